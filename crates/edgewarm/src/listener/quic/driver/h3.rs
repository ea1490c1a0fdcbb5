//! h3's `Connection` and `OpenStreams` traits, and the HTTP/3 driver's [`QuicConn`], on a
//! connection in the worker's loop.

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::quic::{ConnectionErrorIncoming, StreamErrorIncoming};
use quinn_proto::{ConnectionError, Dir};

use super::conn::{incoming, Conn};
use super::stream::{BidiStream, RecvStream, SendStream};
use crate::transport::quic_conn::QuicConn;

impl QuicConn for Conn {
    type Send = SendStream<Bytes>;
    type Recv = RecvStream;
    type Bidi = BidiStream<Bytes>;
    type H3 = Self;
    type Open = Self;

    fn h3(&self) -> Self {
        self.clone()
    }

    fn close(&self, code: u32) {
        self.close_with(code);
    }

    fn rtt(&self) -> Duration {
        self.peek(|s| s.conn.rtt()).unwrap_or_default()
    }

    fn sent_and_lost(&self) -> (u64, u64) {
        self.stats().map_or((0, 0), |s| (s.udp_tx.datagrams, s.path.lost_packets))
    }

    fn ended_normally(&self) -> bool {
        let mut st = self.shared.lock();
        matches!(
            Self::lost(st.peek(self.ch, self.generation)),
            Some(ConnectionError::ApplicationClosed(_) | ConnectionError::TimedOut | ConnectionError::LocallyClosed)
        )
    }
}

impl<B: Buf> h3::quic::Connection<B> for Conn {
    type RecvStream = RecvStream;
    type OpenStreams = Self;

    fn poll_accept_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<RecvStream, ConnectionErrorIncoming>> {
        self.poll_accept(cx, Dir::Uni).map(|r| r.map(|id| RecvStream::new(self.clone(), id)).map_err(incoming))
    }

    fn poll_accept_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<BidiStream<B>, ConnectionErrorIncoming>> {
        self.poll_accept(cx, Dir::Bi).map(|r| r.map(|id| BidiStream::new(self.clone(), id)).map_err(incoming))
    }

    fn opener(&self) -> Self {
        self.clone()
    }
}

impl<B: Buf> h3::quic::OpenStreams<B> for Conn {
    type BidiStream = BidiStream<B>;
    type SendStream = SendStream<B>;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<BidiStream<B>, StreamErrorIncoming>> {
        self.poll_open(cx, Dir::Bi).map(|r| r.map(|id| BidiStream::new(self.clone(), id)))
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<SendStream<B>, StreamErrorIncoming>> {
        self.poll_open(cx, Dir::Uni).map(|r| r.map(|id| SendStream::new(self.clone(), id)))
    }

    fn close(&mut self, code: h3::error::Code, _reason: &[u8]) {
        // h3's codes are all below 2^32 (0x100..=0x110 and the reserved grease values aside).
        self.close_with(u32::try_from(code.value()).unwrap_or(0x102));
    }
}
