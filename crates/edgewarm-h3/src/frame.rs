//! HTTP/3 frames (RFC 9114 §7) as they are read off a stream, and the integers they are made of
//! (QUIC's variable-length integers, RFC 9000 §16).

use std::task::{ready, Context, Poll};

use crate::RecvStream;
use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const DATA: u64 = 0x00;
pub const HEADERS: u64 = 0x01;
pub const CANCEL_PUSH: u64 = 0x03;
pub const SETTINGS: u64 = 0x04;
pub const PUSH_PROMISE: u64 = 0x05;
pub const GOAWAY: u64 = 0x07;
pub const MAX_PUSH_ID: u64 = 0x0d;

/// SETTINGS_MAX_FIELD_SECTION_SIZE (§7.2.4.1).
pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;

/// HTTP/3's error codes (§8.1) and QPACK's (RFC 9204 §6).
pub mod code {
    pub const NO_ERROR: u64 = 0x100;
    pub const GENERAL_PROTOCOL_ERROR: u64 = 0x101;
    pub const INTERNAL_ERROR: u64 = 0x102;
    pub const STREAM_CREATION_ERROR: u64 = 0x103;
    pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
    pub const FRAME_UNEXPECTED: u64 = 0x105;
    pub const FRAME_ERROR: u64 = 0x106;
    pub const EXCESSIVE_LOAD: u64 = 0x107;
    pub const SETTINGS_ERROR: u64 = 0x109;
    pub const MISSING_SETTINGS: u64 = 0x10a;
    pub const REQUEST_REJECTED: u64 = 0x10b;
    pub const REQUEST_INCOMPLETE: u64 = 0x10d;
    pub const MESSAGE_ERROR: u64 = 0x10e;
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
}

/// What a frame type may do on a stream where it has no meaning.
pub enum Kind {
    /// HTTP/2's frame types that HTTP/3 reserves, and frames that belong to another kind of
    /// stream: a connection error (§7.2.8, §7.2).
    Unexpected,
    /// Unknown types, grease among them: skipped (§9).
    Unknown,
    Known,
}

/// Whether `t` is a frame type HTTP/3 defines, one it reserves, or one to skip.
pub fn kind(t: u64) -> Kind {
    match t {
        DATA | HEADERS | CANCEL_PUSH | SETTINGS | PUSH_PROMISE | GOAWAY | MAX_PUSH_ID => Kind::Known,
        0x02 | 0x06 | 0x08 | 0x09 => Kind::Unexpected,
        _ => Kind::Unknown,
    }
}

/// The largest value a variable-length integer holds.
const VARINT_MAX: u64 = (1 << 62) - 1;

/// Read a variable-length integer from the front of `b`: the value and its size, or `None`
/// if `b` is too short.
pub fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &bytes[1..] {
        v = (v << 8) | u64::from(x);
    }
    Some((v, len))
}

/// Append `v` (at most 2^62 - 1) as a variable-length integer, in the fewest bytes.
pub fn put_varint(out: &mut impl BufMut, v: u64) {
    debug_assert!(v <= VARINT_MAX);
    if v < 1 << 6 {
        out.put_u8(v as u8);
    } else if v < 1 << 14 {
        out.put_u16(0x4000 | v as u16);
    } else if v < 1 << 30 {
        out.put_u32(0x8000_0000 | v as u32);
    } else {
        out.put_u64(0xc000_0000_0000_0000 | v.min(VARINT_MAX));
    }
}

/// The longest frame header: a type and a length of eight bytes each.
pub const MAX_HEADER: usize = 16;

/// Append a frame's header: its type and payload length.
pub fn put_header(out: &mut impl BufMut, t: u64, len: usize) {
    put_varint(out, t);
    put_varint(out, len as u64);
}

/// Why a stream could not be read as frames.
#[derive(Debug)]
pub enum ReadError<E> {
    /// The stream ended inside a frame: H3_FRAME_ERROR (§7.1).
    Truncated,
    /// The QUIC stream failed: reset by the peer, or the connection gone.
    Stream(E),
}

/// What a read of the stream gives: `T`, or why not.
pub type Read<T, E> = Poll<Result<T, ReadError<E>>>;

/// A stream read as a sequence of frames. What is read and not yet consumed is kept as the
/// QUIC layer handed it over: a frame inside one chunk is a view into it. A frame header cut
/// between chunks is joined with the next (a header is at most 16 bytes, so that copies the
/// chunk once); a whole payload ([`Reader::poll_exact`]) is gathered into one buffer of its
/// size, so each byte is copied once however finely the peer cuts it up.
pub struct Reader<R> {
    pub recv: R,
    have: Bytes,
    /// A payload being gathered by [`Reader::poll_exact`].
    gather: BytesMut,
    /// The stream's end has been read.
    fin: bool,
}

