//! The HTTP/1.1 kind at the seam ([`Origin`](crate::origin::seam::Origin)): a request takes a pooled keep-alive connection
//! (origin-form target, `Host` header), which goes back to the pool when its response body
//! has ended (an upgrade goes over a connection of its own from the set's connector:
//! [`crate::origin::request_kind::Requests`]). The origin's
//! `103 Early Hints` go to the client as they arrive (hyper's `ext::on_informational`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::Request;
use http_body_util::BodyExt;

use super::{H1Error, H1Upstream};
use crate::metrics::HintSource;
use crate::origin::body::{OnEnd, OriginBody};
use crate::origin::seam::{Failure, OriginError, Outgoing, SendFailure, Sent};

pub(super) async fn send(upstream: &Arc<H1Upstream>, out: Outgoing<'_>) -> Result<Sent, SendFailure> {
    let Outgoing { build, body, up, timeout, affinity: _, tried: _, interim, began: _, client: _ } = out;
    let (parts, ()) = build().into_parts();
    // Origin-form target and a Host header: what an HTTP/1.1 server expects.
    let authority = parts.uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    let path: http::Uri = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| SendFailure::fatal(OriginError::Target))?;
    let counter = up.clone();
    let body = OnEnd::new(body.boxed(), move |n, _| {
        counter.fetch_add(n, Ordering::Relaxed);
    })
    .boxed();
    let mut out = Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = path;
    *out.headers_mut() = parts.headers;
    if let Ok(host) = http::HeaderValue::from_str(&authority) {
        out.headers_mut().insert(http::header::HOST, host);
    }
    if let Some(interim) = interim.cloned() {
        // The origin's `103 Early Hints` on to the client as they come (hyper reads 1xx heads
        // before the final one and hands them to this).
        hyper::ext::on_informational(&mut out, move |head| {
            let mut informational = http::Response::new(());
            *informational.status_mut() = head.status();
            *informational.headers_mut() = head.headers().clone();
            interim.send(informational, HintSource::Origin);
        });
    }
    match tokio::time::timeout(timeout, upstream.send(out)).await {
        Err(_) => Err(SendFailure::fatal(OriginError::Timeout)),
        Ok(Err(H1Error::Connect(e))) => Err(SendFailure::fatal(OriginError::NoConnection(e.to_string()))),
        Ok(Err(H1Error::Http(e))) => {
            // The connection closed before a response head: the origin may have acted.
            let kind = if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
                Failure::Lost
            } else {
                Failure::Final
            };
            Err(SendFailure { kind, error: OriginError::Protocol(format!("origin HTTP/1.1: {e}")) })
        }
        Ok(Ok((response, lease))) => {
            let reused = lease.reused;
            Ok(Sent {
                response: response.map(|b| OriginBody::new(b, Box::new(lease))),
                conn: None,
                reused,
                notes: http::Extensions::new(),
            })
        }
    }
}
