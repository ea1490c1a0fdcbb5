//! An HTTP/2 origin driven with the `h2` crate, so tests control its settings and misbehaviour.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{plain_origin_loop, tls_origin_loop};
use crate::*;

/// What an HTTP/2 test origin saw.
#[derive(Default)]
pub struct H2Stats {
    /// TLS connections accepted.
    pub connections: std::sync::atomic::AtomicUsize,
    pub requests: std::sync::atomic::AtomicUsize,
    /// Every request's headers, in arrival order.
    pub seen: Mutex<Vec<http::HeaderMap>>,
    /// Connections closed for idleness (`close_idle_after`).
    pub idle_closes: std::sync::atomic::AtomicUsize,
}

/// How an HTTP/2 test origin misbehaves.
#[derive(Default, Clone)]
pub struct H2Opts {
    /// Send GOAWAY (graceful) after this many streams on a connection.
    pub goaway_after: Option<usize>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: Option<u32>,
    /// Connection number `freeze_conn` (0: the first) stops reading (no more PONGs, no
    /// answers) this long after it opened, keeping its socket open: a black-holed link.
    pub freeze_after: Option<Duration>,
    pub freeze_conn: usize,
    /// Close a connection (TCP FIN, no GOAWAY) after this long without a new stream, as
    /// origins with short keep-alive timeouts do.
    pub close_idle_after: Option<Duration>,
    /// Connections number 0..n die (dropped, no answer) on their first request: the request
    /// reached the origin, which never answered.
    pub drop_first_request_on: usize,
    /// Announce RFC 8441 extended CONNECT: a `CONNECT` with `:protocol websocket` is
    /// answered `200` (with `x-seen-for`: the `x-forwarded-for` it carried, and
    /// `sec-websocket-protocol: chat` when the client offered `chat`) and its DATA echoed back.
    pub websocket: bool,
    /// Answer `425 Too Early` to every request carrying `Early-Data: 1` (RFC 8470).
    pub too_early: bool,
    /// The first connection is closed with GOAWAY ENHANCE_YOUR_CALM this long after it opened
    /// (what gRPC servers send as `too_many_pings`).
    pub calm_first_after: Option<Duration>,
    /// Paths starting `/gate` answer once this is notified (a request held in flight for as long
    /// as a test needs; each notification lets one through).
    pub gate: Option<Arc<tokio::sync::Notify>>,
}

/// An HTTP/2 origin over TLS (ALPN h2), driven with the `h2` crate so tests control GOAWAY and
/// stream limits. Paths: `/echo` answers with the request body; `/page` (any path ending so) is
/// an HTML page with sub-resources (for browsers) and their preloads in `Link` ([`PAGE_LINKS`]);
/// one ending in `/hinted` gets the origin's own `103 Early Hints` ([`ORIGIN_HINT`]) at once;
/// `/slow` never answers; `/delay` answers after 500 ms; `/gate…` when the test lets it
/// ([`H2Opts::gate`]); `/sink` answers the SHA-256 of the request body and
/// `/source/N` sends N pattern bytes (both streamed, for transfers of any size); any other path
/// answers `hello <path>`. Each response carries `x-origin-conn` (which connection).
pub async fn h2_origin(certs: &Certs, opts: H2Opts) -> (SocketAddr, Arc<H2Stats>) {
    tls_origin_loop(certs.acceptor_with_alpn(&[b"h2"]), move |tls, n, st| serve_h2(tls, n, st, opts.clone())).await
}

/// The same origin in cleartext, HTTP/2 with prior knowledge (h2c), for `upstream.tls: false`.
pub async fn h2c_origin(opts: H2Opts) -> (SocketAddr, Arc<H2Stats>) {
    plain_origin_loop(move |tcp, n, st| serve_h2(tcp, n, st, opts.clone())).await
}

