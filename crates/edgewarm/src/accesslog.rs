//! One line per connection, written when it closes: who, what they asked for, where it went,
//! how much moved, how long each step took, and why it ended. With `--log-format json` every
//! field is a JSON key. The line's level is the close reason's level, so origin trouble stands
//! out from ordinary client noise.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use tracing::Level;

use crate::error::CloseReason;
use crate::metrics::RouteName;

/// Log target of the access log, for filtering (`RUST_LOG=edgewarm::access=off`).
pub(crate) const TARGET: &str = "edgewarm::access";

#[derive(Debug)]
pub(crate) struct AccessLog {
    pub client: SocketAddr,
    pub listener: SocketAddr,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    pub route: Option<RouteName>,
    /// prewarm: the ALPN protocol negotiated with the client.
    pub alpn_selected: Option<String>,
    /// prewarm, http: the client's TLS version.
    pub tls_version: Option<String>,
    /// The client's TLS 1.3 early data (0-RTT) was accepted.
    pub early_data: bool,
    /// prewarm: `hit` (warm connection) or `miss` (connected on demand).
    pub pool: Option<&'static str>,
    pub origin: Option<String>,
    pub origin_addr: Option<SocketAddr>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub hello_time: Option<Duration>,
    pub connect_time: Option<Duration>,
    pub first_byte: Option<Duration>,
    pub duration: Duration,
    pub reason: CloseReason,
    /// The error behind the reason, if any.
    pub detail: Option<String>,
}

/// Optional values render as `-`, like common log format.
struct Opt<'a, T>(&'a Option<T>);

impl<T: fmt::Display> fmt::Display for Opt<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

struct Ms(Option<Duration>);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{:.3}", d.as_secs_f64() * 1e3),
            None => f.write_str("-"),
        }
    }
}

macro_rules! access_event {
    ($level:expr, $log:expr) => {{
        let l = $log;
        tracing::event!(
            target: TARGET,
            $level,
            client = %l.client,
            listener = %l.listener,
            sni = %Opt(&l.sni),
            alpn = %l.alpn.join(","),
            route = %Opt(&l.route),
            alpn_selected = %Opt(&l.alpn_selected),
            tls = %Opt(&l.tls_version),
            early_data = l.early_data,
            pool = %Opt(&l.pool),
            origin = %Opt(&l.origin),
            origin_addr = %Opt(&l.origin_addr),
            bytes_up = l.bytes_up,
            bytes_down = l.bytes_down,
            hello_ms = %Ms(l.hello_time),
            connect_ms = %Ms(l.connect_time),
            first_byte_ms = %Ms(l.first_byte),
            duration_ms = %Ms(Some(l.duration)),
            reason = l.reason.label(),
            detail = %Opt(&l.detail),
            "connection closed"
        )
    }};
}

impl AccessLog {
    /// The record of a connection just accepted from `client` on `listener`.
    pub(crate) fn new(client: std::net::SocketAddr, listener: std::net::SocketAddr) -> Self {
        Self {
            client,
            listener,
            sni: None,
            alpn: Vec::new(),
            route: None,
            alpn_selected: None,
            tls_version: None,
            early_data: false,
            pool: None,
            origin: None,
            origin_addr: None,
            bytes_up: 0,
            bytes_down: 0,
            hello_time: None,
            connect_time: None,
            first_byte: None,
            duration: Default::default(),
            reason: CloseReason::Done,
            detail: None,
        }
    }

    pub(crate) fn emit(&self) {
        // `event!` needs its level at compile time; one arm per level.
        match self.reason.level() {
            Level::ERROR => access_event!(Level::ERROR, self),
            Level::WARN => access_event!(Level::WARN, self),
            Level::INFO => access_event!(Level::INFO, self),
            Level::DEBUG => access_event!(Level::DEBUG, self),
            Level::TRACE => access_event!(Level::TRACE, self),
        }
    }
}

