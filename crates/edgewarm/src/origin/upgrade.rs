//! An HTTP/1.1 protocol upgrade (WebSocket, RFC 6455) on an origin connection of its own: the
//! client's request goes out with its `Upgrade` and `Connection: upgrade` (and edgewarm's
//! forwarding headers); a `101` from the origin becomes the client's `101`, after which bytes
//! are relayed both ways until either side closes. Any other answer is passed to the client as
//! a normal response. Every kind without a way of its own to carry an upgrade uses this, over
//! a connection its own connector made.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use super::connect::OriginIo;
use super::seam::{OriginError, Upgrade, Upgraded};

/// Carry `up` over `io`, a fresh connection that speaks HTTP/1.1.
pub(crate) async fn over_h1(io: OriginIo, up: Upgrade<'_>) -> Result<Upgraded, OriginError> {
    let Upgrade { mut client, head, address: _, timeout, tasks, cut } = up;
    let bad = || OriginError::Upgrade("bad upgrade request".into());
    let http = |e: hyper::Error| OriginError::Upgrade(format!("origin HTTP/1.1 for the upgrade: {e}"));
    let protocol = client.headers().get(header::UPGRADE).cloned().ok_or_else(bad)?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(http)?;
    tasks.spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let authority = head.uri().authority().map(|a| a.as_str().to_string()).ok_or_else(bad)?;
    let path = head.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut out =
        Request::builder().method(head.method().clone()).uri(path).body(Empty::<Bytes>::new()).map_err(|_| bad())?;
    *out.headers_mut() = head.headers().clone();
    let h = out.headers_mut();
    h.insert(header::HOST, HeaderValue::from_str(&authority).map_err(|_| bad())?);
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, protocol);
    let mut response = tokio::time::timeout(timeout, send.send_request(out))
        .await
        .map_err(|_| OriginError::Upgrade("origin did not answer the upgrade in time".into()))?
        .map_err(http)?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let origin_side = hyper::upgrade::on(&mut response);
        let client_side = hyper::upgrade::on(&mut client);
        tasks.spawn(async move {
            let (Ok(client), Ok(origin)) = tokio::join!(client_side, origin_side) else { return };
            let (mut client, mut origin) = (TokioIo::new(client), TokioIo::new(origin));
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut origin) => {}
                () = cut.cancelled() => {}
            }
        });
    }
    Ok(Upgraded { response: response.map(|b| b.map_err(Into::into).boxed()), conn: None })
}
