//! HTTP/1.1 protocol upgrades (WebSocket, RFC 6455) on `http` routes.
//!
//! An upgraded connection is a byte stream for as long as it lives. Two ways to carry it:
//!
//! - **A stream on the standing connections** ([`websocket_h2`]), when the origin announced
//!   `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 8441): the client's WebSocket handshake becomes an
//!   extended CONNECT (`:protocol websocket`) on an origin connection that is already open, so
//!   a WebSocket costs the long link no handshake either. The HTTP/1.1 handshake's key and
//!   accept do not exist in HTTP/2 (RFC 8441 §5), so the edge answers the client's
//!   `Sec-WebSocket-Key` itself once the origin's `200` arrives; subprotocol and extension
//!   headers pass both ways. Frames are relayed as DATA under HTTP/2 flow control.
//! - **An origin connection of its own** ([`upgrade`]), for every other origin and protocol:
//!   TLS without ALPN (so HTTP/1.1); the client's request goes out with its `Upgrade` and
//!   `Connection: upgrade` (and edgewarm's forwarding headers); a `101` from the origin becomes
//!   the client's `101`, after which bytes are relayed both ways until either side closes.
//!
//! Any other answer is passed to the client as a normal response.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http::flow::{send_data, OriginBody};
use crate::http::forward;
use crate::origin::dial::{Dial, TlsDial, WarmError};
use crate::origin::h2::{BoxedBody, Upstream, UpstreamError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("origin connection for the upgrade: {0}")]
    Connect(#[from] WarmError),
    #[error("origin HTTP/1.1 for the upgrade: {0}")]
    Http(#[from] hyper::Error),
    #[error("bad upgrade request")]
    Request,
    #[error("{0}")]
    Upstream(#[from] UpstreamError),
    #[error("origin stream: {0}")]
    Stream(#[from] h2::Error),
    #[error("origin did not answer the upgrade in time")]
    Timeout,
}

/// A request asking to switch protocols (HTTP/1.1 `Upgrade`, not h2c).
pub(crate) fn is_upgrade<B>(req: &Request<B>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")));
    let h2c = req.headers().get(header::UPGRADE).is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"h2c"));
    req.version() == http::Version::HTTP_11 && connection_upgrade && req.headers().contains_key(header::UPGRADE) && !h2c
}

/// Carry one upgrade: `head` is the request as [`forward::head`] made it (hop-by-hop
/// headers gone, forwarding headers set). Returns the response for the client; after a `101`
/// the relay runs as a task of `tasks` until either side closes or `cut` fires.
pub(crate) async fn upgrade(
    mut client_req: Request<Incoming>,
    head: &Request<()>,
    dial: TlsDial,
    timeout: Duration,
    tasks: &TaskTracker,
    cut: CancellationToken,
) -> Result<Response<Incoming>, UpgradeError> {
    let protocol = client_req.headers().get(header::UPGRADE).cloned().ok_or(UpgradeError::Request)?;
    let tls = dial.dial(timeout).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tasks.spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let authority = head.uri().authority().map(|a| a.as_str().to_string()).ok_or(UpgradeError::Request)?;
    let path = head.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut out = Request::builder()
        .method(head.method().clone())
        .uri(path)
        .body(Empty::<Bytes>::new())
        .map_err(|_| UpgradeError::Request)?;
    *out.headers_mut() = head.headers().clone();
    let h = out.headers_mut();
    h.insert(header::HOST, HeaderValue::from_str(&authority).map_err(|_| UpgradeError::Request)?);
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, protocol);
    let mut response =
        tokio::time::timeout(timeout, send.send_request(out)).await.map_err(|_| UpgradeError::Timeout)??;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(response);
    }
    let origin_side = hyper::upgrade::on(&mut response);
    let client_side = hyper::upgrade::on(&mut client_req);
    tasks.spawn(async move {
        let (Ok(client), Ok(origin)) = tokio::join!(client_side, origin_side) else { return };
        let (mut client, mut origin) = (TokioIo::new(client), TokioIo::new(origin));
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut origin) => {}
            () = cut.cancelled() => {}
        }
    });
    Ok(response)
}

/// How an upgrade reaches `route`'s origin on a connection of its own. No ALPN offered:
/// HTTP/1.1 is the default without it, and WebSocket servers often do not negotiate ALPN at
/// all (an offer of `http/1.1` they ignore would fail the check).
pub(crate) fn own_dial(route: &crate::route::HttpRoute, snapshot: &crate::snapshot::Snapshot) -> TlsDial {
    let alpn = None;
    TlsDial {
        key: route.origin.key(alpn),
        connector: tokio_rustls::TlsConnector::from(route.origin.config(alpn)),
        server_name: route.origin.server_name.clone(),
        resolver: snapshot.resolver.clone(),
    }
}