/// One line per request on `http` routes, beside the connection's own line. The path is logged
/// without its query string (queries carry tokens and personal data).
#[derive(Debug)]
pub(crate) struct RequestLog {
    pub(crate) client: SocketAddr,
    pub(crate) route: RouteName,
    pub(crate) method: http::Method,
    pub(crate) version: http::Version,
    /// Kept as the client sent them (cheap shared copies); rendered only if the line is written.
    uri: http::Uri,
    host: Option<http::HeaderValue>,
    pub(crate) status: u16,
    /// Request body bytes sent to the origin (counted by the upload as it goes), if any.
    pub(crate) bytes_up: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    pub(crate) bytes_down: u64,
    pub(crate) duration: Duration,
    /// From the request's arrival to the origin's response headers.
    pub(crate) ttfb: Option<Duration>,
    /// Which standing origin connection carried it, and whether it had carried others before.
    pub(crate) origin_conn: Option<u64>,
    pub(crate) reused: bool,
    pub(crate) retries: u32,
    /// What the route's cache did with it, on routes with one.
    pub(crate) cache: Option<crate::metrics::CacheResult>,
    /// The server of the route's group that answered (routes with several).
    pub(crate) server: Option<std::sync::Arc<str>>,
    /// The route's rule it met (`rules[3]`), on a route with rules.
    pub(crate) rule: Option<std::sync::Arc<str>>,
    /// The upstream it was sent to: a name from the file (none for the edge's own answer).
    pub(crate) upstream: Option<RouteName>,
    /// Counted by its upstream too (a route with rules, where that is the rule's to say).
    pub(crate) by_upstream: bool,
    pub(crate) detail: Option<String>,
    /// The request is gRPC: the edge's own answers to it are gRPC's ([`crate::http::grpc`]);
    /// `status` stays the HTTP status the edge meant.
    pub(crate) grpc: bool,
}

impl RequestLog {
    pub(crate) fn new<B>(req: &http::Request<B>, client: SocketAddr, route: &RouteName) -> Self {
        Self {
            client,
            route: route.clone(),
            method: req.method().clone(),
            version: req.version(),
            uri: req.uri().clone(),
            host: req.headers().get(http::header::HOST).cloned(),
            status: 0,
            bytes_up: None,
            bytes_down: 0,
            duration: Duration::ZERO,
            ttfb: None,
            origin_conn: None,
            reused: false,
            cache: None,
            server: None,
            rule: None,
            upstream: None,
            by_upstream: false,
            retries: 0,
            detail: None,
            grpc: false,
        }
    }

    /// The request is over: its size and duration recorded, counted in `metrics`, its line
    /// written.
    pub(crate) fn finish(
        mut self,
        started: std::time::Instant,
        bytes_down: u64,
        metrics: &crate::metrics::RouteHttpMetrics,
    ) {
        self.bytes_down = bytes_down;
        self.duration = started.elapsed();
        metrics.request(self.status, self.duration);
        if let (true, Some(upstream)) = (self.by_upstream, &self.upstream) {
            metrics.upstream(upstream, self.status);
        }
        self.emit();
    }

    pub(crate) fn emit(&self) {
        let level = if self.status >= 500 { Level::WARN } else { Level::INFO };
        if (level == Level::INFO && !tracing::enabled!(target: TARGET, Level::INFO))
            || !tracing::enabled!(target: TARGET, Level::WARN)
        {
            return;
        }
        let authority =
            self.uri.authority().map(|a| a.as_str()).or_else(|| self.host.as_ref().and_then(|h| h.to_str().ok()));
        let bytes_up = self.bytes_up.as_ref().map_or(0, |b| b.load(std::sync::atomic::Ordering::Relaxed));
        macro_rules! request_event {
            ($level:expr) => {
                tracing::event!(
                    target: TARGET,
                    $level,
                    client = %self.client,
                    route = %self.route,
                    method = %self.method,
                    version = ?self.version,
                    authority = %Opt(&authority),
                    path = %self.uri.path(),
                    status = self.status,
                    bytes_up,
                    bytes_down = self.bytes_down,
                    ttfb_ms = %Ms(self.ttfb),
                    duration_ms = %Ms(Some(self.duration)),
                    origin_conn = %Opt(&self.origin_conn),
                    reused = self.reused,
                    retries = self.retries,
                    cache = %Opt(&self.cache.map(|c| c.label())),
                    server = %Opt(&self.server.as_deref()),
                    rule = %Opt(&self.rule.as_deref()),
                    upstream = %Opt(&self.upstream),
                    detail = %Opt(&self.detail),
                    "request"
                )
            };
        }
        // Origin failures (5xx made here or by the origin) stand out; the rest is traffic.
        if level == Level::WARN {
            request_event!(Level::WARN);
        } else {
            request_event!(Level::INFO);
        }
    }
}
