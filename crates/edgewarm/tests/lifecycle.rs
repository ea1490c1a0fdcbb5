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

    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "ok")]), 1.0);
    assert_eq!(edge.metric("edgewarm_config_reloads_total", &[("result", "error")]), 1.0);
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
