//! Admin endpoints, reload and drain, in process.

use edgewarm_test_support as common;

use common::*;
use edgewarm::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn admin_serves_metrics_ready_live() {
    let (origin, _) = recording_origin(vec![]).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let (status, body) = admin_get(edge.admin, "/live").await;
    assert_eq!((status, body.as_str()), (200, "live\n"));
    assert_eq!(admin_get(edge.admin, "/ready").await.0, 200);
    assert_eq!(admin_get(edge.admin, "/nope").await.0, 404);
    let _ = TcpStream::connect(edge.addr).await.unwrap().write_all(b"GET / HTTP/1.0\r\n\r\n").await;
    // Accepted first (then served on a worker thread), or `settle` finds nothing to wait for.
    wait_for(&edge, "edgewarm_connections_accepted_total", &[], 1.0).await;
    edge.settle().await;
    let (status, metrics) = admin_get(edge.admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("edgewarm_clienthello_rejected_total{reason=\"http\"} 1"), "{metrics}");
    assert!(metrics.contains("# EOF"));
    edge.stop().await;
}

/// A tunnel opened before a reload keeps its origin; new connections use the new routes.
#[tokio::test]
async fn reload_changes_new_connections_only() {
    let (old_origin, old_received) = recording_origin(b"old".to_vec()).await;
    let (new_origin, new_received) = recording_origin(b"new".to_vec()).await;
    let edge = edge(&route_to("a.test", old_origin), "", "").await;

    let mut open = TcpStream::connect(edge.addr).await.unwrap();
    open.write_all(&client_hello("a.test")).await.unwrap();
    // Wait until the tunnel is established (the origin connection exists) before reloading.
    while edge.metric("edgewarm_origin_connect_duration_seconds_count", &[("route", "a.test")]) < 1.0 {
        tokio::task::yield_now().await;
    }

    let yaml = |origin| {
        format!(
            "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}",
            route_to("a.test", origin)
        )
    };
    edge.server.reload(&Config::parse(&yaml(new_origin)).unwrap()).unwrap();

    let mut fresh = TcpStream::connect(edge.addr).await.unwrap();
    fresh.write_all(&client_hello("a.test")).await.unwrap();
    fresh.shutdown().await.unwrap();
    assert_eq!(read_all(&mut fresh).await, b"new");

    open.write_all(b"still here").await.unwrap();
    open.shutdown().await.unwrap();
    assert_eq!(read_all(&mut open).await, b"old");
    assert!(old_received.lock().unwrap()[0].ends_with(b"still here"));
    assert_eq!(new_received.lock().unwrap().len(), 1);

    // An invalid config is refused as a whole and changes nothing.
    let bad = Config::parse(&yaml(new_origin).replace("a.test, action: tunnel", "a..test, action: tunnel")).unwrap();
    let err = edge.server.reload(&bad).unwrap_err().to_string();
    assert!(err.starts_with("routes[0].sni"), "{err}");
    let mut again = TcpStream::connect(edge.addr).await.unwrap();
    again.write_all(&client_hello("a.test")).await.unwrap();
    again.shutdown().await.unwrap();
    assert_eq!(read_all(&mut again).await, b"new");
    // So is one that changes the worker threads (they are started once).
    let workers = Config::parse(&format!("{}workers: 7\n", yaml(new_origin))).unwrap();
    let err = edge.server.reload(&workers).unwrap_err().to_string();
    assert!(err.starts_with("workers: cannot change on reload"), "{err}");

    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "ok")]), 1.0);
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "error")]), 2.0);
    edge.stop().await;
}

/// Shutdown stops accepting and reports not-ready, but lets an open tunnel finish.
#[tokio::test]
async fn shutdown_drains_open_tunnels() {
    let (origin, _) = recording_origin(b"finished".to_vec()).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let mut open = TcpStream::connect(edge.addr).await.unwrap();
    open.write_all(&client_hello("a.test")).await.unwrap();
    while edge.server.open_connections() == 0 {
        tokio::task::yield_now().await;
    }
    edge.server.shutdown();
    assert_eq!(admin_get(edge.admin, "/ready").await.0, 503);
    // Wait until the listener is gone: new connections are refused.
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(edge.addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(refused, "listener still accepting after shutdown");
    assert!(!edge.run.is_finished(), "run() returned with a tunnel still open");
    open.shutdown().await.unwrap();
    let mut got = Vec::new();
    open.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"finished");
    edge.run.await.unwrap();
}

