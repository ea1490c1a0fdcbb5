//! Reading the ClientHello off a fresh connection, without decrypting anything.
//!
//! [`read_hello`] reads until [`clienthello::parse`] says the hello is complete, keeping every
//! byte it read so the tunnel can replay them to the origin unchanged (the origin must see the
//! exact hello: its transcript hash covers it). The first read usually holds the whole hello,
//! so the common case is one `read(2)` and one parse of a buffer that is reused for the relay.
//! Limits: the caller bounds the time (`timeouts.client_hello`); this bounds the bytes.

pub mod clienthello;
pub mod proxy;

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt};

use clienthello::{HelloError, Parsed, MAX_HELLO_LEN};
use proxy::ProxyHeader;

/// What the proxy needs from a ClientHello, owned so the buffer can move on to the relay.
#[derive(Debug, Default)]
pub struct Hello {
    /// Everything read from the client after any PROXY header: the hello records and whatever
    /// followed them in the same reads (early data). Replayed to the origin byte for byte.
    pub bytes: Vec<u8>,
    pub sni: Option<String>,
    /// ALPN protocols offered, in order (lossy UTF-8, for logs).
    pub alpn: Vec<String>,
    /// Highest version offered: `supported_versions` if present, else the legacy field.
    pub max_version: u16,
    pub ech_offered: bool,
    /// The original client, from a PROXY header.
    pub proxied_source: Option<SocketAddr>,
}

/// Why no usable hello could be read.
#[derive(Debug, thiserror::Error)]
pub enum PeekError {
    #[error("invalid ClientHello: {0}")]
    Hello(#[from] HelloError),
    #[error("invalid PROXY protocol header")]
    ProxyHeader,
    #[error("connection closed before the ClientHello was complete")]
    Truncated,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Bytes we hold before giving up. The hello itself is capped at [`MAX_HELLO_LEN`] by the
/// parser; this also bounds record-header overhead of a hello cut into tiny records.
const MAX_BUFFERED: usize = 2 * MAX_HELLO_LEN;

/// Read an optional PROXY header and then a complete ClientHello.
///
/// Boxed: the hello is handed down through every layer of the connection's future, and each
/// layer (and each `Result` it passes through) would otherwise keep a 112-byte slot for it for
/// as long as the connection lives.
pub async fn read_hello<S: AsyncRead + Unpin>(stream: &mut S, proxy_protocol: bool) -> Result<Box<Hello>, PeekError> {
    let mut buf = Vec::with_capacity(4096);
    let mut proxied_source = None;
    if proxy_protocol {
        loop {
            fill(stream, &mut buf, proxy::MAX_PROXY_HEADER).await?;
            match proxy::parse(&buf) {
                ProxyHeader::Complete { len, source } => {
                    proxied_source = source;
                    buf.drain(..len);
                    break;
                }
                ProxyHeader::NeedMore => {}
                ProxyHeader::Invalid => return Err(PeekError::ProxyHeader),
            }
        }
    }
    loop {
        // Parse before reading: bytes after the PROXY header may already hold the hello.
        if !buf.is_empty() {
            if let Parsed::Complete(h) = clienthello::parse(&buf)? {
                let max_version = h.supported_versions().max().unwrap_or(h.legacy_version());
                let (sni, alpn, ech_offered) = (
                    h.sni().map(str::to_owned),
                    h.alpn().map(|p| String::from_utf8_lossy(p).into_owned()).collect(),
                    h.ech_offered(),
                );
                // Exactly the bytes read: the hello waits with the connection for the origin's
                // connect (a second or more when SYNs are dropped), and a 600-byte hello in a
                // 4 KiB read buffer would pin the rest meanwhile (measured: ~2 KiB of resident
                // memory per connection after a burst of slow connects).
                buf.shrink_to_fit();
                return Ok(Box::new(Hello { sni, alpn, max_version, ech_offered, proxied_source, bytes: buf }));
            }
        }
        fill(stream, &mut buf, MAX_BUFFERED).await?;
    }
}

/// One read, appended to `buf`. EOF is [`PeekError::Truncated`]; reaching `limit` without a
/// complete message is `too_large`.
async fn fill<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>, limit: usize) -> Result<(), PeekError> {
    if buf.len() >= limit {
        return Err(HelloError::TooLarge.into());
    }
    if buf.capacity() == buf.len() {
        buf.reserve(buf.len().clamp(4096, limit - buf.len()));
    }
    let n = stream.read_buf(buf).await?;
    if n == 0 {
        return Err(PeekError::Truncated);
    }
    Ok(())
}

/// A TLS alert record, sent in plaintext before any handshake: what a TLS server would say.
pub fn alert(description: u8) -> [u8; 7] {
    // level 2 = fatal; record version 0x0303 is what TLS 1.2 and 1.3 peers expect.
    [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description]
}

pub const ALERT_HANDSHAKE_FAILURE: u8 = 40;
pub const ALERT_ACCESS_DENIED: u8 = 49;
pub const ALERT_DECODE_ERROR: u8 = 50;
pub const ALERT_INTERNAL_ERROR: u8 = 80;
pub const ALERT_UNRECOGNIZED_NAME: u8 = 112;

/// Answer to plain HTTP on the TLS port, like nginx's "plain HTTP request was sent to HTTPS
/// port": a person with a browser learns what went wrong instead of seeing a reset.
pub const PLAIN_HTTP_RESPONSE: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 44\r\nConnection: close\r\n\r\nThis port speaks TLS: connect with https://\n";
