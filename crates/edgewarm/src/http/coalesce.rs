//! Requests for another name on a client's connection. A browser that holds a connection
//! whose certificate also covers another host name, at the same address, sends that name's
//! requests on it instead of opening a new connection (RFC 9110 §4.3.3, "connection reuse";
//! Chromium and Firefox do it over HTTP/2 and HTTP/3). A 421 asks it to open one for the
//! name, which costs a handshake, and over HTTP/3 Chromium does not retry at all: the
//! resource fails. So a request for another `http` route is served here, by that route (its
//! origin, limits, forwarding headers, metrics and log line), when that route terminates TLS
//! with exactly this connection's settings: the same certificate the client verified and the
//! same 0-RTT policy. Any other name is still 421.

use std::sync::{Arc, Mutex};

use http::Request;

use super::forward::ClientFacts;
use super::origin::Origin;
use super::service::{Service, ServiceParts};
use crate::config::TerminateConfig;
use crate::route::RouteAction;

/// How many other routes one connection serves at most (a page's asset and API names).
const MAX_SIBLINGS: usize = 8;

/// What a connection needs to serve another route's requests.
pub(crate) struct Coalesce {
    /// This connection's TLS settings: another route is served only with exactly these.
    tls: TerminateConfig,
    /// The listener's peers are trusted load balancers.
    trust_forwarded: bool,
    /// How this connection's own service was built; a sibling differs in its route's parts.
    parts: ServiceParts,
    made: Mutex<Vec<Arc<Service>>>,
}

impl Coalesce {
    pub(crate) fn new(tls: TerminateConfig, trust_forwarded: bool, parts: ServiceParts) -> Self {
        Self { tls, trust_forwarded, parts, made: Mutex::default() }
    }

    /// The service for `req` when its name belongs to another route this connection may
    /// serve; `None` for this route's own names, and for names it must refuse (421).
    pub(crate) fn sibling<B>(&self, own: &Service, req: &Request<B>) -> Option<Arc<Service>> {
        let host = host(req)?;
        let route = own.snapshot.routes.lookup(Some(host))?;
        if route.name == own.route {
            return None;
        }
        let RouteAction::Http(http) = &route.action else { return None };
        if http.config.tls != self.tls {
            return None;
        }
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = made.iter().find(|s| s.route == route.name) {
            // A reload retired that route's origin connections: the client should come again
            // on a new connection, which sees the new configuration.
            return (!s.origin.retired().is_cancelled()).then(|| s.clone());
        }
        if made.len() >= MAX_SIBLINGS {
            return None;
        }
        let origin = Origin::of(http)?;
        let mut parts = self.parts.clone();
        parts.route = route.name.clone();
        parts.facts = ClientFacts::with_trust(parts.client, self.trust_forwarded, http.config.forward_headers);
        parts.max_body = http.config.max_request_body;
        let sibling = Arc::new(Service::sibling_of(own, origin, parts));
        made.push(sibling.clone());
        Some(sibling)
    }
}

/// The request's host name, without a port, as cheaply as it can be had (the full target is
/// checked later, by the service that handles the request).
fn host<B>(req: &Request<B>) -> Option<&str> {
    if let Some(host) = req.uri().host() {
        return Some(host);
    }
    let header = req.headers().get(http::header::HOST)?.to_str().ok()?;
    // Bracketed IPv6 literals match no route name; no need to parse them.
    Some(header.rsplit_once(':').map_or(header, |(h, _)| h))
}
