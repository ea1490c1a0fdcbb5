//! The answers the edge gives itself on a route (its errors, a rule's redirect or response, an
//! upgrade's answer): counted and logged at once, with the route's header policy (and the
//! rule's after it), and as a gRPC status to a gRPC client ([`super::grpc`]).

use std::time::Instant;

use http::Response;

use super::grpc;
use super::respond::ProxyError;
use super::service::Service;
use super::Body;
use crate::accesslog::RequestLog;
use crate::config::HeaderPolicy;

impl Service {
    /// An error answered by the edge: counted by reason, logged with its detail, with the
    /// route's header policy, or the listener's alone for a request refused before its route
    /// was known (a name this route does not serve: the route's headers are not its).
    pub(crate) fn fail(
        &self,
        mut rlog: RequestLog,
        started: Instant,
        e: &ProxyError,
        rule: Option<&HeaderPolicy>,
    ) -> Response<Body> {
        rlog.detail = Some(e.to_string());
        self.conn.metrics.error(&self.route, e.reason(), e.fault());
        let mut response = e.response();
        let policy = if e.unrouted() { &self.conn.headers } else { &self.headers };
        policy.response.apply(response.headers_mut());
        if let Some(rule) = rule.filter(|_| !e.unrouted()) {
            rule.response.apply(response.headers_mut());
        }
        // To a gRPC client, as a gRPC status (logged with the status meant).
        let to_grpc = rlog.grpc;
        grpc::answer(to_grpc, self.logged(rlog, started, response), e.text())
    }

    /// A response edgewarm gives itself on the route (an upgrade's answer), with the route's
    /// header policy: counted and logged now; a gRPC client's as a gRPC status ([`grpc`]).
    pub(crate) fn answered(
        &self,
        rlog: RequestLog,
        started: Instant,
        mut response: Response<Body>,
        rule: Option<&HeaderPolicy>,
    ) -> Response<Body> {
        self.headers.response.apply(response.headers_mut());
        if let Some(rule) = rule {
            rule.response.apply(response.headers_mut());
        }
        let (to_grpc, status) = (rlog.grpc, response.status());
        grpc::answer(to_grpc, self.logged(rlog, started, response), grpc::reason(status))
    }

    fn logged(&self, mut rlog: RequestLog, started: Instant, response: Response<Body>) -> Response<Body> {
        rlog.status = response.status().as_u16();
        rlog.finish(started, 0, &self.route_metrics);
        response
    }
}