impl<R: RecvStream> Reader<R> {
    pub fn new(recv: R) -> Self {
        Self { recv, have: Bytes::new(), gather: BytesMut::new(), fin: false }
    }

    /// The stream's next chunk; `None` at its end.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Read<Option<Bytes>, R::Error> {
        if self.fin {
            return Poll::Ready(Ok(None));
        }
        match ready!(self.recv.poll_data(cx)).map_err(ReadError::Stream)? {
            Some(chunk) => Poll::Ready(Ok(Some(chunk))),
            None => {
                self.fin = true;
                Poll::Ready(Ok(None))
            }
        }
    }

    /// Read the next chunk into `have` (only ever a few bytes before it): false at the
    /// stream's end.
    fn poll_more(&mut self, cx: &mut Context<'_>) -> Read<bool, R::Error> {
        let Some(chunk) = ready!(self.poll_chunk(cx))? else { return Poll::Ready(Ok(false)) };
        if self.have.is_empty() {
            self.have = chunk;
        } else {
            let mut joined = BytesMut::with_capacity(self.have.len() + chunk.len());
            joined.extend_from_slice(&self.have);
            joined.extend_from_slice(&chunk);
            self.have = joined.freeze();
        }
        Poll::Ready(Ok(true))
    }

    /// A variable-length integer (a unidirectional stream's type); `None` at the stream's end.
    pub fn poll_varint(&mut self, cx: &mut Context<'_>) -> Read<Option<u64>, R::Error> {
        loop {
            if let Some((v, n)) = varint(&self.have) {
                self.have.advance(n);
                return Poll::Ready(Ok(Some(v)));
            }
            if !ready!(self.poll_more(cx))? {
                return Poll::Ready(if self.have.is_empty() { Ok(None) } else { Err(ReadError::Truncated) });
            }
        }
    }

    /// The next frame's type and payload length; `None` where the stream ends between frames.
    pub fn poll_header(&mut self, cx: &mut Context<'_>) -> Read<Option<(u64, u64)>, R::Error> {
        loop {
            if let Some((t, n)) = varint(&self.have) {
                if let Some((len, m)) = varint(&self.have[n..]) {
                    self.have.advance(n + m);
                    return Poll::Ready(Ok(Some((t, len))));
                }
            }
            if !ready!(self.poll_more(cx))? {
                return Poll::Ready(if self.have.is_empty() { Ok(None) } else { Err(ReadError::Truncated) });
            }
        }
    }

    /// A payload of `len` bytes, whole. The caller bounds `len`.
    pub fn poll_exact(&mut self, cx: &mut Context<'_>, len: usize) -> Read<Bytes, R::Error> {
        if self.gather.is_empty() && self.have.len() >= len {
            return Poll::Ready(Ok(self.have.split_to(len)));
        }
        if self.gather.capacity() < len {
            self.gather.reserve(len);
        }
        loop {
            let take = (len - self.gather.len()).min(self.have.len());
            self.gather.extend_from_slice(&self.have.split_to(take));
            if self.gather.len() == len {
                return Poll::Ready(Ok(std::mem::take(&mut self.gather).freeze()));
            }
            match ready!(self.poll_chunk(cx))? {
                Some(chunk) => self.have = chunk,
                None => return Poll::Ready(Err(ReadError::Truncated)),
            }
        }
    }

    /// Up to `left` bytes of a payload, as much as has arrived (never empty).
    pub fn poll_some(&mut self, cx: &mut Context<'_>, left: u64) -> Read<Bytes, R::Error> {
        if self.have.is_empty() && !ready!(self.poll_more(cx))? {
            return Poll::Ready(Err(ReadError::Truncated));
        }
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(self.have.len());
        Poll::Ready(Ok(self.have.split_to(n)))
    }

    /// Skip `left` bytes of a payload; `left` is what is still to skip.
    pub fn poll_skip(&mut self, cx: &mut Context<'_>, left: &mut u64) -> Read<(), R::Error> {
        while *left > 0 {
            let n = ready!(self.poll_some(cx, *left))?.len();
            *left -= n as u64;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_size() {
        // RFC 9000 §A.1's examples.
        assert_eq!(varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]), Some((151_288_809_941_952_652, 8)));
        assert_eq!(varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(varint(&[0x25]), Some((37, 1)));
        assert_eq!(varint(&[0x40]), None);
        assert_eq!(varint(&[]), None);
        for v in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, VARINT_MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(varint(&b), Some((v, b.len())));
        }
    }
}
