//! Protocol upgrades (WebSocket over HTTP/1.1) in the request service: the early-data gate as
//! for any request, then through the origin seam (where the route's lists and rate count it)
//! ([`crate::origin::seam::Origin::upgrade`]): each kind carries it its own way (an RFC 8441
//! stream on standing HTTP/2 connections when the origin offers it, else an HTTP/1.1 origin
//! connection of the upgrade's own). The answer is the origin's (`101` and then a relay, or
//! whatever it said).

use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::respond::ProxyError;
use super::service::Service;
use super::way::{Begun, Way};
use super::{forward, Body};
use crate::accesslog::RequestLog;
use crate::origin::seam::Upgrade;

/// A WebSocket upgrade (HTTP/1.1 `Connection: upgrade` with `websocket` among `Upgrade`'s
/// protocols). A request asking for any other protocol (h2c, `foo/1`) is an ordinary request:
/// its `Upgrade` is a hop-by-hop header, dropped on the way, and the origin answers the request
/// as it stands (RFC 9110 §7.8 lets a server ignore `Upgrade`).
pub(crate) fn is_upgrade<B>(req: &Request<B>) -> bool {
    let has = |name, token: &str| {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    req.version() == http::Version::HTTP_11 && has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "websocket")
}

impl Service {
    /// A request asking to switch protocols, read by hyper (only hyper can hand the connection
    /// over).
    pub(crate) async fn handle_upgrade(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        // Busy until answered; after a 101 the relay (in `conn.upgrades`) keeps it in use.
        let _busy = self.conn.activity.as_ref().map(crate::limits::reclaim::Activity::begin);
        let (mut rlog, way) = match self.begin(&req, started) {
            Begun::Way(rlog, way) => (*rlog, way),
            Begun::Answered(answer) => return answer,
        };
        match self.upgrade(req, &way, &mut rlog).await {
            Ok(response) => self.answered(rlog, started, response, way.policy()),
            Err(e) => self.fail(rlog, started, &e, way.policy()),
        }
    }

    async fn upgrade(
        &self,
        req: Request<Incoming>,
        way: &Way<'_>,
        rlog: &mut RequestLog,
    ) -> Result<Response<Body>, ProxyError> {
        self.early_gate(&req, true).await?;
        // The route's lists and rate are the origin seam's (limits' layer): an upgrade counts
        // as one request there, refused with 403 or 429 like any other.
        let mut head = forward::head(&req, way.target.clone(), &self.facts);
        self.request_headers(head.headers_mut());
        if let Some(rule) = way.policy() {
            rule.request.apply(head.headers_mut());
        }
        let up = Upgrade {
            client: req,
            head,
            address: self.conn.client.ip(),
            timeout: self.conn.snapshot.timeouts.connect,
            tasks: &self.conn.upgrades,
            cut: self.conn.cut.clone(),
        };
        let upgraded = way.origin.upgrade(up).await?;
        rlog.origin_conn = upgraded.conn;
        rlog.reused = upgraded.conn.is_some();
        let mut response = upgraded.response;
        let via = self.facts.via();
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Its Connection and Upgrade headers are the switch itself: only ours are added.
            let h = response.headers_mut();
            h.remove(header::ALT_SVC);
            if via {
                h.append(header::VIA, HeaderValue::from_static("2 edgewarm"));
            }
        } else {
            forward::response_headers(response.headers_mut(), via);
        }
        Ok(response)
    }
}
