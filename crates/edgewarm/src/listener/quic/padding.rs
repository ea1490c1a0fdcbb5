//! Trailing PADDING cut from a client's packets once they are decrypted.
//!
//! A PADDING frame is one zero byte (RFC 9000 §19.1), and quinn-proto reads each as a frame of
//! its own: a full frame iteration, a varint decode and a match for every byte. Clients pad a
//! lot of what they send: every datagram that carries an Initial packet to 1,200 bytes (§14.1),
//! and path-MTU probes (a PING) to the size probed. That came to about 1,800 frames, some 4 % of
//! an HTTP/3 request's instructions at 31 requests a connection (docs/benchmarks.md). Padding
//! means nothing once a packet is authenticated (quinn counts what a connection received, for
//! its anti-amplification limit, from the datagram), so the run of padding that ends a packet is
//! cut to one byte before quinn-proto reads it. One byte stays so that no packet is left without
//! frames, which §12.4 makes a protocol violation.
//!
//! A cut packet's frames are copied out of the datagram's buffer. quinn-proto weighs the CRYPTO
//! data it holds by the size of the packet it came in, to know when to copy scattered pieces out
//! of the buffers they keep alive: were a cut packet's data still a view into its whole datagram,
//! a client sending its handshake a byte a packet could pin hundreds of times what quinn-proto
//! thinks it holds.
//!
//! Finding where a packet's trailing padding starts means walking its frames. Only the frames a
//! padded packet carries are walked: PING, ACK, CRYPTO and CONNECTION_CLOSE (all an Initial or
//! Handshake packet may hold, and what an MTU probe holds). At any other frame, or anything
//! malformed, the packet is left exactly as it is, and quinn-proto reads (and judges) all of it.
//!
//! Not the connection's very first packet: quinn-proto takes that one's size from the decrypted
//! packet, and it is what the server may send before the client's address is validated (three
//! times it). That packet is opened with the keys `ServerConfig::initial_keys` gives, which are
//! not wrapped; the connection's own keys (from its session) are.

use bytes::BytesMut;
use quinn::crypto::{CryptoError, PacketKey};

#[cfg(test)]
thread_local! {
    /// Packets this thread cut the padding of (for the tests of quinn-proto's behaviour).
    pub(super) static CUT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A packet key whose decrypted payloads lose their trailing padding ([`padded_to`]).
pub(super) struct Trimming(pub(super) Box<dyn PacketKey>);

impl PacketKey for Trimming {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        self.0.encrypt(packet, buf, header_len);
    }

    fn decrypt(&self, packet: u64, header: &[u8], payload: &mut BytesMut) -> Result<(), CryptoError> {
        self.0.decrypt(packet, header, payload)?;
        if let Some(len) = padded_to(payload) {
            *payload = BytesMut::from(&payload[..len]);
            #[cfg(test)]
            CUT.with(|n| n.set(n.get() + 1));
        }
        Ok(())
    }

    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }

    fn confidentiality_limit(&self) -> u64 {
        self.0.confidentiality_limit()
    }

    fn integrity_limit(&self) -> u64 {
        self.0.integrity_limit()
    }
}

/// The length `payload` keeps when the padding that ends it is cut to one byte; `None` to keep
/// it as it is (no trailing padding, or a frame this walk does not read).
fn padded_to(payload: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at < payload.len() {
        let ty = payload[at];
        at += 1;
        match ty {
            // PADDING: the rest of the packet, if it is all padding, is cut.
            0x00 => {
                let rest = &payload[at..];
                if rest.iter().all(|&b| b == 0) {
                    return (!rest.is_empty()).then_some(at);
                }
                // Padding between frames: walk on from the next frame.
                at += rest.iter().position(|&b| b != 0)?;
            }
            // PING
            0x01 => {}
            // ACK, ACK with ECN counts: largest acknowledged, delay, range count, first range,
            // then a gap and a length for each further range, then three ECN counts.
            0x02 | 0x03 => {
                let mut fields = [0; 3];
                for f in &mut fields {
                    *f = varint(payload, &mut at)?;
                }
                let ranges = fields[2];
                // The first range, then each range's two fields: a count no packet could hold
                // ends the walk at the first varint that runs off the end.
                let more = ranges.checked_mul(2)?.checked_add(1)?;
                let ecn = if ty == 0x03 { 3 } else { 0 };
                for _ in 0..more.checked_add(ecn)? {
                    varint(payload, &mut at)?;
                }
            }
            // CRYPTO: offset, length, data.
            0x06 => {
                varint(payload, &mut at)?;
                let len = varint(payload, &mut at)?;
                at = skip(payload, at, len)?;
            }
            // CONNECTION_CLOSE (transport: with the offending frame's type; application: without).
            0x1c | 0x1d => {
                varint(payload, &mut at)?;
                if ty == 0x1c {
                    varint(payload, &mut at)?;
                }
                let len = varint(payload, &mut at)?;
                at = skip(payload, at, len)?;
            }
            _ => return None,
        }
    }
    None
}

