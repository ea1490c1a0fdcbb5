//! What the request service does to each request: headers, bodies, limits, the error table, retries.

use super::*;

/// What the origin is told, and what it is not: hop-by-hop headers go, client-supplied
/// forwarding headers are replaced by what the edge saw (all four by default, or the ones
/// `forward_headers` lists).
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

    // `forward_headers: [x-forwarded-for]`: only that one is added, and the client's others
    // are still dropped; no Via either way.
    let only_xff = self::edge(&fx.route(origin, "    forward_headers: [x-forwarded-for]\n"), "", "").await;
    let mut client = HttpClient::connect(&fx.edge, only_xff.addr, "b.test", true).await.unwrap();
    let (head, _) = client.send("GET", "b.test", "/h", &headers[2..], vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(!head.headers.contains_key("via"), "{:?}", head.headers);
    let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");
    for gone in ["forwarded", "x-forwarded-proto", "via"] {
        assert!(!seen.contains_key(gone), "{gone}: {seen:?}");
    }
    only_xff.stop().await;
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

/// Requests edgewarm must not forward: another name (421, so an HTTP/2 client that reused the
/// connection opens one for that name).
#[tokio::test]
async fn misdirected_requests_are_refused() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let mut h2 = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    assert_eq!(h2.send("GET", "other.test", "/", &[], vec![]).await.unwrap().0.status, 421);
    let mut h1 = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
    assert_eq!(h1.send("GET", "b.test", "/fine", &[], vec![]).await.unwrap().0.status, 200);
    assert_eq!(stats.requests.load(Ordering::Relaxed), 1, "only the good request reached the origin");
    drop((h2, h1));
    edge.settle().await;
    edge.stop().await;
}

/// A browser reuses a connection for another name its certificate covers (connection
/// coalescing): a request for another `http` route with the same TLS settings is served on it,
/// by that route, to that route's origin; a route with other TLS settings (here, 0-RTT) is 421.
#[tokio::test]
async fn coalesced_requests_for_a_sibling_route_are_served_by_it() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (assets, assets_stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let p = fx.path.display();
    let sibling = |name: &str, extra: &str| {
        format!(
            "  - sni: {name}\n    action: http\n    origin: \"{assets}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{extra}"
        )
    };
    let routes =
        fx.route(origin, "") + &sibling("static.b.test", "") + &sibling("zero.b.test", "    early_data: safe\n");
    let edge = edge(&routes, "", "").await;
    for h2 in [true, false] {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        assert_eq!(client.send("GET", "static.b.test", "/s", &[], vec![]).await.unwrap().0.status, 200);
        assert_eq!(client.send("GET", "b.test", "/b", &[], vec![]).await.unwrap().0.status, 200);
        assert_eq!(client.send("GET", "static.b.test", "/t", &[], vec![]).await.unwrap().0.status, 200);
        if h2 {
            assert_eq!(client.send("GET", "zero.b.test", "/z", &[], vec![]).await.unwrap().0.status, 421);
        }
    }
    assert_eq!(assets_stats.requests.load(Ordering::Relaxed), 4, "the sibling route's origin");
    assert_eq!(stats.requests.load(Ordering::Relaxed), 2);
    let seen = assets_stats.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["forwarded"], "for=127.0.0.1;proto=https;host=\"static.b.test\"");
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("route", "static.b.test")]), 4.0);
    edge.settle().await;
    edge.stop().await;
}

