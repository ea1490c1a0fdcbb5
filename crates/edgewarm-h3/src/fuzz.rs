//! What the fuzz targets (`fuzz/`, through `edgewarm::fuzzing`) drive: the frame reader and the
//! client's unidirectional streams, on bytes a client chose, cut into chunks where the fuzzer
//! says (a QUIC stream hands data over in pieces of any size). Each checks what must hold
//! whatever the bytes: no panic, an end in a bounded number of steps, and every byte of a
//! well-formed stream read exactly once.

use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};

use crate::frame::{self, put_varint, varint, Kind, Reader};
use crate::uni::Uni;
use crate::RecvStream;

/// A stream whose data is `data` cut after each length in `cuts` (cycled; a 0 is a 1), then its
/// end. Never pending.
struct Chunked {
    data: Bytes,
    cuts: Vec<usize>,
    next: usize,
}

impl Chunked {
    /// The fuzzer's input: its first byte says how many of the next are chunk lengths (at most
    /// 8), and the rest is the stream.
    fn new(input: &[u8]) -> Self {
        let n = input.first().map_or(0, |b| usize::from(b % 9));
        let cuts: Vec<usize> = input.iter().skip(1).take(n).map(|&b| usize::from(b).max(1)).collect();
        let start = (1 + n).min(input.len());
        let cuts = if cuts.is_empty() { vec![usize::MAX] } else { cuts };
        Self { data: Bytes::copy_from_slice(&input[start..]), cuts, next: 0 }
    }
}

impl RecvStream for Chunked {
    /// Never fails: all of the data is here.
    type Error = std::convert::Infallible;

