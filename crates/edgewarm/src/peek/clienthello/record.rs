//! The TLS record layer under a ClientHello: walk records, check each header, and gather the
//! handshake message they carry.
//!
//! Rules (RFC 8446 §5.1, RFC 5246 §6.2): every record up to the end of the hello is a handshake
//! record (type 22) with a non-zero length of at most 2^14; its version's major byte is 3.
//! We accept minor versions 0 to 4 in the record header: clients put 0x0301 there for
//! compatibility and some scanners 0x0300; the version that matters is negotiated inside.

use std::borrow::Cow;

use super::{HelloError, MAX_HELLO_LEN};

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const MAX_RECORD: usize = 1 << 14;

/// A complete handshake message and where its records end.
pub(super) struct Message<'a> {
    /// The ClientHello body (after the 4-byte handshake header).
    pub body: Cow<'a, [u8]>,
    /// Bytes of `buf` covering all records that carry the message.
    pub records_len: usize,
}

/// `Ok(None)`: a valid prefix, need more bytes.
pub(super) fn reassemble(buf: &[u8]) -> Result<Option<Message<'_>>, HelloError> {
    check_first_byte(buf)?;
    let mut offset = 0;
    // Handshake bytes gathered so far; borrowed while they all sit in the first record.
    let mut gathered: Cow<'_, [u8]> = Cow::Borrowed(&[]);
    let mut needed: Option<usize> = None;
    loop {
        let Some(header) = buf.get(offset..offset + 5) else {
            check_partial_header(buf.get(offset..).unwrap_or_default(), offset == 0)?;
            return Ok(None);
        };
        if header[0] != HANDSHAKE {
            return Err(if offset == 0 {
                HelloError::NotTls
            } else {
                HelloError::Malformed("non-handshake record inside the hello")
            });
        }
        if header[1] != 3 || header[2] > 4 {
            return Err(if offset == 0 { HelloError::NotTls } else { HelloError::Malformed("bad record version") });
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 {
            return Err(HelloError::Malformed("empty handshake record"));
        }
        if len > MAX_RECORD {
            return Err(HelloError::Malformed("record longer than 2^14"));
        }
        let start = offset + 5;
        let available = &buf[start..buf.len().min(start + len)];
        append(&mut gathered, available, offset == 0);
        if needed.is_none() {
            needed = handshake_header(&gathered)?;
        }
        if let Some(total) = needed {
            if gathered.len() >= total {
                let records_len = start + available.len();
                // A record may end exactly at the hello or carry more handshake bytes after it
                // (a client coalescing messages is broken, but the bytes are still replayed).
                let body = match gathered {
                    Cow::Borrowed(b) => Cow::Borrowed(&b[4..total]),
                    Cow::Owned(mut b) => {
                        b.truncate(total);
                        b.drain(..4);
                        Cow::Owned(b)
                    }
                };
                return Ok(Some(Message { body, records_len }));
            }
        }
        if available.len() < len {
            return Ok(None);
        }
        offset = start + len;
    }
}

/// Decide from the very first byte when we can: a plain-HTTP client or an SSLv2 hello should get
/// its answer without us waiting for bytes that will never make it TLS.
fn check_first_byte(buf: &[u8]) -> Result<(), HelloError> {
    match buf.first() {
        None | Some(&HANDSHAKE) => Ok(()),
        Some(b'A'..=b'Z') => Err(HelloError::PlainHttp),
        Some(b) if b & 0x80 != 0 => Err(HelloError::SslV2),
        Some(_) => Err(HelloError::NotTls),
    }
}

/// A record header cut short: check the bytes we have. In the first record a bad version
/// means "not TLS"; later it means a broken hello.
fn check_partial_header(partial: &[u8], first: bool) -> Result<(), HelloError> {
    let bad_version = || if first { HelloError::NotTls } else { HelloError::Malformed("bad record version") };
    match partial {
        [t, ..] if *t != HANDSHAKE => Err(HelloError::Malformed("non-handshake record inside the hello")),
        [_, major, ..] if *major != 3 => Err(bad_version()),
        [_, _, minor, ..] if *minor > 4 => Err(bad_version()),
        _ => Ok(()),
    }
}

fn append<'a>(gathered: &mut Cow<'a, [u8]>, more: &'a [u8], first: bool) {
    if first {
        *gathered = Cow::Borrowed(more);
    } else {
        gathered.to_mut().extend_from_slice(more);
    }
}

/// From the 4-byte handshake header: the message's total length (header included).
fn handshake_header(gathered: &[u8]) -> Result<Option<usize>, HelloError> {
    match gathered {
        [t, ..] if *t != CLIENT_HELLO => Err(HelloError::NotClientHello),
        [_, a, b, c, ..] => {
            let total = 4 + (usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c));
            if total > MAX_HELLO_LEN {
                Err(HelloError::TooLarge)
            } else {
                Ok(Some(total))
            }
        }
        _ => Ok(None),
    }
}
