//! Client connection drivers, one file per protocol (HTTP/1.1, HTTP/2, HTTP/3). A driver reads
//! requests off its connection, hands each to the [`Service`] and writes the responses back; it
//! knows nothing of origins (tests/layout.rs checks that no driver imports an origin kind). All
//! end the same way ([`Ended`]) and all honour `stop` (shutdown, or a reload retiring the
//! route's origin connections) by finishing gracefully, and `cut` by ending.

pub(crate) mod alt_svc;
pub(crate) mod h1;
pub(crate) mod h2;
pub(crate) mod h3;

use http::{header, HeaderMap, HeaderValue};
use http_body::Body as _;
use tokio_util::sync::CancellationToken;

use super::service::Service;
use crate::metrics::{Fault, HttpError};

/// Largest request head accepted (HTTP/1.1 buffer, HTTP/2 header list): 431 beyond.
pub(crate) const MAX_HEADER_BYTES: usize = edgewarm_h3::MAX_HEADER_BYTES;
/// Streams one client may have open at once over HTTP/2.
pub(crate) use crate::transport::MAX_CLIENT_STREAMS;

/// How long a connection that has not yet sent its first request is given to send it once
/// asked to finish. A client that has just completed its handshake sends its request at once
/// (a browser in the same flight as its TLS Finished); closing the connection under it loses
/// that request, which a client cannot tell from a failed one (issue 46: every upgrade under
/// short-connection load lost a few).
pub(crate) const FIRST_REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What hyper adds to a response head and the drivers on `h2` and `h3` add themselves: a
/// `Date` on the answers edgewarm writes (origins send theirs) and `Content-Length` from a body
/// of known size.
pub(crate) fn finish_head(head: &mut http::response::Parts, body: &super::Body) {
    if !head.headers.contains_key(header::DATE) {
        if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now())) {
            head.headers.insert(header::DATE, date);
        }
    }
    if !body.is_end_stream() && !head.headers.contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = body.size_hint().exact() {
            head.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
}

/// Resolves once the connection should finish gracefully: shutdown, or a reload retiring the
/// route's origin connections. Pin it once per connection: a cancellation future registers
/// with its token when first polled, which should not be redone on every turn of a loop.
pub(crate) async fn stopping(stop: &CancellationToken, retired: &CancellationToken) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = retired.cancelled() => {}
    }
}

/// A stream's handler panicked (caught per stream: with every stream in its connection's task,
/// it would otherwise end the client's whole connection): counted and logged.
pub(crate) fn handler_panicked(shared: &Service, done: std::thread::Result<()>) {
    if done.is_err() {
        shared.conn.metrics.error(&shared.route, HttpError::Internal, Fault::Edge);
        tracing::error!(route = %shared.route, client = %shared.conn.client, "a request's handler panicked; its stream was reset");
    }
}

/// A request's declared `Content-Length`, if any.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// How a client connection ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The client closed it, or it closed after a graceful shutdown.
    Done,
    /// The shutdown's grace period ran out.
    Cut,
    /// A protocol or I/O error.
    Failed(String),
}