/// [`crate::fuzzing::quic_padding`]: where `payload` (decrypted frames a client chose) would be
/// cut, checked: only a run of padding that ends the packet is cut, one byte of it kept.
pub(crate) fn fuzz_padded_to(payload: &[u8]) -> Option<usize> {
    let cut = padded_to(payload);
    if let Some(n) = cut {
        assert!(n >= 1 && n < payload.len(), "cut inside the packet: {n} of {}", payload.len());
        assert_eq!(payload[n - 1], 0, "one PADDING byte is kept");
        assert!(payload[n..].iter().all(|&b| b == 0), "only padding is cut");
    }
    cut
}

/// A QUIC variable-length integer (RFC 9000 §16) at `*at`, which moves past it.
fn varint(payload: &[u8], at: &mut usize) -> Option<u64> {
    let first = *payload.get(*at)?;
    let len = 1usize << (first >> 6);
    let bytes = payload.get(*at..*at + len)?;
    let value = bytes[1..].iter().fold(u64::from(first & 0x3f), |v, &b| v << 8 | u64::from(b));
    *at += len;
    Some(value)
}

/// `at` moved past `len` bytes, if the payload has them.
fn skip(payload: &[u8], at: usize, len: u64) -> Option<usize> {
    let end = at.checked_add(usize::try_from(len).ok()?)?;
    (end <= payload.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn padded(frames: &[u8], padding: usize) -> Vec<u8> {
        let mut p = frames.to_vec();
        p.resize(frames.len() + padding, 0);
        p
    }

    #[test]
    fn trailing_padding_is_cut_to_one_byte_after_the_frames_a_padded_packet_carries() {
        // CRYPTO at offset 0, 3 bytes (one of them zero), then padding.
        let crypto = [0x06, 0x00, 0x03, 0xaa, 0x00, 0xbb];
        assert_eq!(padded_to(&padded(&crypto, 900)), Some(crypto.len() + 1));
        // ACK: largest 0x1234 (two bytes), delay 0, one more range (gap 0, length 0), first
        // range 0: its last bytes are zeros that are fields, not padding.
        let ack = [0x02, 0x52, 0x34, 0x00, 0x01, 0x00, 0x00, 0x00];
        assert_eq!(padded_to(&padded(&ack, 50)), Some(ack.len() + 1));
        // ACK with ECN counts, then CRYPTO, then padding.
        let both = [0x03, 0x05, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x06, 0x00, 0x01, 0x00];
        assert_eq!(padded_to(&padded(&both, 10)), Some(both.len() + 1));
        // An MTU probe: PING and padding.
        assert_eq!(padded_to(&padded(&[0x01], 1400)), Some(2));
        // Padding alone keeps one byte: a packet needs a frame.
        assert_eq!(padded_to(&[0; 1200]), Some(1));
        // Padding before a frame, then after it.
        assert_eq!(padded_to(&padded(&[0x00, 0x00, 0x01], 5)), Some(4));
        // CONNECTION_CLOSE with a reason, then padding.
        let close = [0x1c, 0x0a, 0x06, 0x02, b'n', b'o'];
        assert_eq!(padded_to(&padded(&close, 3)), Some(close.len() + 1));
    }

    #[test]
    fn a_packet_is_left_whole_without_trailing_padding_or_with_a_frame_not_walked() {
        // Nothing to cut: no padding, or a single padding byte already.
        assert_eq!(padded_to(&[0x01]), None);
        assert_eq!(padded_to(&[0x01, 0x00]), None);
        assert_eq!(padded_to(&[]), None);
        // A STREAM frame ending in zero bytes must never be mistaken for padding.
        assert_eq!(padded_to(&padded(&[0x0b, 0x00, 0x02, 0x61], 20)), None);
        // A frame walked, then one that is not.
        assert_eq!(padded_to(&padded(&[0x01, 0x0b, 0x00, 0x01], 20)), None);
        // Malformed: CRYPTO longer than the packet; a varint cut short; an ACK whose range
        // count no packet could hold.
        assert_eq!(padded_to(&padded(&[0x06, 0x00, 0x44, 0x00], 20)), None);
        assert_eq!(padded_to(&[0x02, 0x80, 0x00]), None);
        let ranges = [0x02, 0x00, 0x00, 0xc0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(padded_to(&padded(&ranges, 20)), None);
        // A frame type in a longer varint encoding is not read as PING.
        assert_eq!(padded_to(&padded(&[0x40, 0x01], 20)), None);
    }
}
