//! What the HTTP/3 client driver ([`super::h3`]) needs of a QUIC connection besides h3's own
//! stream traits: closing, the RTT and packet counts that tell when a response has arrived, and
//! refusing a stream h3 is no longer asked about. Implemented for quinn's connections and for the
//! listener's own driver ([`crate::listener::quic::driver`]).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

/// A server-side QUIC connection h3 can be served on.
pub(crate) trait QuicConn: Clone + Send + Sync + 'static {
    type Send: h3::quic::SendStream<Bytes> + Send + 'static;
    type Recv: h3::quic::RecvStream + Send + Sync + 'static;
    type Bidi: h3::quic::BidiStream<Bytes, SendStream = Self::Send, RecvStream = Self::Recv> + Send + 'static;
    type H3: h3::quic::Connection<Bytes, BidiStream = Self::Bidi> + Send + 'static;

    /// The connection as h3 wants it.
    fn h3(&self) -> Self::H3;
    /// Close now with an application error code.
    fn close(&self, code: u32);
    fn rtt(&self) -> Duration;
    /// Datagrams sent and packets declared lost so far.
    fn sent_and_lost(&self) -> (u64, u64);
    /// Resolves once the connection is closed, by either side.
    fn closed(&self) -> impl Future<Output = ()> + Send;
    /// Take the next request stream the client opens and refuse it with `code` both ways.
    fn refuse_next(&self, code: u32) -> impl Future<Output = Result<(), String>> + Send;
    /// Whether the connection ended the normal way: a close by either side, or the idle timeout.
    fn ended_normally(&self) -> bool;
}

impl QuicConn for quinn::Connection {
    type Send = h3_quinn::SendStream<Bytes>;
    type Recv = h3_quinn::RecvStream;
    type Bidi = h3_quinn::BidiStream<Bytes>;
    type H3 = h3_quinn::Connection;

    fn h3(&self) -> Self::H3 {
        h3_quinn::Connection::new(self.clone())
    }

    fn close(&self, code: u32) {
        quinn::Connection::close(self, code.into(), b"");
    }

    fn rtt(&self) -> Duration {
        quinn::Connection::rtt(self)
    }

    fn sent_and_lost(&self) -> (u64, u64) {
        let stats = self.stats();
        (stats.udp_tx.datagrams, stats.path.lost_packets)
    }

    async fn closed(&self) {
        quinn::Connection::closed(self).await;
    }

    async fn refuse_next(&self, code: u32) -> Result<(), String> {
        let (mut send, mut recv) = self.accept_bi().await.map_err(|e| e.to_string())?;
        let _ = send.reset(code.into());
        let _ = recv.stop(code.into());
        Ok(())
    }

    fn ended_normally(&self) -> bool {
        matches!(
            self.close_reason(),
            Some(
                quinn::ConnectionError::ApplicationClosed(_)
                    | quinn::ConnectionError::TimedOut
                    | quinn::ConnectionError::LocallyClosed
            )
        )
    }
}
