//! QPACK field sections (RFC 9204 §4.5) with the static table only. The edge announces a
//! dynamic table of zero bytes (the default, RFC 9204 §3.2.3), so a client may not refer to
//! one: an encoded section is the static table's indexes and literals, and nothing a section
//! says outlives it. That keeps one client's headers from ever shaping another's, and leaves
//! the encoder and decoder streams nothing to carry.
//!
//! A string is Huffman-coded only where that makes it shorter; the header names and values a
//! response repeats most are in the static table.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderValue};
use http::StatusCode;

use crate::arena::{self, Arena};
use crate::huffman;
use crate::static_table::{named, STATIC};

/// A field section that breaks QPACK's rules: QPACK_DECOMPRESSION_FAILED, a connection error.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub &'static str);

/// A name or value as the section carried it: a static table entry's, or its own.
#[derive(Debug)]
pub enum Text {
    Static(&'static str),
    Own(Bytes),
}

impl Text {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Static(s) => s.as_bytes(),
            Self::Own(b) => b,
        }
    }

    pub fn into_bytes(self) -> Bytes {
        match self {
            Self::Static(s) => Bytes::from_static(s.as_bytes()),
            Self::Own(b) => b,
        }
    }

    pub fn into_value(self) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
        match self {
            Self::Static(s) => Ok(HeaderValue::from_static(s)),
            Self::Own(b) => HeaderValue::from_maybe_shared(b),
        }
    }
}

