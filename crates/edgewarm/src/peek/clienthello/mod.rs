//! The ClientHello parser: a pure function from the bytes read so far to one of three outcomes.
//!
//! - [`Parsed::Complete`]: the whole ClientHello is in the buffer; its SNI, ALPN offer and
//!   versions are available without copying (when it came in one TLS record, which is almost
//!   always: a hello split over several records is reassembled once into an owned buffer).
//! - [`Parsed::NeedMore`]: everything so far is a valid prefix; read more, call again.
//! - [`HelloError`]: not a ClientHello we accept, decided as early as the bytes allow — the
//!   first byte already tells TLS from plain HTTP, and the 4-byte handshake header already
//!   tells whether the hello would exceed [`MAX_HELLO_LEN`].
//!
//! No I/O, no panics, no unbounded loops: every step consumes input. The caller bounds time.
//! [`record`] walks the TLS record layer and reassembles the handshake message; [`hello`]
//! reads the ClientHello body and its extensions.

mod hello;
mod record;

pub use hello::ClientHello;

/// Largest ClientHello handshake message accepted (4-byte header included), across records.
/// Post-quantum key shares make real hellos 1.2 to 2 KB; 64 KiB leaves room for anything
/// legitimate while bounding what one connection can make us buffer.
pub const MAX_HELLO_LEN: usize = 64 * 1024;

/// Outcome of parsing the bytes received so far.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// The whole ClientHello is in the buffer.
    Complete(ClientHello<'a>),
    /// Valid so far; read more bytes and call again with the longer buffer (from the start).
    NeedMore,
}

/// Why the bytes are not an acceptable ClientHello. [`HelloError::reason`] is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum HelloError {
    /// The first bytes are not a TLS handshake record.
    #[error("not TLS")]
    NotTls,
    /// The first byte is an ASCII capital: a plain HTTP request (`GET /`, `POST`, `PRI *` …).
    #[error("plain HTTP on the TLS port")]
    PlainHttp,
    /// An SSL 2.0-style hello (high bit set in the first byte): obsolete and refused.
    #[error("SSL 2.0 ClientHello")]
    SslV2,
    /// A handshake message other than ClientHello came first.
    #[error("first handshake message is not a ClientHello")]
    NotClientHello,
    /// The hello announces more than [`MAX_HELLO_LEN`] bytes.
    #[error("ClientHello larger than {MAX_HELLO_LEN} bytes")]
    TooLarge,
    /// A structural error: a length overruns its container, a record is empty or not a
    /// handshake record, an extension repeats, a host name is not a host name.
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
}

impl HelloError {
    /// Short snake_case label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotTls => "not_tls",
            Self::PlainHttp => "http",
            Self::SslV2 => "sslv2",
            Self::NotClientHello => "not_client_hello",
            Self::TooLarge => "too_large",
            Self::Malformed(_) => "malformed",
        }
    }
}

/// Parse the bytes received so far (from the first byte of the connection).
pub fn parse(buf: &[u8]) -> Result<Parsed<'_>, HelloError> {
    let Some(message) = record::reassemble(buf)? else {
        return Ok(Parsed::NeedMore);
    };
    // A complete message implies at least one whole record header.
    let record_version = buf.get(1..3).map_or(0, |v| u16::from_be_bytes([v[0], v[1]]));
    ClientHello::parse(message.body, record_version, message.records_len).map(Parsed::Complete)
}

/// The same handshake bytes re-cut into TLS records of at most `size` bytes each (records
/// before the first are merged first). For tests, benchmarks and the fuzz corpus: real clients
/// almost never fragment a hello, but a proxy must accept it when they do.
pub fn split_into_records(hello: &[u8], size: usize) -> Vec<u8> {
    let mut body = Vec::new();
    let mut off = 0;
    while let Some(header) = hello.get(off..off + 5) {
        let n = usize::from(u16::from_be_bytes([header[3], header[4]]));
        body.extend_from_slice(hello.get(off + 5..off + 5 + n).unwrap_or_default());
        off += 5 + n;
    }
    let version = hello.get(1..3).unwrap_or(&[3, 1]);
    let mut out = Vec::new();
    for chunk in body.chunks(size.max(1)) {
        out.extend_from_slice(&[0x16, version[0], version[1]]);
        out.extend_from_slice(&u16::try_from(chunk.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests;
