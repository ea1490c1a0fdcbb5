//! A site on one name (issue 59's "done when"): one route with `rules` sends `/api/` to
//! upstream A (HTTP/2 over TLS) and `/static/` to upstream B (cleartext HTTP/1.1, cached),
//! answers `/healthz` itself and redirects `/old/`; the route's response header is on every
//! answer (proxied, cached, the redirect, the origin's 404, a 5xx with A down, a rule's 429);
//! `/static/../api/x` reaches A as `/api/x`, never B.

use super::cache::header;
use super::*;

/// The route: its default upstream `app` (A), and the rules.
fn site(fx: &Pki) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    \
         upstream: app\n    headers: {{response: {{set: {{x-site: on}}}}}}\n    rules:\n      \
         - {{prefix: /static/, upstream: assets, cache: {{}}}}\n      \
         - {{exact: /healthz, respond: {{status: 200, body: ok}}}}\n      \
         - {{prefix: /old/, redirect: {{to: /new/, status: 308}}}}\n      \
         - {{prefix: /api/, methods: [POST], limits: {{requests_per_second: 0.01, burst: 1}}}}\n"
    )
}

/// `upstreams:` with A at `app` and B at `assets`.
fn upstreams(fx: &Pki, app: SocketAddr, assets: SocketAddr) -> String {
    let p = fx.path.display();
    format!(
        "upstreams:\n  app: {{origin: \"{app}\", origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}, connections: 1}}\n  \
         assets: {{origin: \"{assets}\", protocol: http/1.1, tls: false, connections: 1}}\n"
    )
}

#[tokio::test]
async fn one_route_serves_a_site_by_its_rules() {
    let fx = fixture();
    let (app, app_stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (assets, log) = cache_origin().await;
    let edge = edge(&site(&fx), &upstreams(&fx, app, assets), "").await;
    for h2 in [false, true] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let mut get = async |method: &str, path: &str| {
            let (head, body) = client.send(method, "b.test", path, &[], Vec::new()).await.unwrap();
            assert_eq!(header(&head, "x-site"), "on", "{method} {path}: the route's header: {head:?}");
            (head, String::from_utf8(body).unwrap())
        };
        let (head, body) = get("GET", &format!("/api/x-{h2}")).await;
        assert_eq!((head.status.as_u16(), body), (200, format!("hello /api/x-{h2}")), "A answers /api/");

        let asset = format!("/static/a-{h2}.css?cc=max-age%3D60");
        let (head, _) = get("GET", &asset).await;
        assert_eq!(head.status, 200);
        assert!(header(&head, "cache-status").ends_with("stored"), "B's answer stored: {head:?}");
        // Stored as the fill ends, perhaps just after the client has the body. Bounded: 2 s.
        for tries in 0.. {
            let (head, _) = get("GET", &asset).await;
            if header(&head, "cache-status").starts_with("edgewarm; hit") {
                break;
            }
            assert!(tries < 400, "never a hit: {head:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(log.count(&asset), 1, "the second was a hit");

        let (head, body) = get("GET", "/healthz").await;
        assert_eq!((head.status.as_u16(), body.as_str()), (200, "ok"));

        let (head, _) = get("GET", "/old/x?q=1").await;
        assert_eq!(head.status, 308);
        assert_eq!(header(&head, "location"), "/new/x?q=1");

        let (head, _) = get("GET", &format!("/static/gone-{h2}?status=404")).await;
        assert_eq!(head.status, 404, "B's own 404");

        // The climb is resolved before a rule is chosen: /api/x is A's, whatever it started as.
        let (head, body) = get("GET", &format!("/static/../api/climb-{h2}")).await;
        assert_eq!((head.status.as_u16(), body), (200, format!("hello /api/climb-{h2}")));
        assert!(log.seen.lock().unwrap().iter().all(|(_, url, _)| !url.contains("climb")), "never B");

        // POSTs to /api/ have a rate of their own (burst 1): the second is refused.
        let first = get("POST", &format!("/api/post-{h2}")).await.0.status;
        let second = get("POST", &format!("/api/post-{h2}")).await.0.status;
        assert_eq!((first.as_u16(), second.as_u16()), (if h2 { 429 } else { 200 }, 429), "one rate for both clients");
    }
    // `/routes`: the rules in the order they are tried, each with its hits.
    let (status, body) = admin_get(edge.admin, "/routes").await;
    assert_eq!(status, 200, "{body}");
    let routes: serde_json::Value = serde_json::from_str(&body).unwrap();
    let route = &routes["routes"][0];
    assert_eq!((&route["route"], &route["upstream"]), (&"b.test".into(), &"app".into()), "{routes}");
    let rules = route["rules"].as_array().unwrap();
    let order: Vec<_> = rules.iter().map(|r| r["rule"].as_str().unwrap()).collect();
    assert_eq!(order, ["rules[1]", "rules[3]", "rules[2]", "rules[0]"], "exact, then prefixes: {routes}");
    // /healthz and /old/ once per client; /api/'s POSTs twice (the refused counted: the rule
    // met them); /static/ at least its store, its hit and its 404 per client (the climb is
    // /api/climb by the time a rule is chosen, and the default's: no rule counts it).
    let hits: Vec<_> = rules.iter().map(|r| r["hits"].as_u64().unwrap()).collect();
    assert_eq!(hits[..3], [2, 4, 2], "{routes}");
    assert!(hits[3] >= 6, "{routes}");
    // Requests by the upstream their rule chose: names from the file, the edge's own answers
    // in none.
    edge.settle().await;
    let by = |upstream: &str, status: &str| {
        edge.metric(
            "edgewarm_http_upstream_requests_total",
            &[("route", "b.test"), ("upstream", upstream), ("status", status)],
        )
    };
    assert_eq!(by("app", "2xx"), 5.0, "/api/x, the climb and the first POST");
    assert_eq!(by("app", "4xx"), 3.0, "the refused POSTs");
    assert_eq!(by("assets", "4xx"), 2.0, "B's 404s");
    assert!(by("assets", "2xx") >= 4.0, "the stored and the hits");
    let requests = app_stats.requests.load(Ordering::Relaxed);
    assert_eq!(requests, 5, "A took /api/x, the climb and the first POST, per client but the refused");

    // A down: the 5xx the edge answers carries the route's header too.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\n{}\nroutes:\n{}",
        upstreams(&fx, dead, assets),
        site(&fx)
    )
    .replace("listeners:", "timeouts: {connect: 200ms}\nlisteners:");
    let config = edgewarm::config::Config::parse(&yaml).unwrap();
    edge.server.reload(&config).unwrap();
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let (head, _) = client.send("GET", "b.test", "/api/down", &[], Vec::new()).await.unwrap();
    assert!(head.status.is_server_error(), "{head:?}");
    assert_eq!(header(&head, "x-site"), "on", "the 5xx too: {head:?}");
    let (head, _) = client.send("GET", "b.test", "/healthz", &[], Vec::new()).await.unwrap();
    assert_eq!(head.status, 200, "the edge's own answer needs no upstream");
    edge.stop().await;
}
