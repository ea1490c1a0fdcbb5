//! Protocol upgrades (WebSocket over HTTP/1.1) in the request service: the early-data gate and
//! the route check as for any request, then through the origin seam
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
use super::{forward, Body};
use crate::accesslog::RequestLog;
use crate::origin::seam::Upgrade;

/// A request asking to switch protocols (HTTP/1.1 `Upgrade`, not h2c).
pub(crate) fn is_upgrade<B>(req: &Request<B>) -> bool {
    let connection_upgrade = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")));
    let h2c = req.headers().get(header::UPGRADE).is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"h2c"));
    req.version() == http::Version::HTTP_11 && connection_upgrade && req.headers().contains_key(header::UPGRADE) && !h2c
}

impl Service {
    /// A request asking to switch protocols, read by hyper (only hyper can hand the connection
    /// over).
    pub(crate) async fn handle_upgrade(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let mut rlog = RequestLog::new(&req, self.conn.client, &self.route);
        match self.upgrade(req, &mut rlog).await {
            Ok(response) => self.answered(rlog, started, response),
            Err(e) => self.fail(rlog, started, &e),
        }
    }

    async fn upgrade(&self, req: Request<Incoming>, rlog: &mut RequestLog) -> Result<Response<Body>, ProxyError> {
        self.early_gate(&req, true).await?;
        // The route's lists hold for upgrades too (its rate, a per-request limit, does not:
        // an upgraded connection is one request however long it lasts).
        if !self.http.config.access.admits(self.conn.client.ip()) {
            return Ok(super::respond::plain(StatusCode::FORBIDDEN, "forbidden\n"));
        }
        let head = forward::head(&req, self.target(&req)?, &self.facts);
        let up = Upgrade {
            client: req,
            head,
            timeout: self.conn.snapshot.timeouts.connect,
            tasks: &self.conn.upgrades,
            cut: self.conn.cut.clone(),
        };
        let upgraded = self.origin.upgrade(up).await?;
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
