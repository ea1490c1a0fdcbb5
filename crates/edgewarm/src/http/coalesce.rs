//! Requests for another name on a client's connection. A browser that holds a connection
//! whose certificate also covers another host name, at the same address, sends that name's
//! requests on it instead of opening a new connection (RFC 9110 §4.3.3, "connection reuse";
//! Chromium and Firefox do it over HTTP/2 and HTTP/3). A 421 asks it to open one for the
//! name, which costs a handshake, and over HTTP/3 Chromium does not retry at all: the
//! resource fails. So a request for another `http` route is served here, by that route (its
//! origin, limits, forwarding headers, metrics and log line), when that route terminates TLS
//! with exactly this connection's settings: the same certificate the client verified and the
//! same 0-RTT policy. Any other name is still 421.
//!
//! What serves a sibling route is the caller's (`S`, the request service): this module only
//! decides which route may be served and keeps what was made for it.

use std::sync::{Arc, Mutex};

use http::Request;

use crate::config::TerminateConfig;
use crate::metrics::RouteName;
use crate::route::{HttpRoute, RouteAction, RouteTable};

/// How many other routes one connection serves at most (a page's asset and API names).
const MAX_SIBLINGS: usize = 8;

/// A connection's services for other routes.
pub(crate) struct Coalesce<S> {
    /// This connection's TLS settings: another route is served only with exactly these.
    tls: TerminateConfig,
    made: Mutex<Vec<(RouteName, Arc<S>)>>,
}

impl<S> Coalesce<S> {
    pub(crate) fn new(tls: TerminateConfig) -> Self {
        Self { tls, made: Mutex::default() }
    }

    /// The service for `req` when its name belongs to another route this connection may
    /// serve (`own` is this connection's route); `None` for this route's own names, and for
    /// names it must refuse (421). `make` builds a route's service the first time; `live`
    /// says whether one made before may still serve (a reload retires a route's origin
    /// connections: its client should then come again on a new connection, which sees the new
    /// configuration).
    pub(crate) fn sibling<B>(
        &self,
        own: &RouteName,
        routes: &RouteTable,
        req: &Request<B>,
        live: impl Fn(&S) -> bool,
        make: impl FnOnce(&RouteName, &Arc<HttpRoute>) -> Option<S>,
    ) -> Option<Arc<S>> {
        let host = host(req)?;
        let route = routes.lookup(Some(host))?;
        if route.name == *own {
            return None;
        }
        let RouteAction::Http(http) = &route.action else { return None };
        if http.config.tls != self.tls {
            return None;
        }
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, s)) = made.iter().find(|(name, _)| *name == route.name) {
            return live(s).then(|| s.clone());
        }
        if made.len() >= MAX_SIBLINGS {
            return None;
        }
        let sibling = Arc::new(make(&route.name, http)?);
        made.push((route.name.clone(), sibling.clone()));
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