/// CONNECT is not proxied, whatever the origin speaks: an HTTP/2 client's CONNECT gets a 405
/// from routes with an HTTP/2 and with an HTTP/1.1 origin, and neither origin sees it.
#[tokio::test]
async fn connect_gets_405_in_front_of_either_origin() {
    let fx = fixture();
    let (h2, h2_stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (h1, h1_stats) = h1_origin(&fx.origin).await;
    for (origin, stats, extra) in [(h2, h2_stats, ""), (h1, h1_stats, "    upstream: {protocol: http/1.1}\n")] {
        let edge = edge(&fx.route(origin, extra), "", "").await;
        let (tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["h2"]).await.unwrap();
        let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(conn);
        let connect = http::Request::builder().method("CONNECT").uri("b.test:443").body(()).unwrap();
        let (response, _) = send.send_request(connect, true).unwrap();
        assert_eq!(response.await.unwrap().status(), 405, "{extra}");
        assert_eq!(stats.requests.load(Ordering::Relaxed), 0, "the origin saw the CONNECT ({extra})");
        drop(send);
        edge.stop().await;
    }
}

/// Bad requests are answered, not forwarded: a request head over 64 KiB gets 431, garbage gets
/// 400; the origin sees neither.
#[tokio::test]
async fn oversized_and_malformed_requests_get_431_and_400() {
    use tokio::io::AsyncWriteExt;
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let big = format!("GET / HTTP/1.1\r\nhost: b.test\r\nx-big: {}\r\n\r\n", "a".repeat(70 * 1024));
    for (request, status) in [(big.into_bytes(), "431"), (b"GET / HTTP/1.1\r\nho st\r\n\r\n".to_vec(), "400")] {
        let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
        let _ = tls.write_all(&request).await;
        let mut answer = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "want {status}: {answer}");
    }
    assert_eq!(stats.requests.load(Ordering::Relaxed), 0);
    edge.settle().await;
    edge.stop().await;
}

/// Behind a trusted load balancer (`trust_forwarded: true` on the listener) its forwarding
/// headers are kept and the edge's hop appended; the default listener replaces them.
#[tokio::test]
async fn forwarding_headers_are_extended_only_behind_a_trusted_balancer() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "trust_forwarded: true").await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let lb = [("x-forwarded-for", "198.51.100.9"), ("x-forwarded-proto", "https")];
    assert_eq!(client.send("GET", "b.test", "/", &lb, vec![]).await.unwrap().0.status, 200);
    let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["x-forwarded-for"], "198.51.100.9, 127.0.0.1");
    drop(client);
    edge.settle().await;
    edge.stop().await;
}

/// `max_request_body`: a body declared larger gets a 413 before any of it is read or anything
/// reaches the origin; a chunked body that grows past the limit is cut off there with a 413
/// (its origin stream reset, or its HTTP/1.1 origin connection dropped); smaller bodies pass.
#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    use tokio::io::AsyncWriteExt;
    let fx = fixture();
    let (h2, h2_stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (h1, h1_stats) = h1_origin(&fx.origin).await;
    for (origin, stats, extra) in [
        (h2, h2_stats, "    max_request_body: 64KiB\n"),
        (h1, h1_stats, "    max_request_body: 64KiB\n    upstream: {protocol: http/1.1}\n"),
    ] {
        let edge = edge(&fx.route(origin, extra), "", "").await;
        for h2 in [true, false] {
            let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
            let (head, _) = client.send("POST", "b.test", "/echo", &[], vec![1; 100_000]).await.unwrap();
            assert_eq!(head.status, 413, "declared length over the limit (h2 {h2})");
        }
        assert_eq!(stats.requests.load(Ordering::Relaxed), 0, "refused before reaching the origin");
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
        let (head, body) = client.send("POST", "b.test", "/echo", &[], vec![2; 60_000]).await.unwrap();
        assert_eq!((head.status.as_u16(), body.len()), (200, 60_000));

        // Chunked: no length up front, so the body goes out until it passes the limit.
        let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
        tls.write_all(b"POST /echo HTTP/1.1\r\nhost: b.test\r\ntransfer-encoding: chunked\r\n\r\n").await.unwrap();
        let chunk = format!("4000\r\n{}\r\n", "c".repeat(0x4000));
        for _ in 0..8 {
            if tls.write_all(chunk.as_bytes()).await.is_err() {
                break;
            }
        }
        let _ = tls.write_all(b"0\r\n\r\n").await;
        let mut answer = vec![0; 64];
        let n = tokio::io::AsyncReadExt::read(&mut tls, &mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "chunked over the limit: {answer}");
        assert_eq!(
            edge.metric("edgewarm_http_errors_total", &[("route", "b.test"), ("reason", "body_too_large")]),
            3.0
        );
        edge.stop().await;
    }
}

