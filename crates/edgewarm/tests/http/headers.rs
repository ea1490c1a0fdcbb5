//! Header policy (`listeners[].headers`, `routes[].headers`) end to end: real TLS clients over
//! HTTP/1.1, HTTP/2 and HTTP/3 through edgewarm to a real cleartext origin (`cache_origin`,
//! whose query says what to answer), on every kind of answer the edge sends: the origin's, the
//! cache's, and the edge's own.

use super::cache::header;
use super::*;

/// The listener's defaults: HSTS and two markers, one of which the route sets again.
const LISTENER: &str =
    "headers: {response: {set: {strict-transport-security: max-age=1, x-policy: listener, x-listener: \"yes\"}}}";

/// The route's policy, merged into the listener's.
const POLICY: &str = "    headers:\n      \
     request: {set: {x-edge-tag: t1}, add: {x-added: [a, b]}, remove: [x-drop]}\n      \
     response: {set: {x-policy: route}, remove: [server], default: {cache-control: no-store, x-default: edge}}\n";

/// A cached `http` route for b.test to `origin` (cleartext HTTP/1.1), with the policy and
/// `extra` keys.
fn route(fx: &Pki, origin: SocketAddr, extra: &str) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 1}}\n    \
         cache: {{}}\n{POLICY}{extra}"
    )
}

/// The route's policy, with the listener's merged under it, is on `head`.
fn assert_policy(head: &http::response::Parts, what: &str) {
    assert_eq!(header(head, "x-policy"), "route", "{what}: the route's set wins: {head:?}");
    assert_eq!(header(head, "x-listener"), "yes", "{what}: the listener's other names are kept: {head:?}");
    assert_eq!(header(head, "strict-transport-security"), "max-age=1", "{what}: {head:?}");
    assert!(!head.headers.contains_key("server"), "{what}: removed: {head:?}");
    assert_eq!(header(head, "x-default"), "edge", "{what}: {head:?}");
}