/// When the grace period runs out, what is still open is cut and counted as `shutdown`.
#[tokio::test]
async fn shutdown_grace_cuts_stragglers() {
    let (origin, _) = recording_origin(vec![]).await;
    let edge = edge(&route_to("a.test", origin), "timeouts: {shutdown_grace: 100ms}", "").await;
    let mut open = TcpStream::connect(edge.addr).await.unwrap();
    open.write_all(&client_hello("a.test")).await.unwrap();
    while edge.server.open_connections() == 0 {
        tokio::task::yield_now().await;
    }
    edge.server.shutdown();
    assert!(read_all(&mut open).await.is_empty());
    let metrics = edge.server.metrics().clone();
    edge.run.await.unwrap();
    assert_eq!(
        metrics.sample("edgewarm_connections_closed_total", &[("route", "a.test"), ("reason", "shutdown")]),
        Some(1.0)
    );
}

/// A TCP origin that echoes every byte back.
async fn echo_origin() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// Reloads under load: 200 tunnels stream both ways while the configuration is reloaded again
/// and again (a route added and removed each time), then reloaded with an invalid file. Every
/// byte of every tunnel comes back intact; the bad file is refused and counted; new
/// connections follow the routes of the last good configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_two_hundred_streaming_tunnels_lose_nothing() {
    use tokio::io::AsyncReadExt;
    let origin = echo_origin().await;
    let (other, other_received) = recording_origin(b"other".to_vec()).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let hello = client_hello("a.test");
    let payload: std::sync::Arc<Vec<u8>> =
        std::sync::Arc::new((0..256 * 1024u32).map(|i| (i * 7 % 251) as u8).collect());
    // Every tunnel sends its first half, then waits until the reloads are done: all 200 are
    // mid-stream while the configuration changes under them.
    let (go, wait) = tokio::sync::watch::channel(false);
    let mut tunnels = Vec::new();
    for _ in 0..200 {
        let (addr, hello, payload, mut wait) = (edge.addr, hello.clone(), payload.clone(), wait.clone());
        tunnels.push(tokio::spawn(async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let (mut r, mut w) = s.into_split();
            let expect = hello.len() + payload.len();
            let writer = tokio::spawn(async move {
                w.write_all(&hello).await.unwrap();
                let (first, second) = payload.split_at(payload.len() / 2);
                w.write_all(first).await.unwrap();
                wait.wait_for(|go| *go).await.unwrap();
                for chunk in second.chunks(16 * 1024) {
                    w.write_all(chunk).await.unwrap();
                    tokio::task::yield_now().await;
                }
                w.shutdown().await.unwrap();
            });
            let mut back = Vec::with_capacity(expect);
            r.read_to_end(&mut back).await.unwrap();
            writer.await.unwrap();
            back
        }));
    }
    let yaml = |with_other: bool| {
        let extra = if with_other { route_to("b.test", other) } else { String::new() };
        format!(
            "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}{extra}",
            route_to("a.test", origin)
        )
    };
    wait_for(&edge, "edgewarm_origin_connect_duration_seconds_count", &[("route", "a.test")], 200.0).await;
    for i in 0..20 {
        edge.server.reload(&Config::parse(&yaml(i % 2 == 0)).unwrap()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let bad = Config::parse(&yaml(true).replace("b.test, action", "b..test, action")).unwrap();
    assert!(edge.server.reload(&bad).is_err());
    assert_eq!(edge.server.open_connections(), 200, "every tunnel still open across the reloads");
    go.send(true).unwrap();

    let mut expected = hello.clone();
    expected.extend_from_slice(&payload);
    for (i, t) in tunnels.into_iter().enumerate() {
        let back = t.await.unwrap();
        assert!(back == expected, "tunnel {i}: {} bytes back of {}, or different", back.len(), expected.len());
    }
    // The last good configuration (the 20th: i = 19, without b.test) rules new connections.
    let answer = {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(&client_hello("b.test")).await.unwrap();
        s.shutdown().await.unwrap();
        read_all(&mut s).await
    };
    assert_eq!(answer, [0x15, 3, 3, 0, 2, 2, 112], "b.test was removed by the last good reload");
    edge.server.reload(&Config::parse(&yaml(true)).unwrap()).unwrap();
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("b.test")).await.unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(read_all(&mut s).await, b"other", "and added back by the next");
    assert_eq!(other_received.lock().unwrap().len(), 1);
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "ok")]), 21.0);
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "error")]), 1.0);
    assert_eq!(edge.metric("edgewarm_connections_closed_total", &[("route", "a.test"), ("reason", "done")]), 200.0);
    edge.stop().await;
}
