//! Every error an `http` route answers itself, in one table: its status, its metric label
//! (`edgewarm_http_errors_total{reason, fault}`), its log detail and whose fault it was.
//!
//! The client's faults (a malformed request, a body over the limit, a name this route does not
//! serve) are 4xx and never blamed on the origin; the origin's (no connection, no answer in
//! time, a broken stream) are 5xx. An operator reading the counters can tell "clients send
//! garbage" from "the origin is sick" without reading logs.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::forward::BadRequest;
use super::Body;
use crate::metrics::{Fault, HttpError};
use crate::origin::seam::OriginError;

/// Why a request was answered by the edge rather than by the origin.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// The request cannot be forwarded (no authority, a bad target, a duplicated `Host`...).
    #[error("{0}")]
    BadRequest(#[from] BadRequest),
    /// The request names a host this route does not serve (HTTP/2 connection reuse for another
    /// name the certificate covers): 421 makes the client open a connection for that name.
    #[error("{host} is not served by route {route}")]
    Misdirected { host: String, route: String },
    /// On a route with rules, a path origins would read differently (or that climbs above the
    /// root): refused rather than guessed at ([`crate::route::path`]).
    #[error("path refused: {0}")]
    Path(crate::route::path::PathError),
    /// CONNECT: the edge is not a tunnel for clients.
    #[error("CONNECT is not proxied")]
    Connect,
    /// The body passed `max_request_body` (declared or counted).
    #[error("request body over max_request_body ({0} bytes)")]
    BodyTooLarge(u64),
    /// The client's body broke while being read: malformed framing (a chunk extension over
    /// the parser's limit, a bad chunk size), or the client went away mid-upload.
    #[error("request body: {0}")]
    ClientBody(String),
    /// The request came in TLS early data and the handshake then failed.
    #[error("TLS handshake failed")]
    Handshake,
    /// No origin connection could be had.
    #[error("{0}")]
    NoConnection(String),
    /// The origin's response headers took longer than `timeouts.origin_response`.
    #[error("origin response timed out")]
    Timeout,
    /// The origin's stream or connection failed before its response headers.
    #[error("{0}")]
    Origin(String),
    /// The origin failed a protocol upgrade.
    #[error("upgrade: {0}")]
    Upgrade(String),
}

/// The origin's failures, as the client is answered for them.
impl From<OriginError> for ProxyError {
    fn from(e: OriginError) -> Self {
        match e {
            OriginError::NoConnection(why) => Self::NoConnection(why),
            OriginError::Timeout => Self::Timeout,
            OriginError::Protocol(why) => Self::Origin(why),
            OriginError::Target => Self::BadRequest(BadRequest::Target),
            OriginError::Upgrade(why) => Self::Upgrade(why),
        }
    }
}

/// One row of the table.
struct Row {
    status: StatusCode,
    text: &'static str,
    reason: HttpError,
}

impl ProxyError {
    fn row(&self) -> Row {
        let (status, text, reason) = match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad request\n", HttpError::BadRequest),
            Self::Path(_) => (StatusCode::BAD_REQUEST, "bad request: path refused\n", HttpError::BadRequest),
            Self::Misdirected { .. } => {
                (StatusCode::MISDIRECTED_REQUEST, "misdirected request\n", HttpError::Misdirected)
            }
            Self::Connect => (StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not allowed\n", HttpError::MethodNotAllowed),
            Self::BodyTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n", HttpError::BodyTooLarge)
            }
            Self::ClientBody(_) => (StatusCode::BAD_REQUEST, "malformed request body\n", HttpError::BadBody),
            Self::Handshake => (StatusCode::BAD_REQUEST, "TLS handshake failed\n", HttpError::HandshakeFailed),
            Self::NoConnection(_) => (StatusCode::SERVICE_UNAVAILABLE, "origin unavailable\n", HttpError::NoConnection),
            Self::Timeout => (StatusCode::GATEWAY_TIMEOUT, "origin timed out\n", HttpError::Timeout),
            Self::Origin(_) => (StatusCode::BAD_GATEWAY, "origin failed\n", HttpError::OriginError),
            Self::Upgrade(_) => (StatusCode::BAD_GATEWAY, "origin failed the upgrade\n", HttpError::OriginError),
        };
        Row { status, text, reason }
    }

    /// The metric label.
    pub(crate) fn reason(&self) -> HttpError {
        self.row().reason
    }

    /// The answer the client gets.
    pub(crate) fn response(&self) -> Response<Body> {
        let row = self.row();
        plain(row.status, row.text)
    }

    /// Its one-line text, as a gRPC client is told it (`grpc-message`).
    pub(crate) fn text(&self) -> &'static str {
        self.row().text.trim_end()
    }
}

impl ProxyError {
    /// Refused before the request's route was known: its target could not be read, names a
    /// host this route does not serve, or was never looked at (CONNECT, a handshake that failed
    /// under an early request). Such an answer gets its listener's header policy alone.
    pub(crate) fn unrouted(&self) -> bool {
        matches!(self, Self::BadRequest(_) | Self::Misdirected { .. } | Self::Connect | Self::Handshake)
    }

    /// Whose fault it was.
    pub(crate) fn fault(&self) -> Fault {
        fault(self.reason())
    }
}

/// Whose fault an error reason is.
pub(crate) fn fault(reason: HttpError) -> Fault {
    match reason {
        HttpError::BadRequest
        | HttpError::Misdirected
        | HttpError::MethodNotAllowed
        | HttpError::BodyTooLarge
        | HttpError::BadBody
        | HttpError::HandshakeFailed => Fault::Client,
        HttpError::NoConnection | HttpError::Timeout | HttpError::OriginError | HttpError::BodyCut => Fault::Origin,
        HttpError::Internal => Fault::Edge,
    }
}

/// A short `text/plain` answer from the edge itself.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let body = Full::new(Bytes::from_static(text.as_bytes())).map_err(|never| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_faults_are_4xx_and_origin_faults_5xx() {
        let all = [
            ProxyError::BadRequest(BadRequest::DuplicateHost),
            ProxyError::Misdirected { host: "a".into(), route: "b".into() },
            ProxyError::Connect,
            ProxyError::Path(crate::route::path::PathError::Backslash),
            ProxyError::BodyTooLarge(1),
            ProxyError::ClientBody("x".into()),
            ProxyError::Handshake,
            ProxyError::NoConnection("x".into()),
            ProxyError::Timeout,
            ProxyError::Origin("x".into()),
            ProxyError::Upgrade("x".into()),
        ];
        for e in all {
            let status = e.response().status();
            let client = status.is_client_error();
            assert_eq!(client, fault(e.reason()) == Fault::Client, "{e:?}");
            assert!(client || status.is_server_error(), "{e:?}");
        }
    }
}
