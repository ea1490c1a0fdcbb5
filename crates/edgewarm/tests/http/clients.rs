//! Real clients (curl, h2load, hyper) and client behaviour: side by side with other actions, stalls, resets, a gibibyte.

use super::*;

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

/// One edge, one config: tunnel, prewarm and http routes side by side.
#[tokio::test]
async fn tunnel_prewarm_and_http_side_by_side() {
    let fx = fixture();
    let (h2, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (tls, _) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let a = certs(&["a.test"]);
    let echo = tls_echo_origin(&a).await;
    let c = certs(&["c.test"]);
    std::fs::create_dir(fx.path.join("c")).unwrap();
    c.write(&fx.path.join("c"));
    let p = fx.path.display();
    let routes = format!(
        "{}  - sni: c.test\n    action: prewarm\n    origin: \"{tls}\"\n    cert: {p}/c/cert.pem\n    key: {p}/c/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{}",
        fx.route(h2, ""),
        route_to("a.test", echo)
    );
    let edge = edge(&routes, "", "").await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    assert_eq!(client.send("GET", "b.test", "/x", &[], vec![]).await.unwrap().0.status, 200);
    let (mut t, _) = tls_client(&c, edge.addr, "c.test", &[]).await.unwrap();
    t.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    t.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    let (mut tun, _) = tls_client(&a, edge.addr, "a.test", &[]).await.unwrap();
    tun.write_all(b"hi\n").await.unwrap();
    let mut line = vec![0u8; 16];
    let n = tun.read(&mut line).await.unwrap();
    assert!(String::from_utf8_lossy(&line[..n]).contains("hi"), "{:?}", String::from_utf8_lossy(&line[..n]));
    drop((tun, t, client));
    edge.settle().await;
    edge.stop().await;
}

/// A client that stops reading a large response is closed after `timeouts.idle`, and the origin
/// stream it held is released.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_and_its_stream_released() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 1}\n"), "timeouts:\n  idle: 300ms\n", "").await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
    let body = vec![b'x'; 8 << 20];
    let head = format!("POST /echo HTTP/1.1\r\nhost: b.test\r\ncontent-length: {}\r\n\r\n", body.len());
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    // Read a little of the 8 MiB answer, then stop reading.
    let mut some = [0u8; 1024];
    tls.read_exact(&mut some).await.unwrap();
    let streams = || async {
        let (_, json) = admin_get(edge.admin, "/origins").await;
        json.contains("\"streams\":0")
    };
    let mut released = false;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if streams().await && edge.server.open_connections() == 0 {
            released = true;
            break;
        }
    }
    assert!(released, "{}", admin_get(edge.admin, "/origins").await.1);
    drop(tls);
    edge.stop().await;
}

/// An HTTP/2 client's streams end with it: one it resets mid-response frees its origin stream
/// at once while the connection goes on serving, and one it stops reading holds the origin to
/// the client's window until the idle timeout closes the connection, which frees that origin
/// stream too.
#[tokio::test]
async fn an_http2_client_that_resets_or_stops_reading_frees_its_origin_streams() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 1}\n"), "timeouts:\n  idle: 500ms\n", "").await;
    let (tls, alpn) = tls_client(&fx.edge, edge.addr, "b.test", &["h2"]).await.unwrap();
    assert_eq!(alpn.as_deref(), Some("h2"));
    let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
    let driver = tokio::spawn(conn);
    let get = |path: &str| http::Request::get(format!("https://b.test{path}")).body(()).unwrap();
    let origin_streams = || async { admin_get(edge.admin, "/origins").await.1 };
    let released = || async {
        for _ in 0..400 {
            if origin_streams().await.contains("\"streams\":0") {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    };

    // 100 MiB asked for; the first chunk read, then the stream reset (dropping it sends
    // RST_STREAM).
    let (response, _) = send.send_request(get("/source/104857600"), true).unwrap();
    let mut body = response.await.unwrap().into_body();
    assert!(!body.data().await.unwrap().unwrap().is_empty());
    drop(body);
    assert!(released().await, "the reset stream's origin stream stays open: {}", origin_streams().await);

    // The connection serves on.
    send = send.ready().await.unwrap();
    let (response, _) = send.send_request(get("/after"), true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(text, b"hello /after");

    // 100 MiB asked for and never read: the client's window fills, the edge stops reading the
    // origin, and the idle timeout ends the connection and the origin stream with it.
    let (response, _) = send.send_request(get("/source/104857600"), true).unwrap();
    let held = response.await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), driver).await;
    assert!(closed.is_ok(), "the idle timeout did not close the stalled connection");
    assert!(released().await, "the stalled stream's origin stream stays open: {}", origin_streams().await);
    drop(held);
    edge.stop().await;
}

