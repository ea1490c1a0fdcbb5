//! Sockets and streams below TLS: what every action and the pool build on.
//!
//! - [`batch`]: a stream whose writes wait one scheduler turn (or its task's next poll) and
//!   are gathered, so HTTP/2 frames queued by many streams leave in one write.
//! - [`sockopt`]: every setsockopt and raw syscall; the only module allowed `unsafe`.
//! - [`resolve`]: origin name resolution off the worker threads, single-flight, cached.
//! - [`dial`]: connect to an origin (every address, one deadline, optional Fast Open).
//! - [`fastopen`]: a stream whose first write may be a Fast Open connect.
//! - [`idle`]: a stream that fails after a while with no byte either way.
//! - [`linger`]: a stream that reads on for a moment after it is dropped (lingering close).
//! - [`rewind`]: a stream that first returns bytes already read from it (the peeked hello).
//! - [`quic_cc`]: QUIC congestion control by name (listeners and HTTP/3 origins).
//! - [`quic_conn`]: what HTTP/3 serving needs of a client's QUIC connection, whichever driver
//!   runs it.

pub mod batch;
pub mod dial;
pub mod fastopen;
pub mod idle;
pub mod linger;
pub(crate) mod quic_cc;
pub(crate) mod quic_conn;
pub mod resolve;
pub mod rewind;
pub mod sockopt;

pub use batch::Batched;
pub use fastopen::FastOpenStream;
pub use resolve::Resolver;
pub use rewind::Rewind;

/// Requests one client connection may have open at once, over any protocol (HTTP/2 and
/// HTTP/3 say so in their settings; the QUIC listener's stream limit).
pub(crate) const MAX_CLIENT_STREAMS: u32 = 128;