/// A proxied 200, the same response from the cache, the origin's 404 and the edge's 413 all
/// carry the route's policy over the listener's, over HTTP/1.1 and HTTP/2; `remove` takes the
/// origin's `Server` away, `default` keeps the origin's `Cache-Control` and fills it in where
/// the origin sent none. The origin gets the request policy, and the edge's own forwarding
/// headers as ever.
#[tokio::test]
async fn every_answer_on_the_route_carries_its_policy() {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let edge = edge(&route(&fx, origin, "    max_request_body: 1KiB\n"), "", LISTENER).await;
    for h2 in [false, true] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let page = format!("/page-{h2}?cc=max-age%3D60&server=origin-httpd");
        let mut send = async |method: &str, path: &str, body: Vec<u8>| {
            let extra = [("x-drop", "1"), ("x-added", "client")];
            client.send(method, "b.test", path, &extra, body).await.unwrap().0
        };
        let fresh = send("GET", &page, vec![]).await;
        assert_eq!(fresh.status, 200);
        assert!(header(&fresh, "cache-status").ends_with("stored"), "{fresh:?}");
        assert_policy(&fresh, "proxied");
        assert_eq!(header(&fresh, "cache-control"), "max-age=60", "default keeps the origin's value");
        // The entry is stored as the fill task ends, which may be just after the client has
        // the whole body: until then a request joins the fill (`collapsed`). Bounded: 2 s.
        for tries in 0.. {
            let again = send("GET", &page, vec![]).await;
            assert_policy(&again, "from the cache");
            if header(&again, "cache-status").starts_with("edgewarm; hit") {
                break;
            }
            assert!(tries < 400, "never a hit: {again:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let missing = send("GET", &format!("/gone-{h2}?status=404&server=origin-httpd"), vec![]).await;
        assert_eq!(missing.status, 404);
        assert_policy(&missing, "the origin's 404");
        assert_eq!(header(&missing, "cache-control"), "no-store", "the default, where the origin sent none");
        let large = send("POST", "/upload", vec![7; 2048]).await;
        assert_eq!(large.status, 413);
        assert_policy(&large, "413");
        assert_eq!(header(&large, "content-type"), "text/plain", "the edge's own fields stay");
    }
    assert_eq!(log.count("/page-true?cc=max-age%3D60&server=origin-httpd"), 1, "the second was a hit");
    let seen = log.seen.lock().unwrap().clone();
    let (_, _, first) = &seen[0];
    assert_eq!(first["x-edge-tag"], "t1");
    let added: Vec<_> = first.get_all("x-added").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(added, ["client", "a", "b"], "add appends to the client's");
    assert!(!first.contains_key("x-drop"), "{first:?}");
    assert_eq!(first["x-forwarded-for"], "127.0.0.1", "the edge's forwarding headers are untouched");
    assert!(seen.iter().all(|(m, _, _)| m == "GET"), "the 413's body never reached the origin");
    edge.stop().await;
}

/// The route's limit answers 429 with the policy, and so do the edge's 502, 503 and 504 for an
/// origin that fails: one that is down (nothing listens: 503), one that takes the connection and
/// closes it without an answer (502), one that answers after `timeouts.origin_response` (504).
#[tokio::test]
async fn the_edge_s_own_refusals_and_origin_failures_carry_the_policy() {
    let fx = fixture();
    let (origin, _) = cache_origin().await;
    let limited = edge(&route(&fx, origin, "    limits: {requests_per_second: 0.001, burst: 1}\n"), "", LISTENER).await;
    for h2 in [false, true] {
        let mut client = HttpClient::connect(&fx.edge, limited.addr, "b.test", h2).await.unwrap();
        let (first, _) = client.send("GET", "b.test", &format!("/one-{h2}"), &[], vec![]).await.unwrap();
        let (second, _) = client.send("GET", "b.test", &format!("/two-{h2}"), &[], vec![]).await.unwrap();
        // Each client address has one burst: the second connection's first request is over it.
        if h2 {
            assert_eq!(first.status, 429);
        } else {
            assert_eq!(first.status, 200);
        }
        assert_eq!(second.status, 429);
        assert_policy(&second, "429");
        assert!(second.headers.contains_key("retry-after"), "{second:?}");
    }
    limited.stop().await;

    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hangs_up = closing.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = closing.accept().await {
            // Reads the request, then closes without a word.
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut tcp = tcp;
                let mut buf = [0u8; 4096];
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 || buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            });
        }
    });
    for (origin, status) in [(down, 503), (hangs_up, 502)] {
        let edge = edge(&route(&fx, origin, ""), "", LISTENER).await;
        for h2 in [false, true] {
            let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
            let (head, _) = client.send("GET", "b.test", "/failing", &[], vec![]).await.unwrap();
            assert_eq!(head.status, status, "{origin}");
            assert_policy(&head, &format!("{status}"));
        }
        edge.stop().await;
    }
    let (slow, _) = cache_origin().await;
    let edge = edge(&route(&fx, slow, ""), "timeouts: {origin_response: 100ms}", LISTENER).await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let (head, _) = client.send("GET", "b.test", "/late?delay=10000", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 504);
    assert_policy(&head, "504");
    edge.stop().await;
}

/// A request refused before its route is known gets the listener's policy alone: a 421 for a
/// name the connection's route does not serve, a 400 for a request with two `Host`s.
#[tokio::test]
async fn an_answer_before_routing_gets_the_listener_s_policy() {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let edge = edge(&route(&fx, origin, ""), "", LISTENER).await;
    for h2 in [false, true] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let (head, _) = client.send("GET", "other.test", "/elsewhere", &[], vec![]).await.unwrap();
        assert_eq!(head.status, 421);
        assert_eq!(header(&head, "x-policy"), "listener", "{head:?}");
        assert_eq!(header(&head, "strict-transport-security"), "max-age=1", "{head:?}");
        assert!(!head.headers.contains_key("x-default"), "not the route's: {head:?}");
    }
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    let (head, _) = client.send("GET", "b.test", "/twice", &[("host", "b.test")], vec![]).await.unwrap();
    assert_eq!(head.status, 400);
    assert_eq!(header(&head, "x-policy"), "listener", "{head:?}");
    assert!(log.seen.lock().unwrap().is_empty(), "nothing reached the origin");
    edge.stop().await;
}

