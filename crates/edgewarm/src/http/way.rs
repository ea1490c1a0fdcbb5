//! Where one request goes on its route, as [`super::site`] decides it: the type alone, so that
//! the service that follows it and the rules that choose it need not import each other.

use std::sync::Arc;
use std::time::Duration;

use http::Response;

use super::Body;
use crate::config::HeaderPolicy;
use crate::metrics::RouteName;
use crate::origin::seam::Origin;
use crate::route::site::Rule;

/// Where one request goes.
pub(crate) struct Way<'s> {
    /// The target sent on: its path normalized and rewritten on a route with rules.
    pub(crate) target: http::Uri,
    /// The rule it met.
    pub(crate) rule: Option<&'s Rule>,
    pub(crate) origin: &'s Arc<dyn Origin>,
    /// The upstream it goes to (for the log).
    pub(crate) upstream: &'s RouteName,
    /// The edge's own answer (a redirect or a `respond` rule): nothing is sent on.
    pub(crate) answer: Option<Response<Body>>,
    pub(crate) max_body: u64,
    pub(crate) timeout: Duration,
}

impl Way<'_> {
    /// The rule's header policy, applied after the route's (none where it writes nothing).
    pub(crate) fn policy(&self) -> Option<&HeaderPolicy> {
        self.rule.map(|r| &r.headers).filter(|p| !p.is_empty())
    }
}

/// A request begun: its log line and its way on, or the edge's answer already given.
pub(crate) enum Begun<'s> {
    Way(Box<crate::accesslog::RequestLog>, Way<'s>),
    Answered(Response<Body>),
}
