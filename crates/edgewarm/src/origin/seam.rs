//! The one seam between the HTTP core and an origin: [`Origin`]. The request service calls
//! [`Origin::send`] for every request and [`Origin::upgrade`] for every protocol upgrade; it
//! never learns what kind of origin answers. A kind (streams on standing HTTP/2 or HTTP/3
//! connections, a keep-alive HTTP/1.1 pool, over TLS or cleartext) implements the trait; a decorator (a
//! cache, a mirror, a rate limit) implements it by wrapping another `Arc<dyn Origin>`.
//!
//! Failures come back classified for the retry policy ([`Failure`]): the origin provably never
//! took the request, the connection was lost with the request possibly acted on, or final.
//! What a request holds at the origin travels inside the response body
//! ([`super::body::OriginBody`]), so dropping the body releases it.
//!
//! The seam returns final responses only. An informational head (`103 Early Hints`) that a
//! layer or the origin has for the client before then goes to [`Outgoing::interim`], which the
//! client's driver sends on while it waits for the final response.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::body::OriginBody;
use super::BoxedBody;
use crate::metrics::HintSource;

/// A future the seam returns: boxed, so the trait can be used as `dyn Origin`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a route's requests go.
pub(crate) trait Origin: Send + Sync + 'static {
    /// Send one attempt of a request; see [`Outgoing`].
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>>;

    /// Carry a protocol upgrade (WebSocket): the origin's answer, and after a `101` a relay
    /// running in `up.tasks`.
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, OriginError>>;

    /// Cancelled when a reload or shutdown retires this origin's connections: the route's
    /// clients should finish and come back afresh.
    fn retired(&self) -> &CancellationToken;
}

/// One attempt of a request.
pub(crate) struct Outgoing<'a> {
    /// Makes the request head (origin-form, forwarding headers set), each time it is placed:
    /// a multiplexed kind takes it whole, and may have to place it again elsewhere.
    pub(crate) build: &'a mut (dyn FnMut() -> Request<()> + Send),
    pub(crate) body: OutBody,
    /// Counts the request body's bytes as they go.
    pub(crate) up: &'a Arc<AtomicU64>,
    /// Bounds the wait for the response head (`timeouts.origin_response`).
    pub(crate) timeout: Duration,
    /// The client connection's placement hints: which server and which origin connection its
    /// requests went to last.
    pub(crate) affinity: &'a Affinity,
    /// The servers of a group this request was already sent to (a bit each, by the group's
    /// index): a retry goes to another while one is left.
    pub(crate) tried: &'a AtomicU64,
    /// Where an informational head for the client goes while the final response is awaited;
    /// none where the client's protocol carries none (HTTP/1.1: browsers ignore a 103 there)
    /// or no client waits (a background revalidation).
    pub(crate) interim: Option<&'a Arc<dyn Interim>>,
    /// When the request's first attempt began: a kind waits for a connection at most
    /// `timeouts.connect` from then, across attempts, so a request whose connection died under
    /// it (found by silence, a second later) does not wait a whole connect timeout again.
    pub(crate) began: tokio::time::Instant,
    /// The client's request as it asked, on a request's first attempt (what a route's `allow`,
    /// `deny` and rate go by); none on retries and on the edge's own requests. Read-only: what
    /// goes to the origin is [`Outgoing::build`]'s.
    pub(crate) client: Option<Asked<'a>>,
}

/// A read-only view of the client's request, for a layer that decides by who asked and how
/// (its address, its head as received: before forwarding headers were added). A layer that
/// needs more of the request reads it here, not through a new field of [`Outgoing`].
#[derive(Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub(crate) address: std::net::IpAddr,
    pub(crate) head: &'a Request<()>,
}

/// What a request the edge makes of its own accord (a health probe, a background
/// revalidation) holds for its attempt: no client, so no hints and no informational heads.
#[derive(Default)]
pub(crate) struct OwnRequest {
    up: Arc<AtomicU64>,
    affinity: Affinity,
    tried: AtomicU64,
}

impl OwnRequest {
    /// Its attempt, without a body, waiting `timeout` for the response head.
    pub(crate) fn outgoing<'a>(
        &'a self,
        build: &'a mut (dyn FnMut() -> Request<()> + Send),
        timeout: Duration,
    ) -> Outgoing<'a> {
        Outgoing {
            build,
            body: OutBody::Empty,
            up: &self.up,
            timeout,
            affinity: &self.affinity,
            tried: &self.tried,
            interim: None,
            began: tokio::time::Instant::now(),
            client: None,
        }
    }
}

