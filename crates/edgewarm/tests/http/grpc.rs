//! gRPC through an `http` route with a real gRPC server and client (grpcio: `grpc_peer.py`):
//! unary and server-streaming calls pass and are never stored by the cache; what the edge
//! answers itself (the origin gone, too slow, over the route's rate, refused by its lists, a
//! body or a head too large) reaches a gRPC client as a gRPC status, in one HEADERS frame that
//! ends the stream (Trailers-Only), over HTTP/2 (grpcio, nghttp) and HTTP/3 (aioquic).

use std::path::{Path, PathBuf};

use tokio::io::AsyncBufReadExt;

use super::*;

/// Debian's interpreter: python3-grpcio installs for it (a `python3` found first on PATH, a
/// pyenv one, may have no grpc).
const PYTHON: &str = "/usr/bin/python3";
const SERVICE: &str = "/edgewarm.test.Echo";

/// The peer script, written out once per test.
struct Peer {
    _dir: tempfile::TempDir,
    script: PathBuf,
}

fn peer() -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("grpc_peer.py");
    std::fs::write(&script, include_str!("grpc_peer.py")).unwrap();
    Peer { _dir: dir, script }
}

/// A gRPC server on 127.0.0.1 (h2c, as grpcio serves without TLS): its address, and its
/// process (killed when dropped).
async fn grpc_server(p: &Peer) -> (SocketAddr, tokio::process::Child) {
    let mut child = tokio::process::Command::new(PYTHON)
        .arg(&p.script)
        .arg("serve")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with grpcio (scripts/deps.sh: python3-grpcio)");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the gRPC server printed its port")
        .unwrap()
        .expect("the gRPC server started (is python3-grpcio installed?)");
    (SocketAddr::from(([127, 0, 0, 1], line.trim().parse::<u16>().unwrap())), child)
}

/// One call of `method` with `data`, at most 20 s (the client's deadline; `--timeout` in
/// `extra` changes it); over TLS to the edge (its CA trusted, b.test as SNI and authority),
/// or over h2c straight to `origin` when `fx` is none. The client's JSON report.
async fn call(
    p: &Peer,
    to: SocketAddr,
    fx: Option<&Pki>,
    method: &str,
    data: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut cmd = tokio::process::Command::new(PYTHON);
    cmd.arg(&p.script).args(["call", &to.to_string(), method, data]).args(extra).kill_on_drop(true);
    if let Some(fx) = fx {
        cmd.arg("--tls").arg(fx.path.join("edge/ca.pem")).arg("b.test");
    }
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output()).await.expect("the client ended").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)))
}

/// An `http` route for b.test to a cleartext HTTP/2 origin (the gRPC server); `extra` adds
/// keys, indented like the route's.
fn grpc_route(fx: &Pki, origin: SocketAddr, extra: &str) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{tls: false}}\n{extra}"
    )
}

/// A gRPC server and an edge in front of it: `extra` for the route, `top` for the top level
/// of the configuration, `listener` for the listener.
async fn grpc_edge(
    p: &Peer,
    fx: &Pki,
    extra: &str,
    top: &str,
    listener: &str,
) -> (Edge, SocketAddr, tokio::process::Child) {
    let (origin, server) = grpc_server(p).await;
    (edge(&grpc_route(fx, origin, extra), top, listener).await, origin, server)
}

/// A call the edge answered itself: a gRPC status, not an HTTP one (grpcio reports an HTTP
/// status other than 200 as UNKNOWN or UNAVAILABLE with "Received http2 header with status").
fn assert_edge_status(out: &serde_json::Value, code: &str, message: &str) {
    assert_eq!(out["code"], code, "{out}");
    assert_eq!(out["details"], message, "the edge's own text: {out}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (grpcio): scripts/test.sh runs it")]
