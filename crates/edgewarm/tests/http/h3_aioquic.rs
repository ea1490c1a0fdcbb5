//! HTTP/3 with a second real QUIC client (aioquic; the tests in `h3` use quinn's): uploads,
//! downloads and 100 streams at once answered byte for byte, many clients at once, and a
//! client's key updates.

use super::*;

const HTTP3: &str = "http3: true";

fn ca(fx: &Pki) -> std::path::PathBuf {
    fx.path.join("edge/ca.pem")
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn requests_come_back_whole_over_http3() {
    requests_come_back_whole(HTTP3).await;
}

/// A GET, an upload the origin hashes, a large download and many requests at once on one
/// connection, each stream's answer whole and in its own order; the handshakes counted.
async fn requests_come_back_whole(listener: &str) {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", listener).await;
    wait_for(&edge, OPENED, &[("route", "b.test")], 2.0).await;
    let (up, down): (u64, u64) = (3 * 1024 * 1024 + 17, 8 * 1024 * 1024 + 5);
    let out = h3_client(
        edge.addr,
        "b.test",
        &ca(&fx),
        &["GET:/hello", &format!("POST:/sink:{up}"), &format!("GET:/source/{down}")],
    )
    .await;
    let r = &out["responses"];
    assert_eq!(r[0]["status"], 200, "{out}");
    assert_eq!(r[0]["text"], "hello /hello", "{out}");
    assert_eq!(r[1]["status"], 200, "{out}");
    assert_eq!(r[1]["text"], pattern_sha256(up), "the origin hashed the upload: {out}");
    assert_eq!(r[2]["length"], down, "{out}");
    assert_eq!(r[2]["sha256"], pattern_sha256(down), "{out}");
    assert_eq!(stats.seen.lock().unwrap()[0]["via"], "3 edgewarm");

    // 100 streams at once (the client's limit is 128), each its own path and size.
    let many: Vec<String> = (0..100).map(|i| format!("GET:/source/{}", 1000 + i * 997)).collect();
    let mut args: Vec<&str> = vec!["--parallel"];
    args.extend(many.iter().map(String::as_str));
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &args).await;
    let r = out["responses"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(r.len(), 100, "{out}");
    for (i, response) in r.iter().enumerate() {
        let size = 1000 + i as u64 * 997;
        assert_eq!(response["status"], 200, "stream {i}: {response}");
        assert_eq!(response["length"], size, "stream {i}: {response}");
        assert_eq!(response["sha256"], pattern_sha256(size), "stream {i}: {response}");
    }
    assert_eq!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]), 2.0);
    assert_eq!(stats.connections.load(Ordering::Relaxed), 2, "no origin connection per HTTP/3 client");
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn many_http3_clients_at_once() {
    many_clients_at_once(HTTP3).await;
}

/// Several clients at once, each with a few requests: every connection is served.
async fn many_clients_at_once(listener: &str) {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", listener).await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--clients", "20", "GET:/a", "GET:/source/70000"]).await;
    let clients = out["clients"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(clients.len(), 20);
    for c in clients {
        assert_eq!(c["responses"][0]["text"], "hello /a", "{c}");
        assert_eq!(c["responses"][1]["sha256"], pattern_sha256(70000), "{c}");
    }
    assert_eq!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]), 20.0);
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_client_s_key_updates_are_followed() {
    key_updates(HTTP3).await;
}

/// A client that updates its 1-RTT keys twice (RFC 9001 §6) is read and answered in each new
/// key phase: the edge derives a phase's keys only when a packet first needs them, and in turn.
/// aioquic reads nothing the edge would send in a phase it has left (it would take it for an
/// update of the edge's own and lose the connection).
async fn key_updates(listener: &str) {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", listener).await;
    let out = h3_client(
        edge.addr,
        "b.test",
        &ca(&fx),
        &["--key-update", "GET:/a", "GET:/source/300000", "POST:/sink:200000"],
    )
    .await;
    let r = &out["responses"];
    assert_eq!(r[0]["text"], "hello /a", "{out}");
    assert_eq!(r[1]["sha256"], pattern_sha256(300_000), "{out}");
    assert_eq!(r[2]["text"], pattern_sha256(200_000), "the origin hashed the upload: {out}");
    assert_eq!(out["key_phases"], serde_json::json!([0, 1, 0]), "two updates, each taken: {out}");
    edge.stop().await;
}
