//! Named upstreams (`upstreams:`, issue 59): routes of several names naming one upstream share
//! its standing connections and its servers' health; reloads resize it, move a route to
//! another, and retire one no route names. Real TLS: hyper clients to the edge, HTTP/2 origins
//! on 127.0.0.1 that count the connections they accept.

use edgewarm_test_support as common;

use std::sync::atomic::Ordering;

use common::*;

/// The edge's certificate (b.test and c.test) and the origins' (origin.test), written where a
/// configuration names them.
struct Setup {
    dir: tempfile::TempDir,
    edge: std::sync::Arc<Certs>,
    origin: Certs,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (edge, origin) = (certs(&["b.test", "c.test"]), certs(&["origin.test"]));
    for (name, c) in [("edge", &edge), ("origin", &origin)] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
        c.write(&dir.path().join(name));
    }
    Setup { dir, edge: std::sync::Arc::new(edge), origin }
}

impl Setup {
    /// A whole configuration: `upstreams` (YAML map entries, indented two spaces) and an http
    /// route for each (sni, upstream name) of `routes`.
    fn config(&self, upstreams: &str, routes: &[(&str, &str)]) -> String {
        let d = self.dir.path().display();
        let routes: String = routes
            .iter()
            .map(|(sni, upstream)| {
                format!(
                    "  - {{sni: {sni}, action: http, cert: {d}/edge/cert.pem, key: {d}/edge/key.pem, \
                     upstream: {upstream}}}\n"
                )
            })
            .collect();
        format!(
            "admin: {{listen: 127.0.0.1:0}}\nlisteners: [{{listen: 127.0.0.1:0}}]\nupstreams:\n{upstreams}routes:\n{routes}"
        )
    }

    /// An upstream block's TLS to the test origins.
    fn origin_tls(&self) -> String {
        format!("origin_tls: {{sni: origin.test, ca: {}/origin/ca.pem}}", self.dir.path().display())
    }

    /// A GET on a new HTTP/2 connection to `sni`: its status and body.
    async fn get(&self, edge: &Edge, sni: &str, path: &str) -> (u16, String) {
        let mut client = HttpClient::connect(&self.edge, edge.addr, sni, true).await.unwrap();
        let (head, body) = client.send("GET", sni, path, &[], Vec::new()).await.unwrap();
        (head.status.as_u16(), String::from_utf8(body).unwrap())
    }
}

