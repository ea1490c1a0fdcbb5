//! A client's response from a stored one: `Age` set, the client's own conditional request
//! answered (304), `HEAD` answered from a stored `GET`, and one byte range of a stored full
//! object served as a 206 (several ranges, or an `If-Range` that does not match, get the
//! whole object, as RFC 9110 allows).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{
    HeaderValue, AGE, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, LAST_MODIFIED,
    RANGE, TRANSFER_ENCODING,
};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use super::store::Entry;
use crate::origin::body::OriginBody;

/// The response for `head` from `entry` at `now`.
pub(crate) fn response(entry: &Arc<Entry>, head: &Request<()>, now: SystemTime) -> Response<OriginBody> {
    let mut headers = entry.headers.clone();
    headers.insert(AGE, HeaderValue::from(entry.policy.age(now).as_secs()));
    let mut status = entry.status;
    let mut range = 0..entry.size;
    let req = head.headers();
    let ok = entry.status == StatusCode::OK;
    if ok && not_modified(&entry.headers, head) {
        status = StatusCode::NOT_MODIFIED;
        range = 0..0;
        headers.remove(CONTENT_LENGTH);
    } else if ok && head.method() == Method::GET && req.contains_key(RANGE) && if_range_holds(entry, head) {
        match byte_range(req.get(RANGE).and_then(|v| v.to_str().ok()).unwrap_or(""), entry.size) {
            Some(Ok(r)) => {
                let text = format!("bytes {}-{}/{}", r.start, r.end - 1, entry.size);
                headers.insert(CONTENT_RANGE, HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("")));
                status = StatusCode::PARTIAL_CONTENT;
                range = r;
            }
            Some(Err(())) => {
                let text = format!("bytes */{}", entry.size);
                headers.insert(CONTENT_RANGE, HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("")));
                status = StatusCode::RANGE_NOT_SATISFIABLE;
                range = 0..0;
            }
            None => {}
        }
    }
    if status != StatusCode::NOT_MODIFIED {
        headers.remove(TRANSFER_ENCODING);
        headers.insert(CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
    }
    if head.method() == Method::HEAD {
        range = 0..0;
    }
    let trailers = status == entry.status && head.method() != Method::HEAD;
    let body = Stored { entry: entry.clone(), chunk: 0, at: 0, range, trailers };
    let mut response = Response::new(OriginBody::new(body, Box::new(())));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// The client's `If-None-Match` (weak comparison) or, without one, `If-Modified-Since`
/// holds against a response with `headers` (RFC 9110 §13.1).
pub(crate) fn not_modified(headers: &http::HeaderMap, head: &Request<()>) -> bool {
    if !matches!(*head.method(), Method::GET | Method::HEAD) {
        return false;
    }
    let req = head.headers();
    if let Some(inm) = req.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        let Some(etag) = headers.get(ETAG).and_then(|v| v.to_str().ok()) else { return false };
        let weak = |t: &str| t.trim().trim_start_matches("W/").to_string();
        return inm.split(',').any(|t| t.trim() == "*" || weak(t) == weak(etag));
    }
    let since = req.get(IF_MODIFIED_SINCE).and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok());
    // Without Last-Modified, the response's Date is as late as it can have changed.
    let modified = headers
        .get(LAST_MODIFIED)
        .or_else(|| headers.get(http::header::DATE))
        .and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok());
    matches!((since, modified), (Some(s), Some(m)) if m <= s)
}

/// `If-Range` absent, or naming the stored response (a strong ETag or its exact date).
fn if_range_holds(entry: &Entry, head: &Request<()>) -> bool {
    let Some(cond) = head.headers().get(IF_RANGE).and_then(|v| v.to_str().ok()) else { return true };
    if cond.starts_with('"') {
        return entry.headers.get(ETAG).and_then(|v| v.to_str().ok()) == Some(cond);
    }
    entry.headers.get(LAST_MODIFIED).and_then(|v| v.to_str().ok()) == Some(cond)
}

/// One `bytes=` range of an object of `len` bytes: `None` to serve it whole (not a single
/// byte range we read), `Err` when unsatisfiable (416).
fn byte_range(spec: &str, len: u64) -> Option<Result<std::ops::Range<u64>, ()>> {
    let spec = spec.trim().strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    let range = if first.is_empty() {
        let n: u64 = last.parse().ok()?;
        if n == 0 {
            return Some(Err(()));
        }
        len.saturating_sub(n)..len
    } else {
        let start: u64 = first.parse().ok()?;
        let end = if last.is_empty() { u64::MAX } else { last.parse::<u64>().ok()?.saturating_add(1) };
        if end <= start {
            return None;
        }
        if start >= len {
            return Some(Err(()));
        }
        start..end.min(len)
    };
    Some(Ok(range))
}

/// A stored body, or a range of it, as frames of the stored chunks (shared, not copied).
struct Stored {
    entry: Arc<Entry>,
    chunk: usize,
    /// Body offset of `chunk`'s first byte.
    at: u64,
    range: std::ops::Range<u64>,
    trailers: bool,
}

impl Body for Stored {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        while this.range.start < this.range.end {
            let Some(chunk) = this.entry.body.get(this.chunk) else { break };
            let (from, to) = (this.at, this.at + chunk.len() as u64);
            this.chunk += 1;
            this.at = to;
            if to <= this.range.start {
                continue;
            }
            let lo = (this.range.start - from) as usize;
            let hi = (this.range.end.min(to) - from) as usize;
            this.range.start = this.range.end.min(to);
            return Poll::Ready(Some(Ok(Frame::data(chunk.slice(lo..hi)))));
        }
        this.range = 0..0;
        if std::mem::take(&mut this.trailers) {
            if let Some(t) = &this.entry.trailers {
                return Poll::Ready(Some(Ok(Frame::trailers(t.clone()))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.range.is_empty() && !(self.trailers && self.entry.trailers.is_some())
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.range.end - self.range.start)
    }
}

/// The client's answer to a fetch the cache made without the client's validators (so that a
/// whole, storable response came back): a 304 when its `If-None-Match` / `If-Modified-Since`
/// holds against the new response, the body then left to the store.
pub(crate) fn conditional(response: Response<OriginBody>, head: &Request<()>) -> Response<OriginBody> {
    if response.status() != StatusCode::OK || !not_modified(response.headers(), head) {
        return response;
    }
    let (mut parts, _body) = response.into_parts();
    parts.status = StatusCode::NOT_MODIFIED;
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.remove(TRANSFER_ENCODING);
    Response::from_parts(parts, OriginBody::new(http_body_util::Empty::new(), Box::new(())))
}

#[cfg(test)]
mod tests {
    use super::byte_range;

    #[test]
    fn byte_ranges() {
        assert_eq!(byte_range("bytes=0-9", 100), Some(Ok(0..10)));
        assert_eq!(byte_range("bytes=90-", 100), Some(Ok(90..100)));
        assert_eq!(byte_range("bytes=-10", 100), Some(Ok(90..100)));
        assert_eq!(byte_range("bytes=-500", 100), Some(Ok(0..100)));
        assert_eq!(byte_range("bytes=95-200", 100), Some(Ok(95..100)));
        assert_eq!(byte_range("bytes=100-", 100), Some(Err(())));
        assert_eq!(byte_range("bytes=0-1,5-6", 100), None);
        assert_eq!(byte_range("items=0-1", 100), None);
        assert_eq!(byte_range("bytes=5-1", 100), None);
    }
}