/// A prefixed integer (RFC 7541 §5.1) with `bits` bits in its first byte, from `b[*at..]`.
fn get_int(b: &[u8], at: &mut usize, bits: u32) -> Result<u64, Invalid> {
    let mask = (1u64 << bits) - 1;
    let first = *b.get(*at).ok_or(Invalid("truncated integer"))?;
    *at += 1;
    let mut v = u64::from(first) & mask;
    if v < mask {
        return Ok(v);
    }
    let mut shift = 0;
    loop {
        let byte = *b.get(*at).ok_or(Invalid("truncated integer"))?;
        *at += 1;
        if shift > 56 {
            return Err(Invalid("integer overflow"));
        }
        v += u64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// A string literal whose H flag sits just above its `bits`-bit length prefix: a view into the
/// block, or, Huffman-coded, decoded into a piece of the thread's [`arena`].
fn get_string(block: &Bytes, at: &mut usize, bits: u32, arena: &mut Arena<'_>) -> Result<Bytes, Invalid> {
    let huffman = block.get(*at).ok_or(Invalid("truncated string"))? & (1 << bits) != 0;
    let len = get_int(block, at, bits)?;
    let len = usize::try_from(len).map_err(|_| Invalid("string too long"))?;
    let end = at.checked_add(len).filter(|&end| end <= block.len()).ok_or(Invalid("truncated string"))?;
    let raw = &block[*at..end];
    let s = if huffman {
        huffman::decode(raw, arena.room(huffman::decoded_max(raw.len())))
            .map_err(|huffman::Invalid| Invalid("bad Huffman coding"))?;
        arena.cut().unwrap_or_default()
    } else {
        block.slice(*at..end)
    };
    *at = end;
    Ok(s)
}

fn static_entry(index: u64) -> Result<&'static (&'static str, &'static str), Invalid> {
    usize::try_from(index).ok().and_then(|i| STATIC.get(i)).ok_or(Invalid("no such static table entry"))
}

/// Decode a field section, handing each field line to `field` in order.
pub fn decode<E: From<Invalid>>(block: &Bytes, mut field: impl FnMut(Text, Text) -> Result<(), E>) -> Result<(), E> {
    arena::with(|arena| decode_in(block, arena, &mut field))
}

fn decode_in<E: From<Invalid>>(
    block: &Bytes,
    arena: &mut Arena<'_>,
    field: &mut impl FnMut(Text, Text) -> Result<(), E>,
) -> Result<(), E> {
    let mut at = 0;
    // The prefix: Required Insert Count, which must be 0 with no dynamic table, then the Base,
    // which only matters with one.
    if get_int(block, &mut at, 8)? != 0 {
        return Err(Invalid("a reference to the dynamic table, whose capacity is 0").into());
    }
    get_int(block, &mut at, 7)?;
    while at < block.len() {
        let first = block[at];
        if first & 0x80 != 0 {
            // Indexed field line: 1 T index(6).
            if first & 0x40 == 0 {
                return Err(Invalid("a reference to the dynamic table, whose capacity is 0").into());
            }
            let (name, value) = static_entry(get_int(block, &mut at, 6)?)?;
            field(Text::Static(name), Text::Static(value))?;
        } else if first & 0x40 != 0 {
            // Literal field line with name reference: 01 N T index(4), then the value.
            if first & 0x10 == 0 {
                return Err(Invalid("a reference to the dynamic table, whose capacity is 0").into());
            }
            let (name, _) = static_entry(get_int(block, &mut at, 4)?)?;
            let value = get_string(block, &mut at, 7, arena)?;
            field(Text::Static(name), Text::Own(value))?;
        } else if first & 0x20 != 0 {
            // Literal field line with literal name: 001 N H length(3), then the value.
            let name = get_string(block, &mut at, 3, arena)?;
            let value = get_string(block, &mut at, 7, arena)?;
            field(Text::Own(name), Text::Own(value))?;
        } else {
            // Indexed with post-base index, and literal with post-base name reference: both the
            // dynamic table.
            return Err(Invalid("a reference to the dynamic table, whose capacity is 0").into());
        }
    }
    Ok(())
}

/// Append a prefixed integer: `flags` are the first byte's bits above its `bits`-bit prefix.
pub fn put_int(out: &mut BytesMut, bits: u32, flags: u8, v: u64) {
    let mask = (1u64 << bits) - 1;
    if v < mask {
        out.put_u8(flags | v as u8);
        return;
    }
    out.put_u8(flags | mask as u8);
    let mut rest = v - mask;
    while rest >= 0x80 {
        out.put_u8((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.put_u8(rest as u8);
}

/// Append a string literal whose H flag sits just above its `bits`-bit length prefix: Huffman
/// where that is shorter, as it is.
fn put_string(out: &mut BytesMut, bits: u32, flags: u8, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        put_int(out, bits, flags | (1 << bits), coded as u64);
        out.reserve(coded);
        huffman::encode(s, out);
    } else {
        put_int(out, bits, flags, s.len() as u64);
        out.extend_from_slice(s);
    }
}

/// The static entry for a response status, if it has one.
fn status_index(status: StatusCode) -> Option<u64> {
    Some(match status.as_u16() {
        103 => 24,
        200 => 25,
        304 => 26,
        404 => 27,
        503 => 28,
        100 => 63,
        204 => 64,
        206 => 65,
        302 => 66,
        400 => 67,
        403 => 68,
        421 => 69,
        425 => 70,
        500 => 71,
        _ => return None,
    })
}

/// Append one field line: the static entry where name and value match one, a reference to the
/// entry's name where only that does, the name as a literal otherwise. `sensitive` sets the N
/// bit: an intermediary must not put the field in a dynamic table of its own either.
fn put_field(out: &mut BytesMut, name: &str, value: &[u8], sensitive: bool) {
    let entries = named(name);
    if !sensitive {
        if let Some(&i) = entries.iter().find(|&&i| STATIC[usize::from(i)].1.as_bytes() == value) {
            put_int(out, 6, 0xc0, u64::from(i));
            return;
        }
    }
    let never = if sensitive { 0x20 } else { 0 };
    match entries.first() {
        Some(&i) => put_int(out, 4, 0x50 | never, u64::from(i)),
        None => put_string(out, 3, 0x20 | (never >> 1), name.as_bytes()),
    }
    put_string(out, 7, 0, value);
}

/// Encode a response head (`status`) or trailers (none) as a field section, appending it to
/// `out`.
pub fn encode(status: Option<StatusCode>, headers: &HeaderMap, out: &mut BytesMut) {
    // Required Insert Count 0, Base 0.
    out.extend_from_slice(&[0, 0]);
    if let Some(status) = status {
        match status_index(status) {
            Some(i) => put_int(out, 6, 0xc0, i),
            None => {
                put_int(out, 4, 0x50, 24);
                put_string(out, 7, 0, status.as_str().as_bytes());
            }
        }
    }
    for (name, value) in headers {
        put_field(out, name.as_str(), value.as_bytes(), value.is_sensitive());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(block: &[u8]) -> Result<Vec<(String, String)>, Invalid> {
        let mut out = Vec::new();
        decode::<Invalid>(&Bytes::copy_from_slice(block), |n, v| {
            out.push((
                String::from_utf8_lossy(n.as_bytes()).into_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn rfc_9204_b1_a_literal_with_a_static_name() {
        // Appendix B.1's field section: ":path" = "/index.html", name by static reference.
        let block = [0x00, 0x00, 0x51, 0x0b, 0x2f, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x2e, 0x68, 0x74, 0x6d, 0x6c];
        assert_eq!(fields(&block).unwrap(), [(":path".into(), "/index.html".into())]);
    }

    #[test]
    fn responses_come_back_as_they_went() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("content-length", HeaderValue::from_static("1234"));
        headers.insert("x-cache", HeaderValue::from_static("HIT from edgewarm"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        let mut secret = HeaderValue::from_static("Bearer xyz");
        secret.set_sensitive(true);
        headers.insert("authorization", secret);
        headers.insert("x-empty", HeaderValue::from_static(""));
        for status in [StatusCode::OK, StatusCode::from_u16(299).unwrap(), StatusCode::from_u16(103).unwrap()] {
            let mut out = BytesMut::new();
            encode(Some(status), &headers, &mut out);
            let back = fields(&out).unwrap();
            assert_eq!(back[0], (":status".into(), status.as_str().into()));
            let want: Vec<(String, String)> =
                headers.iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string())).collect();
            assert_eq!(back[1..], want[..]);
        }
        // "content-type: text/plain" is entry 53: one byte.
        let mut out = BytesMut::new();
        let mut one = HeaderMap::new();
        one.insert("content-type", HeaderValue::from_static("text/plain"));
        encode(None, &one, &mut out);
        assert_eq!(&out[..], [0, 0, 0xc0 | 53]);
    }

    #[test]
    fn long_integers_round_trip() {
        for v in [0, 14, 15, 16, 127, 128, 300, 1 << 20, u64::from(u32::MAX)] {
            for bits in [3, 4, 6, 7, 8] {
                let mut out = BytesMut::new();
                put_int(&mut out, bits, 0, v);
                let mut at = 0;
                assert_eq!(get_int(&out, &mut at, bits), Ok(v));
                assert_eq!(at, out.len());
            }
        }
    }

    #[test]
    fn the_dynamic_table_and_broken_sections_are_refused() {
        // Required Insert Count 1.
        assert!(fields(&[0x02, 0x00]).is_err());
        // Indexed field line, dynamic (T = 0).
        assert!(fields(&[0x00, 0x00, 0x80]).is_err());
        // Literal with a dynamic name reference.
        assert!(fields(&[0x00, 0x00, 0x40, 0x00]).is_err());
        // Post-base forms.
        assert!(fields(&[0x00, 0x00, 0x10]).is_err());
        assert!(fields(&[0x00, 0x00, 0x00]).is_err());
        // Static index 99 does not exist.
        assert!(fields(&[0x00, 0x00, 0xff, 0x24]).is_err());
        // A string running past the section's end.
        assert!(fields(&[0x00, 0x00, 0x51, 0x0b, 0x2f]).is_err());
        // An integer too long to be one.
        assert!(fields(&[0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        // Empty: no prefix.
        assert!(fields(&[]).is_err());
    }
}
