//! gRPC clients get gRPC errors. A gRPC client reads an HTTP status other than 200 as a
//! transport failure with a synthesized message, and a `text/plain` body as garbage; so when a
//! request is gRPC (`content-type: application/grpc`, `application/grpc+proto`,
//! `application/grpc;…`), every answer the edge gives itself is turned into gRPC's
//! Trailers-Only form: `:status 200`, `content-type: application/grpc`, `grpc-status` and
//! `grpc-message` in the head, and no body, so the head is the stream's end (END_STREAM on the
//! HEADERS frame in HTTP/2; HEADERS then FIN in HTTP/3).
//!
//! The code follows the HTTP status the edge meant (table in docs/config.md): gRPC's "HTTP to
//! gRPC status code mapping", except where the status says more than that table does: an
//! `origin_response` timeout (504) is DEADLINE_EXCEEDED, and a refusal for size or rate (413,
//! 429, 431) RESOURCE_EXHAUSTED. The access log and the metrics keep the status the edge meant.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::response::Parts;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Empty};

use super::Body;
use crate::origin::body::OriginBody;

const GRPC: &[u8] = b"application/grpc";

/// The gRPC status codes the edge answers with (gRPC's `doc/statuscodes.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Unknown = 2,
    DeadlineExceeded = 4,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// The client's request is gRPC: its `content-type` is `application/grpc`, or that followed by
/// `+` (a message format) or `;` (parameters). Media types are case-insensitive.
pub(crate) fn requested(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else { return false };
    let value = value.as_bytes();
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// The gRPC code for an answer the edge meant as `status`.
pub(crate) fn code(status: StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        // CONNECT refused (405) is a method this edge does not implement.
        404 | 405 => Code::Unimplemented,
        413 | 429 | 431 => Code::ResourceExhausted,
        // 421: the client should try again on a connection of its own for that name, which a
        // gRPC client does for UNAVAILABLE.
        421 | 502 | 503 => Code::Unavailable,
        504 => Code::DeadlineExceeded,
        _ => Code::Unknown,
    }
}

/// `message` as `grpc-message` carries it: percent-encoded UTF-8, every byte outside printable
/// ASCII and `%` itself as `%XX` (gRPC's PROTOCOL-HTTP2.md).
fn percent_encoded(message: &str) -> HeaderValue {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // Printable ASCII only: always a valid header value.
    HeaderValue::try_from(out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Rewrite an edge answer's head as Trailers-Only (its other fields, `retry-after` and the
/// route's header policy among them, stay). An informational head (an upgrade's `101`) is not
/// an answer to a gRPC call and is left alone; it says so by returning false. The body must
/// then be dropped for an empty one.
fn head(parts: &mut Parts, message: &str) -> bool {
    if parts.status.is_informational() {
        return false;
    }
    let code = code(parts.status);
    parts.status = StatusCode::OK;
    let h = &mut parts.headers;
    h.remove(CONTENT_LENGTH);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(code as u16));
    h.insert("grpc-message", percent_encoded(message));
    true
}

/// An answer of the edge's own (an error from [`super::respond`], a rule's answer), as a gRPC
/// client gets it when `grpc`.
pub(crate) fn answer(grpc: bool, response: Response<Body>, message: &str) -> Response<Body> {
    if !grpc {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    if !head(&mut parts, message) {
        return Response::from_parts(parts, body);
    }
    Response::from_parts(parts, Empty::<Bytes>::new().map_err(|never| match never {}).boxed())
}

/// A layer's own answer in the seam ([`crate::origin::seam::EdgeAnswer`]: a route's 403 or
/// 429), as a gRPC client gets it.
pub(crate) fn local(parts: &mut Parts, body: OriginBody, message: &str) -> OriginBody {
    if !head(parts, message) {
        return body;
    }
    OriginBody::new(Empty::<Bytes>::new(), Box::new(()))
}

/// An HTTP/3 request head the edge would not take whole (over the size limit: 431) is gRPC: its
/// field section (already read, within the frame limit) decoded again for `content-type` alone.
pub(crate) fn in_qpack_block(block: &Bytes) -> bool {
    let mut headers = HeaderMap::new();
    let found = edgewarm_h3::qpack::decode(block, |name, value| -> Result<(), edgewarm_h3::qpack::Invalid> {
        if name.as_bytes() == b"content-type" {
            if let Ok(value) = value.into_value() {
                headers.insert(CONTENT_TYPE, value);
            }
        }
        Ok(())
    });
    found.is_ok() && requested(&headers)
}

/// What a gRPC client is told for a status with no text of the edge's own.
pub(crate) fn reason(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("edge answer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_are_told_from_others() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            requested(&h)
        };
        for yes in ["application/grpc", "application/grpc+proto", "application/grpc;charset=utf-8", "Application/GRPC"]
        {
            assert!(with(yes), "{yes}");
        }
        for no in ["application/grpc-web", "application/grpcx", "application/json", "text/plain"] {
            assert!(!with(no), "{no}");
        }
        assert!(!requested(&HeaderMap::new()));
    }

    #[test]
    fn statuses_map_to_the_issue_s_and_grpc_s_codes() {
        let cases = [
            (400, Code::Internal),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::Unimplemented),
            (405, Code::Unimplemented),
            (413, Code::ResourceExhausted),
            (421, Code::Unavailable),
            (429, Code::ResourceExhausted),
            (431, Code::ResourceExhausted),
            (502, Code::Unavailable),
            (503, Code::Unavailable),
            (504, Code::DeadlineExceeded),
            (500, Code::Unknown),
            (200, Code::Unknown),
        ];
        for (status, want) in cases {
            assert_eq!(code(StatusCode::from_u16(status).unwrap()), want, "{status}");
        }
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encoded("origin unavailable"), "origin unavailable");
        assert_eq!(percent_encoded("100% café\n"), "100%25 caf%C3%A9%0A");
    }

    #[test]
    fn an_answer_becomes_trailers_only_and_keeps_its_other_fields() {
        let mut response = super::super::respond::plain(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
        response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(3));
        response.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(18));
        let r = answer(true, response, "too many requests");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/grpc");
        assert_eq!(r.headers()["grpc-status"], "8");
        assert_eq!(r.headers()["grpc-message"], "too many requests");
        assert_eq!(r.headers()[http::header::RETRY_AFTER], "3");
        assert!(!r.headers().contains_key(CONTENT_LENGTH));
        assert!(http_body::Body::is_end_stream(r.body()), "the head ends the stream");

        let plain = answer(false, super::super::respond::plain(StatusCode::BAD_GATEWAY, "x\n"), "x");
        assert_eq!(plain.status(), StatusCode::BAD_GATEWAY, "not gRPC: as it was");
        let mut switched = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
        *switched.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        assert_eq!(answer(true, switched, "x").status(), StatusCode::SWITCHING_PROTOCOLS);
    }
}
