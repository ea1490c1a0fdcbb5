//! What the cache did with a request, as RFC 9211's `Cache-Status` (appended after any
//! cache nearer the origin, a second tier's included), as the access log's `cache=` and as the
//! `cache_requests` metric's `result` label.

use http::header::{HeaderMap, HeaderName, HeaderValue};

const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// One `Cache-Status` member.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    /// Why the request went forward (`fwd=`); none for a hit.
    pub(crate) fwd: Option<&'static str>,
    /// The origin's status where it was asked.
    pub(crate) fwd_status: Option<u16>,
    /// Seconds of freshness left (negative: stale by that much), where something was served
    /// from storage or stored.
    pub(crate) ttl: Option<i64>,
    pub(crate) stored: bool,
    pub(crate) collapsed: bool,
    pub(crate) detail: Option<&'static str>,
}

impl Status {
    pub(crate) fn value(&self) -> HeaderValue {
        let mut v = String::from("edgewarm");
        match self.fwd {
            Some(fwd) => v.push_str(&format!("; fwd={fwd}")),
            None => v.push_str("; hit"),
        }
        if let Some(s) = self.fwd_status {
            v.push_str(&format!("; fwd-status={s}"));
        }
        if let Some(ttl) = self.ttl {
            v.push_str(&format!("; ttl={ttl}"));
        }
        if self.stored {
            v.push_str("; stored");
        }
        if self.collapsed {
            v.push_str("; collapsed");
        }
        if let Some(d) = self.detail {
            v.push_str(&format!("; detail={d}"));
        }
        // Only tokens and integers above: always a valid header value.
        HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("edgewarm"))
    }

    /// Add this member after any the response carries from caches nearer the origin.
    pub(crate) fn append_to(&self, headers: &mut HeaderMap) {
        headers.append(CACHE_STATUS, self.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_follow_rfc_9211() {
        let hit = Status { ttl: Some(30), ..Status::default() };
        assert_eq!(hit.value(), "edgewarm; hit; ttl=30");
        let miss = Status { fwd: Some("uri-miss"), fwd_status: Some(200), stored: true, ..Status::default() };
        assert_eq!(miss.value(), "edgewarm; fwd=uri-miss; fwd-status=200; stored");
        let mut headers = HeaderMap::new();
        headers.insert(CACHE_STATUS, HeaderValue::from_static("shield; hit"));
        Status { fwd: Some("uri-miss"), detail: Some("set-cookie"), ..Status::default() }.append_to(&mut headers);
        let all: Vec<_> = headers.get_all(CACHE_STATUS).iter().collect();
        assert_eq!(all, ["shield; hit", "edgewarm; fwd=uri-miss; detail=set-cookie"]);
    }
}
