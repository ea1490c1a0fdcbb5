//! Requests that arrive before the client's handshake is complete (TLS 1.3 early data over
//! TCP, QUIC 0-RTT), and RFC 8470's rules for them, written once for every client
//! protocol.
//!
//! Early data can be replayed by an attacker (RFC 8446 §8), so an edge forwards a request read
//! from it at once only when a replay does no harm: GET, HEAD or OPTIONS without a body, marked
//! `Early-Data: 1` for the origin. Anything else waits here until the handshake completes. An
//! origin's `425 Too Early` is never shown to the client: the edge waits for the handshake and
//! sends the request again ([`super::retry`]).

use http::{Method, Request};
use http_body::Body;

use super::respond::ProxyError;
pub(crate) use crate::tls::handshake::EarlyData;

/// RFC 8470 §5.1: tells the origin the request arrived in early data.
pub(crate) const EARLY_DATA: http::HeaderName = http::HeaderName::from_static("early-data");

/// What the gate decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Not early data (or the handshake completed while it waited): forward as usual.
    Complete,
    /// Safe to replay: forward now, marked `Early-Data: 1`.
    Forward,
}

/// Safe to forward from early data: a safe method, no body, not a protocol upgrade.
pub(crate) fn replay_safe<B: Body>(req: &Request<B>, upgrade: bool) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) && req.body().is_end_stream() && !upgrade
}

/// Decide for `req`; `held` is called when it has to wait. A handshake that fails meanwhile
/// is the client's fault.
pub(crate) async fn gate<B: Body>(
    handshake: Option<&dyn EarlyData>,
    req: &Request<B>,
    upgrade: bool,
    counted: impl FnOnce(bool),
) -> Result<Gate, ProxyError> {
    let Some(h) = handshake.filter(|h| h.in_early_data()) else {
        return Ok(Gate::Complete);
    };
    if replay_safe(req, upgrade) {
        counted(true);
        return Ok(Gate::Forward);
    }
    counted(false);
    if h.handshake_done().await {
        Ok(Gate::Complete)
    } else {
        Err(ProxyError::Handshake)
    }
}
