//! Bodies as they cross the HTTP core: the client's request body, watched for its limit and
//! its faults ([`Capped`]), and the origin's response body ([`OriginBody`]), which carries what
//! the request holds at the origin (an HTTP/2 stream's place and its upload, or a pooled
//! HTTP/1.1 connection) and lets it go when the body ends or is dropped. No `h2` or hyper
//! type leaves this module and [`super::origin`].

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::flow::{Frames, SendError};
use super::BoxError;
use crate::origin::h1::Lease;
use crate::origin::h2::conn::Slot;

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

/// A request body on its way to an HTTP/2 origin, stopped when dropped: when the request is
/// over (response finished, error answered, or the client gone), so no upload outlives its
/// request.
pub(crate) struct Upload(pub(crate) tokio::task::JoinHandle<Result<(), SendError>>);

impl Drop for Upload {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a request holds at the origin until its response has ended.
pub(crate) enum Held {
    /// The stream's place on its HTTP/2 connection, and the upload still running, if any.
    H2 { _slot: Slot, _upload: Option<Upload> },
    /// The pooled HTTP/1.1 connection: back to the pool when dropped.
    H1 { _lease: Lease },
}

enum Inner {
    H2(Frames),
    H1(hyper::body::Incoming),
}

/// The origin's response body, whatever the origin speaks. Its DATA is handed on as it is
/// taken (HTTP/2 window given back then), and what the request [`Held`] is let go as soon as
/// the body has ended, or when it is dropped (the client went away).
pub(crate) struct OriginBody {
    inner: Inner,
    held: Option<Held>,
}

impl OriginBody {
    pub(crate) fn h2(recv: h2::RecvStream, held: Held) -> Self {
        Self { inner: Inner::H2(Frames::new(recv)), held: Some(held) }
    }

    pub(crate) fn h1(body: hyper::body::Incoming, lease: Lease) -> Self {
        Self { inner: Inner::H1(body), held: Some(Held::H1 { _lease: lease }) }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = match &mut self.inner {
            Inner::H2(frames) => ready!(frames.poll_frame(cx)).map(|f| f.map_err(BoxError::from)),
            Inner::H1(body) => ready!(Pin::new(body).poll_frame(cx)).map(|f| f.map_err(BoxError::from)),
        };
        let more = matches!(&frame, Some(Ok(f)) if f.is_data()) && !self.is_end_stream();
        if !more {
            self.held = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::H2(frames) => frames.is_end_stream(),
            Inner::H1(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::H2(_) => SizeHint::default(),
            Inner::H1(body) => body.size_hint(),
        }
    }
}
