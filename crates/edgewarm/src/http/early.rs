//! Requests that arrive before the client's handshake is complete (TLS 1.3 early data over
//! TCP, QUIC 0-RTT), and RFC 8470's rules for them, written once for every client
//! protocol.
//!
//! Early data can be replayed by an attacker (RFC 8446 §8), so an edge forwards a request read
//! from it at once only when a replay does no harm: GET, HEAD or OPTIONS without a body, marked
//! `Early-Data: 1` for the origin. Anything else waits here until the handshake completes. An
//! origin's `425 Too Early` is never shown to the client: the edge waits for the handshake and
//! sends the request again ([`super::retry`]).

use std::future::Future;
use std::pin::Pin;

use http::{Method, Request};
use http_body::Body;

use super::respond::ProxyError;
use crate::tls::early::Handshake;

/// RFC 8470 §5.1: tells the origin the request arrived in early data.
pub(crate) const EARLY_DATA: http::HeaderName = http::HeaderName::from_static("early-data");

/// A client handshake that may still be running while requests are read: the seam through
/// which a client protocol tells the HTTP core whether a request is replayable.
pub(crate) trait EarlyData: Send + Sync {
    /// The handshake is still running: a request read now came in early data.
    fn in_early_data(&self) -> bool;
    /// Wait for the handshake to complete (`true`) or fail (`false`).
    fn handshake_done(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

impl EarlyData for Handshake {
    fn in_early_data(&self) -> bool {
        !self.is_done()
    }

    fn handshake_done(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(self.wait())
    }
}

/// A QUIC connection's handshake (HTTP/3), while requests may arrive in its 0-RTT data.
pub(crate) struct QuicHandshake {
    conn: quinn::Connection,
    done: tokio::sync::watch::Receiver<bool>,
}

impl QuicHandshake {
    /// `accepted` is quinn's signal that the handshake completed (on a server it resolves
    /// then, whatever its value); `None` for a handshake already complete.
    pub(crate) fn new(conn: quinn::Connection, accepted: Option<quinn::ZeroRttAccepted>) -> Self {
        let (tx, done) = tokio::sync::watch::channel(accepted.is_none());
        if let Some(accepted) = accepted {
            tokio::spawn(async move {
                let _ = accepted.await;
                let _ = tx.send(true);
            });
        }
        Self { conn, done }
    }
}

impl EarlyData for QuicHandshake {
    fn in_early_data(&self) -> bool {
        // The task above may not have run yet: the HANDSHAKE_DONE frame the server sends once
        // the handshake completes says so at once.
        !*self.done.borrow() && self.conn.stats().frame_tx.handshake_done == 0
    }

    fn handshake_done(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let mut done = self.done.clone();
            let _ = done.wait_for(|d| *d).await;
            self.conn.close_reason().is_none()
        })
    }
}

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
