//! What HTTP/3 serving ([`crate::http::client::h3`]) needs of a QUIC connection besides h3's
//! stream traits: closing, and the RTT and packet counts that tell when a response has arrived.
//! Implemented for quinn's connections and for the listener's own driver
//! ([`crate::listener::quic::driver`]). Here, below both, so neither imports the other.

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h3::quic::{SendStreamUnframed, StreamErrorIncoming};

/// H3_NO_ERROR (RFC 9114 §8.1): how a connection is closed when all went well, and a stream
/// stopped whose rest is not needed.
pub(crate) const H3_NO_ERROR: u32 = 0x100;

/// A server-side QUIC connection HTTP/3 can be served on.
pub(crate) trait QuicConn: Clone + Send + Sync + 'static {
    type Send: SendChunks + Send + 'static;
    type Recv: h3::quic::RecvStream + Send + Sync + 'static;
    type Bidi: h3::quic::BidiStream<Bytes, SendStream = Self::Send, RecvStream = Self::Recv> + Send + 'static;
    type H3: h3::quic::Connection<Bytes, BidiStream = Self::Bidi, RecvStream = Self::Recv, OpenStreams = Self::Open>
        + Send
        + 'static;
    type Open: h3::quic::OpenStreams<Bytes, SendStream = Self::Send> + Send + 'static;

    /// The connection as h3's `quic` traits see it.
    fn h3(&self) -> Self::H3;
    /// Close now with an application error code.
    fn close(&self, code: u32);
    fn rtt(&self) -> Duration;
    /// Datagrams sent and packets declared lost so far.
    fn sent_and_lost(&self) -> (u64, u64);
    /// Whether the connection ended the normal way: a close by either side, or the idle timeout.
    fn ended_normally(&self) -> bool;
}

/// A stream's sending half that can take whole `Bytes`.
pub(crate) trait SendChunks: SendStreamUnframed<Bytes> {
    /// Write the front of `chunks` as far as the stream's window goes, returning how many bytes
    /// it took: a chunk taken whole is left empty, one taken in part keeps its rest. `Pending`
    /// only if it took none. This one copies, a chunk at a time; the own driver's hands
    /// quinn-proto the chunks themselves, which it keeps until they are acknowledged.
    fn poll_send_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut [Bytes],
    ) -> Poll<Result<usize, StreamErrorIncoming>> {
        match chunks.iter_mut().find(|c| !c.is_empty()) {
            Some(first) => self.poll_send(cx, first),
            None => Poll::Ready(Ok(0)),
        }
    }
}

/// quinn's stream takes a slice, which it copies.
impl SendChunks for h3_quinn::SendStream<Bytes> {}

impl QuicConn for quinn::Connection {
    type Send = h3_quinn::SendStream<Bytes>;
    type Recv = h3_quinn::RecvStream;
    type Bidi = h3_quinn::BidiStream<Bytes>;
    type H3 = h3_quinn::Connection;
    type Open = h3_quinn::OpenStreams;

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

/// A QUIC stream's receiving half as the HTTP/3 codec reads it ([`edgewarm_h3::RecvStream`]).
pub(crate) struct Recv<R>(pub(crate) R);

impl<R: h3::quic::RecvStream> edgewarm_h3::RecvStream for Recv<R> {
    type Error = StreamErrorIncoming;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        use bytes::Buf;
        self.0.poll_data(cx).map_ok(|chunk| chunk.map(|mut c| c.copy_to_bytes(c.remaining())))
    }

    fn stop_sending(&mut self, code: u64) {
        self.0.stop_sending(code);
    }
}
