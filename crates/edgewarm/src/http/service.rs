//! The request service: one client request in, one response out, whatever protocol the client
//! speaks. Every client driver ([`super::client`]) calls [`Service::handle`] for each request;
//! what happens in between is written once here: CONNECT refused, the early-data gate
//! ([`super::early`]), the body limit, the route check (421), the request rewritten for the
//! origin ([`super::forward`]), sent through the origin seam ([`crate::origin::seam::Origin`],
//! an `Arc<dyn Origin>`: the service never learns which kind answers, or what wraps it) under
//! the retry policy ([`super::retry`]), errors answered from one table ([`super::respond`]),
//! and one access-log line and the metrics when the response has ended.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::body::{BodyFault, Capped, Prepended};
use super::coalesce::Coalesce;
use super::early::{self, EarlyData, Gate, EARLY_DATA};
use super::forward::{self, ClientFacts};
use super::grpc;
use super::interim::ToClient;
use super::respond::ProxyError;
use super::retry::{Next, Policy};
use super::way::{Begun, Way};
use super::{Body, BoxError, ClientBody};
use crate::accesslog::RequestLog;
use crate::config::HeaderPolicy;
use crate::limits::reclaim::Activity;
use crate::metrics::{
    CacheResult, ClientProtocol, EarlyOutcome, HttpError, HttpMetrics, RouteEarly, RouteHttpMetrics, RouteName,
};
use crate::origin::body::{BodyEnd, OnEnd};
use crate::origin::seam::{Affinity, Asked, EdgeAnswer, Origin, OutBody, Outgoing, Sent, ServedBy};
use crate::route::HttpRoute;
use crate::snapshot::Snapshot;

/// Request bodies up to this size (with a known length) are kept so the request can be sent
/// again; larger ones stream.
const MAX_REPLAY_BODY: u64 = 64 * 1024;

/// What every request on one client connection shares, whichever route serves it: built once
/// per connection.
pub(crate) struct Conn {
    /// The configuration this connection was accepted under (to check request names).
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) client: SocketAddr,
    /// The listener's port the client connected to (`X-Forwarded-Port`).
    pub(crate) port: u16,
    pub(crate) metrics: HttpMetrics,
    /// The listener's peers are trusted load balancers (their forwarding headers are kept).
    pub(crate) trust_forwarded: bool,
    pub(crate) cut: CancellationToken,
    /// The client's handshake, while requests may arrive in its early data.
    pub(crate) handshake: Option<Arc<dyn EarlyData>>,
    pub(crate) early_metrics: Family<RouteEarly, Counter>,
    /// The client's protocol (a label on the request metrics).
    pub(crate) protocol: ClientProtocol,
    /// Body bytes of every request on this connection, for its own log line.
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    /// Upgraded (WebSocket) relays: the connection lasts until they end.
    pub(crate) upgrades: TaskTracker,
    /// A request arrived in early data (0-RTT) on this connection: for its log line.
    pub(crate) early_seen: AtomicBool,
    /// The origin connection this client's requests rode last (a placement hint:
    /// [`Outgoing::affinity`]).
    pub(crate) affinity: Affinity,
    /// Its requests in flight and last activity, for a full listener choosing idle connections
    /// to reclaim (TCP connections only).
    pub(crate) activity: Option<Arc<Activity>>,
    /// The listener's header policy: merged into each route's, and alone on an answer given
    /// before a request's route is known.
    pub(crate) headers: Arc<HeaderPolicy>,
}

impl Conn {
    /// Whether a full listener asked this connection to finish: it then closes at once when
    /// idle, without the first-request grace a shutdown gives (it has been idle a while).
    pub(crate) fn reclaimed(&self) -> bool {
        self.activity.as_ref().is_some_and(|a| a.reclaimed())
    }
}

/// One route's requests on one client connection. It reads the route's settings from the
/// route itself ([`HttpRoute::config`]), so a new route option is read where it is used.
pub(crate) struct Service {
    pub(crate) conn: Arc<Conn>,
    pub(crate) route: RouteName,
    pub(super) http: Arc<HttpRoute>,
    pub(crate) origin: Arc<dyn Origin>,
    pub(super) route_metrics: Arc<RouteHttpMetrics>,
    /// X-Forwarded-For and Forwarded values for this client, built once.
    pub(crate) facts: ClientFacts,
    /// Other routes' requests on this connection ([`super::coalesce`]); none in a sibling.
    coalesce: Option<Coalesce<Service>>,
    /// The listener's header policy with the route's merged into it, once per connection.
    pub(super) headers: Arc<HeaderPolicy>,
}

