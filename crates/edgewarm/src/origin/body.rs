//! Bodies as they cross the origin seam: the origin's response body ([`OriginBody`]), which
//! carries whatever the request holds at the origin (a stream's place on a multiplexed
//! connection and its upload, a pooled connection's lease, ...) and lets it go when the body
//! ends or is dropped; and [`OnEnd`], a body that reports its end once.

use std::any::Any;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::BoxedBody;

/// What a request holds at the origin until its response has ended, whatever the kind: only
/// dropped, never looked at.
pub(crate) type Held = Box<dyn Any + Send + Sync>;

/// A request body on its way to the origin in a task of its own, stopped when dropped: when
/// the request is over (response finished, error answered, or the client gone), so no upload
/// outlives its request.
pub(crate) struct Upload(pub(crate) tokio::task::AbortHandle);

impl Drop for Upload {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The origin's response body, whatever the origin speaks. Its DATA is handed on as it is
/// taken (flow-control window given back then, where the kind has one), and what the request
/// [`Held`] is let go as soon as the body has ended, or when it is dropped (the client went
/// away).
pub(crate) struct OriginBody {
    inner: BoxedBody,
    held: Option<Held>,
}

impl OriginBody {
    /// `body` as read from the origin; `held` is dropped when it has ended.
    pub(crate) fn new<B>(body: B, held: Held) -> Self
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        Self { inner: body.map_err(Into::into).boxed(), held: Some(held) }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let more = matches!(&frame, Some(Ok(f)) if f.is_data()) && !self.inner.is_end_stream();
        if !more {
            self.held = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How a body wrapped in [`OnEnd`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// Whole.
    Whole,
    /// It failed part-way (the text of its error).
    Failed(String),
    /// Its reader let it go before its end (a client that went away).
    Dropped,
}

/// Any body, with `on_end` run once when it has ended or is dropped, with the data bytes
/// passed on and how it ended (the HTTP/1.1 origin path: the connection goes back to its pool
/// then; the request service: the request's log line is written).
pub(crate) struct OnEnd<B: Body, F: FnOnce(u64, BodyEnd)> {
    inner: B,
    sent: u64,
    on_end: Option<F>,
}

impl<B: Body, F: FnOnce(u64, BodyEnd)> OnEnd<B, F> {
    pub(crate) fn new(inner: B, on_end: F) -> Self {
        Self { inner, sent: 0, on_end: Some(on_end) }
    }

    fn end(&mut self, how: BodyEnd) {
        if let Some(f) = self.on_end.take() {
            f(self.sent, how);
        }
    }
}

impl<B: Body, F: FnOnce(u64, BodyEnd)> Drop for OnEnd<B, F> {
    fn drop(&mut self) {
        // An empty body (a HEAD's, a 304's) may be dropped unread: it was whole all the same.
        let how = if self.inner.is_end_stream() { BodyEnd::Whole } else { BodyEnd::Dropped };
        self.end(how);
    }
}

impl<B: Body + Unpin, F: FnOnce(u64, BodyEnd)> Unpin for OnEnd<B, F> {}

impl<B, F> Body for OnEnd<B, F>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
    F: FnOnce(u64, BodyEnd),
{
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
                    self.end(BodyEnd::Whole);
                }
            }
            Some(Err(e)) => {
                let why = e.to_string();
                self.end(BodyEnd::Failed(why));
            }
            None => self.end(BodyEnd::Whole),
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
