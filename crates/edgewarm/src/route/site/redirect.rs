//! A rule answered with a redirect. Its target is the operator's (`to`), never the request's:
//! only what follows a matched prefix (a normalized path, which cannot start with `//`) and
//! the query are carried over, so no request can make it point at another host.

use bytes::BytesMut;
use http::{HeaderValue, StatusCode};

use super::{join, Rule};
use crate::config::RedirectConfig;

pub struct Redirect {
    to: String,
    /// `to` carries its own query: the request's is dropped.
    own_query: bool,
    status: StatusCode,
}

impl Redirect {
    pub(super) fn new(r: &RedirectConfig) -> Self {
        // Checked at load: one of 301, 302, 303, 307, 308.
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::PERMANENT_REDIRECT);
        Self { to: r.to.clone(), own_query: r.to.contains('?'), status }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Where a request for `path` (normalized, met by `rule`) with `query` is sent.
    pub fn location(&self, rule: &Rule, path: &str, query: Option<&[u8]>) -> Option<HeaderValue> {
        let mut out = BytesMut::new();
        if rule.is_prefix() {
            out.extend_from_slice(join(&self.to, rule.rest(path)).as_bytes());
        } else {
            out.extend_from_slice(self.to.as_bytes());
        }
        if let (Some(query), false) = (query, self.own_query) {
            out.extend_from_slice(b"?");
            out.extend_from_slice(query);
        }
        // A query with bytes a header cannot carry (raw control bytes) gets no redirect: the
        // caller answers 400.
        HeaderValue::from_maybe_shared(out.freeze()).ok()
    }

    pub(super) fn describe(&self) -> String {
        format!("redirect {} {}", self.status.as_u16(), self.to)
    }
}
