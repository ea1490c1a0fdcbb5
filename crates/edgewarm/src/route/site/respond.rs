//! A rule the edge answers itself, with the same status, body and type every time.

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use crate::config::RespondConfig;

pub struct Respond {
    status: StatusCode,
    pub body: Bytes,
    pub content_type: Option<HeaderValue>,
}

impl Respond {
    pub(super) fn new(r: &RespondConfig) -> Self {
        // Both checked at load (200 to 599; a header value).
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
        let content_type = match &r.content_type {
            Some(t) => HeaderValue::from_str(t).ok(),
            None if !r.body.is_empty() => Some(HeaderValue::from_static("text/plain; charset=utf-8")),
            None => None,
        };
        Self { status, body: Bytes::from(r.body.clone()), content_type }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}
