//! `action: http`: terminate TLS and HTTP at the edge; carry each request as a stream on the
//! route's standing HTTP/2 origin connections ([`crate::upstream`]).
//!
//! The client side is hyper's server for HTTP/1.1 keep-alive, and the `h2` crate's for HTTP/2
//! (by ALPN), every stream run in its connection's task ([`streams`]), with limits
//! that answer abuse instead of absorbing it: header size (431), slow headers (the connection is
//! closed), HTTP/2 concurrent streams, and h2's rapid-reset and CONTINUATION-flood guards.
//! Every request gets one access-log line; the connection gets its own when it closes.
//!
//! Protocol upgrades (WebSocket over HTTP/1.1) become a stream on the standing connections
//! when the origin offers RFC 8441 extended CONNECT, else get their own HTTP/1.1 origin
//! connection; a byte relay follows the `101` ([`crate::upstream::upgrade`]). CONNECT from
//! the client is refused (405).
//!
//! Errors toward the client: 400 for a request that cannot be forwarded, 502 when the origin
//! fails mid-request, 503 when no origin connection can be had, 504 when the origin's response
//! headers take longer than `timeouts.origin_response`. A request is retried on another stream
//! only when it provably never reached the origin (REFUSED_STREAM, or the connection refused
//! the stream before sending it) and it has no body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;

mod streams;

use super::{terminate_tls, ConnCtx};
use crate::accesslog::{AccessLog, RequestLog};
use crate::error::CloseReason;
use crate::metrics::{EarlyOutcome, HttpError, HttpMetrics, RouteEarly, RouteHttpMetrics, RouteName};
use crate::peek::Hello;
use crate::pool::dial::TlsDial;
use crate::route::HttpRoute;
use crate::route::RouteAction;
use crate::snapshot::Snapshot;
use crate::tls::early::Handshake;
use crate::transport::idle::IdleTimeout;
use crate::transport::Batched;
use crate::upstream::body as upstream_body;
use crate::upstream::body::{self, Capped, OriginBody};
use crate::upstream::conn::Slot;
use crate::upstream::h1::{H1Upstream, Lease};
use crate::upstream::{forward, upgrade, Upstream};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A client's request body: hyper's (HTTP/1.1) or h2's ([`h2`]).
trait ClientBody: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static {}
impl<B: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static> ClientBody for B {}

/// Largest request head accepted (HTTP/1.1 buffer, HTTP/2 header list): 431 beyond.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Streams one client may have open at once over HTTP/2.
const MAX_CLIENT_STREAMS: u32 = 128;
/// Attempts for a request that never reached the origin.
const MAX_ATTEMPTS: u32 = 3;
/// Request bodies up to this size (with a known length) are kept so the request can be sent
/// again; larger ones stream.
const MAX_REPLAY_BODY: u64 = 64 * 1024;

