//! Cleartext origins (`upstream.tls: false`): an HTTP/1.1 keep-alive pool and standing h2c
//! connections behind an `http` route, and `/origins` listing every kind of standing set.

use super::*;

/// The two cleartext kinds and what `/origins` calls them.
async fn cleartext_origins() -> Vec<(&'static str, &'static str, SocketAddr, std::sync::Arc<H2Stats>)> {
    let (h1, h1_stats) = h1_plain_origin().await;
    let (h2c, h2c_stats) = h2c_origin(H2Opts::default()).await;
    vec![("http/1.1", "protocol: http/1.1, ", h1, h1_stats), ("h2c", "", h2c, h2c_stats)]
}

/// An `http` route whose origin speaks cleartext: the route as a test writes it.
fn cleartext_route(fx: &Pki, origin: SocketAddr, upstream: &str) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{{upstream}tls: false, connections: 2}}\n"
    )
}

/// Each cleartext kind serves HTTP/1.1 and HTTP/2 clients over the standing connections it
/// opened at load (no connection per request), bodies both ways, with the usual forwarding
/// headers; `/origins` shows the set as cleartext.
#[tokio::test]
async fn cleartext_origins_serve_both_client_protocols() {
    let fx = fixture();
    for (kind, upstream, origin, stats) in cleartext_origins().await {
        let edge = edge(&cleartext_route(&fx, origin, upstream), "", "").await;
        wait_for(&edge, OPENED, &[("route", "b.test"), ("alpn", kind)], 2.0).await;
        for h2 in [true, false] {
            let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
            for i in 0..5 {
                let (head, body) = client.send("GET", "b.test", &format!("/c{i}"), &[], vec![]).await.unwrap();
                assert_eq!(head.status, 200, "{kind}");
                assert_eq!(body, format!("hello /c{i}").into_bytes(), "{kind}");
            }
            let big = vec![7u8; 300_000];
            let (head, echoed) = client.send("POST", "b.test", "/echo", &[], big.clone()).await.unwrap();
            assert_eq!(head.status, 200, "{kind}");
            assert!(echoed == big, "{kind}: {} bytes back", echoed.len());
        }
        assert_eq!(stats.requests.load(Ordering::Relaxed), 12, "{kind}");
        assert_eq!(
            stats.connections.load(Ordering::Relaxed),
            2,
            "{kind}: the standing connections carried every request"
        );
        let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{kind}");
        assert_eq!(seen["x-forwarded-proto"], "https", "{kind}: the client's side was TLS");
        assert!(seen["forwarded"].to_str().unwrap().contains("for=127.0.0.1"), "{kind}: {seen:?}");
        assert!(seen["via"].to_str().unwrap().contains("edgewarm"), "{kind}: {seen:?}");
        let (_, json) = admin_get(edge.admin, "/origins").await;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let set = &v["origins"][0];
        assert_eq!((set["kind"].as_str(), set["transport"].as_str()), (Some(kind), Some("cleartext")), "{json}");
        edge.stop().await;
    }
}

/// Real clients: curl over HTTP/1.1 and HTTP/2 through both cleartext kinds.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (real clients): scripts/test.sh runs it")]
async fn curl_through_cleartext_origins() {
    let fx = fixture();
    for (kind, upstream, origin, stats) in cleartext_origins().await {
        let edge = edge(&cleartext_route(&fx, origin, upstream), "", "").await;
        let port = edge.addr.port();
        let ca = fx.path.join("edge/ca.pem").display().to_string();
        let resolve = format!("b.test:{port}:127.0.0.1");
        for (flag, status_line) in [("--http1.1", "HTTP/1.1 200"), ("--http2", "HTTP/2 200")] {
            let mut args: Vec<String> =
                ["-sS", "-i", flag, "--cacert", &ca, "--resolve", &resolve].iter().map(|s| s.to_string()).collect();
            args.push(format!("https://b.test:{port}/curl"));
            let (ok, out, err) = run("curl", args).await;
            assert!(ok, "{kind} curl {flag}: {err}");
            assert!(out.starts_with(status_line), "{kind} {flag}: {out}");
            assert!(out.to_ascii_lowercase().contains("\nvia: "), "{kind} {flag}: {out}");
            assert!(out.ends_with("hello /curl"), "{kind} {flag}: {out}");
        }
        let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{kind}");
        assert_eq!(seen["x-forwarded-proto"], "https", "{kind}");
        edge.stop().await;
    }
}

/// `/origins` lists every kind of standing set, each with its kind and transport: a `prewarm`
/// route's pool, an HTTP/2 set over TLS, and a cleartext HTTP/1.1 pool.
#[tokio::test]
async fn origins_lists_every_kind() {
    let fx = fixture();
    let (h2, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let tls = tls_echo_origin(&fx.origin).await;
    let (h1, _) = h1_plain_origin().await;
    let p = fx.path.display();
    let routes = format!(
        "{}{}  - sni: p.test\n    action: prewarm\n    origin: \"{tls}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    pool: {{min: 1}}\n",
        fx.route(h2, "    upstream: {connections: 1}\n"),
        cleartext_route(&fx, h1, "protocol: http/1.1, ").replace("b.test", "c.test"),
    );
    let edge = edge(&routes, "", "").await;
    assert!(edge.server.wait_warm(Duration::from_secs(10)).await, "every set warm");
    let (_, json) = admin_get(edge.admin, "/origins").await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut kinds: Vec<_> = v["origins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s["route"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["transport"].as_str().unwrap()
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["b.test h2 tls", "c.test http/1.1 cleartext", "p.test prewarm tls"], "{json}");
    edge.stop().await;
}

/// An origin that dies in the middle of a response body (here an HTTP/1.1 origin that sends
/// its head and 3 of the 100 bytes it declared, then closes): the client's response, already
/// under way, is cut (never a clean end that would pass for the whole), and the edge counts it
/// as the origin's `body_cut`, its log line saying so instead of a plain 200.
#[tokio::test]
async fn a_body_the_origin_cuts_is_cut_for_the_client_and_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc").await;
            });
        }
    });
    let edge = edge(&cleartext_route(&fx, origin, "protocol: http/1.1, "), "", "").await;
    for h2 in [false, true] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let result = client.send("GET", "b.test", "/cut", &[], vec![]).await;
        assert!(result.is_err(), "a cut body must not read as a whole one: {result:?}");
    }
    let cut = [("route", "b.test"), ("reason", "body_cut"), ("fault", "origin")];
    wait_for(&edge, "edgewarm_http_errors_total", &cut, 2.0).await;
    edge.stop().await;
}
