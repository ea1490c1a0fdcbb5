//! The ClientHello body (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2) and the extensions edgewarm reads:
//! server_name (0), application_layer_protocol_negotiation (16), supported_versions (43) and
//! encrypted_client_hello (0xfe0d). Every other extension is skipped, but every length is
//! checked, so a hello whose declared lengths disagree is refused rather than half-read.

use std::borrow::Cow;
use std::ops::Range;

use super::HelloError;

const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const EXT_ECH: u16 = 0xfe0d;

/// A parsed ClientHello. Fields are ranges into the body, which is borrowed from the caller's
/// buffer unless the hello spanned several records.
#[derive(Debug)]
pub struct ClientHello<'a> {
    body: Cow<'a, [u8]>,
    legacy_version: u16,
    record_version: u16,
    records_len: usize,
    sni: Option<Range<usize>>,
    /// The ALPN protocol list (without its 2-byte length), already validated.
    alpn: Option<Range<usize>>,
    /// The supported_versions list (without its 1-byte length), already validated.
    versions: Option<Range<usize>>,
    ech: bool,
}

/// A cursor over a byte slice that only ever moves forward and fails instead of panicking.
struct Reader<'b> {
    bytes: &'b [u8],
    pos: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<Range<usize>, HelloError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or(HelloError::Malformed(what))?;
        let r = self.pos..end;
        self.pos = end;
        Ok(r)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        let r = self.take(1, what)?;
        Ok(self.bytes[r.start])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let r = self.take(2, what)?;
        Ok(u16::from_be_bytes([self.bytes[r.start], self.bytes[r.start + 1]]))
    }

    /// A vector with a 1- or 2-byte length prefix; returns its contents' range.
    fn vec8(&mut self, what: &'static str) -> Result<Range<usize>, HelloError> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<Range<usize>, HelloError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

impl<'a> ClientHello<'a> {
    pub(super) fn parse(body: Cow<'a, [u8]>, record_version: u16, records_len: usize) -> Result<Self, HelloError> {
        let mut hello = Self {
            body,
            legacy_version: 0,
            record_version,
            records_len,
            sni: None,
            alpn: None,
            versions: None,
            ech: false,
        };
        let b: &[u8] = &hello.body;
        let mut r = Reader { bytes: b, pos: 0 };
        hello.legacy_version = r.u16("legacy_version")?;
        r.take(32, "random")?;
        let session_id = r.vec8("session_id")?;
        if session_id.len() > 32 {
            return Err(HelloError::Malformed("session_id longer than 32"));
        }
        let suites = r.vec16("cipher_suites")?;
        if suites.is_empty() || suites.len() % 2 != 0 {
            return Err(HelloError::Malformed("cipher_suites"));
        }
        if r.vec8("compression_methods")?.is_empty() {
            return Err(HelloError::Malformed("compression_methods"));
        }
        if r.done() {
            // TLS 1.2 and older may omit the extensions block entirely.
            return Ok(hello);
        }
        let exts = r.vec16("extensions")?;
        if !r.done() {
            return Err(HelloError::Malformed("bytes after the extensions"));
        }
        let mut e = Reader { bytes: &b[..exts.end], pos: exts.start };
        // Extension types seen, to refuse repeats (RFC 8446 §4.2). Hellos carry ~10-25, nearly
        // all numbered below 64: those are a bit each; the few others (GREASE, ALPS, ECH,
        // renegotiation_info) a short list searched in full. A linear search over all of them
        // was a fifth of the parse.
        let mut low: u64 = 0;
        let mut high: [u16; 32] = [0; 32];
        let (mut n_high, mut n_all) = (0, 0);
        while !e.done() {
            let ty = e.u16("extension type")?;
            let data = e.vec16("extension length")?;
            if n_all == 64 {
                return Err(HelloError::Malformed("too many extensions"));
            }
            n_all += 1;
            if ty < 64 {
                let bit = 1u64 << ty;
                if low & bit != 0 {
                    return Err(HelloError::Malformed("repeated extension"));
                }
                low |= bit;
            } else {
                if high[..n_high].contains(&ty) {
                    return Err(HelloError::Malformed("repeated extension"));
                }
                if n_high == high.len() {
                    return Err(HelloError::Malformed("too many extensions"));
                }
                high[n_high] = ty;
                n_high += 1;
            }
            match ty {
                EXT_SERVER_NAME => hello.sni = server_name(b, data)?,
                EXT_ALPN => hello.alpn = Some(alpn(b, data)?),
                EXT_SUPPORTED_VERSIONS => hello.versions = Some(versions(b, data)?),
                EXT_ECH => hello.ech = true,
                _ => {}
            }
        }
        Ok(hello)
    }

    /// The host name from server_name, as sent (not lower-cased). With ECH, the outer name.
    pub fn sni(&self) -> Option<&str> {
        // Validated as ASCII at parse time.
        self.sni.clone().and_then(|r| std::str::from_utf8(&self.body[r]).ok())
    }

    /// ALPN protocols offered, in the client's order.
    pub fn alpn(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let list = self.alpn.clone().map(|r| &self.body[r]).unwrap_or_default();
        Entries { rest: list }
    }

    /// The hello's `legacy_version` field (0x0303 for TLS 1.2 and 1.3 clients).
    pub fn legacy_version(&self) -> u16 {
        self.legacy_version
    }

    /// The version in the first record's header.
    pub fn record_version(&self) -> u16 {
        self.record_version
    }

    /// Versions from supported_versions (empty if the extension is absent: a TLS ≤ 1.2 client).
    pub fn supported_versions(&self) -> impl Iterator<Item = u16> + '_ {
        let list = self.versions.clone().map(|r| &self.body[r]).unwrap_or_default();
        list.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]]))
    }

    /// Whether an encrypted_client_hello extension was offered.
    pub fn ech_offered(&self) -> bool {
        self.ech
    }

    #[cfg(test)]
    pub(super) fn body_for_tests(&self) -> &Cow<'a, [u8]> {
        &self.body
    }

    /// Bytes of the buffer covering every record that carries the hello.
    pub fn records_len(&self) -> usize {
        self.records_len
    }
}