pub(crate) async fn serve(
    client: TcpStream,
    hello: Box<Hello>,
    route: &HttpRoute,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> CloseReason {
    let origin = match (route.upstream(), route.h1()) {
        (Some(u), _) => Origin::H2(u.clone()),
        (None, Some(h1)) => Origin::H1(h1.clone()),
        (None, None) => {
            log.detail = Some("no upstream for this route".into());
            return CloseReason::Internal;
        }
    };
    log.origin = Some(route.origin.key(None).origin.to_string());
    // The client may speak either protocol, whatever the origin side speaks.
    let alpn = route.client.choose(&hello.alpn, |_| true);
    let peer = log.client;
    let tls = match terminate_tls(client, hello, &route.client, alpn.as_deref(), ctx, log).await {
        Ok(tls) => tls,
        Err(reason) => return reason,
    };
    let handshake = tls.pending_handshake();

    let shared = Arc::new(Shared {
        origin,
        snapshot: ctx.snapshot.clone(),
        client: peer,
        route: ctx.route.name.clone(),
        metrics: ctx.metrics.http.clone(),
        route_metrics: Arc::new(ctx.metrics.http.for_route(&ctx.route.name)),
        facts: forward::ClientFacts::with_trust(peer, ctx.trust_forwarded, route.forward_headers),
        origin_response: ctx.snapshot.timeouts.origin_response,
        max_body: route.max_request_body.unwrap_or(u64::MAX),
        up: Arc::default(),
        down: Arc::default(),
        upgrades: TaskTracker::new(),
        cut: ctx.cut.clone(),
        handshake,
        early_metrics: ctx.metrics.early.requests.clone(),
    });
    // Shutdown, or a reload that retired this route's origin connections: first ask the
    // connection to finish gracefully (HTTP/2 GOAWAY, HTTP/1.1 close after the current
    // response) so the client's next request comes in afresh; at the end of the grace period
    // of a shutdown, cut it.
    // An HTTP/1.1 pool belongs to its snapshot and is never retired while in use.
    let retired = match &shared.origin {
        Origin::H2(u) => u.retired().clone(),
        Origin::H1(_) => CancellationToken::new(),
    };
    // A client that moves no byte for `timeouts.idle` (silent between requests, or no longer
    // reading a response) is closed, releasing every origin stream it held.
    let tls = IdleTimeout::new(tls, ctx.snapshot.timeouts.idle);
    if alpn.as_deref() == Some(b"h2".as_slice()) {
        // HTTP/2 writes are gathered (many streams' responses leave in one write).
        let ended = streams::serve(Batched::new(tls), shared.clone(), ctx.stop, &retired, ctx.cut).await;
        log.bytes_up = shared.up.load(Ordering::Relaxed);
        log.bytes_down = shared.down.load(Ordering::Relaxed);
        return match ended {
            streams::Ended::Done => CloseReason::Done,
            streams::Ended::Cut => CloseReason::Shutdown,
            streams::Ended::Failed(e) => {
                log.detail = Some(e.to_string());
                CloseReason::ClientReset
            }
        };
    }
    let service = {
        let shared = shared.clone();
        service_fn(move |req| {
            let shared = shared.clone();
            // Boxed: the request's future is large, and hyper spawns a task per request
            // around it; a small task allocates from the allocator's fast path.
            Box::pin(async move { Ok::<_, Infallible>(shared.handle_hyper(req).await) })
        })
    };
    // HTTP/1.1 (or HTTP/2 with prior knowledge, which hyper detects) on hyper's server.
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Slow headers (slowloris) close the connection.
        .header_read_timeout(ctx.snapshot.timeouts.client_hello)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CLIENT_STREAMS)
        .max_header_list_size(u32::try_from(MAX_HEADER_BYTES).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256));
    // HTTP/1.1 has one response at a time and nothing to gather. Closed lingering: hyper may
    // answer (413, 408, an error) and close before the client has sent all of its request.
    let io = Batched::pass_through(crate::transport::linger::Linger::new(tls));
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = async { tokio::select! { () = ctx.stop.cancelled() => {}, () = retired.cancelled() => {} } } => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                () = ctx.cut.cancelled() => {
                    log.bytes_up = shared.up.load(Ordering::Relaxed);
                    log.bytes_down = shared.down.load(Ordering::Relaxed);
                    return CloseReason::Shutdown;
                }
            }
        }
    };
    // An upgraded connection lives on in its relay: the connection is over when that is.
    shared.upgrades.close();
    shared.upgrades.wait().await;
    log.bytes_up = shared.up.load(Ordering::Relaxed);
    log.bytes_down = shared.down.load(Ordering::Relaxed);
    match result {
        Ok(()) => CloseReason::Done,
        Err(e) => {
            log.detail = Some(e.to_string());
            CloseReason::ClientReset
        }
    }
}

/// Where a route's requests go.
enum Origin {
    /// Streams on standing HTTP/2 connections.
    H2(Arc<Upstream>),
    /// Keep-alive HTTP/1.1 connections, one request at a time.
    H1(Arc<H1Upstream>),
}

