//! The Huffman code of HPACK and QPACK string literals (RFC 7541 §5.2, Appendix B), coded a
//! table lookup per symbol: h3 0.0.8 walks its code a bit at a time, which was 6.2k
//! instructions per request for five short strings (docs/benchmarks.md).
//!
//! The code is canonical: the codes of one length are consecutive numbers, longer codes
//! following shorter ones. So a symbol of up to [`FAST_BITS`] bits is found by one lookup on
//! the next bits, and a longer one by comparing those bits with each longer length's first code.

use std::sync::LazyLock;

use bytes::{BufMut, BytesMut};

use crate::huffman_table::CODES;

/// Codes up to this long are decoded by one lookup (all of the printable ASCII's common
/// symbols are 5–8 bits).
const FAST_BITS: u32 = 10;
const EOS: u16 = 256;

/// A string literal's Huffman coding is invalid (RFC 7541 §5.2): EOS in it, or padding that is
/// longer than 7 bits or not the EOS code's leading ones.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid;

/// Each symbol's code length alone: the length pass reads a byte a symbol.
const LENGTHS: [u8; 256] = {
    let mut lengths = [0; 256];
    let mut i = 0;
    while i < 256 {
        lengths[i] = CODES[i].1;
        i += 1;
    }
    lengths
};

/// The number of bytes `s` takes Huffman-coded.
pub fn encoded_len(s: &[u8]) -> usize {
    let bits: usize = s.iter().map(|&b| usize::from(LENGTHS[usize::from(b)])).sum();
    bits.div_ceil(8)
}

