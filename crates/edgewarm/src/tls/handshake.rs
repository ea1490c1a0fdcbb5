//! A client handshake that may still be running while requests are read (TLS 1.3 early data
//! over TCP, QUIC 0-RTT): the seam through which a client protocol tells the HTTP core
//! ([`crate::http`]'s early-data gate) whether a request is replayable. Here, below both, so
//! the QUIC listener and the HTTP core each import it and neither imports the other.

use std::future::Future;
use std::pin::Pin;

use super::early::Handshake;

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
