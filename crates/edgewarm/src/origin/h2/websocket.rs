//! WebSockets as RFC 8441 streams on the standing HTTP/2 connections, when the origin
//! announced `SETTINGS_ENABLE_CONNECT_PROTOCOL`: the client's WebSocket handshake becomes an
//! extended CONNECT (`:protocol websocket`) on an origin connection that is already open, so
//! a WebSocket costs the long link no handshake either. The HTTP/1.1 handshake's key and
//! accept do not exist in HTTP/2 (RFC 8441 §5), so the edge answers the client's
//! `Sec-WebSocket-Key` itself once the origin's `200` arrives; subprotocol and extension
//! headers pass both ways. Frames are relayed as DATA under HTTP/2 flow control.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::H2Upstream;
use crate::h2_stream::{send_data, Frames};
use crate::origin::body::OriginBody;
use crate::origin::seam::{OriginError, Upgrade, Upgraded};

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
/// have announced extended CONNECT). After a `101` the relay runs as a task of `up.tasks`
/// until either side closes or `up.cut` fires; the stream's place on its connection is held
/// as long as the relay.
pub(crate) async fn websocket(upstream: &Arc<H2Upstream>, up: Upgrade<'_>) -> Result<Upgraded, OriginError> {
    let Upgrade { mut client, head, address: _, timeout, tasks, cut } = up;
    let bad = || OriginError::Upgrade("bad upgrade request".into());
    let stream = |e: h2::Error| OriginError::Upgrade(format!("origin stream: {e}"));
    let key = client.headers().get(header::SEC_WEBSOCKET_KEY).cloned().ok_or_else(bad)?;
    let mut connect = Request::builder().method(Method::CONNECT).uri(head.uri().clone()).body(()).map_err(|_| bad())?;
    *connect.headers_mut() = head.headers().clone();
    let h = connect.headers_mut();
    // HTTP/2 has neither (RFC 8441 §5): `:authority` names the host, and the key is answered
    // here.
    h.remove(header::HOST);
    h.remove(header::SEC_WEBSOCKET_KEY);
    connect.extensions_mut().insert(h2::ext::Protocol::from_static("websocket"));
    let sent = upstream
        .send(&mut || connect.clone(), false, &Default::default())
        .await
        .map_err(|e| OriginError::Upgrade(e.to_string()))?;
    let response = tokio::time::timeout(timeout, sent.response)
        .await
        .map_err(|_| OriginError::Upgrade("origin did not answer the upgrade in time".into()))?
        .map_err(stream)?;
    let (mut parts, recv) = response.into_parts();
    parts.version = http::Version::HTTP_11;
    let conn = Some(sent.conn_id);
    if !parts.status.is_success() {
        // Refused: the origin's answer goes back as an ordinary response; the stream's place
        // is freed when its body ends.
        let body = OriginBody::new(Frames::new(recv), Box::new(sent.slot));
        return Ok(Upgraded { response: Response::from_parts(parts, body.boxed()), conn });
    }
    parts.status = StatusCode::SWITCHING_PROTOCOLS;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let accept = HeaderValue::from_str(&websocket_accept(key.as_bytes())).map_err(|_| bad())?;
    parts.headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    let client_side = hyper::upgrade::on(&mut client);
    let (tx, slot) = (sent.body, sent.slot);
    tasks.spawn(async move {
        let _slot = slot;
        let Ok(client) = client_side.await else { return };
        let (r, w) = tokio::io::split(TokioIo::new(client));
        tokio::select! {
            _ = async { tokio::join!(up_stream(r, tx), down_stream(recv, w)) } => {}
            () = cut.cancelled() => {}
        }
    });
    let body = Empty::<Bytes>::new().map_err(|never| match never {}).boxed();
    Ok(Upgraded { response: Response::from_parts(parts, body), conn })
}

/// Client bytes to the origin stream, as the stream's window allows; the client's EOF ends the
/// stream, a client error resets it.
async fn up_stream(mut r: impl AsyncRead + Unpin, mut tx: SendStream<Bytes>) {
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
async fn down_stream(recv: RecvStream, mut w: impl AsyncWrite + Unpin) {
    let mut body = Frames::new(recv);
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            if w.write_all(&data).await.is_err() {
                return;
            }
        }
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 §1.3's worked example.
    #[test]
    fn accept_matches_the_rfc_example() {
        assert_eq!(websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }
}
