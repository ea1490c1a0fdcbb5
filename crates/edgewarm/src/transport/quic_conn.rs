//! What HTTP/3 serving ([`crate::http::client::h3`]) needs of a QUIC connection (quinn's, the
//! listener's: [`crate::listener::quic`]): the streams a client opens, one to open, closing, and
//! the RTT and packet counts that tell when a response has arrived. Here, below both, so that
//! neither imports the other.
//!
//! On quinn's own streams rather than h3-quinn's (which the HTTP/3 origin kind, a client, still
//! uses): a response's chunks go to quinn as the `Bytes` they are, which it keeps until they are
//! acknowledged, instead of as slices it copies; and a request stream the edge no longer reads
//! is stopped with H3_NO_ERROR (RFC 9114 §4.1.2), where quinn alone says 0.

use std::future::Future;
use std::pin::pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use quinn::{ReadError, VarInt, WriteError};
use tokio_util::sync::ReusableBoxFuture;

/// H3_NO_ERROR (RFC 9114 §8.1): how a connection is closed when all went well, and a stream
/// stopped whose rest is not needed.
pub(crate) const H3_NO_ERROR: u32 = 0x100;

/// A server-side QUIC connection HTTP/3 is served on.
#[derive(Clone)]
pub(crate) struct QuicConn(pub(crate) quinn::Connection);

impl QuicConn {
    /// Close now with an application error code.
    pub(crate) fn close(&self, code: u32) {
        self.0.close(code.into(), b"");
    }

    pub(crate) fn rtt(&self) -> Duration {
        self.0.rtt()
    }

    /// Datagrams sent and packets declared lost so far.
    pub(crate) fn sent_and_lost(&self) -> (u64, u64) {
        let stats = self.0.stats();
        (stats.udp_tx.datagrams, stats.path.lost_packets)
    }

    /// Whether the connection ended the normal way: a close by either side, or the idle timeout.
    pub(crate) fn ended_normally(&self) -> bool {
        matches!(
            self.0.close_reason(),
            Some(
                quinn::ConnectionError::ApplicationClosed(_)
                    | quinn::ConnectionError::TimedOut
                    | quinn::ConnectionError::LocallyClosed
            )
        )
    }

    /// A unidirectional stream of the edge's (its control stream).
    pub(crate) async fn open_uni(&self) -> Result<Send, String> {
        self.0.open_uni().await.map(Send).map_err(|e| e.to_string())
    }

    /// The streams the client opens, as they come.
    pub(crate) fn accept(&self) -> Accept {
        Accept {
            bi: ReusableBoxFuture::new(accept_bi(self.0.clone())),
            uni: ReusableBoxFuture::new(accept_uni(self.0.clone())),
        }
    }
}

type Accepted<T> = (quinn::Connection, Result<T, quinn::ConnectionError>);

async fn accept_bi(conn: quinn::Connection) -> Accepted<(quinn::SendStream, quinn::RecvStream)> {
    let accepted = conn.accept_bi().await;
    (conn, accepted)
}

async fn accept_uni(conn: quinn::Connection) -> Accepted<quinn::RecvStream> {
    let accepted = conn.accept_uni().await;
    (conn, accepted)
}

/// The client's streams as it opens them. quinn's accept futures are kept from one poll to the
/// next, since one dropped while pending could miss the wake-up of the stream it waited for;
/// each is made again in the box the last one used.
pub(crate) struct Accept {
    bi: ReusableBoxFuture<'static, Accepted<(quinn::SendStream, quinn::RecvStream)>>,
    uni: ReusableBoxFuture<'static, Accepted<quinn::RecvStream>>,
}

impl Accept {
    /// The next request stream (`Err`: the connection ended, and why).
    pub(crate) fn poll_bi(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Send, Recv), String>> {
        let (conn, accepted) = ready!(self.bi.poll(cx));
        self.bi.set(accept_bi(conn));
        Poll::Ready(accepted.map(|(send, recv)| (Send(send), Recv::new(recv))).map_err(|e| e.to_string()))
    }

    /// The client's next unidirectional stream.
    pub(crate) fn poll_uni(&mut self, cx: &mut Context<'_>) -> Poll<Result<Recv, String>> {
        let (conn, accepted) = ready!(self.uni.poll(cx));
        self.uni.set(accept_uni(conn));
        Poll::Ready(accepted.map(Recv::new).map_err(|e| e.to_string()))
    }
}

/// An HTTP/3 error code as QUIC carries it (every one fits: they are below 2^62).
fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

/// A stream's sending half. Dropped unfinished, quinn finishes it: a response cut short must
/// be reset first.
pub(crate) struct Send(quinn::SendStream);

impl Send {
    /// The stream's ID (a request stream's: 0, 4, 8, …).
    pub(crate) fn id(&self) -> u64 {
        self.0.id().into()
    }

    /// Write the front of `chunks` as far as the stream's window goes, returning how many bytes
    /// it took: a chunk taken whole is left empty, one taken in part keeps its rest. `Pending`
    /// only if it took none.
    pub(crate) fn poll_send_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut [Bytes],
    ) -> Poll<Result<usize, WriteError>> {
        if chunks.iter().all(Bytes::is_empty) {
            return Poll::Ready(Ok(0));
        }
        // Cancel-safe (quinn: if it does not resolve, nothing was written), and its waker is
        // kept by the connection, not the future: made again on each poll.
        pin!(self.0.write_chunks(chunks)).poll(cx).map_ok(|written| written.bytes)
    }

    pub(crate) fn finish(&mut self) {
        let _ = self.0.finish();
    }

    pub(crate) fn reset(&mut self, code: u64) {
        let _ = self.0.reset(varint(code));
    }
}

/// A stream's receiving half, as the HTTP/3 codec reads it ([`edgewarm_h3::RecvStream`]).
/// Dropped before its end, it is stopped with H3_NO_ERROR.
pub(crate) struct Recv {
    stream: quinn::RecvStream,
    /// Read to its end, or stopped with a code already.
    done: bool,
}

impl Recv {
    fn new(stream: quinn::RecvStream) -> Self {
        Self { stream, done: false }
    }
}

impl edgewarm_h3::RecvStream for Recv {
    type Error = ReadError;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ReadError>> {
        // Cancel-safe, and its waker kept by the connection: made again on each poll.
        let read = ready!(pin!(self.stream.read_chunk(usize::MAX, true)).poll(cx));
        Poll::Ready(match read {
            Ok(Some(chunk)) => Ok(Some(chunk.bytes)),
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        })
    }

    fn stop_sending(&mut self, code: u64) {
        self.done = true;
        let _ = self.stream.stop(varint(code));
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.stream.stop(H3_NO_ERROR.into());
        }
    }
}