/// What every request of one client connection shares.
struct Shared {
    origin: Origin,
    /// The configuration this connection was accepted under (to check request names).
    snapshot: Arc<Snapshot>,
    client: SocketAddr,
    route: RouteName,
    metrics: HttpMetrics,
    route_metrics: Arc<RouteHttpMetrics>,
    /// X-Forwarded-For and Forwarded values for this client, built once.
    facts: forward::ClientFacts,
    origin_response: Duration,
    /// `max_request_body` (u64::MAX when unset).
    max_body: u64,
    /// Body bytes of every request on this connection, for its own log line.
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    /// Upgraded (WebSocket) relays: the connection lasts until they end.
    upgrades: TaskTracker,
    cut: CancellationToken,
    /// The client's TLS handshake, while requests may arrive in its 0-RTT data.
    handshake: Option<Arc<Handshake>>,
    early_metrics: Family<RouteEarly, Counter>,
}

impl Shared {
    /// Whether the client's TLS handshake is still running: a request read now came in its
    /// early data, which an attacker could have replayed (RFC 8446 §8).
    fn in_early_data(&self) -> bool {
        self.handshake.as_ref().is_some_and(|h| !h.is_done())
    }

    /// Wait for the client's Finished; `false` if the handshake failed instead.
    async fn handshake_done(&self) -> bool {
        match &self.handshake {
            Some(h) => h.wait().await,
            None => true,
        }
    }

    fn count_early(&self, outcome: EarlyOutcome) {
        self.early_metrics.get_or_create(&RouteEarly { route: self.route.clone(), outcome }).inc();
    }

