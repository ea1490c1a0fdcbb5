//! Origins that speak only HTTP/1.1: the keep-alive pool.

use super::*;

/// An origin without HTTP/2 (`upstream.protocol: http/1.1`): requests go over a pool of
/// keep-alive connections opened at start and reused, bodies both ways, headers rewritten.
#[tokio::test]
async fn http1_origins_get_a_keep_alive_pool() {
    let fx = fixture();
    let (origin, stats) = h1_origin(&fx.origin).await;
    let upstream = "    upstream: {protocol: http/1.1, connections: 2, max_connections: 4}\n";
    let edge = edge(&fx.route(origin, upstream), "", "").await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("alpn", "http/1.1")], 2.0).await;
    for h2 in [true, false] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        for i in 0..10 {
            let (head, body) = client.send("GET", "b.test", &format!("/k{i}"), &[], vec![]).await.unwrap();
            assert_eq!(head.status, 200);
            assert_eq!(body, format!("hello /k{i}").into_bytes());
        }
        let big = vec![9u8; 1_000_000];
        let (head, echoed) = client.send("POST", "b.test", "/echo", &[], big.clone()).await.unwrap();
        assert_eq!(head.status, 200);
        assert!(echoed == big, "{} bytes back", echoed.len());
    }
    assert_eq!(stats.requests.load(Ordering::Relaxed), 22);
    // One request at a time: the two opened at load, and at most one more for headroom.
    let opened = stats.connections.load(Ordering::Relaxed);
    assert!((2..=3).contains(&opened), "sequential requests reuse the pooled connections: {opened} opened");
    let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["host"], "b.test");
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");
    edge.stop().await;
}

/// HTTP/2 and HTTP/3 clients may split `Cookie` into several field lines (browsers do, to
/// compress them); an HTTP/1.1 origin gets them as the one line HTTP/1.1 allows, in order.
#[tokio::test]
async fn split_cookies_reach_an_http1_origin_as_one_line() {
    let fx = fixture();
    let (origin, stats) = h1_origin(&fx.origin).await;
    let upstream = "    upstream: {protocol: http/1.1, connections: 1}\n";
    let edge = edge(&fx.route(origin, upstream), "", "http3: true").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let cookies = [("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")];
    let (head, _) = client.send("GET", "b.test", "/h2", &cookies, vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    let ca = fx.path.join("edge/ca.pem");
    let args = ["--header", "cookie=c=3", "--header", "cookie=d=4", "GET:/h3"];
    let out = h3_client(edge.addr, "b.test", &ca, &args).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    let seen = stats.seen.lock().unwrap().clone();
    let lines =
        |h: &http::HeaderMap| h.get_all("cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(lines(&seen[0]), ["a=1; b=2"]);
    assert_eq!(lines(&seen[1]), ["c=3; d=4"]);
    edge.stop().await;
}

/// An HTTP/1.1 origin pool follows demand: a burst of concurrent requests makes it grow (the
/// estimate counts connections in use), so the next burst of the same size finds idle
/// connections and opens none; a reload with the same origin keeps the pool and its
/// connections.
#[tokio::test]
async fn http1_pools_grow_with_concurrency_and_survive_reloads() {
    let fx = fixture();
    let (origin, stats) = h1_origin(&fx.origin).await;
    let route = fx.route(origin, "    upstream: {protocol: http/1.1, connections: 1, max_connections: 40}\n");
    let edge = edge(&route, "", "").await;
    let labels = [("route", "b.test"), ("alpn", "http/1.1")];
    wait_for(&edge, "edgewarm_pool_ready", &labels, 1.0).await;
    let burst = |n: usize| {
        let (certs, addr) = (fx.edge.clone(), edge.addr);
        async move {
            let mut all = Vec::new();
            for i in 0..n {
                let certs = certs.clone();
                all.push(tokio::spawn(async move {
                    let mut c = HttpClient::connect(&certs, addr, "b.test", false).await.unwrap();
                    c.send("GET", "b.test", "/delay", &[], vec![]).await.unwrap().0.status.as_u16()
                }));
                if i == 0 {
                    tokio::task::yield_now().await;
                }
            }
            for t in all {
                assert_eq!(t.await.unwrap(), 200);
            }
        }
    };
    burst(12).await;
    // The estimate saw up to 12 in use (12 + √12 + 1 = 17 held when all overlapped; 13 even
    // if only 9 did, on a slow machine), the burst's connections among them.
    wait_for(&edge, "edgewarm_pool_target", &labels, 13.0).await;
    // The refill finishes (up to the target, whatever it came to) before the count is taken.
    let target = edge.metric("edgewarm_pool_target", &labels);
    wait_for(&edge, "edgewarm_pool_ready", &labels, target).await;
    let opened = stats.connections.load(Ordering::Relaxed);
    let misses = edge.metric("edgewarm_pool_misses_total", &labels);
    burst(12).await;
    assert_eq!(edge.metric("edgewarm_pool_misses_total", &labels), misses, "the second burst found idle connections");
    assert_eq!(stats.connections.load(Ordering::Relaxed), opened);

    let yaml = format!("listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{route}");
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    let mut c = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    assert_eq!(c.send("GET", "b.test", "/after", &[], vec![]).await.unwrap().0.status, 200);
    assert_eq!(stats.connections.load(Ordering::Relaxed), opened, "the reload kept the pool's connections");
    edge.stop().await;
}

/// A reload that retires an HTTP/1.1 origin pool tells its keep-alive clients, as one that
/// retires HTTP/2 origin connections does: the client's idle connection is closed, so its next
/// request comes in afresh and goes to the new origin; the old origin gets no new connection.
#[tokio::test]
async fn retiring_an_http1_pool_closes_its_keep_alive_clients() {
    let fx = fixture();
    let (old, old_stats) = h1_origin(&fx.origin).await;
    let (new, new_stats) = h1_origin(&fx.origin).await;
    let h1 = "    upstream: {protocol: http/1.1, connections: 1}\n";
    let edge = edge(&fx.route(old, h1), "", "").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    assert_eq!(client.send("GET", "b.test", "/before", &[], vec![]).await.unwrap().0.status, 200);
    let opened = old_stats.connections.load(Ordering::Relaxed);
    let yaml =
        format!("listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}", fx.route(new, h1));
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    // The retired pool's client is closed between requests (bounded wait: 5 s).
    let mut closed = false;
    for _ in 0..500 {
        if edge.server.open_connections() == 0 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the keep-alive client of a retired HTTP/1.1 pool was never told");
    assert!(client.send("GET", "b.test", "/stale", &[], vec![]).await.is_err(), "the old connection still serves");
    assert_eq!(old_stats.connections.load(Ordering::Relaxed), opened, "the retired origin got a new connection");
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    assert_eq!(client.send("GET", "b.test", "/after", &[], vec![]).await.unwrap().0.status, 200);
    assert!(new_stats.requests.load(Ordering::Relaxed) >= 1);
    edge.stop().await;
}