/// One connection of [`h2_origin`] or [`h2c_origin`].
async fn serve_h2<IO>(io: IO, n: usize, st: Arc<H2Stats>, opts: H2Opts)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use std::sync::atomic::Ordering;
    let mut builder = h2::server::Builder::new();
    builder.initial_window_size(4 << 20).initial_connection_window_size(16 << 20);
    if let Some(m) = opts.max_streams {
        builder.max_concurrent_streams(m);
    }
    if opts.websocket {
        builder.enable_connect_protocol();
    }
    let Ok(mut conn) = builder.handshake::<_, bytes::Bytes>(io).await else { return };
    let mut streams = 0;
    let freeze = opts.freeze_after.filter(|_| n == opts.freeze_conn);
    let freeze_at = tokio::time::Instant::now() + freeze.unwrap_or(Duration::from_secs(3600));
    let mut calm = opts.calm_first_after.filter(|_| n == 0);
    let calm_at = tokio::time::Instant::now() + calm.unwrap_or(Duration::from_secs(3600));
    loop {
        let idle = opts.close_idle_after.unwrap_or(Duration::from_secs(3600));
        let next = tokio::select! {
            next = conn.accept() => next,
            () = tokio::time::sleep_until(freeze_at), if freeze.is_some() => {
                // Hold the connection without polling it: nothing is read or sent.
                let _held = conn;
                std::future::pending::<()>().await;
                return;
            }
            () = tokio::time::sleep(idle), if opts.close_idle_after.is_some() => {
                st.idle_closes.fetch_add(1, Ordering::Relaxed);
                return;
            }
            () = tokio::time::sleep_until(calm_at), if calm.is_some() => {
                calm = None;
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                continue;
            }
        };
        let Some(next) = next else { return };
        let Ok((req, respond)) = next else { return };
        if streams == 0 && n < opts.drop_first_request_on {
            st.requests.fetch_add(1, Ordering::Relaxed);
            return;
        }
        streams += 1;
        st.requests.fetch_add(1, Ordering::Relaxed);
        st.seen.lock().unwrap().push(req.headers().clone());
        if opts.too_early && req.headers().contains_key("early-data") {
            let mut respond = respond;
            let _ = respond.send_response(http::Response::builder().status(425).body(()).unwrap(), true);
            continue;
        }
        let gate = opts.gate.clone().filter(|_| req.uri().path().starts_with("/gate"));
        tokio::spawn(async move {
            let mut respond = respond;
            if req.uri().path().ends_with("/hinted") {
                let early = http::Response::builder().status(103).header("link", ORIGIN_HINT).body(()).unwrap();
                let _ = respond.send_informational(early);
            }
            if let Some(gate) = gate {
                gate.notified().await;
            }
            h2_answer(req, respond, n).await;
        });
        if opts.goaway_after == Some(streams) {
            conn.graceful_shutdown();
        }
    }
}

async fn h2_answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    conn: usize,
) {
    if req.method() == http::Method::CONNECT {
        return h2_websocket_echo(req, respond).await;
    }
    let path = req.uri().path().to_string();
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return;
    }
    if path == "/delay" {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if path == "/sink" || path.starts_with("/source/") {
        return h2_stream(req, respond, &path).await;
    }
    let mut recv = req.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let page = path.ends_with("/page");
    let reply = match path.as_str() {
        "/echo" => body,
        _ if page => PAGE.as_bytes().to_vec(),
        _ => format!("hello {path}").into_bytes(),
    };
    let kind = if page { "text/html" } else { "text/plain" };
    let mut response =
        http::Response::builder().status(200).header("x-origin-conn", conn.to_string()).header("content-type", kind);
    if page {
        response = PAGE_LINKS.iter().fold(response, |r, link| r.header("link", *link));
    }
    let response = response.body(()).unwrap();
    let Ok(mut tx) = respond.send_response(response, reply.is_empty()) else { return };
    let mut reply = bytes::Bytes::from(reply);
    while !reply.is_empty() {
        tx.reserve_capacity(reply.len());
        let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
        let chunk = reply.split_to(n.min(reply.len()));
        if tx.send_data(chunk, reply.is_empty()).is_err() {
            return;
        }
    }
}