/// `/origins` as JSON.
async fn origins(edge: &Edge) -> serde_json::Value {
    let (status, body) = admin_get(edge.admin, "/origins").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

const CONNECTIONS: &str = "edgewarm_upstream_connections";

/// Two routes (two names) naming one upstream of two servers: both answer, through one standing
/// set per server (`connections` each, not twice that) and one group, labelled by the
/// upstream's name; what is the route's own (its request counts) stays the route's.
#[tokio::test]
async fn two_routes_naming_one_upstream_share_its_connections_and_its_group() {
    let s = setup();
    let (one, one_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let (two, two_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let app = format!(
        "  app: {{origins: [{{address: \"{one}\"}}, {{address: \"{two}\"}}], {}, connections: 2, balance: round_robin}}\n",
        s.origin_tls()
    );
    let edge = edge_from(&s.config(&app, &[("b.test", "app"), ("c.test", "app")])).await;
    wait_for(&edge, CONNECTIONS, &[("route", "app")], 4.0).await;
    for (sni, i) in [("b.test", 0), ("c.test", 1), ("b.test", 2), ("c.test", 3)] {
        let (status, body) = s.get(&edge, sni, &format!("/{i}")).await;
        assert_eq!((status, body), (200, format!("hello /{i}")), "{sni}");
    }
    // Round robin over the one group both routes share: two requests each server.
    assert_eq!(one_stats.requests.load(Ordering::Relaxed), 2);
    assert_eq!(two_stats.requests.load(Ordering::Relaxed), 2);
    assert_eq!(one_stats.connections.load(Ordering::Relaxed), 2, "one set per server, not one per route");
    assert_eq!(two_stats.connections.load(Ordering::Relaxed), 2);
    assert_eq!(edge.metric(CONNECTIONS, &[("route", "app")]), 4.0);
    let metrics = edge.server.metrics();
    assert_eq!(metrics.sample(CONNECTIONS, &[("route", "b.test")]), None, "no series per route");
    assert_eq!(metrics.sample(CONNECTIONS, &[("route", "c.test")]), None);
    wait_for(&edge, "edgewarm_origin_server_up", &[("route", "app")], 2.0).await;
    assert_eq!(edge.metric("edgewarm_origin_server_up", &[("route", "app")]), 2.0, "one group: two servers");
    edge.settle().await;
    for sni in ["b.test", "c.test"] {
        assert_eq!(edge.metric("edgewarm_http_requests_total", &[("route", sni)]), 2.0, "{sni}");
    }

    let o = origins(&edge).await;
    let sets: Vec<_> = o["origins"].as_array().unwrap().iter().filter(|v| v["upstream"] == "app").collect();
    assert_eq!(sets.len(), 2, "{o}");
    assert!(sets.iter().all(|v| v["route"] == "app" && v["connections"].as_array().unwrap().len() == 2), "{o}");
    let groups = o["groups"].as_array().unwrap();
    assert_eq!((groups.len(), &groups[0]["route"]), (1, &serde_json::json!("app")), "{o}");
    assert_eq!(o["upstreams"], serde_json::json!([{"upstream": "app", "routes": ["b.test", "c.test"]}]));
    edge.stop().await;
}

/// A server one route's request found failing is out for the other route too: the health
/// state is the upstream's group's, not each route's.
#[tokio::test]
async fn a_server_ejected_through_one_route_is_out_for_the_other() {
    let s = setup();
    let (one, one_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let (two, two_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let app = format!(
        "  app: {{origins: [{{address: \"{one}\"}}, {{address: \"{two}\"}}], {}, connections: 1, \
         balance: round_robin, health: {{fails: 1, eject: 1m}}}}\n",
        s.origin_tls()
    );
    let yaml = s
        .config(&app, &[("b.test", "app"), ("c.test", "app")])
        .replace("listeners:", "timeouts: {origin_response: 1s}\nlisteners:");
    let edge = edge_from(&yaml).await;
    wait_for(&edge, CONNECTIONS, &[("route", "app")], 2.0).await;
    // b.test's request times out at whichever server took it: that server is ejected.
    assert_eq!(s.get(&edge, "b.test", "/slow").await.0, 504);
    let o = origins(&edge).await;
    let servers = o["groups"][0]["servers"].as_array().unwrap().clone();
    let ejected: Vec<_> = servers.iter().filter(|v| v["state"] == "ejected").map(|v| v["server"].clone()).collect();
    assert_eq!(ejected.len(), 1, "{o}");
    let (out, serving) =
        if ejected[0] == one.to_string() { (&one_stats, &two_stats) } else { (&two_stats, &one_stats) };
    let (out_before, serving_before) = (out.requests.load(Ordering::Relaxed), serving.requests.load(Ordering::Relaxed));
    // Round robin would give the ejected server half of c.test's requests if c.test had a group
    // of its own; it gets none.
    for i in 0..4 {
        assert_eq!(s.get(&edge, "c.test", &format!("/c{i}")).await, (200, format!("hello /c{i}")));
    }
    assert_eq!(out.requests.load(Ordering::Relaxed), out_before, "the ejected server took none of c.test's");
    assert_eq!(serving.requests.load(Ordering::Relaxed), serving_before + 4);
    edge.stop().await;
}

/// Reloads: a changed `connections` keeps the upstream's connections (and serves both routes
/// throughout); a route pointed to another upstream sends its next request there; an upstream
/// no route names any more is retired.
#[tokio::test]
async fn reloads_resize_an_upstream_move_a_route_and_retire_one() {
    let s = setup();
    let (one, one_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let (two, two_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let block = |name: &str, addr: std::net::SocketAddr, n: usize| {
        format!("  {name}: {{origin: \"{addr}\", {}, connections: {n}}}\n", s.origin_tls())
    };
    let reload = |yaml: String| edge_reload(&yaml);
    let edge = edge_from(&s.config(&block("app", one, 2), &[("b.test", "app"), ("c.test", "app")])).await;
    wait_for(&edge, CONNECTIONS, &[("route", "app")], 2.0).await;
    assert_eq!(one_stats.connections.load(Ordering::Relaxed), 2);

    // Resized: the two stay, one more opens.
    edge.server.reload(&reload(s.config(&block("app", one, 3), &[("b.test", "app"), ("c.test", "app")]))).unwrap();
    wait_for(&edge, CONNECTIONS, &[("route", "app")], 3.0).await;
    for sni in ["b.test", "c.test"] {
        assert_eq!(s.get(&edge, sni, "/resized").await, (200, "hello /resized".to_string()), "{sni}");
    }
    assert_eq!(one_stats.connections.load(Ordering::Relaxed), 3, "the standing two were kept");
    assert_eq!(one_stats.requests.load(Ordering::Relaxed), 2);

    // c.test moves to `other`: its next request goes there; b.test stays on app's connections.
    let both = format!("{}{}", block("app", one, 3), block("other", two, 1));
    edge.server.reload(&reload(s.config(&both, &[("b.test", "app"), ("c.test", "other")]))).unwrap();
    wait_for(&edge, CONNECTIONS, &[("route", "other")], 1.0).await;
    assert_eq!(s.get(&edge, "c.test", "/moved").await, (200, "hello /moved".to_string()));
    assert_eq!(two_stats.requests.load(Ordering::Relaxed), 1, "c.test's request went to other");
    assert_eq!(s.get(&edge, "b.test", "/stayed").await, (200, "hello /stayed".to_string()));
    assert_eq!(one_stats.requests.load(Ordering::Relaxed), 3, "b.test's went to app");
    assert_eq!(one_stats.connections.load(Ordering::Relaxed), 3, "app kept its connections");
    let o = origins(&edge).await;
    assert_eq!(
        o["upstreams"],
        serde_json::json!([{"upstream": "app", "routes": ["b.test"]}, {"upstream": "other", "routes": ["c.test"]}])
    );

    // Both on `other`, app gone from the file: its connections are retired.
    edge.server
        .reload(&reload(s.config(&block("other", two, 1), &[("b.test", "other"), ("c.test", "other")])))
        .unwrap();
    assert_eq!(s.get(&edge, "b.test", "/last").await, (200, "hello /last".to_string()));
    assert_eq!(two_stats.requests.load(Ordering::Relaxed), 2);
    let o = origins(&edge).await;
    let routes: Vec<_> = o["origins"].as_array().unwrap().iter().map(|v| v["route"].clone()).collect();
    assert_eq!(routes, [serde_json::json!("other")], "app's set was retired: {o}");
    assert_eq!(o["upstreams"], serde_json::json!([{"upstream": "other", "routes": ["b.test", "c.test"]}]));
    assert_eq!(two_stats.connections.load(Ordering::Relaxed), 1, "other kept its one");
    edge.stop().await;
}

/// A configuration as a reload reads it (parsed and checked; the server checks it again).
fn edge_reload(yaml: &str) -> edgewarm::config::Config {
    let config = edgewarm::config::Config::parse(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    config
}

/// Today's inline form beside a named upstream: the inline route keeps its own set, labelled
/// by its own name as before.
#[tokio::test]
async fn an_inline_route_beside_a_named_upstream_keeps_its_own() {
    let s = setup();
    let (one, one_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let (two, two_stats) = h2_origin(&s.origin, H2Opts::default()).await;
    let d = s.dir.path().display();
    let yaml = format!(
        "admin: {{listen: 127.0.0.1:0}}\nlisteners: [{{listen: 127.0.0.1:0}}]\nupstreams:\n  app: {{origin: \"{one}\", {}, connections: 1}}\n\
         routes:\n  - {{sni: b.test, action: http, cert: {d}/edge/cert.pem, key: {d}/edge/key.pem, upstream: app}}\n\
         \x20 - {{sni: c.test, action: http, cert: {d}/edge/cert.pem, key: {d}/edge/key.pem, origin: \"{two}\", \
         origin_tls: {{sni: origin.test, ca: {d}/origin/ca.pem}}, upstream: {{connections: 2}}}}\n",
        s.origin_tls()
    );
    let edge = edge_from(&yaml).await;
    wait_for(&edge, CONNECTIONS, &[("route", "app")], 1.0).await;
    wait_for(&edge, CONNECTIONS, &[("route", "c.test")], 2.0).await;
    assert_eq!(s.get(&edge, "b.test", "/b").await, (200, "hello /b".to_string()));
    assert_eq!(s.get(&edge, "c.test", "/c").await, (200, "hello /c".to_string()));
    assert_eq!((one_stats.requests.load(Ordering::Relaxed), two_stats.requests.load(Ordering::Relaxed)), (1, 1));
    let o = origins(&edge).await;
    let inline = o["origins"].as_array().unwrap().iter().find(|v| v["route"] == "c.test").cloned().unwrap();
    assert!(inline.get("upstream").is_none(), "{inline}");
    edge.stop().await;
}
