//! Protocol upgrades (WebSocket over HTTP/1.1) in the request service: the early-data gate and
//! the route check as for any request, then an RFC 8441 stream on the standing connections
//! when the origin offers it, else an HTTP/1.1 origin connection of the upgrade's own
//! ([`carry`]); the answer is the origin's (`101` and then a relay, or
//! whatever it said).

mod carry;

pub(crate) use carry::is_upgrade;

use std::time::Instant;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::origin::Origin;
use super::respond::ProxyError;
use super::service::Service;
use super::{forward, Body};
use crate::accesslog::RequestLog;
use crate::route::RouteAction;
use carry as upgrade;

impl Service {
    /// A request asking to switch protocols, read by hyper (only hyper can hand the connection
    /// over).
    pub(crate) async fn handle_upgrade(&self, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let mut rlog = RequestLog::new(&req, self.client, &self.route);
        match self.upgrade(req, &mut rlog).await {
            Ok(response) => self.answered(rlog, started, response),
            Err(e) => self.fail(rlog, started, &e),
        }
    }

    async fn upgrade(&self, req: Request<Incoming>, rlog: &mut RequestLog) -> Result<Response<Body>, ProxyError> {
        self.early_gate(&req, true).await?;
        let head = forward::head(&req, self.target(&req)?, &self.facts);
        let timeout = self.snapshot.timeouts.connect;
        if let Origin::H2(upstream) = &self.origin {
            if upgrade::is_websocket(&req) && upstream.extended_connect() {
                let (tasks, cut, via) = (&self.upgrades, self.cut.clone(), self.facts.via());
                let (response, conn) = upgrade::websocket_h2(req, &head, upstream, timeout, tasks, cut, via)
                    .await
                    .map_err(|e| ProxyError::Upgrade(e.to_string()))?;
                rlog.origin_conn = Some(conn);
                rlog.reused = true;
                return Ok(response);
            }
        }
        let Some(RouteAction::Http(route)) = self.snapshot.routes.lookup(head.uri().host()).map(|r| &r.action) else {
            let host = head.uri().host().unwrap_or_default().to_string();
            return Err(ProxyError::Misdirected { host, route: self.route.to_string() });
        };
        let dial = upgrade::own_dial(route, &self.snapshot);
        let response = upgrade::upgrade(req, &head, dial, timeout, &self.upgrades, self.cut.clone())
            .await
            .map_err(|e| ProxyError::Upgrade(e.to_string()))?;
        let mut response = upgrade::boxed(response);
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            forward::response_headers(response.headers_mut(), self.facts.via());
        }
        Ok(response)
    }
}
