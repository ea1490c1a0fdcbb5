//! Client connection drivers, one file per protocol. A driver reads requests off its
//! connection, hands each to the [`Service`](super::service::Service) and writes the responses
//! back; it knows nothing of origins (tests/layout.rs checks that no driver imports an origin
//! kind). Both end the same way ([`Ended`]) and both honour `stop` (shutdown, or a reload
//! retiring the route's origin connections) by finishing gracefully, and `cut` by ending.

pub(crate) mod h1;
pub(crate) mod h2;

/// Largest request head accepted (HTTP/1.1 buffer, HTTP/2 header list): 431 beyond.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Streams one client may have open at once over HTTP/2.
pub(crate) const MAX_CLIENT_STREAMS: u32 = 128;

/// How a client connection ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The client closed it, or it closed after a graceful shutdown.
    Done,
    /// The shutdown's grace period ran out.
    Cut,
    /// A protocol or I/O error.
    Failed(String),
}
