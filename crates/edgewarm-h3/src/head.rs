//! A request's head and trailers from their field sections, held to HTTP/3's rules for a
//! well-formed message (RFC 9114 §4.1.2, §4.2, §4.3.1). A malformed request is refused before
//! the request service sees it, as h2 refuses one on HTTP/2.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Uri, Version};

use crate::qpack::{self, Text};
use crate::MAX_HEADER_BYTES;

/// Why a field section is not a request head (or trailers).
#[derive(Debug)]
pub enum Refused {
    /// QPACK_DECOMPRESSION_FAILED: a connection error.
    Qpack(qpack::Invalid),
    /// A malformed message (H3_MESSAGE_ERROR on the stream).
    Malformed(&'static str),
    /// Larger than the edge takes (431).
    TooLarge,
}

impl From<qpack::Invalid> for Refused {
    fn from(e: qpack::Invalid) -> Self {
        Self::Qpack(e)
    }
}

/// Each field's share of a section's size (RFC 9114 §4.2.2, as HTTP/2's list size).
const FIELD_OVERHEAD: usize = 32;

/// A regular field, checked: lowercase (§4.2), and none of HTTP/1.1's connection-specific
/// fields, which HTTP/3 has no use for (§4.2: "connection", and the fields it lists).
fn regular(headers: &mut HeaderMap, name: &Text, value: Text) -> Result<(), Refused> {
    let raw = name.as_bytes();
    if raw.iter().any(u8::is_ascii_uppercase) {
        return Err(Refused::Malformed("an uppercase field name"));
    }
    let name = HeaderName::from_bytes(raw).map_err(|_| Refused::Malformed("an invalid field name"))?;
    let value = value.into_value().map_err(|_| Refused::Malformed("an invalid field value"))?;
    match name.as_str() {
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" => {
            return Err(Refused::Malformed("a connection-specific field"));
        }
        "te" if value != "trailers" => return Err(Refused::Malformed("TE other than \"trailers\"")),
        _ => {}
    }
    headers.append(name, value);
    Ok(())
}

/// Count a field against the limit.
fn count(size: &mut usize, name: &Text, value: &Text) -> Result<(), Refused> {
    *size += name.as_bytes().len() + value.as_bytes().len() + FIELD_OVERHEAD;
    if *size > MAX_HEADER_BYTES {
        return Err(Refused::TooLarge);
    }
    Ok(())
}

/// A request head from a HEADERS frame's field section.
pub fn request(block: &Bytes) -> Result<Request<()>, Refused> {
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut headers = HeaderMap::new();
    let mut size = 0;
    qpack::decode(block, |name, value| {
        count(&mut size, &name, &value)?;
        let Some(pseudo) = name.as_bytes().strip_prefix(b":") else {
            return regular(&mut headers, &name, value);
        };
        // Pseudo-header fields come first (§4.3), each at most once.
        if !headers.is_empty() {
            return Err(Refused::Malformed("a pseudo-header field after a regular one"));
        }
        let slot = match pseudo {
            b"method" => &mut method,
            b"scheme" => &mut scheme,
            b"authority" => &mut authority,
            b"path" => &mut path,
            // :protocol only with extended CONNECT, which the edge does not announce.
            _ => return Err(Refused::Malformed("an unknown pseudo-header field")),
        };
        if slot.replace(value).is_some() {
            return Err(Refused::Malformed("a pseudo-header field twice"));
        }
        Ok(())
    })?;
    let method = method.ok_or(Refused::Malformed("no :method"))?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| Refused::Malformed("an invalid :method"))?;
    let mut uri = Uri::builder();
    if method == Method::CONNECT {
        // §4.4: :authority only.
        if scheme.is_some() || path.is_some() {
            return Err(Refused::Malformed(":scheme or :path in a CONNECT request"));
        }
    } else {
        let scheme = scheme.ok_or(Refused::Malformed("no :scheme"))?;
        let path = path.ok_or(Refused::Malformed("no :path"))?;
        if path.as_bytes().is_empty() {
            return Err(Refused::Malformed("an empty :path"));
        }
        let scheme = Scheme::try_from(scheme.as_bytes()).map_err(|_| Refused::Malformed("an invalid :scheme"))?;
        let path =
            PathAndQuery::from_maybe_shared(path.into_bytes()).map_err(|_| Refused::Malformed("an invalid :path"))?;
        uri = uri.scheme(scheme).path_and_query(path);
    }
    // §4.3.1: :authority or Host, the same if both, never empty.
    let host = headers.get(http::header::HOST);
    let authority = match (authority, host) {
        (Some(a), Some(h)) if a.as_bytes() != h.as_bytes() => {
            return Err(Refused::Malformed(":authority and Host differ"));
        }
        (Some(a), _) => Some(a),
        (None, Some(h)) => Some(Text::Own(Bytes::copy_from_slice(h.as_bytes()))),
        (None, None) => None,
    };
    // Never `from_static`, which panics on what it refuses: the static table's :authority is
    // empty, and an empty authority is malformed.
    let authority = authority.ok_or(Refused::Malformed("no :authority or Host"))?;
    let authority = Authority::from_maybe_shared(authority.into_bytes())
        .map_err(|_| Refused::Malformed("an invalid or empty authority"))?;
    uri = uri.authority(authority);
    let uri = uri.build().map_err(|_| Refused::Malformed("an invalid request target"))?;
    // §4.1.2: a Content-Length the body does not match is malformed, and so is one that is not
    // a number, or two that differ: the body is held to it ([`super::body`]), and an HTTP/1.1
    // origin frames the request by it.
    let mut lengths = headers.get_all(http::header::CONTENT_LENGTH).iter();
    if let Some(first) = lengths.next() {
        let digits = |v: &http::HeaderValue| !v.is_empty() && v.as_bytes().iter().all(u8::is_ascii_digit);
        if !digits(first) || first.len() > 19 || lengths.any(|v| v != first) {
            return Err(Refused::Malformed("an invalid Content-Length"));
        }
    }
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_3;
    *req.headers_mut() = headers;
    Ok(req)
}

