//! The request service: one client request in, one response out, whatever protocol the client
//! speaks. Every client driver ([`super::client`]) calls [`Service::handle`] for each request;
//! what happens in between is written once here: CONNECT refused, the early-data gate
//! ([`super::early`]), the body limit, the route check (421), the request rewritten for the
//! origin ([`super::forward`]), sent through the origin seam ([`super::origin`]) under the
//! retry policy ([`super::retry`]), errors answered from one table ([`super::respond`]), and
//! one access-log line and the metrics when the response has ended.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::body::{BodyFault, Capped};
use super::coalesce::Coalesce;
use super::early::{self, EarlyData, Gate, EARLY_DATA};
use super::flow::OnEnd;
use super::forward::{self, ClientFacts};
use super::origin::{Origin, OutBody, Sent};
use super::respond::ProxyError;
use super::retry::{Next, Policy};
use super::{Body, BoxError, ClientBody};
use crate::accesslog::RequestLog;
use crate::metrics::{ClientProtocol, EarlyOutcome, HttpMetrics, RouteEarly, RouteHttpMetrics, RouteName};
use crate::snapshot::Snapshot;

/// Request bodies up to this size (with a known length) are kept so the request can be sent
/// again; larger ones stream.
const MAX_REPLAY_BODY: u64 = 64 * 1024;

/// What one client connection's requests share: built once per connection.
pub(crate) struct Service {
    pub(crate) origin: Origin,
    /// The configuration this connection was accepted under (to check request names).
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) client: SocketAddr,
    pub(crate) route: RouteName,
    pub(crate) metrics: HttpMetrics,
    route_metrics: Arc<RouteHttpMetrics>,
    /// X-Forwarded-For and Forwarded values for this client, built once.
    pub(crate) facts: ClientFacts,
    origin_response: Duration,
    /// `max_request_body` (u64::MAX when unset).
    max_body: u64,
    /// Body bytes of every request on this connection, for its own log line.
    pub(crate) up: Arc<AtomicU64>,
    pub(crate) down: Arc<AtomicU64>,
    /// Upgraded (WebSocket) relays: the connection lasts until they end.
    pub(crate) upgrades: TaskTracker,
    pub(crate) cut: CancellationToken,
    /// The client's handshake, while requests may arrive in its early data.
    handshake: Option<Arc<dyn EarlyData>>,
    early_metrics: Family<RouteEarly, Counter>,
    /// Added to every response (`Alt-Svc: h3=…` on a listener that serves HTTP/3 too).
    alt_svc: Option<http::HeaderValue>,
    /// A request arrived in early data (0-RTT) on this connection: for its log line.
    pub(crate) early_seen: Arc<AtomicBool>,
    /// Other routes' requests on this connection ([`super::coalesce`]); none in a sibling.
    coalesce: Option<Coalesce>,
}

/// What a [`Service`] is built from, besides its origin.
#[derive(Clone)]
pub(crate) struct ServiceParts {
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) client: SocketAddr,
    pub(crate) route: RouteName,
    pub(crate) metrics: HttpMetrics,
    pub(crate) facts: ClientFacts,
    pub(crate) max_body: Option<u64>,
    pub(crate) cut: CancellationToken,
    pub(crate) handshake: Option<Arc<dyn EarlyData>>,
    pub(crate) early_metrics: Family<RouteEarly, Counter>,
    pub(crate) alt_svc: Option<http::HeaderValue>,
    /// The client's protocol (a label on the request metrics).
    pub(crate) protocol: ClientProtocol,
}

impl Service {
    pub(crate) fn new(origin: Origin, p: ServiceParts) -> Self {
        Self {
            origin,
            origin_response: p.snapshot.timeouts.origin_response,
            route_metrics: Arc::new(p.metrics.for_route(&p.route, p.protocol)),
            snapshot: p.snapshot,
            client: p.client,
            route: p.route,
            metrics: p.metrics,
            facts: p.facts,
            max_body: p.max_body.unwrap_or(u64::MAX),
            up: Arc::default(),
            down: Arc::default(),
            upgrades: TaskTracker::new(),
            cut: p.cut,
            handshake: p.handshake,
            early_metrics: p.early_metrics,
            alt_svc: p.alt_svc,
            early_seen: Arc::default(),
            coalesce: None,
        }
    }