    fn poll_data(&mut self, _: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Self::Error>> {
        if self.data.is_empty() {
            return Poll::Ready(Ok(None));
        }
        let cut = self.cuts[self.next % self.cuts.len()].min(self.data.remaining());
        self.next += 1;
        Poll::Ready(Ok(Some(self.data.split_to(cut))))
    }

    // Nothing to stop: all of the data is here already.
    fn stop_sending(&mut self, _: u64) {}
}

/// A request head's field section (QPACK with the static table only), read as the edge reads
/// one off a client's HEADERS frame, and the same bytes as trailers: whether each was
/// accepted. Every string that decodes is also checked to come back through the Huffman coder
/// unchanged.
pub fn field_section(block: &[u8]) -> (bool, bool) {
    let bytes = Bytes::copy_from_slice(block);
    let mut strings = Vec::new();
    let _ = crate::qpack::decode::<crate::qpack::Invalid>(&bytes, |name, value| {
        strings.push(name.into_bytes());
        strings.push(value.into_bytes());
        Ok(())
    });
    for s in strings {
        let mut coded = bytes::BytesMut::new();
        crate::huffman::encode(&s, &mut coded);
        let mut back = bytes::BytesMut::new();
        assert_eq!(crate::huffman::decode(&coded, &mut back), Ok(()));
        assert_eq!(back, s, "a string comes back through the Huffman coder");
    }
    (crate::head::request(&bytes).is_ok(), crate::head::trailers(&bytes).is_ok())
}

/// The largest payload read whole here: larger ones are skipped, as the edge does with frames
/// it has no use for.
const MAX_PAYLOAD: u64 = 1 << 16;

/// Read the stream as frames to its end. Returns how many frames were read whole, or `None`
/// where the stream ended inside one. Checks that every byte was consumed once, and that each
/// integer read comes back through the encoder no longer than it came.
pub fn frames(input: &[u8]) -> Option<usize> {
    let stream = Chunked::new(input);
    let total = stream.data.len();
    let whole = stream.data.clone();
    let mut reader = Reader::new(stream);
    let mut cx = Context::from_waker(Waker::noop());
    let (mut frames, mut consumed) = (0usize, 0usize);
    // Each step reads at least one byte or ends: the bound only guards the check itself.
    for _ in 0..=total + 1 {
        let Poll::Ready(header) = reader.poll_header(&mut cx) else { unreachable!("never pending") };
        let (t, len) = match header {
            Ok(Some(h)) => h,
            Ok(None) => {
                assert_eq!(consumed, total, "a stream that ends between frames was read whole");
                return Some(frames);
            }
            Err(_) => return None,
        };
        for v in [t, len] {
            let mut coded = Vec::new();
            put_varint(&mut coded, v);
            assert_eq!(varint(&coded), Some((v, coded.len())), "{v} comes back");
        }
        let (_, a) = varint(&whole[consumed..]).expect("the type was read");
        let (_, b) = varint(&whole[consumed + a..]).expect("the length was read");
        consumed += a + b;
        let payload_len = if matches!(frame::kind(t), Kind::Known) && len <= MAX_PAYLOAD {
            let Poll::Ready(payload) = reader.poll_exact(&mut cx, len as usize) else { unreachable!() };
            let Ok(payload) = payload else { return None };
            assert_eq!(payload.len() as u64, len);
            assert_eq!(&payload[..], &whole[consumed..consumed + payload.len()], "the payload as sent");
            len
        } else {
            let mut left = len;
            let Poll::Ready(skipped) = reader.poll_skip(&mut cx, &mut left) else { unreachable!() };
            if skipped.is_err() {
                return None;
            }
            len
        };
        consumed += payload_len as usize;
        frames += 1;
    }
    unreachable!("every step read a byte or ended")
}

/// Read the stream as one of the client's unidirectional streams (control, QPACK encoder or
/// decoder, or another type) until it ends, errs or is put aside. Returns the events it told
/// and the connection error it ended with, if any (its code).
pub fn uni(input: &[u8]) -> (usize, Option<u64>) {
    let stream = Chunked::new(input);
    let bound = stream.data.len() + 2;
    let mut uni = Uni::new(stream);
    let mut cx = Context::from_waker(Waker::noop());
    let mut events = 0;
    for _ in 0..=bound {
        match uni.poll(&mut cx) {
            Poll::Ready(Ok(Some(_))) => events += 1,
            Poll::Ready(Ok(None)) => return (events, None),
            Poll::Ready(Err(e)) => {
                assert!(e.code >= frame::code::NO_ERROR, "an HTTP/3 or QPACK error code");
                return (events, Some(e.code));
            }
            Poll::Pending => unreachable!("the stream is never pending"),
        }
    }
    unreachable!("each event reads a byte, and the stream ends")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::code;

    /// The harness on the committed seeds' shapes: a request's frames whole however cut, a
    /// frame cut short, a control stream's events then its close, the QPACK streams.
    #[test]
    fn the_harness_reads_streams_as_the_edge_does() {
        let request = [0x01, 0x03, 0x00, 0x00, 0xd1, 0x00, 0x05, b'h', b'e', b'l', b'l', b'o'];
        for cuts in [&[0][..], &[3, 1, 2, 5], &[1, 1]] {
            let input: Vec<u8> = cuts.iter().copied().chain(request).collect();
            assert_eq!(frames(&input), Some(2), "cut as {cuts:?}");
        }
        assert_eq!(frames(&[0, 0x01, 0x0a, 0x00, 0x00, 0xd1]), None, "a HEADERS frame cut short");
        let control = [0, 0x00, 0x04, 0x04, 0x01, 0x00, 0x07, 0x00, 0x07, 0x01, 0x00];
        assert_eq!(uni(&control), (2, Some(code::CLOSED_CRITICAL_STREAM)), "opened, GOAWAY, then closed");
        assert_eq!(uni(&[0, 0x00, 0x07, 0x01, 0x00]), (1, Some(code::MISSING_SETTINGS)));
        assert_eq!(uni(&[0, 0x02, 0x20, 0x21]), (1, Some(code::QPACK_ENCODER_STREAM_ERROR)));
        assert_eq!(uni(&[0, 0x40, 0x21, 1, 2]), (0, None), "an unknown type, put aside");
    }
}