/// A WebSocket upgrade's `101` carries the policy too, and the relay goes on after it.
#[tokio::test]
async fn an_upgrade_s_answer_carries_the_policy() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = fixture();
    let origin = upgrade_echo_origin(&fx.origin).await;
    let edge = edge(&fx.route(origin, POLICY), "", LISTENER).await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
    let head = websocket_upgrade(&mut tls, "").await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("\r\nx-policy: route\r\n") && head.contains("\r\nx-listener: yes\r\n"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    echo_round_trips(&mut tls).await;
    // The relay ends when the client does (the edge's shutdown would wait for it).
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest).await.unwrap();
    edge.stop().await;
}

/// Over HTTP/3 (a quinn and h3 client), the origin's 200 and 404 carry the policy too.
#[tokio::test(flavor = "multi_thread")]
async fn responses_over_http3_carry_the_policy() {
    let fx = fixture();
    let (origin, _) = cache_origin().await;
    let edge = edge(&route(&fx, origin, ""), "", &format!("http3: true\n    {LISTENER}")).await;
    let endpoint = common::h3_endpoint(&fx.edge.ca_der, quinn::TransportConfig::default());
    let conn = endpoint.connect(edge.addr, "b.test").unwrap().await.unwrap();
    let (mut driver, mut send) = ::h3::client::new(h3_quinn::Connection::new(conn.clone())).await.unwrap();
    let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    for (path, status) in [("/h3?server=origin-httpd", 200), ("/h3-gone?status=404&server=origin-httpd", 404)] {
        let req = http::Request::get(format!("https://b.test{path}")).body(()).unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        // The edge may answer and stop reading first (RFC 9114 §4.1.2).
        let _ = stream.finish().await;
        let response = stream.recv_response().await.unwrap();
        while stream.recv_data().await.unwrap().is_some() {}
        let (head, ()) = response.into_parts();
        assert_eq!(head.status, status);
        assert_policy(&head, &format!("HTTP/3 {status}"));
    }
    conn.close(0u32.into(), b"");
    drive.abort();
    edge.stop().await;
}

/// A listener's policy changes on reload (its other keys cannot): a new connection gets the
/// new one; the cached response gets it too, with no purge.
#[tokio::test]
async fn a_reload_changes_the_listener_s_policy_without_a_purge() {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let yaml = |hsts: &str| {
        format!(
            "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\n    {}\nroutes:\n{}",
            LISTENER.replace("max-age=1", hsts),
            route(&fx, origin, "")
        )
    };
    let edge = edge_from(&yaml("max-age=1")).await;
    let path = "/reloaded?cc=max-age%3D60";
    let get = async || {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
        client.send("GET", "b.test", path, &[], vec![]).await.unwrap().0
    };
    assert_eq!(header(&get().await, "strict-transport-security"), "max-age=1");
    edge.server.reload(&edgewarm::config::Config::parse(&yaml("max-age=2")).unwrap()).unwrap();
    let after = get().await;
    assert!(header(&after, "cache-status").starts_with("edgewarm; hit"), "{after:?}");
    assert_eq!(header(&after, "strict-transport-security"), "max-age=2");
    assert_eq!(log.count(path), 1);
    edge.stop().await;
}

/// `edgewarm check` refuses a policy writing a framing header or a forwarding header the edge
/// owns, naming the key, exit 64.
#[test]
fn check_refuses_framing_and_forwarding_headers() {
    let dir = tempfile::tempdir().unwrap();
    common::certs(&["a.test"]).write(dir.path());
    let d = dir.path().display();
    let config = dir.path().join("edge.yaml");
    for (headers, key) in [
        ("{response: {set: {Transfer-Encoding: chunked}}}", "routes[0].headers.response.set.Transfer-Encoding"),
        ("{request: {set: {x-forwarded-for: 10.0.0.1}}}", "routes[0].headers.request.set.x-forwarded-for"),
    ] {
        let yaml = format!(
            "listeners: [{{listen: \"127.0.0.1:0\"}}]\nroutes:\n  - {{sni: a.test, action: http, origin: \
             \"127.0.0.1:9\", cert: {d}/cert.pem, key: {d}/key.pem, headers: {headers}}}\n"
        );
        std::fs::write(&config, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgewarm"))
            .args(["check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{headers}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{key}: ")), "{err}");
    }
}
