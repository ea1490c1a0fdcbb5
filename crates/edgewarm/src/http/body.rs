//! The client's request body as the HTTP core reads it: watched for its limit and its faults
//! ([`Capped`]), and a body whose first frame was read ahead ([`Prepended`]). (The origin's
//! response body is the seam's: [`crate::origin::body`].)

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::BoxError;

/// What went wrong with a client's request body, if anything: the client's fault either way.
#[derive(Debug, Clone)]
pub(crate) enum BodyFault {
    /// Past `max_request_body`.
    TooLarge,
    /// Malformed, or the client went away in the middle of it.
    Broken(String),
}

/// A client's request body, refused past `limit` bytes (`max_request_body`), with any fault
/// recorded: the error ends the upload (resetting the origin's stream, or breaking its
/// HTTP/1.1 connection, never reused), and the fault tells the request's handler to answer
/// 413 or 400 rather than blame the origin with a 502.
pub(crate) struct Capped<B> {
    inner: B,
    left: u64,
    fault: Arc<OnceLock<BodyFault>>,
}

/// The error a [`Capped`] body ends with past its limit.
#[derive(Debug, thiserror::Error)]
#[error("request body larger than max_request_body")]
pub(crate) struct TooLarge;

impl<B> Capped<B> {
    pub(crate) fn new(inner: B, limit: u64) -> Self {
        Self { inner, left: limit, fault: Arc::default() }
    }

    /// Set once the body has failed.
    pub(crate) fn fault(&self) -> Arc<OnceLock<BodyFault>> {
        self.fault.clone()
    }
}

impl<B: Unpin> Unpin for Capped<B> {}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                let e: BoxError = e.into();
                let _ = self.fault.set(BodyFault::Broken(e.to_string()));
                return Poll::Ready(Some(Err(e)));
            }
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            let n = data.len() as u64;
            if n > self.left {
                let _ = self.fault.set(BodyFault::TooLarge);
                return Poll::Ready(Some(Err(Box::new(TooLarge))));
            }
            self.left -= n;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body with its first frame already read (to learn whether there was one), given out first.
pub(crate) struct Prepended<B> {
    first: Option<Frame<Bytes>>,
    rest: B,
}

impl<B> Prepended<B> {
    pub(crate) fn new(first: Frame<Bytes>, rest: B) -> Self {
        Self { first: Some(first), rest }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Prepended<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let first = self.first.as_ref().and_then(|f| f.data_ref()).map_or(0, |d| d.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(first));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(first));
        }
        hint
    }
}
