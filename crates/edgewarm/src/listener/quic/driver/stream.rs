//! h3's stream traits on a stream of a connection in the worker's loop. A read takes what
//! quinn-proto has reassembled; a write hands it `Bytes` to keep, or copies a slice into its
//! send buffer; either waits only when the stream has nothing (or no room), and is woken by
//! that stream's own event.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{StreamErrorIncoming, StreamId as H3StreamId, WriteBuf};
use quinn_proto::{FinishError, ReadError, ReadableError, StreamId, VarInt, WriteError};

use super::conn::{incoming, Conn};
use crate::transport::quic_conn::SendChunks;
use crate::transport::quic_conn::H3_NO_ERROR;

/// The largest piece read at once: a QUIC packet's worth is all a read usually finds.
const READ_MAX: usize = 64 * 1024;

fn h3_id(id: StreamId) -> H3StreamId {
    H3StreamId::try_from(u64::from(id)).expect("a QUIC stream ID is a valid HTTP/3 one")
}

fn conn_error(conn: &Conn) -> StreamErrorIncoming {
    let mut st = conn.shared.lock();
    let lost = Conn::lost(st.peek(conn.ch, conn.generation)).unwrap_or(quinn_proto::ConnectionError::LocallyClosed);
    StreamErrorIncoming::ConnectionErrorIncoming { connection_error: incoming(lost) }
}

fn code(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

/// The receiving half of a stream.
pub(crate) struct RecvStream {
    conn: Conn,
    id: StreamId,
    /// Read to its end, reset, or stopped: nothing to stop on drop.
    done: bool,
}

impl RecvStream {
    pub(super) fn new(conn: Conn, id: StreamId) -> Self {
        Self { conn, id, done: false }
    }
}

impl h3::quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let id = self.id;
        let read = self.conn.with(|slot| {
            if slot.lost.is_some() {
                return None;
            }
            let mut stream = slot.conn.recv_stream(id);
            let mut chunks = match stream.read(true) {
                Ok(chunks) => chunks,
                Err(ReadableError::ClosedStream) => return Some(Ok(None)),
                Err(ReadableError::IllegalOrderedRead) => unreachable!("only ordered reads here"),
            };
            let result = chunks.next(READ_MAX);
            // Tells the peer it may send more (MAX_STREAM_DATA) once enough was read.
            let _ = chunks.finalize();
            match result {
                Ok(chunk) => Some(Ok(chunk.map(|c| c.bytes))),
                Err(ReadError::Blocked) => {
                    slot.wakers.read.insert(id, cx.waker());
                    Some(Err(None))
                }
                Err(ReadError::Reset(code)) => Some(Err(Some(code))),
            }
        });
        match read.flatten() {
            None => {
                self.done = true;
                Poll::Ready(Err(conn_error(&self.conn)))
            }
            Some(Ok(chunk)) => {
                self.done |= chunk.is_none();
                Poll::Ready(Ok(chunk))
            }
            Some(Err(None)) => Poll::Pending,
            Some(Err(Some(code))) => {
                self.done = true;
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() }))
            }
        }
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.done = true;
        let id = self.id;
        self.conn.with(|slot| slot.conn.recv_stream(id).stop(code(error_code)));
    }

    fn recv_id(&self) -> H3StreamId {
        h3_id(self.id)
    }
}

impl Drop for RecvStream {
    /// A stream dropped unread is stopped, or it would hold the peer's stream credit forever.
    /// This driver carries HTTP/3 only, which asks for H3_NO_ERROR when the rest of a request
    /// is not needed (RFC 9114 §4.1.2); QUIC's 0 is no HTTP/3 code.
    fn drop(&mut self) {
        if !self.done {
            h3::quic::RecvStream::stop_sending(self, H3_NO_ERROR.into());
        }
    }
}

/// The sending half of a stream.
pub(crate) struct SendStream<B: Buf> {
    conn: Conn,
    id: StreamId,
    /// What h3 handed over and quinn-proto has not taken yet.
    pending: Option<WriteBuf<B>>,
    /// Finished or reset: nothing to finish on drop.
    done: bool,
}

impl<B: Buf> SendStream<B> {
    pub(super) fn new(conn: Conn, id: StreamId) -> Self {
        Self { conn, id, pending: None, done: false }
    }

