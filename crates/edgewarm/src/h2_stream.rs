//! An h2 stream's body under HTTP/2 flow control, on either side of the proxy (the client's
//! HTTP/2 driver and the HTTP/2 origin kind): nothing is buffered whole.
//!
//! Toward a peer, [`send`] reads a body a frame at a time and writes each only when the peer's
//! window has room, so a slow origin slows the client's upload instead of growing our buffers.
//! From a peer, [`Frames`] hands its DATA on and returns the window only once the reader has
//! taken it, so a slow client slows the origin's download the same way. Trailers pass both
//! ways.

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

impl Body for Frames {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        self.get_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
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