/// Large transfers through a real client, checked by hash at both ends: curl uploads a stream
/// the origin hashes as it arrives (HTTP/2), and downloads one the origin generates, hashed as
/// it arrives (HTTP/1.1, then HTTP/2); nothing touches the disk. 1 GiB each way (EDGEWARM_BIG_TRANSFER=bytes to change).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (real clients): scripts/test.sh runs it")]
async fn a_gibibyte_up_and_down_hashed_at_both_ends() {
    use std::process::{Command, Stdio};
    let size: u64 = std::env::var("EDGEWARM_BIG_TRANSFER").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30);
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "timeouts:\n  origin_response: 600s\n", "").await;
    let port = edge.addr.port();
    let ca = fx.path.join("edge/ca.pem").display().to_string();
    let curl = move |args: &[&str]| {
        let mut c = Command::new("curl");
        c.args(["-sS", "--cacert", &ca, "--resolve", &format!("b.test:{port}:127.0.0.1")]).args(args);
        c
    };
    let want = pattern_sha256(size);
    let mut up = curl(&["--http2", "-T", "-", &format!("https://b.test:{port}/sink")]);
    let mut down = curl(&["--http1.1", &format!("https://b.test:{port}/source/{size}")]);
    let mut down_h2 = curl(&["--http2", &format!("https://b.test:{port}/source/{size}")]);
    let (sent, received, received_h2) = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut up = up.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdin = up.stdin.take().unwrap();
        let mut at = 0;
        while at < size {
            let n = (size - at).min(1 << 20) as usize;
            stdin.write_all(&pattern(at, n)).unwrap();
            at += n as u64;
        }
        drop(stdin);
        let out = up.wait_with_output().unwrap();
        assert!(out.status.success(), "upload failed");
        let mut down = down.stdout(Stdio::piped()).spawn().unwrap();
        let received = sha256_of(down.stdout.take().unwrap()).unwrap();
        assert!(down.wait().unwrap().success(), "download failed");
        let mut down = down_h2.stdout(Stdio::piped()).spawn().unwrap();
        let received_h2 = sha256_of(down.stdout.take().unwrap()).unwrap();
        assert!(down.wait().unwrap().success(), "HTTP/2 download failed");
        (String::from_utf8(out.stdout).unwrap(), received, received_h2)
    })
    .await
    .unwrap();
    assert_eq!(sent, want, "the origin received the upload intact");
    assert_eq!(received, want, "the client received the download intact");
    assert_eq!(received_h2, want, "the HTTP/2 client received the download intact");
    edge.settle().await;
    edge.stop().await;
}

/// A client that completed TLS but had not yet sent its first request when the edge began to
/// stop (a shutdown, or the old side of an upgrade) is served that request, over HTTP/1.1 with
/// `Connection: close` and over HTTP/2 before GOAWAY, instead of losing it to a connection
/// closed with nothing said (issue 46). A connection that has already had its requests is
/// asked to go at once, as before.
#[tokio::test]
async fn a_connection_s_first_request_is_served_after_a_stop() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let mut h1 = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    let mut h2 = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let mut used = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    let (head, _) = used.send("GET", "b.test", "/before", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    edge.server.shutdown();
    // Let every connection's task see the stop first; then both first requests go at once,
    // well inside the second of grace.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (one, two) = tokio::join!(
        h1.send("GET", "b.test", "/first-h1", &[], vec![]),
        h2.send("GET", "b.test", "/first-h2", &[], vec![])
    );
    let (head, body) = one.unwrap();
    assert_eq!((head.status.as_u16(), &body[..]), (200, &b"hello /first-h1"[..]));
    assert_eq!(head.headers["connection"], "close");
    let (head, body) = two.unwrap();
    assert_eq!((head.status.as_u16(), &body[..]), (200, &b"hello /first-h2"[..]));
    assert!(used.send("GET", "b.test", "/after", &[], vec![]).await.is_err(), "an idle used connection goes");
    assert_eq!(stats.seen.lock().unwrap().len(), 3);
    edge.stop().await;
}
