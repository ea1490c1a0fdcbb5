//! The HTTP core of `http` routes, written once for every client protocol and every kind of
//! origin. A request's path through it:
//!
//! - [`client`]: one driver per client protocol (HTTP/1.1 on hyper, HTTP/2 on `h2`, HTTP/3 on
//!   the edge's own framing and QPACK over the listener's QUIC) reads requests and writes
//!   responses; nothing else about the protocol leaks past it.
//! - [`service`]: the request service, `Request<ClientBody> → Response<Body>`: CONNECT refused,
//!   the early-data gate ([`early`]), the body limit ([`body`]), the route check (421), the
//!   request rewritten for the origin ([`forward`], less what a client may not claim:
//!   [`claims`]), protocol upgrades ([`upgrade`]).
//! - the origin seam, [`crate::origin::seam::Origin`]: `send(request attempt) → response` and
//!   `upgrade`; the service holds an `Arc<dyn Origin>` and never learns which kind answers
//!   (HTTP/2 streams, an HTTP/1.1 pool, over TLS or cleartext) or what wraps it. What a
//!   request holds there travels inside the response body.
//! - [`interim`]: informational heads (`103 Early Hints`) from a layer or the origin, sent to
//!   an HTTP/2 or HTTP/3 client while its final response is awaited.
//! - [`retry`]: when a request is sent again.
//! - [`respond`]: every error the edge answers itself, the origin's included: status, metric
//!   label, whose fault; [`grpc`]: the same answers as a gRPC client reads them.

pub(crate) mod answered;
pub(crate) mod body;
pub(crate) mod claims;
pub(crate) mod client;
pub(crate) mod coalesce;
pub(crate) mod early;
pub(crate) mod forward;
pub(crate) mod grpc;
pub(crate) mod interim;
pub(crate) mod respond;
pub(crate) mod retry;
pub(crate) mod service;
pub(crate) mod site;
pub(crate) mod upgrade;
pub(crate) mod way;

use bytes::Bytes;

/// Errors as bodies carry them.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body toward the client, whatever produced it.
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// A client's request body: hyper's (HTTP/1.1) or h2's.
pub(crate) trait ClientBody: http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static {}
impl<B: http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static> ClientBody for B {}
