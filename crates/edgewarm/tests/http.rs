//! `http` routes end to end: real TLS and real HTTP clients (hyper) through edgewarm to an
//! HTTP/2 origin on 127.0.0.1, which counts the connections it accepts.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    edge: Certs,
    origin: Certs,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (edge, origin) = (certs(&["b.test"]), certs(&["origin.test"]));
    for (name, c) in [("edge", &edge), ("origin", &origin)] {
        std::fs::create_dir(path.join(name)).unwrap();
        c.write(&path.join(name));
    }
    Fixture { _dir: dir, path, edge, origin }
}

impl Fixture {
    /// An http route for b.test; `extra` adds keys (indented like the route's keys).
    fn route(&self, origin: SocketAddr, extra: &str) -> String {
        let p = self.path.display();
        format!(
            "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{extra}"
        )
    }
}

async fn wait_for(edge: &Edge, name: &str, labels: &[(&str, &str)], want: f64) {
    for _ in 0..2000 {
        if edge.metric(name, labels) >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}{labels:?} never reached {want}: {}", edge.metric(name, labels));
}

const OPENED: &str = "edgewarm_pool_opened_total";

/// Many clients, both protocols, several requests each: every request is a stream on the
/// connections opened at start; no client causes an origin handshake.
#[tokio::test]
async fn requests_ride_the_standing_connections() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", "").await;
    wait_for(&edge, OPENED, &[("route", "b.test"), ("alpn", "h2")], 2.0).await;
    assert_eq!(stats.connections.load(Ordering::Relaxed), 2, "opened before any client");
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (c, addr) = (certs_clone(&fx.edge), edge.addr);
        tasks.push(tokio::spawn(async move {
            let mut client = HttpClient::connect(&c, addr, "b.test", i % 2 == 0).await.unwrap();
            for j in 0..5 {
                let (head, body) = client.send("GET", "b.test", &format!("/c{i}/r{j}"), &[], vec![]).await.unwrap();
                assert_eq!(head.status, 200);
                assert_eq!(body, format!("hello /c{i}/r{j}").into_bytes());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(stats.requests.load(Ordering::Relaxed), 100);
    assert_eq!(stats.connections.load(Ordering::Relaxed), 2, "no origin handshake per client");
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("route", "b.test"), ("status", "2xx")]), 100.0);
    let (_, origins) = admin_get(edge.admin, "/origins").await;
    assert!(origins.contains("\"requests\":"), "{origins}");
    edge.stop().await;
}

fn certs_clone(c: &Certs) -> Certs {
    Certs {
        ca_pem: c.ca_pem.clone(),
        ca_der: c.ca_der.clone(),
        cert_pem: c.cert_pem.clone(),
        key_pem: c.key_pem.clone(),
        cert_der: c.cert_der.clone(),
        key_der: c.key_der.clone_key(),
    }
}

/// What the origin is told, and what it is not: hop-by-hop headers go, client-supplied
/// forwarding headers are replaced by what the edge saw.
#[tokio::test]
async fn headers_are_rewritten_for_the_origin() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    let headers = [
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "secret"),
        ("x-forwarded-for", "6.6.6.6"),
        ("forwarded", "for=6.6.6.6"),
        ("x-kept", "yes"),
    ];
    let (head, _) = client.send("GET", "b.test", "/h?q=1", &headers, vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(head.headers.get_all("via").iter().any(|v| v == "2 edgewarm"), "{:?}", head.headers);
    let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");
    assert_eq!(seen["x-forwarded-proto"], "https");
    assert_eq!(seen["forwarded"], "for=127.0.0.1;proto=https;host=\"b.test\"");
    assert_eq!(seen["via"], "1.1 edgewarm");
    assert_eq!(seen["x-kept"], "yes");
    assert!(!seen.contains_key("x-hop") && !seen.contains_key("connection"), "{seen:?}");
    edge.stop().await;
}

/// Bodies are streamed both ways, intact, over both client protocols.
#[tokio::test]
async fn bodies_pass_both_ways_intact() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    // 3 MiB and a bit: larger than every flow-control window on the way.
    let body: Vec<u8> = (0..3_300_000u32).map(|i| (i % 251) as u8).collect();
    for h2 in [true, false] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let (head, echoed) = client.send("POST", "b.test", "/echo", &[], body.clone()).await.unwrap();
        assert_eq!(head.status, 200);
        assert!(echoed == body, "h2 {h2}: {} bytes back of {}", echoed.len(), body.len());
    }
    edge.settle().await;
    edge.stop().await;
}

