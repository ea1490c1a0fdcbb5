//! HTTP/1.1 protocol upgrades (WebSocket, RFC 6455) on `http` routes.
//!
//! An upgraded connection is a byte stream for as long as it lives, so it cannot be a stream
//! on the shared HTTP/2 connections (RFC 8441's extended CONNECT would allow it, but only with
//! origins that announce it; the HTTP/1.1 handshake works with every WebSocket server). Each
//! upgrade gets its own origin connection, TLS without ALPN (so HTTP/1.1): the client's request goes
//! out with its `Upgrade` and `Connection: upgrade` (and edgewarm's forwarding headers); a `101`
//! from the origin becomes the client's `101`, after which bytes are relayed both ways until
//! either side closes. Any other answer is passed to the client as a normal response.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::pool::dial::{Dial, TlsDial, WarmError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("origin connection for the upgrade: {0}")]
    Connect(#[from] WarmError),
    #[error("origin HTTP/1.1 for the upgrade: {0}")]
    Http(#[from] hyper::Error),
    #[error("bad upgrade request")]
    Request,
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

/// Carry one upgrade: `head` is the request as [`super::forward::request`] made it (hop-by-hop
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
    let mut response = tokio::time::timeout(timeout, send.send_request(out))
        .await
        .map_err(|_| UpgradeError::Connect(WarmError::HandshakeTimeout))??;
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

/// The client's copy of an origin response, body passed through.
pub(crate) fn boxed(response: Response<Incoming>) -> Response<super::BoxedBody> {
    response.map(|b| b.map_err(Into::into).boxed())
}
