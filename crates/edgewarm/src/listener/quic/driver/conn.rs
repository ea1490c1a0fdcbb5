//! A connection task's handle on its connection in the worker's loop: the handshake's progress,
//! closing, statistics, and accepting and opening streams (for [`super::h3`]).

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use h3::quic::{ConnectionErrorIncoming, StreamErrorIncoming};
use quinn_proto::{ConnectionError, ConnectionHandle, ConnectionStats, Dir, VarInt};

use super::state::{dir_index, Shared, Slot};
use crate::tls::handshake::EarlyData;

/// A connection in a worker's loop. Clones name the same connection.
#[derive(Clone)]
pub(crate) struct Conn {
    pub(super) shared: Arc<Shared>,
    pub(super) ch: ConnectionHandle,
    pub(super) generation: u64,
}

impl Conn {
    /// Run `f` on the connection, which it marks for the loop to step; `None` once it is gone.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        let mut st = self.shared.lock();
        st.slot(self.ch, self.generation).map(f)
    }

    /// Run `f` on the connection without marking it (see [`super::state::State::peek`]).
    pub(super) fn peek<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        let mut st = self.shared.lock();
        st.peek(self.ch, self.generation).map(f)
    }

    /// Why the connection ended, if it has (one no longer in the loop ended by being closed).
    pub(super) fn lost(slot: Option<&mut Slot>) -> Option<ConnectionError> {
        match slot {
            Some(slot) => slot.lost.clone(),
            None => Some(ConnectionError::LocallyClosed),
        }
    }

    pub(crate) fn remote(&self) -> Option<SocketAddr> {
        self.peek(|s| s.conn.remote_address())
    }

    /// The server name from the ClientHello, once it is read; `Err` if the connection ended
    /// first.
    pub(crate) async fn server_name(&self) -> Result<Option<String>, ConnectionError> {
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            let slot = st.peek(self.ch, self.generation);
            match slot {
                Some(slot) if slot.handshake_data => {
                    let data = slot.conn.crypto_session().handshake_data();
                    let name = data
                        .and_then(|d| d.downcast::<quinn_proto::crypto::rustls::HandshakeData>().ok())
                        .and_then(|d| d.server_name);
                    Poll::Ready(Ok(name))
                }
                Some(slot) if slot.lost.is_none() => {
                    slot.wakers.wait_conn(cx.waker());
                    Poll::Pending
                }
                slot => Poll::Ready(Err(Self::lost(slot).unwrap_or(ConnectionError::LocallyClosed))),
            }
        })
        .await
    }

    /// Whether the handshake completed (false: the connection ended first).
    pub(crate) async fn connected(&self) -> bool {
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            match st.peek(self.ch, self.generation) {
                Some(slot) if slot.connected => Poll::Ready(true),
                Some(slot) if slot.lost.is_none() => {
                    slot.wakers.wait_conn(cx.waker());
                    Poll::Pending
                }
                _ => Poll::Ready(false),
            }
        })
        .await
    }

    pub(crate) fn stats(&self) -> Option<ConnectionStats> {
        self.peek(|s| s.conn.stats())
    }

    pub(crate) fn close_with(&self, code: u32) {
        self.with(|s| {
            s.conn.close(Instant::now(), VarInt::from_u32(code), Bytes::new());
            s.lost.get_or_insert(ConnectionError::LocallyClosed);
            s.wakers.wake_all();
        });
    }

    /// Take the next stream of `dir` the peer opened.
    pub(super) fn poll_accept(
        &self,
        cx: &mut Context<'_>,
        dir: Dir,
    ) -> Poll<Result<quinn_proto::StreamId, ConnectionError>> {
        self.poll_stream(cx, dir, |s, dir| s.conn.streams().accept(dir), |s| &mut s.wakers.accept)
    }

    /// Open a stream of ours, once the peer's limit allows.
    pub(super) fn poll_open(
        &self,
        cx: &mut Context<'_>,
        dir: Dir,
    ) -> Poll<Result<quinn_proto::StreamId, StreamErrorIncoming>> {
        self.poll_stream(cx, dir, |s, dir| s.conn.streams().open(dir), |s| &mut s.wakers.open)
            .map_err(|lost| StreamErrorIncoming::ConnectionErrorIncoming { connection_error: incoming(lost) })
    }

    /// A stream `take` gives, or a wait in `waiters` for the event that may give one.
    fn poll_stream(
        &self,
        cx: &mut Context<'_>,
        dir: Dir,
        take: impl FnOnce(&mut Slot, Dir) -> Option<quinn_proto::StreamId>,
        waiters: impl FnOnce(&mut Slot) -> &mut [Option<std::task::Waker>; 2],
    ) -> Poll<Result<quinn_proto::StreamId, ConnectionError>> {
        let mut st = self.shared.lock();
        let mut slot = st.slot(self.ch, self.generation);
        if let Some(lost) = Self::lost(slot.as_deref_mut()) {
            return Poll::Ready(Err(lost));
        }
        let slot = slot.expect("a connection not lost is there");
        match take(slot, dir) {
            Some(id) => Poll::Ready(Ok(id)),
            None => {
                waiters(slot)[dir_index(dir)] = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A request read while the handshake is still running came in 0-RTT data (RFC 8470).
impl EarlyData for Conn {
    fn in_early_data(&self) -> bool {
        self.peek(|s| s.conn.is_handshaking()).unwrap_or(false)
    }

    fn handshake_done(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(self.connected())
    }
}

/// quinn-proto's reason for a connection's end, as h3 wants it.
pub(super) fn incoming(e: ConnectionError) -> ConnectionErrorIncoming {
    match e {
        ConnectionError::ApplicationClosed(close) => {
            ConnectionErrorIncoming::ApplicationClose { error_code: close.error_code.into_inner() }
        }
        ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        e => ConnectionErrorIncoming::Undefined(Arc::new(e)),
    }
}
