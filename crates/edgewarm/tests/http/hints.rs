//! `103 Early Hints` end to end: the hints an edge learned from a page sent at once on the next
//! navigation to it, over HTTP/2 (the `h2` crate's client, which reports 1xx heads) and HTTP/3
//! (aioquic); none on other requests or over HTTP/1.1; and an origin's own 103s passed on, from
//! an HTTP/2 and an HTTP/1.1 origin. Where a test says a 103 came "at once", the origin is
//! holding the response (`H2Opts::gate`) when the client reads it: the hint cannot have waited
//! for the response.

use std::future::poll_fn;
use std::sync::Arc;

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::*;

const NAVIGATION: [(&str, &str); 2] =
    [("accept", "text/html,application/xhtml+xml,*/*;q=0.8"), ("sec-fetch-dest", "document")];
const LEARNED: [(&str, &str); 2] = [("route", "b.test"), ("source", "learned")];

/// An HTTP/2 client on one TLS connection to the edge.
async fn h2_client(fx: &Pki, edge: &Edge) -> SendRequest<Bytes> {
    let (tls, alpn) = tls_client(&fx.edge, edge.addr, "b.test", &["h2"]).await.unwrap();
    assert_eq!(alpn.as_deref(), Some("h2"));
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    send
}

/// A GET for `path` with `headers`, sent; its response to come.
async fn start(client: &SendRequest<Bytes>, path: &str, headers: &[(&str, &str)]) -> ResponseFuture {
    let mut send = client.clone().ready().await.unwrap();
    let mut req = http::Request::builder().uri(format!("https://b.test{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send.send_request(req.body(()).unwrap(), true).unwrap().0
}

/// The response's next informational head; `None` once its final head is there.
async fn informational(response: &mut ResponseFuture) -> Option<http::Response<()>> {
    poll_fn(|cx| response.poll_informational(cx)).await.transpose().unwrap()
}

/// The 103 of a response whose origin still holds it. Bounded (10 s) so that a missing hint
/// fails the test instead of waiting for a response the origin never sends.
async fn hint_while_held(response: &mut ResponseFuture) -> http::Response<()> {
    let head = tokio::time::timeout(Duration::from_secs(10), informational(response)).await;
    let head = head.expect("no 103 while the origin held the response").expect("a 103, not the final response");
    assert_eq!(head.status(), 103);
    head
}

/// The informational heads still to come, and the final status.
async fn finish(mut response: ResponseFuture) -> (Vec<http::Response<()>>, http::StatusCode) {
    let mut early = Vec::new();
    while let Some(head) = informational(&mut response).await {
        early.push(head);
    }
    let response = response.await.unwrap();
    let status = response.status();
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    (early, status)
}

fn links(head: &http::Response<()>) -> Vec<&str> {
    head.headers().get_all("link").iter().map(|v| v.to_str().unwrap()).collect()
}

/// A gated HTTP/2 origin and an edge learning hints on its route.
async fn hinting_edge(early_hints: &str) -> (Pki, Edge, Arc<Notify>, Arc<H2Stats>) {
    let fx = fixture();
    let gate = Arc::new(Notify::new());
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { gate: Some(gate.clone()), ..H2Opts::default() }).await;
    let edge = edge(&fx.route(origin, &format!("    early_hints: {early_hints}\n")), "", "").await;
    (fx, edge, gate, stats)
}

/// Let the origin answer once it holds `n` requests in all.
async fn release_at(stats: &H2Stats, gate: &Notify, n: usize) {
    for _ in 0..2000 {
        if stats.requests.load(Ordering::Relaxed) >= n {
            gate.notify_one();
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the origin never saw request {n}");
}

/// The first navigation to a page teaches the edge its preloads (the `rel=next` entry is no
/// hint); the second gets them as a 103 while the origin still holds the page, then the page.
/// A script's fetch of the same URL is no navigation and gets none.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_navigation_gets_the_learned_hints_at_once_over_http2() {
    let (fx, edge, gate, stats) = hinting_edge("{}").await;
    let client = h2_client(&fx, &edge).await;
    let first = start(&client, "/gate/page", &NAVIGATION).await;
    release_at(&stats, &gate, 1).await;
    let (early, status) = finish(first).await;
    assert!(early.is_empty(), "nothing learned before the first response: {early:?}");
    assert_eq!(status, 200);

    let mut second = start(&client, "/gate/page", &NAVIGATION).await;
    let hint = hint_while_held(&mut second).await;
    assert_eq!(links(&hint), [PAGE_HINTS]);
    assert_eq!(edge.metric("edgewarm_http_early_hints_total", &LEARNED), 1.0);
    gate.notify_one();
    let (more, status) = finish(second).await;
    assert!(more.is_empty(), "{more:?}");
    assert_eq!(status, 200);

    let fetch = start(&client, "/gate/page", &[("accept", "*/*"), ("sec-fetch-dest", "empty")]).await;
    // Released only once the origin has the request: a hint, sent before the origin is asked,
    // would be ahead of the response.
    release_at(&stats, &gate, 3).await;
    let (early, _) = finish(fetch).await;
    assert!(early.is_empty(), "no hints for a request that is no navigation: {early:?}");
    assert_eq!(edge.metric("edgewarm_http_early_hints_total", &LEARNED), 1.0);
    edge.stop().await;
}

/// Over HTTP/1.1 no 103 is sent (browsers ignore it there): the first head a navigation reads
/// is the page's, though the edge has learned its hints (an HTTP/2 navigation afterwards gets
/// them, learned from the HTTP/1.1 ones).
#[tokio::test(flavor = "multi_thread")]
async fn no_hints_over_http1() {
    let (fx, edge, gate, stats) = hinting_edge("{}").await;
    for n in 1..=2 {
        let (mut tls, alpn) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
        assert_eq!(alpn.as_deref(), Some("http/1.1"));
        let head = "GET /gate/page HTTP/1.1\r\nHost: b.test\r\nAccept: text/html\r\nSec-Fetch-Dest: document\r\n\r\n";
        tls.write_all(head.as_bytes()).await.unwrap();
        release_at(&stats, &gate, n).await;
        let head = response_head(&mut tls).await;
        assert!(head.starts_with("http/1.1 200"), "navigation {n}: {head}");
    }
    assert_eq!(edge.metric("edgewarm_http_early_hints_total", &LEARNED), 0.0);
    let client = h2_client(&fx, &edge).await;
    let mut third = start(&client, "/gate/page", &NAVIGATION).await;
    let hint = hint_while_held(&mut third).await;
    assert_eq!(links(&hint), [PAGE_HINTS]);
    gate.notify_one();
    finish(third).await;
    edge.stop().await;
}

/// An HTTP/2 origin's own 103 reaches the client before the final response, on a route without
/// `early_hints` (passing them on is the default) and for any request.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_origins_own_hints_are_passed_on() {
    let fx = fixture();
    let gate = Arc::new(Notify::new());
    let (origin, _) = h2_origin(&fx.origin, H2Opts { gate: Some(gate.clone()), ..H2Opts::default() }).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let client = h2_client(&fx, &edge).await;
    let mut response = start(&client, "/gate/hinted", &[]).await;
    let hint = hint_while_held(&mut response).await;
    assert_eq!(links(&hint), [ORIGIN_HINT]);
    gate.notify_one();
    let (more, status) = finish(response).await;
    assert!(more.is_empty(), "{more:?}");
    assert_eq!(status, 200);
    let origin_hints = [("route", "b.test"), ("source", "origin")];
    assert_eq!(edge.metric("edgewarm_http_early_hints_total", &origin_hints), 1.0);
    edge.stop().await;
}

/// A cleartext HTTP/1.1 origin that answers every request with a 103 (`Link`, and a
/// `Connection` header that must not reach an HTTP/2 client) and then, once let through, `ok`.
async fn h1_hinting_origin(gate: Arc<Notify>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let gate = gate.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while tcp.read_exact(&mut byte).await.is_ok() {
                    head.push(byte[0]);
                    if !head.ends_with(b"\r\n\r\n") {
                        continue;
                    }
                    head.clear();
                    let early = format!("HTTP/1.1 103 Early Hints\r\nLink: {ORIGIN_HINT}\r\nConnection: x-hop\r\n\r\n");
                    if tcp.write_all(early.as_bytes()).await.is_err() {
                        return;
                    }
                    gate.notified().await;
                    if tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// An HTTP/1.1 origin's 103 is passed on too (hyper's client hands it over), without the
/// connection options it named.
#[tokio::test(flavor = "multi_thread")]
async fn an_http1_origins_own_hints_are_passed_on() {
    let fx = fixture();
    let gate = Arc::new(Notify::new());
    let origin = h1_hinting_origin(gate.clone()).await;
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 1}}\n"
    );
    let edge = edge(&route, "", "").await;
    let client = h2_client(&fx, &edge).await;
    let mut response = start(&client, "/any", &[]).await;
    let hint = hint_while_held(&mut response).await;
    assert_eq!(links(&hint), [ORIGIN_HINT]);
    assert!(!hint.headers().contains_key("connection"), "{hint:?}");
    gate.notify_one();
    let (_, status) = finish(response).await;
    assert_eq!(status, 200);
    edge.stop().await;
}

/// Over HTTP/3 (aioquic): the second navigation's response is preceded by a 103 with the
/// learned hints; a request that is no navigation gets none.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_second_navigation_gets_the_learned_hints_over_http3() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    early_hints: {}\n"), "", "http3: true").await;
    let ca = fx.path.join("edge/ca.pem");
    let out = h3_client(edge.addr, "b.test", &ca, &["--header", "accept=text/html", "GET:/page", "GET:/page"]).await;
    let r = &out["responses"];
    assert_eq!(r[0]["informational"], serde_json::json!([]), "{out}");
    assert_eq!(r[1]["informational"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(r[1]["informational"][0][":status"], "103", "{out}");
    assert_eq!(r[1]["informational"][0]["link"], PAGE_HINTS, "{out}");
    assert_eq!(r[1]["status"], 200, "{out}");
    assert_eq!(r[1]["length"], r[0]["length"], "{out}");
    // aioquic sends no Accept of its own: not a navigation.
    let out = h3_client(edge.addr, "b.test", &ca, &["GET:/page"]).await;
    assert_eq!(out["responses"][0]["informational"], serde_json::json!([]), "{out}");
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!(edge.metric("edgewarm_http_early_hints_total", &LEARNED), 1.0);
    edge.stop().await;
}