impl Service {
    /// `route`'s service on `conn`; `None` before the server attached the route's origin.
    pub(crate) fn new(conn: Arc<Conn>, route: RouteName, http: Arc<HttpRoute>) -> Option<Self> {
        let origin = http.seam()?.clone();
        Some(Self {
            route_metrics: Arc::new(conn.metrics.for_route(&route, conn.protocol)),
            facts: ClientFacts::with_trust(conn.client, conn.port, conn.trust_forwarded, http.config.forward_headers),
            headers: HeaderPolicy::merged(&conn.headers, &http.headers),
            conn,
            route,
            http,
            origin,
            coalesce: None,
        })
    }

    /// A connection's service that also serves other routes' names ([`super::coalesce`]).
    pub(crate) fn with_coalescing(mut self) -> Self {
        self.coalesce = Some(Coalesce::new(self.http.config.tls.clone()));
        self
    }

    /// One request, start to end. Its log line and metrics are written when its response
    /// body ends (or at once for an error answered here), so they carry real sizes and times.
    /// `interim`: where informational heads go while the response is awaited, from a driver
    /// whose protocol carries them ([`super::interim`]).
    pub(crate) async fn handle<B>(&self, req: Request<B>, interim: Option<&ToClient>) -> Response<Body>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let _busy = self.conn.activity.as_ref().map(Activity::begin);
        let sibling = self.coalesce.as_ref().and_then(|c| {
            let live = |s: &Service| !s.origin.retired().is_cancelled();
            let make =
                |name: &RouteName, http: &Arc<HttpRoute>| Service::new(self.conn.clone(), name.clone(), http.clone());
            c.sibling(&self.route, &self.conn.snapshot.routes, &req, live, make)
        });
        match sibling {
            Some(sibling) => sibling.handle_here(req, interim).await,
            None => self.handle_here(req, interim).await,
        }
    }

    async fn handle_here<B>(&self, req: Request<B>, interim: Option<&ToClient>) -> Response<Body>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        let (mut rlog, way) = match self.begin(&req, started) {
            Begun::Way(rlog, way) => (*rlog, way),
            Begun::Answered(answer) => return answer,
        };
        match self.proxy(req, &way, interim, &mut rlog, started).await {
            Ok(sent) => self.respond(sent, rlog, started, way.policy()),
            Err(e) => self.fail(rlog, started, &e, way.policy()),
        }
    }

    /// The request's log line, begun: whether it is gRPC is read here (the log does not know
    /// what gRPC is; the answers given to it are [`grpc`]'s).
    pub(crate) fn request_log<B>(&self, req: &Request<B>) -> RequestLog {
        let mut rlog = RequestLog::new(req, self.conn.client, &self.route);
        rlog.grpc = grpc::requested(req.headers());
        rlog
    }

    async fn proxy<B>(
        &self,
        req: Request<B>,
        way: &Way<'_>,
        interim: Option<&ToClient>,
        rlog: &mut RequestLog,
        started: Instant,
    ) -> Result<Sent, ProxyError>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let gate = self.early_gate(&req, false).await?;
        // A body declared larger than allowed is refused before any of it is read; one that
        // grows past the limit (chunked, or HTTP/2 without content-length) is cut off there.
        let max_body = way.max_body;
        if req.body().size_hint().exact().is_some_and(|n| n > max_body) {
            return Err(ProxyError::BodyTooLarge(max_body));
        }
        let req = req.map(|b| Capped::new(b, max_body));
        let fault = req.body().fault();
        let result = self.forward(req, way, gate == Gate::Forward, interim, rlog, started).await;
        // A failure caused by the client's own body is the client's, not the origin's.
        result.map_err(|e| match fault.get() {
            Some(BodyFault::TooLarge) => ProxyError::BodyTooLarge(max_body),
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
        early::gate(self.conn.handshake.as_deref(), req, upgrade, count).await
    }

    fn count_early(&self, outcome: EarlyOutcome) {
        self.conn.early_seen.store(true, Ordering::Relaxed);
        self.conn.early_metrics.get_or_create(&RouteEarly { route: self.route.clone(), outcome }).inc();
    }

    /// Where the request goes at the origin: 400 for a request that cannot be forwarded; 421
    /// for a name this route does not serve (an HTTP/2 client reusing the connection for
    /// another name its certificate covers), so the client opens a connection for that name and
    /// is routed afresh.
    pub(crate) fn target<B>(&self, req: &Request<B>) -> Result<http::Uri, ProxyError> {
        let target = forward::target(req)?;
        let host = target.host().unwrap_or_default();
        // A connection without SNI (by address) was routed by that; it serves any name.
        let routed = self.conn.snapshot.routes.lookup(Some(host));
        if &*self.route != crate::route::NO_SNI && routed.is_none_or(|r| r.name != self.route) {
            return Err(ProxyError::Misdirected { host: host.to_string(), route: self.route.to_string() });
        }
        Ok(target)
    }

    /// Send the request to the origin, again where the retry policy allows.
    async fn forward<B>(
        &self,
        req: Request<Capped<B>>,
        way: &Way<'_>,
        early: bool,
        interim: Option<&ToClient>,
        rlog: &mut RequestLog,
        started: Instant,
    ) -> Result<Sent, ProxyError>
    where
        B: ClientBody,
        B::Error: Into<BoxError>,
    {
        let target = &way.target;
        let (parts, body) = req.into_parts();
        let client_head = Request::from_parts(parts, ());
        // A small body of known length is read first and kept, so the request can be sent
        // again when the origin provably never took it (a large one streams and cannot be).
        let mut out = if body.is_end_stream() {
            OutBody::Empty
        } else if body.size_hint().exact().is_some_and(|n| n <= MAX_REPLAY_BODY) {
            let collected = body.collect().await.map_err(|e| ProxyError::ClientBody(e.to_string()))?;
            OutBody::Replay(collected.to_bytes())
        } else if matches!(*client_head.method(), http::Method::GET | http::Method::HEAD) {
            // HTTP/3 has no flag on a request's head saying "no body": a GET's end is its
            // stream's FIN, which may come a packet after the head (h3's client sends it so).
            // It is on its way: waiting for it tells a GET without a body from one with, which
            // the cache must pass by (a "fat GET").
            let mut body = body.boxed();
            match body.frame().await {
                None => OutBody::Empty,
                Some(Ok(first)) => OutBody::Stream(Prepended::new(first, body).boxed()),
                Some(Err(e)) => return Err(ProxyError::ClientBody(e.to_string())),
            }
        } else {
            OutBody::Stream(body.boxed())
        };
        let mut policy = Policy::new(client_head.method(), !matches!(out, OutBody::Stream(_)), early);
        // The origin request is built from the client's head each time it is placed (h2 takes
        // it whole), so the common case copies the client's headers once.
        let marked = AtomicBool::new(early);
        let mut build = || {
            let mut head = forward::head(&client_head, target.clone(), &self.facts);
            self.request_headers(head.headers_mut());
            if let Some(rule) = way.policy() {
                rule.request.apply(head.headers_mut());
            }
            if marked.load(Ordering::Relaxed) {
                head.headers_mut().insert(EARLY_DATA, http::HeaderValue::from_static("1"));
            }
            head
        };
        let up = rlog.bytes_up.get_or_insert_with(Arc::default).clone();
        // An HTTP/2 or HTTP/3 client's driver takes informational heads while it waits.
        let interim = interim.map(|to| to.sink(&self.route_metrics));
        let (began, tried) = (tokio::time::Instant::now(), AtomicU64::new(0));
        // Who asked, for the route's limits: on the first send only (a resend is the edge's,
        // a 425's included).
        let mut client = Some(Asked { address: self.conn.client.ip(), head: &client_head });
        loop {
            policy.attempt();
            let timeout = way.timeout;
            let (affinity, tried) = (&self.conn.affinity, &tried);
            let body = out.for_attempt();
            let interim = interim.as_ref();
            let client = client.take();
            let attempt =
                Outgoing { build: &mut build, body, up: &up, timeout, affinity, tried, interim, began, client };
            match way.origin.send(attempt).await {
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
                        rlog.cache = sent.notes.get::<CacheResult>().copied();
                        rlog.server = sent.notes.get::<ServedBy>().map(|s| s.0.clone());
                        rlog.ttfb = Some(started.elapsed());
                        return Ok(sent);
                    }
                },
                Err(failure) => match policy.after_failure(failure.kind) {
                    Next::Again => {
                        self.conn.metrics.retry(&self.route);
                        rlog.retries += 1;
                    }
                    Next::AfterHandshake | Next::Stop => return Err(failure.error.into()),
                },
            }
        }
    }

    async fn handshake_done(&self) -> bool {
        match &self.conn.handshake {
            Some(h) => h.handshake_done().await,
            None => true,
        }
    }

    /// The origin's response for the client: hop-by-hop headers gone, ours added; counted and
    /// logged when its body has ended.
    fn respond(
        &self,
        sent: Sent,
        mut rlog: RequestLog,
        started: Instant,
        rule: Option<&HeaderPolicy>,
    ) -> Response<Body> {
        let (mut parts, body) = sent.response.into_parts();
        rlog.status = parts.status.as_u16();
        // A layer's own answer (403, 429) to a gRPC client is a gRPC status; the line keeps the
        // status meant.
        let body = match sent.notes.get::<EdgeAnswer>() {
            Some(EdgeAnswer(text)) if rlog.grpc => grpc::local(&mut parts, body, text),
            _ => body,
        };
        forward::response_headers(&mut parts.headers, self.facts.via());
        // On delivery, so a cached response gets the policy as it is now (the cache, in the
        // seam, stores what the origin sent).
        self.headers.response.apply(&mut parts.headers);
        if let Some(rule) = rule {
            rule.response.apply(&mut parts.headers);
        }
        // How long the body is, where the head says: a body let go once that much has gone is
        // whole (hyper's HTTP/1.1 writer stops reading at the length, and never reads the empty
        // body of a HEAD, a 204 or a 304).
        let bodiless = rlog.method == http::Method::HEAD
            || matches!(parts.status, http::StatusCode::NO_CONTENT | http::StatusCode::NOT_MODIFIED);
        let declared = || parts.headers.get(http::header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok();
        let length = if bodiless { Some(0) } else { declared() };
        let body = OnEnd::new(body, self.on_response_end(rlog, started, length));
        Response::from_parts(parts, body.boxed())
    }

    /// What runs once a forwarded response has ended or its client has gone (what the request
    /// held at the origin was let go just before): the request is counted and its line written,
    /// saying so when the body was cut (its status had gone out, so the line's status is what
    /// the client was told, and `detail` what it got).
    pub(crate) fn on_response_end(
        &self,
        mut rlog: RequestLog,
        started: Instant,
        length: Option<u64>,
    ) -> impl FnOnce(u64, BodyEnd) + use<> {
        let (metrics, conn, route) = (self.route_metrics.clone(), self.conn.clone(), self.route.clone());
        move |sent, how| {
            match how {
                BodyEnd::Whole => {}
                BodyEnd::Dropped if length == Some(sent) => {}
                BodyEnd::Failed(why) => {
                    rlog.detail = Some(format!("response body cut after {sent} bytes: {why}"));
                    conn.metrics.error(&route, HttpError::BodyCut, crate::http::respond::fault(HttpError::BodyCut));
                }
                BodyEnd::Dropped => rlog.detail = Some(format!("client went away after {sent} bytes of the body")),
            }
            conn.down.fetch_add(sent, Ordering::Relaxed);
            if let Some(n) = &rlog.bytes_up {
                conn.up.fetch_add(n.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            rlog.finish(started, sent, &metrics);
        }
    }

    /// The request policy, on a request built for the origin: after the forwarding headers,
    /// which no policy may name (refused at load), so none overrides them.
    pub(crate) fn request_headers(&self, headers: &mut http::HeaderMap) {
        self.headers.request.apply(headers);
    }

    /// The listener's response policy, on an answer a driver gives before the request reached
    /// the service (an HTTP/3 head over the size limit: 431).
    pub(crate) fn unrouted_headers(&self, headers: &mut http::HeaderMap) {
        self.conn.headers.response.apply(headers);
    }
}