/// Trailers from a HEADERS frame after the body: regular fields only (§4.3).
pub fn trailers(block: &Bytes) -> Result<HeaderMap, Refused> {
    let mut headers = HeaderMap::new();
    let mut size = 0;
    qpack::decode(block, |name, value| {
        count(&mut size, &name, &value)?;
        if name.as_bytes().starts_with(b":") {
            return Err(Refused::Malformed("a pseudo-header field in trailers"));
        }
        regular(&mut headers, &name, value)
    })?;
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field section of literals with literal names, as plain strings.
    fn section(fields: &[(&str, &str)]) -> Bytes {
        let mut out = bytes::BytesMut::from(&[0u8, 0][..]);
        for (n, v) in fields {
            qpack::put_int(&mut out, 3, 0x20, n.len() as u64);
            out.extend_from_slice(n.as_bytes());
            qpack::put_int(&mut out, 7, 0, v.len() as u64);
            out.extend_from_slice(v.as_bytes());
        }
        out.freeze()
    }

    fn malformed(fields: &[(&str, &str)]) -> bool {
        matches!(request(&section(fields)), Err(Refused::Malformed(_)))
    }

    const GET: [(&str, &str); 4] =
        [(":method", "GET"), (":scheme", "https"), (":path", "/a?b"), (":authority", "x.test")];

    #[test]
    fn a_request_head_is_read() {
        let mut fields = GET.to_vec();
        fields.push(("accept", "*/*"));
        let req = request(&section(&fields)).unwrap();
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().to_string(), "https://x.test/a?b");
        assert_eq!(req.version(), Version::HTTP_3);
        assert_eq!(req.headers()["accept"], "*/*");
        // Host alone names the authority.
        let req =
            request(&section(&[(":method", "GET"), (":scheme", "https"), (":path", "/"), ("host", "h.test")])).unwrap();
        assert_eq!(req.uri().authority().unwrap(), "h.test");
    }

    #[test]
    fn malformed_heads_are_refused() {
        let with = |extra: (&'static str, &'static str)| {
            let mut f = GET.to_vec();
            f.push(extra);
            f
        };
        assert!(malformed(&GET[1..]));
        assert!(malformed(&GET[..3]));
        assert!(malformed(&with(("Accept", "x"))));
        assert!(malformed(&with(("upgrade", "h2c"))));
        assert!(malformed(&with(("te", "gzip"))));
        assert!(malformed(&with((":path", "/again"))));
        assert!(malformed(&with(("host", "other.test"))));
        assert!(malformed(&[("accept", "x"), (":method", "GET"), (":scheme", "https"), (":path", "/")]));
        assert!(malformed(&with((":proto", "x"))));
        assert!(!malformed(&with(("te", "trailers"))));
        assert!(malformed(&with(("content-length", "abc"))));
        assert!(malformed(&with(("content-length", ""))));
        let mut two = with(("content-length", "5"));
        two.push(("content-length", "500"));
        assert!(malformed(&two));
        two[5].1 = "5";
        assert!(!malformed(&two));
        // The static table's empty :authority (index 0).
        let block = Bytes::from_static(&[0x00, 0x00, 0xd1, 0xd7, 0xc1, 0xc0]);
        assert!(matches!(request(&block), Err(Refused::Malformed(_))));
    }

    #[test]
    fn oversized_heads_get_431() {
        let big = "v".repeat(70_000);
        let mut fields = GET.to_vec();
        fields.push(("x-a", &big));
        assert!(matches!(request(&section(&fields)), Err(Refused::TooLarge)));
        // Many small fields add up too: 32 bytes each beside their text.
        let mut fields = GET.to_vec();
        fields.extend(std::iter::repeat_n(("x-b", ""), 2100));
        assert!(matches!(request(&section(&fields)), Err(Refused::TooLarge)));
    }

    #[test]
    fn trailers_take_no_pseudo_fields() {
        assert_eq!(trailers(&section(&[("x-sum", "1")])).unwrap()["x-sum"], "1");
        assert!(matches!(trailers(&section(&[(":path", "/")])), Err(Refused::Malformed(_))));
    }
}