/// A client connection's placement hints, kept across its requests.
#[derive(Debug, Default)]
pub(crate) struct Affinity {
    /// A multiplexed kind puts the client's requests on one origin connection while it has
    /// room (see `h2::place`), and notes which here (its id + 1; 0: none).
    pub(crate) conn: AtomicU64,
    /// A group sends the client's requests to the server its last one went to while that server
    /// is healthy (its index + 1; 0: none): one origin connection, one HPACK table.
    pub(crate) server: AtomicU64,
}

/// The client's end for informational (1xx) heads of one request. Shared (`Arc`) so that a
/// kind whose client library takes a callback with a lifetime of its own can hold it.
pub(crate) trait Interim: Send + Sync {
    /// Hand `head` (a 1xx, no body) to the client if it can still go before the final
    /// response; otherwise, or beyond a few per request, it is dropped: a hint is never
    /// worth holding the response for.
    fn send(&self, head: Response<()>, source: HintSource);
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

    pub(crate) fn boxed(self) -> BoxedBody {
        match self {
            Self::Empty => Empty::new().map_err(|never| match never {}).boxed(),
            Self::Replay(b) => Full::new(b).map_err(|never| match never {}).boxed(),
            Self::Stream(b) => b,
        }
    }
}

/// The origin's answer, which connection carried it, and what the layers on the way back
/// noted about it (for the access log and metrics).
pub(crate) struct Sent {
    pub(crate) response: Response<OriginBody>,
    /// The standing connection's id, where the kind numbers them.
    pub(crate) conn: Option<u64>,
    /// The connection had carried requests before this one.
    pub(crate) reused: bool,
    /// What layers noted, by type: a cache its [`CacheResult`](crate::metrics::CacheResult), a group the [`ServedBy`] server.
    /// A new layer notes a type of its own here instead of adding a field to `Sent`.
    pub(crate) notes: http::Extensions,
}

impl Sent {
    /// An answer no standing connection carried (a layer's own, or a cache's).
    pub(crate) fn local(response: Response<OriginBody>) -> Self {
        Self { response, conn: None, reused: false, notes: http::Extensions::new() }
    }

    /// `note` added to the answer's notes (replacing one of its type).
    pub(crate) fn noted<T: Clone + Send + Sync + 'static>(mut self, note: T) -> Self {
        self.notes.insert(note);
        self
    }
}

/// The note a group leaves on an answer: which of its servers gave it (none for a route of one
/// server).
#[derive(Clone, Debug)]
pub(crate) struct ServedBy(pub(crate) Arc<str>);

/// The note a layer leaves on an answer it gave itself, no origin asked (a route's 403 or 429),
/// with its one-line text: what a gRPC client is told instead ([`crate::http::grpc`]). A cache's
/// answer is the origin's, stored, and carries none.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EdgeAnswer(pub(crate) &'static str);

/// How a send failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The origin never acted on the request.
    NotProcessed,
    /// The connection broke before a response header: the origin may have acted.
    Lost,
    /// Anything else: not sent again.
    Final,
}

/// What went wrong at the origin; the HTTP core maps each to the client's answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OriginError {
    /// No origin connection could be had.
    #[error("{0}")]
    NoConnection(String),
    /// No response head within the timeout.
    #[error("origin response timed out")]
    Timeout,
    /// The origin's stream or connection failed.
    #[error("{0}")]
    Protocol(String),
    /// The request cannot be put in the origin's protocol (a target it cannot carry).
    #[error("request target cannot be sent to the origin")]
    Target,
    /// The origin failed a protocol upgrade.
    #[error("{0}")]
    Upgrade(String),
}

/// A send that failed: what the client is told, and what the retry policy may do.
#[derive(Debug)]
pub(crate) struct SendFailure {
    pub(crate) kind: Failure,
    pub(crate) error: OriginError,
}

impl SendFailure {
    pub(crate) fn fatal(error: OriginError) -> Self {
        Self { kind: Failure::Final, error }
    }
}

/// A protocol upgrade to carry.
pub(crate) struct Upgrade<'a> {
    /// The client's request as hyper read it (hyper hands the connection over from it).
    pub(crate) client: Request<hyper::body::Incoming>,
    /// The request for the origin (hop-by-hop headers gone, forwarding headers set).
    pub(crate) head: Request<()>,
    /// The client's address: what a route's `allow`, `deny` and rate go by (an upgrade is a
    /// request like any other, counted once however long it lasts).
    pub(crate) address: std::net::IpAddr,
    pub(crate) timeout: Duration,
    /// Where the relay runs after a `101`; it ends when either side closes or `cut` fires.
    pub(crate) tasks: &'a TaskTracker,
    pub(crate) cut: CancellationToken,
}

/// The origin's answer to an upgrade.
pub(crate) struct Upgraded {
    pub(crate) response: Response<BoxedBody>,
    /// The standing connection that carries it, where the kind numbers them.
    pub(crate) conn: Option<u64>,
}
