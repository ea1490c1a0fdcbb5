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