async fn grpc_calls_pass_and_are_never_cached() {
    let (fx, p) = (fixture(), peer());
    let (edge, origin, _server) = grpc_edge(&p, &fx, "    cache: {}\n", "", "").await;
    for _ in 0..2 {
        let out = call(&p, edge.addr, Some(&fx), "Say", "hi", &[]).await;
        assert_eq!(out["code"], "OK", "{out}");
        assert_eq!(out["replies"], serde_json::json!(["echo:hi"]), "{out}");
    }
    let out = call(&p, edge.addr, Some(&fx), "Count", "5", &["--stream"]).await;
    assert_eq!(out["code"], "OK", "{out}");
    assert_eq!(out["replies"], serde_json::json!(["0", "1", "2", "3", "4"]), "every message, in order: {out}");
    // gRPC is POST: the cache passes every call by, and stores none.
    let calls = call(&p, origin, None, "Calls", "", &[]).await;
    assert_eq!(calls["replies"], serde_json::json!(["3"]), "each call reached the origin: {calls}");
    assert_eq!(edge.metric("edgewarm_cache_requests_total", &[("route", "b.test"), ("result", "bypass")]), 3.0);
    assert_eq!(edge.metric("edgewarm_cache_stored_bytes", &[("route", "b.test")]), 0.0, "nothing stored");
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (grpcio): scripts/test.sh runs it")]
async fn an_origin_gone_or_too_slow_is_a_grpc_status() {
    let (fx, p) = (fixture(), peer());
    let (edge, _, mut server) = grpc_edge(&p, &fx, "", "timeouts:\n  origin_response: 1s\n", "").await;
    // The origin answers after 5 s, the edge waits 1 s; the client would wait 20 s: the
    // deadline is the edge's.
    let out = call(&p, edge.addr, Some(&fx), "Slow", "x", &[]).await;
    assert_edge_status(&out, "DEADLINE_EXCEEDED", "origin timed out");
    assert_eq!(edge.metric("edgewarm_http_errors_total", &[("route", "b.test"), ("reason", "timeout")]), 1.0);

    server.kill().await.unwrap();
    let out = call(&p, edge.addr, Some(&fx), "Say", "hi", &[]).await;
    assert_eq!(out["code"], "UNAVAILABLE", "{out}");
    let details = out["details"].as_str().unwrap_or_default();
    assert!(["origin unavailable", "origin failed"].contains(&details), "the edge's own text: {out}");
    let origin_faults = edge.metric("edgewarm_http_errors_total", &[("route", "b.test"), ("fault", "origin")]);
    assert_eq!(origin_faults, 2.0, "the metrics keep the real reasons");
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (grpcio): scripts/test.sh runs it")]
async fn a_route_s_limits_are_grpc_statuses() {
    let (fx, p) = (fixture(), peer());
    let limited = "    limits: {requests_per_second: 0.001, burst: 1}\n";
    let (edge, origin, _server) = grpc_edge(&p, &fx, limited, "", "").await;
    let out = call(&p, edge.addr, Some(&fx), "Say", "hi", &[]).await;
    assert_eq!(out["code"], "OK", "the burst's one call: {out}");
    let out = call(&p, edge.addr, Some(&fx), "Say", "hi", &[]).await;
    assert_edge_status(&out, "RESOURCE_EXHAUSTED", "too many requests");
    assert!(out["trailing"]["retry-after"].as_str().is_some_and(|s| s.parse::<u64>().is_ok()), "{out}");
    let over = edge.metric("edgewarm_limited_total", &[("scope", "route"), ("name", "b.test"), ("reason", "rate")]);
    assert_eq!(over, 1.0);
    let calls = call(&p, origin, None, "Calls", "", &[]).await;
    assert_eq!(calls["replies"], serde_json::json!(["1"]), "the refused call never reached the origin");
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (grpcio): scripts/test.sh runs it")]
async fn a_message_over_max_request_body_is_resource_exhausted() {
    let (fx, p) = (fixture(), peer());
    let (edge, _, _server) = grpc_edge(&p, &fx, "    max_request_body: 100\n", "", "").await;
    let out = call(&p, edge.addr, Some(&fx), "Say", &"x".repeat(50), &[]).await;
    assert_eq!(out["replies"], serde_json::json!([format!("echo:{}", "x".repeat(50))]), "within the limit: {out}");
    // grpcio sends no content-length: the body is cut where it passes the limit.
    let out = call(&p, edge.addr, Some(&fx), "Say", &"x".repeat(1000), &[]).await;
    assert_edge_status(&out, "RESOURCE_EXHAUSTED", "request body too large");
    let reason = [("route", "b.test"), ("reason", "body_too_large")];
    assert_eq!(edge.metric("edgewarm_http_errors_total", &reason), 1.0);
    edge.stop().await;
}

/// nghttp's frame log of one gRPC POST (an empty message) to `edge` over HTTP/2.
async fn nghttp_grpc(edge: SocketAddr, dir: &Path) -> String {
    let body = dir.join("message");
    std::fs::write(&body, [0u8; 5]).unwrap();
    let args = [
        "-v".to_string(),
        "--timeout=20".into(),
        "-H".into(),
        "content-type: application/grpc".into(),
        "-H".into(),
        "te: trailers".into(),
        "-d".into(),
        body.display().to_string(),
        format!("https://127.0.0.1:{}{SERVICE}/Say", edge.port()),
    ];
    let (ok, stdout, stderr) = run("nghttp", args.to_vec()).await;
    assert!(ok, "{stdout}{stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (nghttp): scripts/test.sh runs it")]
async fn a_refusal_is_one_headers_frame_that_ends_the_stream() {
    let fx = fixture();
    // nghttp connects by address and sends no SNI, which the `""` route serves; its origin
    // (TLS: a no-SNI route names the origin's name in `origin_tls`) listens nowhere, so every
    // call is refused (503).
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let route = fx.route(gone, "").replacen("sni: b.test", "sni: \"\"", 1);
    let edge = edge(&route, "", "").await;
    let frames = nghttp_grpc(edge.addr, &fx.path).await;
    // nghttp prints a frame's flags on the line after its header.
    let lines: Vec<&str> = frames.lines().collect();
    let heads: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains("recv HEADERS frame")).collect();
    assert_eq!(heads.len(), 1, "{frames}");
    let flags = lines.get(heads[0] + 1).copied().unwrap_or_default();
    assert!(flags.contains("END_STREAM | END_HEADERS"), "the head ends the stream: {frames}");
    assert!(!frames.contains("recv DATA frame"), "no body: {frames}");
    for field in
        [":status: 200", "content-type: application/grpc", "grpc-status: 14", "grpc-message: origin unavailable"]
    {
        assert!(frames.contains(field), "{field}: {frames}");
    }
    // The log and the metrics keep the status the edge meant.
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("route", "<no-sni>"), ("status", "5xx")]), 1.0);
    edge.stop().await;
}

