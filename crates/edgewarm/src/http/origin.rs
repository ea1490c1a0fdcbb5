//! The one seam between the HTTP core and the origin: [`Origin::send`] takes a request (its
//! head built afresh for each attempt, and its body) and gives back the origin's response, or
//! a failure classified for [`super::retry`]. Two kinds of origin sit behind it: streams on
//! standing HTTP/2 connections ([`Upstream`]) and a keep-alive HTTP/1.1 pool
//! ([`H1Upstream`]). What the request holds at the origin travels inside the response body
//! ([`OriginBody`]), so dropping the body releases it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use tokio_util::sync::CancellationToken;

use super::body::{Held, OriginBody, Upload};
use super::flow::{self as h2_body, OnEnd};
use super::respond::ProxyError;
use super::retry::Failure;
use crate::origin::h1::{H1Error, H1Upstream};
use crate::origin::h2::{BoxedBody, Upstream};

/// Where a route's requests go.
#[derive(Clone)]
pub(crate) enum Origin {
    /// Streams on standing HTTP/2 connections.
    H2(Arc<Upstream>),
    /// Keep-alive HTTP/1.1 connections, one request at a time.
    H1(Arc<H1Upstream>),
}

impl Origin {
    /// A route's origin, whichever kind it speaks (none before the server attached it).
    pub(crate) fn of(route: &crate::route::HttpRoute) -> Option<Self> {
        match (route.upstream(), route.h1()) {
            (Some(u), _) => Some(Self::H2(u.clone())),
            (None, Some(h1)) => Some(Self::H1(h1.clone())),
            (None, None) => None,
        }
    }
}

/// A request body as the seam takes it.
pub(crate) enum OutBody {
    /// None at all (most requests).
    Empty,
    /// Small and read whole: can be sent again.
    Replay(Bytes),
    /// Streamed: sent once.
    Stream(BoxedBody),
}

impl OutBody {
    /// The body for one attempt (a streamed one only once).
    pub(crate) fn for_attempt(&mut self) -> Self {
        match self {
            Self::Empty => Self::Empty,
            Self::Replay(b) => Self::Replay(b.clone()),
            Self::Stream(_) => std::mem::replace(self, Self::Empty),
        }
    }

    fn boxed(self) -> BoxedBody {
        match self {
            Self::Empty => Empty::new().map_err(|never| match never {}).boxed(),
            Self::Replay(b) => Full::new(b).map_err(|never| match never {}).boxed(),
            Self::Stream(b) => b,
        }
    }
}

/// The origin's answer, and which connection carried it (for the access log).
pub(crate) struct Sent {
    pub(crate) response: Response<OriginBody>,
    /// The standing connection's id (HTTP/2 origins).
    pub(crate) conn: Option<u64>,
    /// The connection had carried requests before this one.
    pub(crate) reused: bool,
}

/// A send that failed: what the client is told, and what the retry policy may do.
#[derive(Debug)]
pub(crate) struct SendFailure {
    pub(crate) kind: Failure,
    pub(crate) error: ProxyError,
}

impl SendFailure {
    fn fatal(error: ProxyError) -> Self {
        Self { kind: Failure::Final, error }
    }
}

impl Origin {
    /// Cancelled when a reload or shutdown retires this origin's connections: the route's
    /// clients should finish and come back afresh.
    pub(crate) fn retired(&self) -> &CancellationToken {
        match self {
            Self::H2(u) => u.retired(),
            Self::H1(u) => u.retired(),
        }
    }

    /// Send one attempt: `build` makes the request head (origin-form, forwarding headers set),
    /// `up` counts the request body's bytes as they go, and `timeout` bounds the wait for the
    /// response head (`timeouts.origin_response`).
    pub(crate) async fn send(
        &self,
        build: &mut (dyn FnMut() -> Request<()> + Send),
        body: OutBody,
        up: &Arc<AtomicU64>,
        timeout: Duration,
    ) -> Result<Sent, SendFailure> {
        match self {
            Self::H2(u) => send_h2(u, build, body, up, timeout).await,
            // Boxed: hyper's request future is large, and inline it would grow every request's
            // future (HTTP/2 origins' included) to its size.
            Self::H1(u) => Box::pin(send_h1(u, build, body, up, timeout)).await,
        }
    }
}