/// Iterates u8-length-prefixed entries of a list already validated by [`alpn`].
struct Entries<'b> {
    rest: &'b [u8],
}

impl<'b> Iterator for Entries<'b> {
    type Item = &'b [u8];

    fn next(&mut self) -> Option<&'b [u8]> {
        let (&n, tail) = self.rest.split_first()?;
        let n = usize::from(n).min(tail.len());
        let (entry, rest) = tail.split_at(n);
        self.rest = rest;
        Some(entry)
    }
}

/// server_name: a list of (type, name); we take the host_name entry (type 0). A list without
/// one means no SNI; two host names is malformed (RFC 6066 §3).
fn server_name(b: &[u8], data: Range<usize>) -> Result<Option<Range<usize>>, HelloError> {
    if data.is_empty() {
        // Servers send it empty; a client may not, but it carries no name either way.
        return Ok(None);
    }
    let mut r = Reader { bytes: &b[..data.end], pos: data.start };
    let list = r.vec16("server_name list")?;
    if !r.done() {
        return Err(HelloError::Malformed("server_name length"));
    }
    let mut l = Reader { bytes: &b[..list.end], pos: list.start };
    let mut host = None;
    while !l.done() {
        let kind = l.u8("server_name type")?;
        let name = l.vec16("server_name entry")?;
        if kind == 0 {
            if host.is_some() {
                return Err(HelloError::Malformed("two host names"));
            }
            let bytes = &b[name.clone()];
            let valid = !bytes.is_empty()
                && bytes.len() <= 255
                && bytes.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
            if !valid {
                return Err(HelloError::Malformed("host name"));
            }
            host = Some(name);
        }
    }
    Ok(host)
}

/// ALPN: a non-empty list of non-empty protocol names (RFC 7301 §3.1).
fn alpn(b: &[u8], data: Range<usize>) -> Result<Range<usize>, HelloError> {
    let mut r = Reader { bytes: &b[..data.end], pos: data.start };
    let list = r.vec16("alpn list")?;
    if !r.done() || list.is_empty() {
        return Err(HelloError::Malformed("alpn length"));
    }
    let mut l = Reader { bytes: &b[..list.end], pos: list.start };
    while !l.done() {
        if l.vec8("alpn entry")?.is_empty() {
            return Err(HelloError::Malformed("empty alpn protocol"));
        }
    }
    Ok(list)
}

/// supported_versions in a ClientHello: a u8-length list of u16 versions.
fn versions(b: &[u8], data: Range<usize>) -> Result<Range<usize>, HelloError> {
    let mut r = Reader { bytes: &b[..data.end], pos: data.start };
    let list = r.vec8("supported_versions")?;
    if !r.done() || list.is_empty() || list.len() % 2 != 0 {
        return Err(HelloError::Malformed("supported_versions length"));
    }
    Ok(list)
}