/// aioquic's gRPC POST of `/Say` on b.test over HTTP/3; `extra` goes first.
async fn h3_grpc(edge: &Edge, fx: &Pki, extra: &[&str]) -> serde_json::Value {
    let path = format!("POST:{SERVICE}/Say:5");
    let mut args = vec!["--header", "content-type=application/grpc", "--header", "te=trailers"];
    args.extend(extra);
    args.push(&path);
    h3_client(edge.addr, "b.test", &fx.path.join("edge/ca.pem"), &args).await
}

/// An HTTP/3 answer in Trailers-Only form: 200, `code` and `message` in its head, no body.
fn assert_h3_status(out: &serde_json::Value, code: &str, message: &str) {
    let r = &out["responses"][0];
    assert_eq!(r["status"], 200, "{out}");
    assert_eq!(r["headers"]["grpc-status"], code, "{out}");
    assert_eq!(r["headers"]["grpc-message"], message, "{out}");
    assert_eq!(r["length"], 0, "no body: {out}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic, grpcio): scripts/test.sh runs it")]
async fn over_http3_refusals_are_grpc_statuses_too() {
    let (fx, p) = (fixture(), peer());
    let denied = "    deny: [\"127.0.0.1\"]\n";
    let (edge, _, _server) = grpc_edge(&p, &fx, denied, "", "http3: true").await;
    assert_h3_status(&h3_grpc(&edge, &fx, &[]).await, "7", "forbidden");

    // A head over the edge's 64 KiB: refused before the route is known, still as gRPC.
    // In fields of 4 KiB (aioquic's encoder refuses a longer value).
    let big: Vec<String> = (0..18).map(|i| format!("x-big-{i}={}", "a".repeat(4096))).collect();
    let big: Vec<&str> = big.iter().flat_map(|h| ["--header", h.as_str()]).collect();
    assert_h3_status(&h3_grpc(&edge, &fx, &big).await, "8", "request header fields too large");
    edge.stop().await;
}