async fn send_h2(
    upstream: &Arc<Upstream>,
    build: &mut (dyn FnMut() -> Request<()> + Send),
    body: OutBody,
    up: &Arc<AtomicU64>,
    timeout: Duration,
) -> Result<Sent, SendFailure> {
    let end_of_stream = matches!(body, OutBody::Empty);
    let sent = upstream
        .send(build, end_of_stream)
        .await
        .map_err(|e| SendFailure::fatal(ProxyError::NoConnection(e.to_string())))?;
    // The body goes up while we wait for the response: an origin may answer early.
    let upload = match body {
        OutBody::Empty => None,
        body => {
            let (tx, counter, body) = (sent.body, up.clone(), body.boxed());
            Some(Upload(tokio::spawn(h2_body::send(body, tx, counter))))
        }
    };
    let response = match tokio::time::timeout(timeout, sent.response).await {
        Err(_) => return Err(SendFailure::fatal(ProxyError::Timeout)),
        Ok(Err(e)) => {
            let kind = if never_processed(&e) {
                Failure::NotProcessed
            } else if e.is_io() || e.is_go_away() {
                Failure::Lost
            } else {
                Failure::Final
            };
            return Err(SendFailure { kind, error: ProxyError::Origin(e.to_string()) });
        }
        Ok(Ok(response)) => response,
    };
    // The upload, if any, finishes on its own (or fails and resets the stream).
    let (mut parts, recv) = response.into_parts();
    parts.version = http::Version::HTTP_11;
    let held = Held::H2 { _slot: sent.slot, _upload: upload };
    Ok(Sent {
        response: Response::from_parts(parts, OriginBody::h2(recv, held)),
        conn: Some(sent.conn_id),
        reused: sent.reused,
    })
}

/// The origin never acted on the stream: REFUSED_STREAM (RFC 9113 §8.7), or the stream was
/// above the last stream id of a graceful GOAWAY (h2 fails those with the GOAWAY's NO_ERROR;
/// a graceful GOAWAY promises the streams it does not cover were not processed).
fn never_processed(e: &h2::Error) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}

async fn send_h1(
    upstream: &Arc<H1Upstream>,
    build: &mut (dyn FnMut() -> Request<()> + Send),
    body: OutBody,
    up: &Arc<AtomicU64>,
    timeout: Duration,
) -> Result<Sent, SendFailure> {
    let head = build();
    let (parts, ()) = head.into_parts();
    // Origin-form target and a Host header: what an HTTP/1.1 server expects.
    let authority = parts.uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    let path: http::Uri = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| SendFailure::fatal(ProxyError::BadRequest(super::forward::BadRequest::Target)))?;
    let counter = up.clone();
    let body = OnEnd::new(body.boxed(), move |n| {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    })
    .boxed();
    let mut out = Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = path;
    *out.headers_mut() = parts.headers;
    if let Ok(host) = http::HeaderValue::from_str(&authority) {
        out.headers_mut().insert(http::header::HOST, host);
    }
    match tokio::time::timeout(timeout, upstream.send(out)).await {
        Err(_) => Err(SendFailure::fatal(ProxyError::Timeout)),
        Ok(Err(H1Error::Connect(e))) => Err(SendFailure::fatal(ProxyError::NoConnection(e.to_string()))),
        Ok(Err(H1Error::Http(e))) => {
            // The connection closed before a response head: the origin may have acted.
            let kind = if e.is_canceled() || e.is_closed() || e.is_incomplete_message() {
                Failure::Lost
            } else {
                Failure::Final
            };
            Err(SendFailure { kind, error: ProxyError::Origin(format!("origin HTTP/1.1: {e}")) })
        }
        Ok(Ok((response, lease))) => {
            let reused = lease.reused;
            Ok(Sent { response: response.map(|b| OriginBody::h1(b, lease)), conn: None, reused })
        }
    }
}
