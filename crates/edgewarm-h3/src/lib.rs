//! edgewarm's HTTP/3 codec (RFC 9114, RFC 9204): what an edge needs to read a client's
//! requests and write its responses, and nothing of the proxy or of a QUIC stack. Frames and
//! variable-length integers ([`frame`]), QPACK with the static table only ([`qpack`],
//! [`static_table`], [`huffman`] over its table in `huffman_table`), request heads and
//! trailers ([`head`]), the client's control and QPACK streams ([`uni`]), a per-thread arena
//! responses are cut from ([`arena`]), and what the fuzz targets drive ([`fuzz`]).
//!
//! The QUIC streams are reached through one small trait, [`RecvStream`]: the proxy adapts its
//! QUIC stack's streams to it, the fuzz targets feed it bytes a client chose.

pub mod arena;
pub mod frame;
pub mod fuzz;
pub mod head;
pub mod huffman;
mod huffman_table;
pub mod qpack;
pub mod static_table;
pub mod uni;

use std::task::{Context, Poll};

use bytes::Bytes;

/// The largest field section (a request head, trailers) accepted, decoded: 64 KiB, as the
/// proxy allows over HTTP/1.1 and HTTP/2.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The receiving half of a QUIC stream, as the codec reads it.
pub trait RecvStream {
    /// Why the stream could not be read: reset by the peer, the connection gone.
    type Error: std::fmt::Debug;
    /// The stream's next chunk; `None` at its end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Self::Error>>;
    /// Ask the peer to stop sending (STOP_SENDING with an HTTP/3 error code).
    fn stop_sending(&mut self, code: u64);
}