    /// A connection's service that also serves other routes' names ([`super::coalesce`]).
    pub(crate) fn with_coalescing(mut self, coalesce: Coalesce) -> Self {
        self.coalesce = Some(coalesce);
        self
    }

    /// Another route's service on `own`'s connection: its bytes, upgrades and early data are
    /// the connection's.
    pub(crate) fn sibling_of(own: &Service, origin: Origin, parts: ServiceParts) -> Self {
        let mut s = Self::new(origin, parts);
        s.up = own.up.clone();
        s.down = own.down.clone();
        s.upgrades = own.upgrades.clone();
        s.early_seen = own.early_seen.clone();
        s
    }

    /// One request, start to end. Its log line and metrics are written when its response
    /// body ends (or at once for an error answered here), so they carry real sizes and times.
    pub(crate) async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        match self.coalesce.as_ref().and_then(|c| c.sibling(self, &req)) {
            Some(sibling) => sibling.handle_here(req).await,
            None => self.handle_here(req).await,
        }
    }

    async fn handle_here<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        let mut rlog = RequestLog::new(&req, self.client, &self.route);
        let mut response = match self.proxy(req, &mut rlog, started).await {
            Ok(sent) => self.respond(sent, rlog, started),
            Err(e) => self.fail(rlog, started, &e),
        };
        if let Some(alt_svc) = &self.alt_svc {
            response.headers_mut().insert(http::header::ALT_SVC, alt_svc.clone());
        }
        response
    }

    async fn proxy<B>(&self, req: Request<B>, rlog: &mut RequestLog, started: Instant) -> Result<Sent, ProxyError>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        if req.method() == http::Method::CONNECT {
            // Not a tunnel for clients, whatever the origin speaks.
            return Err(ProxyError::Connect);
        }
        let gate = self.early_gate(&req, false).await?;
        // A body declared larger than allowed is refused before any of it is read; one that
        // grows past the limit (chunked, or HTTP/2 without content-length) is cut off there.
        if req.body().size_hint().exact().is_some_and(|n| n > self.max_body) {
            return Err(ProxyError::BodyTooLarge(self.max_body));
        }
        let req = req.map(|b| Capped::new(b, self.max_body));
        let fault = req.body().fault();
        let result = self.forward(req, gate == Gate::Forward, rlog, started).await;
        // A failure caused by the client's own body is the client's, not the origin's.
        result.map_err(|e| match fault.get() {
            Some(BodyFault::TooLarge) => ProxyError::BodyTooLarge(self.max_body),
            Some(BodyFault::Broken(why)) => ProxyError::ClientBody(why.clone()),
            None => e,
        })
    }

    /// RFC 8470's gate ([`early::gate`]), counted per route.
    pub(crate) async fn early_gate<B: http_body::Body>(
        &self,
        req: &Request<B>,
        upgrade: bool,
    ) -> Result<Gate, ProxyError> {
        let count = |forwarded| self.count_early(if forwarded { EarlyOutcome::Forwarded } else { EarlyOutcome::Held });
        early::gate(self.handshake.as_deref(), req, upgrade, count).await
    }

    fn count_early(&self, outcome: EarlyOutcome) {
        self.early_seen.store(true, Ordering::Relaxed);
        self.early_metrics.get_or_create(&RouteEarly { route: self.route.clone(), outcome }).inc();
    }

    /// Where the request goes at the origin: 400 for a request that cannot be forwarded; 421
    /// for a name this route does not serve (an HTTP/2 client reusing the connection for
    /// another name its certificate covers), so the client opens a connection for that name and
    /// is routed afresh.
    pub(crate) fn target<B>(&self, req: &Request<B>) -> Result<http::Uri, ProxyError> {
        let target = forward::target(req)?;
        let host = target.host().unwrap_or_default();
        // A connection without SNI (by address) was routed by that; it serves any name.
        let routed = self.snapshot.routes.lookup(Some(host));
        if &*self.route != crate::route::NO_SNI && routed.is_none_or(|r| r.name != self.route) {
            return Err(ProxyError::Misdirected { host: host.to_string(), route: self.route.to_string() });
        }
        Ok(target)
    }

    /// Send the request to the origin, again where the retry policy allows.
    async fn forward<B>(
        &self,
        req: Request<Capped<B>>,
        early: bool,
        rlog: &mut RequestLog,
        started: Instant,
    ) -> Result<Sent, ProxyError>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let target = self.target(&req)?;
        let (parts, body) = req.into_parts();
        let client_head = Request::from_parts(parts, ());
        // A small body of known length is read first and kept, so the request can be sent
        // again when the origin provably never took it (a large one streams and cannot be).
        let mut out = if body.is_end_stream() {
            OutBody::Empty
        } else if body.size_hint().exact().is_some_and(|n| n <= MAX_REPLAY_BODY) {
            let collected = body.collect().await.map_err(|e| ProxyError::ClientBody(e.to_string()))?;
            OutBody::Replay(collected.to_bytes())
        } else {
            OutBody::Stream(body.boxed())
        };
        let mut policy = Policy::new(client_head.method(), !matches!(out, OutBody::Stream(_)), early);
        // The origin request is built from the client's head each time it is placed (h2 takes
        // it whole), so the common case copies the client's headers once.
        let marked = AtomicBool::new(early);
        let mut build = || {
            let mut head = forward::head(&client_head, target.clone(), &self.facts);
            if marked.load(Ordering::Relaxed) {
                head.headers_mut().insert(EARLY_DATA, http::HeaderValue::from_static("1"));
            }
            head
        };
        let up = rlog.bytes_up.get_or_insert_with(Arc::default).clone();
        loop {
            policy.attempt();
            match self.origin.send(&mut build, out.for_attempt(), &up, self.origin_response).await {
                Ok(sent) => match policy.after_response(sent.response.status()) {
                    Next::AfterHandshake => {
                        // The origin answered 425 Too Early: after the handshake the same
                        // request is no longer early and goes again.
                        marked.store(false, Ordering::Relaxed);
                        self.count_early(EarlyOutcome::RetriedAfter425);
                        rlog.retries += 1;
                        if !self.handshake_done().await {
                            return Err(ProxyError::Handshake);
                        }
                    }
                    Next::Again | Next::Stop => {
                        rlog.origin_conn = sent.conn;
                        rlog.reused = sent.reused;
                        rlog.ttfb = Some(started.elapsed());
                        return Ok(sent);
                    }
                },
                Err(failure) => match policy.after_failure(failure.kind) {
                    Next::Again => {
                        self.metrics.retry(&self.route);
                        rlog.retries += 1;
                    }
                    Next::AfterHandshake | Next::Stop => return Err(failure.error),
                },
            }
        }
    }

    async fn handshake_done(&self) -> bool {
        match &self.handshake {
            Some(h) => h.handshake_done().await,
            None => true,
        }
    }

    /// The origin's response for the client: hop-by-hop headers gone, ours added; counted and
    /// logged when its body has ended.
    fn respond(&self, sent: Sent, mut rlog: RequestLog, started: Instant) -> Response<Body> {
        let (mut parts, body) = sent.response.into_parts();
        rlog.status = parts.status.as_u16();
        forward::response_headers(&mut parts.headers, self.facts.via());
        let body = OnEnd::new(body, self.on_response_end(rlog, started));
        Response::from_parts(parts, body.boxed())
    }

    /// What runs once a forwarded response has ended or its client has gone (what the request
    /// held at the origin was let go just before): the request is counted and its line written.
    pub(crate) fn on_response_end(&self, rlog: RequestLog, started: Instant) -> impl FnOnce(u64) + use<> {
        let (metrics, up, down) = (self.route_metrics.clone(), self.up.clone(), self.down.clone());
        move |sent| {
            down.fetch_add(sent, Ordering::Relaxed);
            if let Some(n) = &rlog.bytes_up {
                up.fetch_add(n.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            rlog.finish(started, sent, &metrics);
        }
    }

    /// An error answered by the edge: counted by reason, logged with its detail.
    pub(crate) fn fail(&self, mut rlog: RequestLog, started: Instant, e: &ProxyError) -> Response<Body> {
        rlog.detail = Some(e.to_string());
        self.metrics.error(&self.route, e.reason(), e.fault());
        self.answered(rlog, started, e.response())
    }

    /// A response edgewarm gives itself (an error, or an upgrade's answer): counted and logged
    /// now.
    pub(crate) fn answered(&self, mut rlog: RequestLog, started: Instant, response: Response<Body>) -> Response<Body> {
        rlog.status = response.status().as_u16();
        rlog.finish(started, 0, &self.route_metrics);
        response
    }
}
