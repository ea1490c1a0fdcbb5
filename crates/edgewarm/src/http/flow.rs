//! Bodies, streamed both ways under HTTP/2 flow control; nothing is buffered whole.
//!
//! Toward the origin, [`send`] reads the client's body a frame at a time and writes each only
//! when the origin's window has room, so a slow origin slows the client's upload instead of
//! growing our buffers. Back toward the client, [`OriginBody`] hands the origin's DATA frames
//! to hyper and returns their window to the origin only once hyper has taken them, so a slow
//! client slows the origin's download the same way. Trailers pass both ways.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

/// An h2 receive stream read as body frames: its DATA, each chunk's window given back to the
/// peer as it is taken (so the reader's pace is the peer's), then its trailers.
pub(crate) struct Frames {
    recv: RecvStream,
    data_done: bool,
}

impl Frames {
    pub(crate) fn new(recv: RecvStream) -> Self {
        Self { recv, data_done: false }
    }

    pub(crate) fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// The origin's response body, as a hyper body. `on_end` runs once, when the body is finished
/// or dropped (the client went away), with the bytes passed on: the request's log line is
/// written then, with its real size and duration.
pub(crate) struct OriginBody<F: FnOnce(u64)> {
    frames: Frames,
    sent: u64,
    on_end: Option<F>,
}

impl<F: FnOnce(u64)> OriginBody<F> {
    pub(crate) fn new(recv: RecvStream, on_end: F) -> Self {
        Self { frames: Frames::new(recv), sent: 0, on_end: Some(on_end) }
    }

    fn end(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(self.sent);
        }
    }
}

impl<F: FnOnce(u64)> Drop for OriginBody<F> {
    fn drop(&mut self) {
        self.end();
    }
}

// The callback is never pinned-projected; moving it is fine.
impl<F: FnOnce(u64)> Unpin for OriginBody<F> {}

impl<F: FnOnce(u64)> Body for OriginBody<F> {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let frame = ready!(self.frames.poll_frame(cx));
        match &frame {
            // The client side has the bytes now: the origin may send as many more.
            Some(Ok(f)) if f.is_data() => self.sent += f.data_ref().map_or(0, |d| d.len() as u64),
            _ => self.end(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_end_stream()
    }
}

/// Why an upload stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("client body: {0}")]
    Client(Box<dyn std::error::Error + Send + Sync>),
    #[error("origin stream: {0}")]
    Origin(#[from] h2::Error),
}

/// Copy the client's request body to the origin stream, counting into `sent` as it goes.
pub(crate) async fn send<B>(body: B, mut tx: SendStream<Bytes>, sent: Arc<AtomicU64>) -> Result<(), SendError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = body;
    loop {
        let Some(frame) = body.frame().await else {
            tx.send_data(Bytes::new(), true)?;
            return Ok(());
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                // The client's body broke (it went away, or passed `max_request_body`): the
                // origin must not wait for the rest. Dropping `tx` alone would not tell it while
                // the response is still awaited, so reset the stream.
                tx.send_reset(h2::Reason::CANCEL);
                return Err(SendError::Client(e.into()));
            }
        };
        match frame.into_data() {
            Ok(data) => send_data(&mut tx, data, &sent).await?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tx.send_trailers(trailers)?;
                    return Ok(());
                }
            }
        }
    }
}

/// Send `data` as the origin's window allows (never more than it granted), counting into
/// `sent`.
pub(crate) async fn send_data(tx: &mut SendStream<Bytes>, mut data: Bytes, sent: &AtomicU64) -> Result<(), h2::Error> {
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let granted = std::future::poll_fn(|cx| tx.poll_capacity(cx))
            .await
            .ok_or_else(|| h2::Error::from(h2::Reason::CANCEL))??;
        let chunk = data.split_to(granted.min(data.len()));
        sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        tx.send_data(chunk, false)?;
    }
    Ok(())
}

/// Any body, with `on_end` run once when it has ended or is dropped, with the data bytes
/// passed on (the HTTP/1.1 origin path: the connection goes back to its pool then, and the
/// request's log line is written).
pub(crate) struct OnEnd<B, F: FnOnce(u64)> {
    inner: B,
    sent: u64,
    on_end: Option<F>,
}

impl<B, F: FnOnce(u64)> OnEnd<B, F> {
    pub(crate) fn new(inner: B, on_end: F) -> Self {
        Self { inner, sent: 0, on_end: Some(on_end) }
    }

    fn end(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(self.sent);
        }
    }
}

impl<B, F: FnOnce(u64)> Drop for OnEnd<B, F> {
    fn drop(&mut self) {
        self.end();
    }
}

impl<B: Unpin, F: FnOnce(u64)> Unpin for OnEnd<B, F> {}

impl<B: Body<Data = Bytes> + Unpin, F: FnOnce(u64)> Body for OnEnd<B, F> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    self.sent += data.len() as u64;
                }
                if self.inner.is_end_stream() {
                    self.end();
                }
            }
            _ => self.end(),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
