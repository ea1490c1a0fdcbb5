//! PROXY protocol v1/v2 header from a load balancer in front of edgewarm.
//!
//! The header arrives before the ClientHello on the same stream. We parse it with the `ppp`
//! crate and use the source address it carries for logs; the bytes are consumed, not replayed
//! (the origin sees a plain TLS stream).

use std::net::SocketAddr;

use ppp::{v1, v2, HeaderResult, PartialResult};

/// Outcome of looking for a PROXY header at the start of `buf`.
#[derive(Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// A complete header of `len` bytes; `source` is the original client when it says one
    /// (`LOCAL` commands and `UNKNOWN` families carry none).
    Complete {
        len: usize,
        source: Option<SocketAddr>,
    },
    NeedMore,
    Invalid,
}

/// Longest legal header: v1 is at most 107 bytes; v2 is 16 bytes plus a 16-bit length.
pub const MAX_PROXY_HEADER: usize = 16 + u16::MAX as usize;

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8; 6] = b"PROXY ";
const V1_MAX: usize = 107;

/// The PROXY header edgewarm sends to an origin: `source` is the client, `destination` the
/// address it connected to. Mixed families are written as IPv6 (IPv4-mapped), which both
/// versions can carry.
pub fn encode(version: crate::config::ProxyVersion, source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let (source, destination) = match (source, destination) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => (source, destination),
        _ => (mapped(source), mapped(destination)),
    };
    match version {
        crate::config::ProxyVersion::V1 => v1::Addresses::from((source, destination)).to_string().into_bytes(),
        crate::config::ProxyVersion::V2 => {
            let addresses = v2::Addresses::from((source, destination));
            v2::Builder::with_addresses(v2::Version::Two | v2::Command::Proxy, v2::Protocol::Stream, addresses)
                .build()
                // Building into a Vec from a fixed-size address block cannot fail.
                .unwrap_or_default()
        }
    }
}

fn mapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        v6 => v6,
    }
}

pub fn parse(buf: &[u8]) -> ProxyHeader {
    // Frame the header ourselves before handing it to `ppp`: its v1 parser calls some
    // incomplete lines invalid (e.g. one cut right after the source port), and a read boundary
    // can fall anywhere.
    let framed = if buf.starts_with(V2_SIGNATURE) {
        match buf.get(14..16) {
            Some(len) => 16 + usize::from(u16::from_be_bytes([len[0], len[1]])),
            None => return ProxyHeader::NeedMore,
        }
    } else if buf.starts_with(V1_PREFIX) {
        match buf.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") {
            Some(i) => i + 2,
            None if buf.len() < V1_MAX => return ProxyHeader::NeedMore,
            None => return ProxyHeader::Invalid,
        }
    } else if V2_SIGNATURE.starts_with(buf) || V1_PREFIX.starts_with(buf) {
        return ProxyHeader::NeedMore;
    } else {
        return ProxyHeader::Invalid;
    };
    let Some(header) = buf.get(..framed) else {
        return ProxyHeader::NeedMore;
    };
    let result = HeaderResult::parse(header);
    if result.is_incomplete() {
        return ProxyHeader::Invalid;
    }
    match result {
        HeaderResult::V1(Ok(h)) => {
            let source = match h.addresses {
                v1::Addresses::Tcp4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
                v1::Addresses::Tcp6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
                v1::Addresses::Unknown => None,
            };
            ProxyHeader::Complete { len: h.header.len(), source }
        }
        HeaderResult::V2(Ok(h)) => {
            let source = match (h.command, h.addresses) {
                (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                _ => None,
            };
            ProxyHeader::Complete { len: h.len(), source }
        }
        _ => ProxyHeader::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_headers_parse_back() {
        use crate::config::ProxyVersion;
        let cases = [
            ("192.0.2.7:40000", "198.51.100.1:443", "192.0.2.7:40000"),
            ("[2001:db8::7]:40000", "[2001:db8::1]:443", "[2001:db8::7]:40000"),
            // Mixed families: the client as an IPv4-mapped IPv6 address.
            ("192.0.2.7:40000", "[2001:db8::1]:443", "[::ffff:192.0.2.7]:40000"),
        ];
        for version in [ProxyVersion::V1, ProxyVersion::V2] {
            for (src, dst, want) in cases {
                let h = encode(version, src.parse().unwrap(), dst.parse().unwrap());
                let parsed = parse(&h);
                assert_eq!(
                    parsed,
                    ProxyHeader::Complete { len: h.len(), source: Some(want.parse().unwrap()) },
                    "{version:?} {src}"
                );
            }
        }
    }

    #[test]
    fn v1_every_prefix_then_complete() {
        let h = b"PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n";
        for i in 1..h.len() {
            assert_eq!(parse(&h[..i]), ProxyHeader::NeedMore, "prefix {i}");
        }
        let mut with_hello = h.to_vec();
        with_hello.extend_from_slice(&[0x16, 3, 1]);
        assert_eq!(
            parse(&with_hello),
            ProxyHeader::Complete { len: h.len(), source: Some("192.0.2.7:40000".parse().unwrap()) }
        );
    }

    #[test]
    fn v2_ipv6() {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x21\x00\x24".to_vec();
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        h.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb]);
        for i in 1..h.len() {
            assert_eq!(parse(&h[..i]), ProxyHeader::NeedMore, "prefix {i}");
        }
        assert_eq!(
            parse(&h),
            ProxyHeader::Complete { len: h.len(), source: Some("[2001:db8::9]:40000".parse().unwrap()) }
        );
    }

    #[test]
    fn a_tls_hello_is_not_a_proxy_header() {
        assert_eq!(parse(&[0x16, 3, 1, 0, 200, 1]), ProxyHeader::Invalid);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), ProxyHeader::Invalid);
    }
}