/// The `Link` fields `/page` answers with: its stylesheet and script to preload (what a
/// `103 Early Hints` carries), and one that is no hint.
pub const PAGE_LINKS: [&str; 2] =
    ["</res/a.css>; rel=preload; as=style, </next>; rel=next", "</res/b.js>; rel=preload; as=script"];
/// `PAGE_LINKS`' hints, as an edge that learned them sends them.
pub const PAGE_HINTS: &str = "</res/a.css>; rel=preload; as=style, </res/b.js>; rel=preload; as=script";
/// What the origin's own `103 Early Hints` (paths ending in `/hinted`) carries.
pub const ORIGIN_HINT: &str = "</res/e.css>; rel=preload; as=style";

/// `/page`: HTML with four sub-resources; once loaded, it writes the protocol the browser used
/// for the page and for each sub-resource (Navigation and Resource Timing's `nextHopProtocol`)
/// into `data-protocols` on its body, where a headless browser's `--dump-dom` shows it.
const PAGE: &str = r#"<!doctype html><html><head><title>edgewarm</title>
<link rel="stylesheet" href="/res/a.css"><script src="/res/b.js"></script></head>
<body><img src="/res/c.png"><img src="/res/d.png"><script>
addEventListener("load", () => setTimeout(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource").map(r => r.name.split("/").pop() + "=" + r.nextHopProtocol);
  document.body.setAttribute("data-protocols", ["page=" + nav.nextHopProtocol, ...res].join(" "));
}, 0));
</script></body></html>
"#;

/// An RFC 8441 WebSocket stream: `200`, then every DATA frame echoed until the client ends
/// the stream.
async fn h2_websocket_echo(req: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<bytes::Bytes>) {
    let protocol = req.extensions().get::<h2::ext::Protocol>().map(|p| p.as_str().to_string());
    if protocol.as_deref() != Some("websocket") {
        let _ = respond.send_response(http::Response::builder().status(400).body(()).unwrap(), true);
        return;
    }
    let seen = req.headers().get("x-forwarded-for").cloned().unwrap_or(http::HeaderValue::from_static(""));
    let mut response = http::Response::builder().status(200).header("x-seen-for", seen);
    if req.headers().get("sec-websocket-protocol").is_some_and(|p| p.to_str().unwrap_or("").contains("chat")) {
        response = response.header("sec-websocket-protocol", "chat");
    }
    let Ok(mut tx) = respond.send_response(response.body(()).unwrap(), false) else { return };
    let mut recv = req.into_body();
    while let Some(Ok(mut chunk)) = recv.data().await {
        let _ = recv.flow_control().release_capacity(chunk.len());
        while !chunk.is_empty() {
            tx.reserve_capacity(chunk.len());
            let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
            if tx.send_data(chunk.split_to(n.min(chunk.len())), false).is_err() {
                return;
            }
        }
    }
    let _ = tx.send_data(bytes::Bytes::new(), true);
}

/// `/sink`: read the body as it comes and answer its SHA-256 (nothing is held);
/// `/source/N`: send N bytes of [`pattern`], as the client's window allows.
async fn h2_stream(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    path: &str,
) {
    use sha2::Digest;
    let mut recv = req.into_body();
    let mut h = sha2::Sha256::new();
    while let Some(chunk) = recv.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = recv.flow_control().release_capacity(chunk.len());
        h.update(&chunk);
    }
    let total: u64 = path.strip_prefix("/source/").and_then(|n| n.parse().ok()).unwrap_or(0);
    let response = http::Response::builder().status(200).body(()).unwrap();
    let Ok(mut tx) = respond.send_response(response, false) else { return };
    if path == "/sink" {
        let _ = tx.send_data(bytes::Bytes::from(hex(&h.finalize())), true);
        return;
    }
    let mut at = 0u64;
    while at < total {
        tx.reserve_capacity(((total - at).min(1 << 20)) as usize);
        let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
        let n = n.min((total - at) as usize);
        let last = at + n as u64 == total;
        if tx.send_data(bytes::Bytes::from(pattern(at, n)), last).is_err() {
            return;
        }
        at += n as u64;
    }
}