/// The client's malformed requests are 400s counted as the client's fault, never blamed on the
/// origin: two `Host` lines (RFC 9112 §3.2; which one to believe is what request smuggling
/// plays on) are refused before forwarding, and a chunked body whose chunk extension is over
/// the parser's limit (70 KB) is answered 400, not 502, in front of either kind of origin.
#[tokio::test]
async fn malformed_requests_are_the_client_s_fault() {
    use tokio::io::AsyncWriteExt;
    let fx = fixture();
    let (h2, h2_stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (h1, h1_stats) = h1_origin(&fx.origin).await;
    for (origin, stats, extra) in [(h2, h2_stats, ""), (h1, h1_stats, "    upstream: {protocol: http/1.1}\n")] {
        let edge = edge(&fx.route(origin, extra), "", "").await;
        let ask = |request: Vec<u8>| {
            let (certs, addr) = (fx.edge.clone(), edge.addr);
            async move {
                let (mut tls, _) = tls_client(&certs, addr, "b.test", &["http/1.1"]).await.unwrap();
                let _ = tls.write_all(&request).await;
                let mut answer = vec![0; 64];
                let n = tokio::io::AsyncReadExt::read(&mut tls, &mut answer).await.unwrap_or(0);
                String::from_utf8_lossy(&answer[..n]).into_owned()
            }
        };
        let two_hosts = b"GET /x HTTP/1.1\r\nhost: b.test\r\nhost: evil.test\r\n\r\n".to_vec();
        let answer = ask(two_hosts).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "two Host lines ({extra}): {answer}");
        assert_eq!(stats.requests.load(Ordering::Relaxed), 0, "forwarded with two Host lines ({extra})");
        let client = [("route", "b.test"), ("reason", "bad_request"), ("fault", "client")];
        assert_eq!(edge.metric("edgewarm_http_errors_total", &client), 1.0, "{extra}");

        let mut chunked = b"POST /echo HTTP/1.1\r\nhost: b.test\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        chunked.extend_from_slice(format!("5;ext={}\r\nhello\r\n0\r\n\r\n", "e".repeat(70_000)).as_bytes());
        let answer = ask(chunked).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "a 70 KB chunk extension ({extra}): {answer}");
        let bad_body = [("route", "b.test"), ("reason", "bad_body"), ("fault", "client")];
        assert_eq!(edge.metric("edgewarm_http_errors_total", &bad_body), 1.0, "{extra}");
        assert_eq!(edge.metric("edgewarm_http_errors_total", &[("fault", "origin")]), 0.0, "blamed on the origin");
        edge.stop().await;
    }
}

/// A connection that dies with a request on it: an idempotent request without a body is sent
/// again on another connection; a POST with a body is not (the origin may have acted on it),
/// it gets a 502.
#[tokio::test]
async fn only_safe_requests_are_retried_after_a_connection_dies() {
    let fx = fixture();
    let opts = H2Opts { drop_first_request_on: 2, ..Default::default() };
    let (origin, stats) = h2_origin(&fx.origin, opts).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 1}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test")], 1.0).await;
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    // Connection 0 dies with a POST on it.
    let (head, _) = client.send("POST", "b.test", "/echo", &[], b"pay once".to_vec()).await.unwrap();
    assert_eq!(head.status, 502, "a POST is never sent twice");
    assert_eq!(edge.metric("edgewarm_http_retries_total", &[("route", "b.test")]), 0.0);
    // Connection 1 dies with a GET on it: sent again, on connection 2.
    let (head, body) = client.send("GET", "b.test", "/again", &[], vec![]).await.unwrap();
    assert_eq!((head.status.as_u16(), body.as_slice()), (200, &b"hello /again"[..]), "GET retried");
    assert_eq!(edge.metric("edgewarm_http_retries_total", &[("route", "b.test")]), 1.0);
    assert_eq!(stats.requests.load(Ordering::Relaxed), 3);
    edge.stop().await;
}