    /// Hand quinn-proto what is pending, as far as the stream's window goes.
    fn flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        let Some(mut buf) = self.pending.take() else { return Poll::Ready(Ok(())) };
        let written = self.write(cx, &mut buf);
        if buf.has_remaining() {
            self.pending = Some(buf);
        }
        written.map_ok(|_| ())
    }

    /// Copy as much of `buf` into quinn-proto's send buffer as the stream's window takes:
    /// `Pending` only if it took none, with the stream's waker set.
    fn write(&mut self, cx: &mut Context<'_>, buf: &mut impl Buf) -> Poll<Result<usize, StreamErrorIncoming>> {
        self.write_with(cx, |stream| {
            buf.has_remaining().then(|| stream.write(buf.chunk()).inspect(|&n| buf.advance(n)))
        })
    }

    /// Hand quinn-proto what `put` writes, call after call, until it has nothing left (`None`)
    /// or the stream's window is full: `Pending` only if it took nothing, with the stream's
    /// waker set.
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut put: impl FnMut(&mut quinn_proto::SendStream<'_>) -> Option<Result<usize, WriteError>>,
    ) -> Poll<Result<usize, StreamErrorIncoming>> {
        let id = self.id;
        let written = self.conn.with(|slot| {
            if slot.lost.is_some() {
                return None;
            }
            let mut total = 0;
            while let Some(put) = put(&mut slot.conn.send_stream(id)) {
                match put {
                    Ok(n) => total += n,
                    Err(WriteError::Blocked) if total > 0 => break,
                    Err(WriteError::Blocked) => {
                        slot.wakers.write.insert(id, cx.waker());
                        return Some(Ok(None));
                    }
                    Err(WriteError::Stopped(code)) => return Some(Err(Some(code))),
                    Err(WriteError::ClosedStream) => return Some(Err(None)),
                }
            }
            Some(Ok(Some(total)))
        });
        match written.flatten() {
            None => Poll::Ready(Err(conn_error(&self.conn))),
            Some(Ok(Some(n))) => Poll::Ready(Ok(n)),
            Some(Ok(None)) => Poll::Pending,
            Some(Err(code)) => {
                self.done = true;
                let error_code = code.map_or(0, VarInt::into_inner);
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code }))
            }
        }
    }
}

/// Raw bytes: the HTTP/3 driver frames them itself.
impl<B: Buf> h3::quic::SendStreamUnframed<B> for SendStream<B> {
    fn poll_send<D: Buf>(&mut self, cx: &mut Context<'_>, buf: &mut D) -> Poll<Result<usize, StreamErrorIncoming>> {
        std::task::ready!(self.flush(cx))?;
        self.write(cx, buf)
    }
}

/// Whole `Bytes`, kept by quinn-proto as they are: a response's frames are not copied again.
impl SendChunks for SendStream<Bytes> {
    fn poll_send_chunks(
        &mut self,
        cx: &mut Context<'_>,
        chunks: &mut [Bytes],
    ) -> Poll<Result<usize, StreamErrorIncoming>> {
        std::task::ready!(self.flush(cx))?;
        // `write_chunks` passes over the chunks already taken (left empty) itself.
        self.write_with(cx, |stream| {
            chunks.iter().any(|c| !c.is_empty()).then(|| stream.write_chunks(chunks).map(|w| w.bytes))
        })
    }
}

impl<B: Buf> h3::quic::SendStream<B> for SendStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.flush(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.pending.is_some() {
            // h3 waits for `poll_ready` before each write; this would be its bug.
            return Err(StreamErrorIncoming::Unknown("a write before the last one was taken".into()));
        }
        self.pending = Some(data.into());
        // Most writes fit the window: taken now, before h3 asks again.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.flush(&mut cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        std::task::ready!(self.flush(cx))?;
        self.done = true;
        let id = self.id;
        match self.conn.with(|slot| slot.conn.send_stream(id).finish()) {
            None => Poll::Ready(Err(conn_error(&self.conn))),
            Some(Err(FinishError::Stopped(code))) => {
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code: code.into_inner() }))
            }
            Some(Ok(()) | Err(FinishError::ClosedStream)) => Poll::Ready(Ok(())),
        }
    }

    fn reset(&mut self, reset_code: u64) {
        self.done = true;
        self.pending = None;
        let id = self.id;
        self.conn.with(|slot| slot.conn.send_stream(id).reset(code(reset_code)));
    }

    fn send_id(&self) -> H3StreamId {
        h3_id(self.id)
    }
}

impl<B: Buf> Drop for SendStream<B> {
    /// As quinn does: a stream dropped unfinished is finished with what it was given.
    fn drop(&mut self) {
        if !self.done {
            let id = self.id;
            self.conn.with(|slot| slot.conn.send_stream(id).finish());
        }
    }
}

/// Both halves of a request stream.
pub(crate) struct BidiStream<B: Buf> {
    send: SendStream<B>,
    recv: RecvStream,
}

impl<B: Buf> BidiStream<B> {
    pub(super) fn new(conn: Conn, id: StreamId) -> Self {
        Self { send: SendStream::new(conn.clone(), id), recv: RecvStream::new(conn, id) }
    }
}

impl<B: Buf> h3::quic::SendStream<B> for BidiStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code);
    }

    fn send_id(&self) -> H3StreamId {
        self.send.send_id()
    }
}

impl<B: Buf> h3::quic::RecvStream for BidiStream<B> {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code);
    }

    fn recv_id(&self) -> H3StreamId {
        self.recv.recv_id()
    }
}

impl<B: Buf> h3::quic::BidiStream<B> for BidiStream<B> {
    type SendStream = SendStream<B>;
    type RecvStream = RecvStream;

    fn split(self) -> (SendStream<B>, RecvStream) {
        (self.send, self.recv)
    }
}
