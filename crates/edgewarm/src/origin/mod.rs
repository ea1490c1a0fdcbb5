//! Standing origin connections: opened before any client asks, kept, and handed out. One
//! supervisor, three kinds:
//!
//! - [`prewarm`]: pre-handshaked TLS connections, each handed to exactly one client (`prewarm`
//!   routes), sized from the arrival rate and the warm time.
//! - [`h2`]: multiplexed HTTP/2 connections every request of an `http` route rides as a stream,
//!   kept at `connections` and grown for demand.
//! - [`h1`]: keep-alive HTTP/1.1 connections for origins without HTTP/2, sized from the
//!   requests in flight.
//!
//! What every kind shares is written once here: the labels, upkeep task and retirement of a
//! set ([`supervisor`]), how a connection is made ([`dial`]), how a
//! failing origin is retried and connects are counted ([`backoff`]), how many to hold
//! ([`sizing`]), and the registry that starts, updates and retires the sets on reload, keyed by
//! (pool key, kind) ([`registry`]). An HTTP/3 origin would be a fourth kind, not a fourth copy.

pub mod backoff;
pub mod dial;
pub(crate) mod h1;
pub mod h2;
pub mod prewarm;
pub mod registry;
pub mod sizing;
pub(crate) mod supervisor;

use bytes::Bytes;

/// A request or response body as it crosses an origin connection.
pub(crate) type BoxedBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
