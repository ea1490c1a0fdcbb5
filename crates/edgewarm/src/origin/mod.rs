//! The origin side: everything between the HTTP core (or a prewarm route's client) and an
//! origin server. The map:
//!
//! - [`layer`]: the one shape of a decorator on a route's seam (its cache, its early hints):
//!   wrap it where the route asks, keep per-route state across reloads ([`per_route`]: that
//!   state, kept while the route's settings are equal; a group's servers keep theirs there too).
//! - [`seam`]: the one seam the request service calls, the [`seam::Origin`] trait: `send` a
//!   request (a response, or a failure classified for retrying), `upgrade` a protocol
//!   (WebSocket), `retired`. Kinds implement it; decorators (a cache) wrap it. What a request
//!   holds at the origin travels inside the response body ([`body`]).
//! - The kinds of standing set, each opened before any client asks and kept:
//!   - [`h2`]: multiplexed HTTP/2 connections every request of an `http` route rides as a
//!     stream, kept at `connections` and grown for demand;
//!   - [`h1`]: keep-alive HTTP/1.1 connections, sized from the requests in flight;
//!   - [`h3`]: standing QUIC connections every request rides as a stream of its own (a loss
//!     stalls only the streams it hit), resumed with 0-RTT;
//!   - [`prewarm`]: pre-handshaked TLS connections, each handed to exactly one client
//!     (`prewarm` routes), sized from the arrival rate and the warm time.
//! - [`group`]: a route's several servers (`origins:`) as one origin: each attempt goes to a
//!   server in service chosen by `upstream.balance`, through that server's own standing set;
//!   a server found down or failing is taken out, backups stand in, a retry goes elsewhere.
//! - What carries a request kind's bytes, [`connect::Connect`]: TLS ([`connect::TlsConnect`])
//!   or cleartext ([`cleartext`]). A protocol's set is written once for both.
//! - [`registry`]: the running sets, keyed by (pool key, kind, transport); a kind is a
//!   [`registry::Spec`] (what a route asks for) and a [`registry::Standing`] (the running set:
//!   update, retire, warm, status for `/origins`). The `match` on configured protocols is in
//!   one place, [`crate::snapshot`], where routes register what they want.
//! - [`request_kind`]: what the request kinds (HTTP/2, HTTP/1.1, HTTP/3) share: one
//!   registration ([`request_kind::UpstreamSpec`]), and the route's seam on a running set with
//!   the HTTP/1.1 fallback for upgrades ([`request_kind::Requests`]).
//! - Shared by every kind: the upkeep task, labels, new settings and retirement
//!   ([`supervisor`]); by the multiplexed ones, their connections' life ([`multiplexed`]); how a
//!   connection is made ([`dial`]), how a failing origin is retried and connects are counted
//!   ([`backoff`]), how many to hold ([`sizing`]), HTTP/1.1 upgrades on a connection of their
//!   own ([`upgrade`]).
//!
//! A new request kind is a module here implementing [`request_kind::RequestKind`] and
//! `Standing`, plus one arm where the snapshot registers it (as [`h3`] was added); a kind that
//! carries no requests (as [`prewarm`]) implements `Spec` and `Standing` itself.

pub mod backoff;
pub(crate) mod body;
pub(crate) mod cleartext;
pub(crate) mod connect;
pub mod dial;
pub mod group;
pub(crate) mod h1;
pub mod h2;
pub(crate) mod h3;
pub(crate) mod layer;
pub(crate) mod multiplexed;
pub(crate) mod per_route;
pub mod prewarm;
pub mod registry;
pub(crate) mod request_kind;
pub(crate) mod seam;
pub mod sizing;
pub(crate) mod supervisor;
pub(crate) mod upgrade;

use bytes::Bytes;

/// A request or response body as it crosses an origin connection.
pub(crate) type BoxedBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