/// An origin that sends GOAWAY every few streams: the edge replaces the connection and no
/// client sees an error.
#[tokio::test]
async fn goaway_costs_clients_nothing() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { goaway_after: Some(5), ..Default::default() }).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", "").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    for i in 0..40 {
        let (head, body) = client.send("GET", "b.test", &format!("/g{i}"), &[], vec![]).await.unwrap();
        assert_eq!(head.status, 200, "request {i}");
        assert_eq!(body, format!("hello /g{i}").into_bytes());
    }
    assert!(stats.connections.load(Ordering::Relaxed) > 2, "GOAWAYs made the edge open new connections");
    assert!(edge.metric("edgewarm_upstream_replaced_total", &[("route", "b.test")]) >= 1.0);
    edge.stop().await;
}

/// The origin's stream limit is respected: with one stream per connection, parallel requests
/// spill onto further connections (up to `max_connections`) instead of queueing behind one.
#[tokio::test]
async fn full_connections_spill_to_new_ones() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { max_streams: Some(1), ..Default::default() }).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 1, max_connections: 4}\n"), "", "").await;
    wait_for(&edge, OPENED, &[("route", "b.test")], 1.0).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = certs_clone(&fx.edge);
        let addr = edge.addr;
        tasks.push(tokio::spawn(async move {
            let mut client = HttpClient::connect(&c, addr, "b.test", true).await.unwrap();
            let (head, _) = client.send("POST", "b.test", "/echo", &[], vec![7u8; 200_000]).await.unwrap();
            assert_eq!(head.status, 200, "request {i}: {:?}", head.headers);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let opened = stats.connections.load(Ordering::Relaxed);
    assert!((2..=4).contains(&opened), "opened {opened} origin connections");
    edge.stop().await;
}

/// Errors the edge answers itself: 504 when the origin is slow, 503 when there is no origin.
#[tokio::test]
async fn origin_trouble_becomes_504_and_503() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "timeouts:\n  origin_response: 300ms\n", "").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let (head, _) = client.send("GET", "b.test", "/slow", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 504);
    // The connection stays usable after an error response.
    let (head, _) = client.send("GET", "b.test", "/ok", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    edge.stop().await;

    let closed = free_port();
    let down: SocketAddr = format!("127.0.0.1:{closed}").parse().unwrap();
    let edge = common::edge(&fx.route(down, ""), "timeouts:\n  connect: 500ms\n", "").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    let (head, body) = client.send("GET", "b.test", "/", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(edge.metric("edgewarm_http_errors_total", &[("reason", "no_connection")]) >= 1.0);
    edge.stop().await;
}

/// Runs a command to completion off the runtime; returns (success, stdout, stderr).
async fn run(cmd: &str, args: Vec<String>) -> (bool, String, String) {
    let cmd = cmd.to_string();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&cmd).args(&args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Real clients: curl over HTTP/1.1 and HTTP/2 (sequential and `--parallel`), and h2load
/// with 50 connections and 5000 requests, all through two standing origin connections.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (real clients): scripts/test.sh runs it")]
async fn curl_and_h2load_through_the_edge() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", "").await;
    let port = edge.addr.port();
    let ca = fx.path.join("edge/ca.pem").display().to_string();
    let resolve = format!("b.test:{port}:127.0.0.1");
    let url = |p: &str| format!("https://b.test:{port}{p}");
    for (flag, status_line) in [("--http1.1", "HTTP/1.1 200"), ("--http2", "HTTP/2 200")] {
        let args = vec!["-sS", "-i", flag, "--cacert", &ca, "--resolve", &resolve];
        let mut args: Vec<String> = args.into_iter().map(str::to_string).collect();
        args.push(url("/curl"));
        let (ok, out, err) = run("curl", args).await;
        assert!(ok, "curl {flag}: {err}");
        assert!(out.starts_with(status_line), "{flag}: {out}");
        assert!(out.ends_with("hello /curl"), "{flag}: {out}");
    }
    let mut args: Vec<String> = ["-sS", "--http2", "--parallel", "--cacert", &ca, "--resolve", &resolve]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in 0..20 {
        args.push(url(&format!("/p{i}")));
    }
    let (ok, out, err) = run("curl", args).await;
    assert!(ok, "curl --parallel: {err}");
    assert_eq!(out.matches("hello /p").count(), 20, "{out}");

    let args = vec![
        "-c".to_string(),
        "50".to_string(),
        "-n".to_string(),
        "5000".to_string(),
        format!("--connect-to=127.0.0.1:{port}"),
        url("/load"),
    ];
    let (ok, out, err) = run("h2load", args).await;
    assert!(ok, "h2load: {err}\n{out}");
    assert!(out.contains("5000 succeeded, 0 failed, 0 errored"), "{out}");
    let upstream_metrics = || {
        let all = edge.server.metrics().encode();
        all.lines().filter(|l| l.starts_with("edgewarm_upstream")).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(
        stats.connections.load(Ordering::Relaxed),
        2,
        "clients never cost an origin handshake\n{}",
        upstream_metrics()
    );
    edge.settle().await;
    edge.stop().await;
}