/// The client's copy of an origin response, body passed through.
pub(crate) fn boxed(response: Response<Incoming>) -> Response<BoxedBody> {
    response.map(|b| b.map_err(Into::into).boxed())
}

/// A WebSocket handshake (RFC 6455 §4.1): `Upgrade: websocket` with a key to answer.
pub(crate) fn is_websocket<B>(req: &Request<B>) -> bool {
    req.headers().get(header::UPGRADE).is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket"))
        && req.headers().contains_key(header::SEC_WEBSOCKET_KEY)
}

/// `Sec-WebSocket-Accept` for a client's key (RFC 6455 §4.2.2).
pub(crate) fn websocket_accept(key: &[u8]) -> String {
    use base64::Engine;
    use sha1::{Digest, Sha1};
    let mut h = Sha1::new();
    h.update(key);
    h.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Carry a WebSocket as an RFC 8441 stream on `upstream`'s standing connections (which must
/// have announced extended CONNECT). Returns the response for the client and which connection
/// carries it; after a `101` the relay runs as a task of `tasks` until either side closes or
/// `cut` fires. The stream's place on its connection is held as long as the relay.
pub(crate) async fn websocket_h2(
    mut client_req: Request<Incoming>,
    head: &Request<()>,
    upstream: &Arc<Upstream>,
    timeout: Duration,
    tasks: &TaskTracker,
    cut: CancellationToken,
    via: bool,
) -> Result<(Response<BoxedBody>, u64), UpgradeError> {
    let key = client_req.headers().get(header::SEC_WEBSOCKET_KEY).cloned().ok_or(UpgradeError::Request)?;
    let mut connect = Request::builder()
        .method(Method::CONNECT)
        .uri(head.uri().clone())
        .body(())
        .map_err(|_| UpgradeError::Request)?;
    *connect.headers_mut() = head.headers().clone();
    let h = connect.headers_mut();
    // HTTP/2 has neither (RFC 8441 §5): `:authority` names the host, and the key is answered
    // here.
    h.remove(header::HOST);
    h.remove(header::SEC_WEBSOCKET_KEY);
    connect.extensions_mut().insert(h2::ext::Protocol::from_static("websocket"));
    let sent = upstream.send(&mut || connect.clone(), false).await?;
    let response = tokio::time::timeout(timeout, sent.response).await.map_err(|_| UpgradeError::Timeout)??;
    let (mut parts, recv) = response.into_parts();
    forward::response_headers(&mut parts.headers, via);
    parts.version = http::Version::HTTP_11;
    if !parts.status.is_success() {
        // Refused: the origin's answer goes back as an ordinary response; the stream's place
        // is freed when its body ends.
        let slot = sent.slot;
        let body = OriginBody::new(recv, move |_| drop(slot));
        return Ok((Response::from_parts(parts, body.map_err(Into::into).boxed()), sent.conn_id));
    }
    parts.status = StatusCode::SWITCHING_PROTOCOLS;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let accept = HeaderValue::from_str(&websocket_accept(key.as_bytes())).map_err(|_| UpgradeError::Request)?;
    parts.headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    let client_side = hyper::upgrade::on(&mut client_req);
    let (tx, slot) = (sent.body, sent.slot);
    tasks.spawn(async move {
        let _slot = slot;
        let Ok(client) = client_side.await else { return };
        let (r, w) = tokio::io::split(TokioIo::new(client));
        tokio::select! {
            _ = async { tokio::join!(up(r, tx), down(recv, w)) } => {}
            () = cut.cancelled() => {}
        }
    });
    let body = Empty::<Bytes>::new().map_err(|never| match never {}).boxed();
    Ok((Response::from_parts(parts, body), sent.conn_id))
}

/// Client bytes to the origin stream, as the stream's window allows; the client's EOF ends the
/// stream, a client error resets it.
async fn up(mut r: impl AsyncRead + Unpin, mut tx: SendStream<Bytes>) {
    let counted = AtomicU64::new(0);
    let mut buf = bytes::BytesMut::new();
    loop {
        buf.reserve(16 * 1024);
        match r.read_buf(&mut buf).await {
            Ok(0) => {
                let _ = tx.send_data(Bytes::new(), true);
                return;
            }
            Ok(_) => {
                if send_data(&mut tx, buf.split().freeze(), &counted).await.is_err() {
                    return;
                }
            }
            Err(_) => {
                tx.send_reset(h2::Reason::CANCEL);
                return;
            }
        }
    }
}

/// Origin DATA to the client, each frame's window returned once it is handed to the client's
/// connection; the stream's end half-closes the client.
async fn down(recv: RecvStream, mut w: impl AsyncWrite + Unpin) {
    let mut body = OriginBody::new(recv, |_| {});
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            if w.write_all(&data).await.is_err() {
                return;
            }
        }
    }
    let _ = w.shutdown().await;
}