/// Append `s` Huffman-coded to `out`, padded with the EOS code's leading ones. The caller
/// reserves the room ([`encoded_len`]).
pub fn encode(s: &[u8], out: &mut BytesMut) {
    // Bits waiting to be written, aligned to the low end of `acc`: fewer than 32 between
    // symbols, and a code is at most 30, so they fit; they leave four bytes at a time.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in s {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        if bits >= 32 {
            bits -= 32;
            out.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
        }
    }
    while bits >= 8 {
        bits -= 8;
        out.put_u8((acc >> bits) as u8);
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.put_u8(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

/// The decoding tables, built once from [`CODES`].
struct Decoder {
    /// By the next [`FAST_BITS`] bits: the symbol and its length, or length 0 where the code is
    /// longer.
    fast: Vec<(u16, u8)>,
    /// By length (index = bits): the first code of that length, and how many there are.
    first: [(u32, u32); 31],
    /// Where each length's symbols start in `symbols`.
    start: [u16; 31],
    /// Every symbol, by code length, then code.
    symbols: Vec<u16>,
}

static DECODER: LazyLock<Decoder> = LazyLock::new(|| {
    let mut by_code: Vec<(u8, u32, u16)> =
        CODES.iter().enumerate().map(|(sym, &(code, len))| (len, code, sym as u16)).collect();
    by_code.sort_unstable();
    let mut first = [(0u32, 0u32); 31];
    let mut start = [0u16; 31];
    for (i, &(len, code, _)) in by_code.iter().enumerate() {
        let slot = &mut first[usize::from(len)];
        if slot.1 == 0 {
            *slot = (code, 0);
            start[usize::from(len)] = i as u16;
        }
        slot.1 += 1;
    }
    let mut fast = vec![(0u16, 0u8); 1 << FAST_BITS];
    for &(len, code, sym) in &by_code {
        if u32::from(len) <= FAST_BITS {
            let shift = FAST_BITS - u32::from(len);
            let base = (code << shift) as usize;
            for entry in &mut fast[base..base + (1 << shift)] {
                *entry = (sym, len);
            }
        }
    }
    Decoder { fast, first, start, symbols: by_code.iter().map(|&(_, _, sym)| sym).collect() }
});

/// The most bytes `len` Huffman-coded bytes decode to (the shortest code is 5 bits).
pub const fn decoded_max(len: usize) -> usize {
    len * 8 / 5
}

/// Decode a Huffman-coded string literal, appending it to `out`.
pub fn decode(mut s: &[u8], out: &mut BytesMut) -> Result<(), Invalid> {
    let d = &*DECODER;
    out.reserve(decoded_max(s.len()));
    // The next bits, left-aligned in `acc`; `bits` of them are the string's.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    loop {
        while bits <= 56 {
            let Some((&b, rest)) = s.split_first() else { break };
            acc |= u64::from(b) << (56 - bits);
            bits += 8;
            s = rest;
        }
        // The end: nothing left, or padding (fewer than 8 bits, all ones, which no code is),
        // found here rather than by the long-code search every string would end in.
        if bits == 0 || (bits < 8 && (!acc) >> (64 - bits) == 0) {
            return Ok(());
        }
        // Past the string's end the bits read as ones: a code cut off there is padding.
        let window = acc | u64::MAX.checked_shr(bits).unwrap_or(0);
        let (sym, len) = match d.fast[(window >> (64 - FAST_BITS)) as usize] {
            (sym, len) if len > 0 => (sym, u32::from(len)),
            _ => long_code(d, window).ok_or(Invalid)?,
        };
        if len > bits {
            // Padding: fewer than 8 bits, all ones (a run of ones this short is no code).
            let ones = (!acc) >> (64 - bits) == 0;
            return if bits < 8 && ones { Ok(()) } else { Err(Invalid) };
        }
        if sym == EOS {
            return Err(Invalid);
        }
        out.put_u8(sym as u8);
        acc <<= len;
        bits -= len;
    }
}

/// The symbol of a code longer than [`FAST_BITS`] at the top of `window`.
fn long_code(d: &Decoder, window: u64) -> Option<(u16, u32)> {
    for len in FAST_BITS + 1..=30 {
        let (first, count) = d.first[len as usize];
        let code = (window >> (64 - len)) as u32;
        if count > 0 && code >= first && code - first < count {
            let at = usize::from(d.start[len as usize]) + (code - first) as usize;
            return Some((d.symbols[at], len));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(s: &[u8]) -> Vec<u8> {
        let mut coded = BytesMut::with_capacity(encoded_len(s));
        encode(s, &mut coded);
        assert_eq!(coded.len(), encoded_len(s));
        let mut back = BytesMut::new();
        decode(&coded, &mut back).unwrap();
        back.to_vec()
    }

    #[test]
    fn the_code_is_canonical() {
        // The decoder's long-code search relies on it: within a length, consecutive codes.
        let d = &*DECODER;
        for (sym, &(code, len)) in CODES.iter().enumerate() {
            let (first, count) = d.first[usize::from(len)];
            assert!(code >= first && code - first < count);
            assert_eq!(usize::from(d.symbols[usize::from(d.start[usize::from(len)]) + (code - first) as usize]), sym);
        }
    }

    #[test]
    fn rfc_7541_appendix_c_examples() {
        // C.4.1 and C.6.1.
        let mut out = BytesMut::new();
        encode(b"www.example.com", &mut out);
        assert_eq!(&out[..], [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff]);
        out.clear();
        encode(b"Mon, 21 Oct 2013 20:13:21 GMT", &mut out);
        let want = [
            0xd0, 0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b, 0x81, 0x66, 0xe0, 0x82,
            0xa6, 0x2d, 0x1b, 0xff,
        ];
        assert_eq!(&out[..], want);
        let mut back = BytesMut::new();
        decode(&want, &mut back).unwrap();
        assert_eq!(back, b"Mon, 21 Oct 2013 20:13:21 GMT"[..]);
    }

    #[test]
    fn every_byte_comes_back() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(round(&all), all);
        let rev: Vec<u8> = (0..=255).rev().cycle().take(3000).collect();
        assert_eq!(round(&rev), rev);
        assert_eq!(round(b""), b"");
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = BytesMut::new();
        // A whole byte of padding.
        assert_eq!(decode(&[0xff], &mut out), Err(Invalid));
        // "a" is 00011: padded with zeros instead of ones.
        assert_eq!(decode(&[0b0001_1000], &mut out), Err(Invalid));
        // EOS, 30 ones, then padding.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out), Err(Invalid));
        out.clear();
        assert_eq!(decode(&[0b0001_1111], &mut out), Ok(()));
        assert_eq!(out, b"a"[..]);
    }
}