    /// RFC 8470 for an edge: a request in early data is forwarded at once (marked
    /// `Early-Data: 1`) only if it is safe to replay: GET, HEAD or OPTIONS without a body.
    /// Anything else waits here for the handshake to complete. Returns whether the request goes
    /// out as early data, or the answer to give if the handshake failed meanwhile.
    #[allow(clippy::result_large_err)]
    async fn early_gate<B: hyper::body::Body>(&self, req: &Request<B>) -> Result<bool, Response<Body>> {
        if !self.in_early_data() {
            return Ok(false);
        }
        let safe = matches!(*req.method(), http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
            && req.body().is_end_stream()
            && !upgrade::is_upgrade(req);
        if safe {
            self.count_early(EarlyOutcome::Forwarded);
            return Ok(true);
        }
        self.count_early(EarlyOutcome::Held);
        if self.handshake_done().await {
            Ok(false)
        } else {
            Err(error_response(StatusCode::BAD_REQUEST, "TLS handshake failed\n"))
        }
    }

    /// The origin answered 425 Too Early to a request sent as early data: wait for the
    /// handshake, after which the same request is no longer early and may be sent again.
    async fn after_too_early(&self, rlog: &mut RequestLog) -> bool {
        self.count_early(EarlyOutcome::RetriedAfter425);
        rlog.retries += 1;
        self.handshake_done().await
    }

    /// A request read by hyper (HTTP/1.1): a protocol upgrade, which only hyper can hand over,
    /// or any other request ([`Self::handle`]).
    async fn handle_hyper(&self, req: Request<Incoming>) -> Response<Body> {
        if !upgrade::is_upgrade(&req) {
            return self.handle(req).await;
        }
        // Boxed: its future is several KiB, and inline it would make every request's future
        // (allocated and moved per request) that large.
        Box::pin(async move {
            let started = Instant::now();
            let mut rlog = RequestLog::new(&req, self.client, &self.route);
            if let Err(response) = self.early_gate(&req).await {
                return self.answered(rlog, started, response);
            }
            let response = self.upgrade(req, &mut rlog).await;
            self.answered(rlog, started, response)
        })
        .await
    }

    /// One request, start to end. Its log line and metrics are written when its response
    /// body ends (or at once for an error answered here), so they carry real sizes and times.
    async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: ClientBody,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let mut rlog = RequestLog::new(&req, self.client, &self.route);
        if req.method() == http::Method::CONNECT {
            // Not a tunnel for clients, whatever the origin speaks.
            rlog.detail = Some("CONNECT is not proxied".into());
            let response = error_response(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not allowed\n");
            return self.answered(rlog, started, response);
        }
        let early = match self.early_gate(&req).await {
            Ok(early) => early,
            Err(response) => return self.answered(rlog, started, response),
        };
        // A body declared larger than allowed is refused before any of it is read; one that
        // grows past the limit (chunked, or HTTP/2 without content-length) is cut off there.
        let declared = hyper::body::Body::size_hint(req.body()).exact();
        if declared.is_some_and(|n| n > self.max_body) {
            return self.too_large(rlog, started);
        }
        let req = req.map(|b| Capped::new(b, self.max_body));
        let tripped = req.body().tripped();
        // The HTTP/1.1-origin path is boxed like the upgrade: only its requests pay its size.
        if let Origin::H1(h1) = &self.origin {
            return match Box::pin(self.forward_h1(h1, req, early, &mut rlog, started)).await {
                Ok((response, lease)) => {
                    let (parts, body) = response.into_parts();
                    // The connection goes back to the pool when the response is over.
                    let body = upstream_body::OnEnd::new(body, self.on_response_end(lease, rlog, started));
                    Response::from_parts(parts, body.map_err(Into::into).boxed())
                }
                Err(_) if tripped.load(Ordering::Relaxed) => self.too_large(rlog, started),
                Err(response) => self.answered(rlog, started, response),
            };
        }
        match self.forward(req, early, &mut rlog, started).await {
            Ok((parts, recv, slot, upload)) => {
                rlog.status = parts.status.as_u16();
                // An upload still running is no longer wanted: stopping it drops the stream's
                // send side, and with the receive side gone h2 resets the stream, freeing its
                // place at the origin.
                let body = OriginBody::new(recv, self.on_response_end((upload, slot), rlog, started));
                Response::from_parts(parts, body.map_err(Into::into).boxed())
            }
            Err(_) if tripped.load(Ordering::Relaxed) => self.too_large(rlog, started),
            Err(response) => self.answered(rlog, started, response),
        }
    }

    /// 413: the request's body is larger than `max_request_body`.
    fn too_large(&self, mut rlog: RequestLog, started: Instant) -> Response<Body> {
        self.metrics.error(&self.route, HttpError::BodyTooLarge);
        rlog.detail = Some(format!("request body over max_request_body ({} bytes)", self.max_body));
        self.answered(rlog, started, error_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n"))
    }

    /// What runs once a forwarded response has ended or its client has gone: `held` (the
    /// origin stream's place, a pooled connection, an upload) is let go first, then the request
    /// is counted and its line written.
    fn on_response_end<H>(&self, held: H, rlog: RequestLog, started: Instant) -> impl FnOnce(u64) + use<H> {
        let (metrics, down) = (self.route_metrics.clone(), self.down.clone());
        move |sent| {
            drop(held);
            down.fetch_add(sent, Ordering::Relaxed);
            rlog.finish(started, sent, &metrics);
        }
    }

    /// A response edgewarm gives itself (an error, or an upgrade's answer): counted and logged
    /// now.
    fn answered(&self, mut rlog: RequestLog, started: Instant, response: Response<Body>) -> Response<Body> {
        rlog.status = response.status().as_u16();
        rlog.finish(started, 0, &self.route_metrics);
        response
    }

    /// The request as the origin should get it, or the answer to give the client instead (see
    /// [`Self::origin_target`]).
    #[allow(clippy::result_large_err)]
    fn origin_request<B>(&self, req: &Request<B>, rlog: &mut RequestLog) -> Result<Request<()>, Response<Body>> {
        let target = self.origin_target(req, rlog)?;
        Ok(forward::head(req, target, &self.facts))
    }

    /// Where the request goes at the origin, or the answer to give the client instead: 400 for
    /// a request that cannot be forwarded; 421 for a name this route does not serve (an HTTP/2
    /// client reusing the connection for another name its certificate covers), so the client
    /// opens a connection for that name and is routed afresh.
    // The error is the response to send, used at once: boxing it would only add an allocation.
    #[allow(clippy::result_large_err)]
    fn origin_target<B>(&self, req: &Request<B>, rlog: &mut RequestLog) -> Result<http::Uri, Response<Body>> {
        let target = forward::target(req).map_err(|e| {
            rlog.detail = Some(e.to_string());
            error_response(StatusCode::BAD_REQUEST, "bad request\n")
        })?;
        let host = target.host().unwrap_or_default();
        // A connection without SNI (by address) was routed by that; it serves any name.
        let routed = self.snapshot.routes.lookup(Some(host));
        if &*self.route != crate::route::NO_SNI && routed.is_none_or(|r| r.name != self.route) {
            rlog.detail = Some(format!("{host} is not served by route {}", self.route));
            return Err(error_response(StatusCode::MISDIRECTED_REQUEST, "misdirected request\n"));
        }
        Ok(target)
    }

    /// A protocol upgrade (WebSocket): an RFC 8441 stream on the standing connections when the
    /// origin offers it, else its own HTTP/1.1 origin connection ([`upgrade`]); the answer is
    /// the origin's (`101` and then a relay, or whatever it said).
    async fn upgrade(&self, req: Request<Incoming>, rlog: &mut RequestLog) -> Response<Body> {
        let head = match self.origin_request(&req, rlog) {
            Ok(head) => head,
            Err(response) => return response,
        };
        let timeout = self.snapshot.timeouts.connect;
        if let Origin::H2(upstream) = &self.origin {
            if upgrade::is_websocket(&req) && upstream.extended_connect() {
                let carried = upgrade::websocket_h2(
                    req,
                    &head,
                    upstream,
                    timeout,
                    &self.upgrades,
                    self.cut.clone(),
                    self.facts.via(),
                )
                .await;
                return match carried {
                    Ok((response, conn)) => {
                        rlog.origin_conn = Some(conn);
                        rlog.reused = true;
                        response
                    }
                    Err(e) => self.upgrade_failed(rlog, &e),
                };
            }
        }
        let Some(RouteAction::Http(route)) = self.snapshot.routes.lookup(head.uri().host()).map(|r| &r.action) else {
            return error_response(StatusCode::MISDIRECTED_REQUEST, "misdirected request\n");
        };
        // No ALPN offered: HTTP/1.1 is the default without it, and WebSocket servers often do
        // not negotiate ALPN at all (an offer of `http/1.1` they ignore would fail the check).
        let alpn = None;
        let dial = TlsDial {
            key: route.origin.key(alpn),
            connector: tokio_rustls::TlsConnector::from(route.origin.config(alpn)),
            server_name: route.origin.server_name.clone(),
            resolver: self.snapshot.resolver.clone(),
        };
        match upgrade::upgrade(req, &head, dial, timeout, &self.upgrades, self.cut.clone()).await {
            Ok(response) => {
                let mut response = upgrade::boxed(response);
                if response.status() != StatusCode::SWITCHING_PROTOCOLS {
                    forward::response_headers(response.headers_mut(), self.facts.via());
                }
                response
            }
            Err(e) => self.upgrade_failed(rlog, &e),
        }
    }

    fn upgrade_failed(&self, rlog: &mut RequestLog, e: &upgrade::UpgradeError) -> Response<Body> {
        rlog.detail = Some(e.to_string());
        self.metrics.error(&self.route, HttpError::OriginError);
        error_response(StatusCode::BAD_GATEWAY, "origin failed the upgrade\n")
    }

    /// One request to an HTTP/1.1 origin, on a pooled keep-alive connection, which goes back
    /// to the pool when the response body has ended (the lease is held until then).
    // The error is the response to send (or a 413 in its place), used at once.
    #[allow(clippy::result_large_err)]
    async fn forward_h1<B>(
        &self,
        h1: &Arc<H1Upstream>,
        req: Request<Capped<B>>,
        mut early: bool,
        rlog: &mut RequestLog,
        started: Instant,
    ) -> Result<(Response<Incoming>, Lease), Response<Body>>
    where
        B: ClientBody,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let head = self.origin_request(&req, rlog)?;
        let authority = head.uri().authority().map(|a| a.as_str().to_string()).unwrap_or_default();
        let path: http::Uri = head
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|_| error_response(StatusCode::BAD_REQUEST, "bad request\n"))?;
        let mut body = Some(req.into_body());
        let (mut response, lease) = loop {
            let counter = rlog.bytes_up.get_or_insert_with(Arc::default).clone();
            // Sent again only after a 425, and only bodiless requests go out early.
            let out_body = match body.take() {
                Some(b) => upstream_body::OnEnd::new(b, move |n| {
                    counter.fetch_add(n, Ordering::Relaxed);
                })
                .map_err(Into::into)
                .boxed(),
                None => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
            };
            let mut out = Request::new(out_body);
            *out.method_mut() = head.method().clone();
            *out.uri_mut() = path.clone();
            *out.headers_mut() = head.headers().clone();
            if let Ok(host) = http::HeaderValue::from_str(&authority) {
                out.headers_mut().insert(http::header::HOST, host);
            }
            if early {
                out.headers_mut().insert(EARLY_DATA, http::HeaderValue::from_static("1"));
            }
            match tokio::time::timeout(self.origin_response, h1.send(out)).await {
                Err(_) => {
                    self.metrics.error(&self.route, HttpError::Timeout);
                    rlog.detail = Some("origin response timed out".into());
                    return Err(error_response(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"));
                }
                Ok(Err(e)) => {
                    self.metrics.error(&self.route, HttpError::OriginError);
                    rlog.detail = Some(e.to_string());
                    return Err(error_response(StatusCode::BAD_GATEWAY, "origin failed\n"));
                }
                Ok(Ok((response, _))) if early && response.status() == StatusCode::TOO_EARLY => {
                    early = false;
                    if !self.after_too_early(rlog).await {
                        return Err(error_response(StatusCode::BAD_REQUEST, "TLS handshake failed\n"));
                    }
                }
                Ok(Ok(ok)) => break ok,
            }
        };
        rlog.ttfb = Some(started.elapsed());
        rlog.reused = lease.reused;
        rlog.status = response.status().as_u16();
        forward::response_headers(response.headers_mut(), self.facts.via());
        Ok((response, lease))
    }

    /// Send the request to the origin and return its response head and body stream, or the
    /// error response to give the client.
    async fn forward<B>(
        &self,
        req: Request<Capped<B>>,
        early: bool,
        rlog: &mut RequestLog,
        started: Instant,
    ) -> Result<(http::response::Parts, h2::RecvStream, Slot, Option<Upload>), Response<Body>>
    where
        B: ClientBody,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let target = self.origin_target(&req, rlog)?;
        let (parts, body) = req.into_parts();
        let client_head = Request::from_parts(parts, ());
        // The origin request is built from the client's head each time it is placed on a
        // stream (h2 takes it whole), so the common case copies the client's headers once.
        let early = AtomicBool::new(early);
        let mut build = || {
            let mut head = forward::head(&client_head, target.clone(), &self.facts);
            if early.load(Ordering::Relaxed) {
                head.headers_mut().insert(EARLY_DATA, http::HeaderValue::from_static("1"));
            }
            head
        };
        let end_of_stream = hyper::body::Body::is_end_stream(&body);
        // A small body of known length is read first and kept, so the request can be sent
        // again when the origin provably never took it (a large one streams and cannot be).
        let small = hyper::body::Body::size_hint(&body).exact().is_some_and(|n| n <= MAX_REPLAY_BODY);
        let (mut body, replay) = if small && !end_of_stream {
            match body.collect().await {
                Ok(collected) => (None, Some(collected.to_bytes())),
                Err(e) => {
                    rlog.detail = Some(e.to_string());
                    return Err(error_response(StatusCode::BAD_REQUEST, "incomplete request body\n"));
                }
            }
        } else {
            (Some(body), None)
        };
        // Whether the whole request can be sent again.
        let resendable = end_of_stream || replay.is_some();
        let mut attempt = 0;
        let (response, slot, upload) = loop {
            attempt += 1;
            let Origin::H2(upstream) = &self.origin else { unreachable!("HTTP/1.1 origins are served by forward_h1") };
            let sent = upstream.send(&mut build, end_of_stream).await.map_err(|e| {
                rlog.detail = Some(e.to_string());
                self.metrics.error(&self.route, HttpError::NoConnection);
                error_response(StatusCode::SERVICE_UNAVAILABLE, "origin unavailable\n")
            })?;
            rlog.origin_conn = Some(sent.conn_id);
            rlog.reused = sent.reused;
            // The body goes up while we wait for the response: an origin may answer early.
            let counter = rlog.bytes_up.get_or_insert_with(Arc::default).clone();
            let conn_total = self.up.clone();
            let upload = match (&replay, body.take()) {
                (Some(bytes), _) => {
                    let (tx, b) = (sent.body, http_body_util::Full::new(bytes.clone()));
                    Some(Upload(tokio::spawn(async move {
                        let r = body::send(b, tx, counter.clone()).await;
                        conn_total.fetch_add(counter.load(Ordering::Relaxed), Ordering::Relaxed);
                        r
                    })))
                }
                (None, Some(b)) if !end_of_stream => {
                    let tx = sent.body;
                    Some(Upload(tokio::spawn(async move {
                        let r = body::send(b, tx, counter.clone()).await;
                        conn_total.fetch_add(counter.load(Ordering::Relaxed), Ordering::Relaxed);
                        r
                    })))
                }
                _ => None,
            };
            let response = sent.response;
            match tokio::time::timeout(self.origin_response, response).await {
                Err(_) => {
                    drop(upload);
                    self.metrics.error(&self.route, HttpError::Timeout);
                    rlog.detail = Some("origin response timed out".into());
                    return Err(error_response(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"));
                }
                Ok(Err(e)) if resendable && attempt < MAX_ATTEMPTS && never_processed(&e) => {
                    // The origin refused the stream before doing anything with it: safe to
                    // send again, whatever the method.
                    self.metrics.retry(&self.route);
                    rlog.retries += 1;
                }
                Ok(Err(e))
                    if resendable
                        && attempt < MAX_ATTEMPTS
                        && idempotent(client_head.method())
                        && (e.is_io() || e.is_go_away()) =>
                {
                    // The connection died before any response header: the origin may or may not
                    // have acted, which an idempotent request without a body allows (RFC 9110
                    // §9.2.2); anything else gets its 502.
                    self.metrics.retry(&self.route);
                    rlog.retries += 1;
                }
                Ok(Err(e)) => {
                    drop(upload);
                    self.metrics.error(&self.route, HttpError::OriginError);
                    rlog.detail = Some(e.to_string());
                    return Err(error_response(StatusCode::BAD_GATEWAY, "origin failed\n"));
                }
                Ok(Ok(resp))
                    if early.load(Ordering::Relaxed) && resp.status() == StatusCode::TOO_EARLY && resendable =>
                {
                    // Sent again once the handshake is complete, no longer early.
                    early.store(false, Ordering::Relaxed);
                    attempt -= 1;
                    if !self.after_too_early(rlog).await {
                        return Err(error_response(StatusCode::BAD_REQUEST, "TLS handshake failed\n"));
                    }
                }
                // The upload, if any, finishes on its own (or fails and resets the stream).
                Ok(Ok(resp)) => break (resp, sent.slot, upload),
            }
        };
        rlog.ttfb = Some(started.elapsed());
        let (mut parts, recv) = response.into_parts();
        forward::response_headers(&mut parts.headers, self.facts.via());
        parts.version = http::Version::HTTP_11;
        Ok((parts, recv, slot, upload))
    }
}

/// RFC 8470 §5.1: tells the origin the request arrived in TLS early data.
const EARLY_DATA: http::HeaderName = http::HeaderName::from_static("early-data");

/// Methods a client expects may be sent twice (RFC 9110 §9.2.2).
fn idempotent(m: &http::Method) -> bool {
    matches!(
        *m,
        http::Method::GET
            | http::Method::HEAD
            | http::Method::OPTIONS
            | http::Method::TRACE
            | http::Method::PUT
            | http::Method::DELETE
    )
}

/// The origin never acted on the stream: REFUSED_STREAM (RFC 9113 §8.7), or the stream was
/// above the last stream id of a graceful GOAWAY (h2 fails those with the GOAWAY's NO_ERROR;
/// a graceful GOAWAY promises the streams it does not cover were not processed).
fn never_processed(e: &h2::Error) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}

/// A request body on its way to the origin, stopped when dropped: when the request is over
/// (response finished, error answered, or the client gone), so no upload outlives its request.
struct Upload(tokio::task::JoinHandle<Result<(), body::SendError>>);

impl Drop for Upload {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn error_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let body = Full::new(Bytes::from_static(text.as_bytes())).map_err(|never| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    r
}
