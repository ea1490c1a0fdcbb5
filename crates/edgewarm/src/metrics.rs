//! Prometheus metrics, registered in an explicit registry (no globals) so tests can run many
//! servers in one process and read each one's numbers.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::CloseReason;

/// A closed set of label values: an enum whose variants are the only values the label takes.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub fn label(self) -> &'static str {
                match self {
                    $(Self::$variant => $label),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
                EncodeLabelValue::encode(&self.label(), encoder)
            }
        }
    };
}

/// A route's name (its SNI pattern): shared, so a label costs a reference count, not a copy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteName(Arc<str>);

impl RouteName {
    pub fn new(name: &str) -> Self {
        Self(Arc::from(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RouteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for RouteName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl EncodeLabelValue for RouteName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: RouteName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteReason {
    pub route: RouteName,
    pub reason: CloseReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: CloseReason,
}

label_enum! {
    /// Why accept(2) failed: out of descriptors or memory, or one connection's own error.
    AcceptError {
        Resources => "resources",
        Connection => "connection",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AcceptErrorLabel {
    pub reason: AcceptError,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteDirection {
    pub route: RouteName,
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// A warm-connection pool: the route it serves, the origin, the ALPN it speaks.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub route: RouteName,
    pub origin: String,
    pub alpn: String,
}

label_enum! {
    /// Why a warm connection was discarded before use: the origin closed or reset it (`dead`),
    /// or sent more than we buffer for an idle connection (`overflow`).
    Discard {
        Dead => "dead",
        Overflow => "overflow",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolDiscard {
    pub route: RouteName,
    pub origin: String,
    pub alpn: String,
    pub reason: Discard,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReason {
    pub route: RouteName,
    pub origin: String,
    pub alpn: String,
    pub reason: CloseReason,
}

label_enum! {
    /// Why a standing origin connection ended or was retired.
    UpstreamEnd {
        MaxAge => "max_age",
        GoAway => "goaway",
        Closed => "closed",
        Error => "error",
        PingTimeout => "ping_timeout",
        PingFailed => "ping_failed",
        PingUnavailable => "ping_unavailable",
        // Opened for demand and closed after `upstream.idle_timeout` without a stream (not
        // replaced: the standing `connections` remain).
        Idle => "idle",
    }
}

label_enum! {
    /// Why edgewarm answered an `http` request itself.
    HttpError {
        NoConnection => "no_connection",
        Timeout => "timeout",
        OriginError => "origin_error",
        BodyTooLarge => "body_too_large",
        // The client's faults (`fault="client"`), answered 4xx.
        BadRequest => "bad_request",
        BadBody => "bad_body",
        Misdirected => "misdirected",
        MethodNotAllowed => "method_not_allowed",
        HandshakeFailed => "handshake_failed",
        // edgewarm's own fault: a stream's handler panicked (the stream is reset; its
        // connection and the connection's other streams go on).
        Internal => "internal",
    }
}

label_enum! {
    /// Whose fault an error was (the HTTP core's error table says which).
    Fault {
        Client => "client",
        Origin => "origin",
        Edge => "edge",
    }
}

label_enum! {
    /// An HTTP status class.
    StatusClass {
        Informational => "1xx",
        Success => "2xx",
        Redirect => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
    }
}

/// A standing origin connection's end, by reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolEvent {
    pub route: RouteName,
    pub origin: String,
    pub reason: UpstreamEnd,
}

/// One `http` route's origin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamConn {
    pub route: RouteName,
    pub origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    pub route: RouteName,
    pub status: StatusClass,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteError {
    pub route: RouteName,
    pub reason: HttpError,
    pub fault: Fault,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `http` routes: requests, their errors and retries.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    pub requests: Family<RouteStatus, Counter>,
    pub duration: HistogramFamily<RouteLabel>,
    pub errors: Family<RouteError, Counter>,
    pub retries: Family<RouteLabel, Counter>,
}

impl HttpMetrics {
    fn new() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            retries: Family::default(),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register("http_requests", "Requests on http routes, by status class", self.requests.clone());
        r.register("http_request_duration_seconds", "Request to end of response", self.duration.clone());
        r.register("http_errors", "Requests answered by edgewarm with an error, by reason", self.errors.clone());
        r.register("http_retries", "Requests sent again because the origin refused the stream", self.retries.clone());
    }

    pub fn request(&self, route: &RouteName, status: u16, took: std::time::Duration) {
        let class = match status {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirect,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        };
        self.requests.get_or_create(&RouteStatus { route: route.clone(), status: class }).inc();
        self.duration.get_or_create(&RouteLabel { route: route.clone() }).observe(took.as_secs_f64());
    }

    /// One route's request handles, resolved once (per client connection) instead of per
    /// request.
    pub fn for_route(&self, route: &RouteName) -> RouteHttpMetrics {
        let class = |status| self.requests.get_or_create(&RouteStatus { route: route.clone(), status }).clone();
        RouteHttpMetrics {
            by_class: [
                class(StatusClass::Informational),
                class(StatusClass::Success),
                class(StatusClass::Redirect),
                class(StatusClass::ClientError),
                class(StatusClass::ServerError),
            ],
            duration: self.duration.get_or_create(&RouteLabel { route: route.clone() }).clone(),
        }
    }

    pub fn error(&self, route: &RouteName, reason: HttpError, fault: Fault) {
        self.errors.get_or_create(&RouteError { route: route.clone(), reason, fault }).inc();
    }

    pub fn retry(&self, route: &RouteName) {
        self.retries.get_or_create(&RouteLabel { route: route.clone() }).inc();
    }
}

/// [`HttpMetrics::for_route`].
#[derive(Debug)]
pub struct RouteHttpMetrics {
    by_class: [Counter; 5],
    duration: Histogram,
}

impl RouteHttpMetrics {
    pub fn request(&self, status: u16, took: std::time::Duration) {
        let i = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        self.by_class[i].inc();
        self.duration.observe(took.as_secs_f64());
    }
}

/// The standing HTTP/2 origin connections of `http` routes (opened connections and handshake
/// times are in the pool metrics, labelled `alpn="h2"`).
pub struct UpstreamMetrics {
    /// Last PING round trip on any of the origin's connections: the live R of the link.
    pub ping_rtt: Family<UpstreamConn, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub goaways: Family<PoolEvent, Counter>,
    /// Connections that ended or were retired, by why (`max_age`, `goaway`, `ping_timeout`…).
    pub replaced: Family<PoolEvent, Counter>,
    pub connect_errors: Family<PoolLabels, Counter>,
    /// Connections opened beyond `connections` because every one was at its stream limit.
    pub spills: Family<PoolLabels, Counter>,
    /// Standing connections open now (retiring ones included until they close).
    pub open: Family<UpstreamConn, Gauge>,
    /// Requests in flight on them now.
    pub streams: Family<UpstreamConn, Gauge>,
}

impl UpstreamMetrics {
    fn new() -> Self {
        Self {
            ping_rtt: Family::default(),
            goaways: Family::default(),
            replaced: Family::default(),
            connect_errors: Family::default(),
            spills: Family::default(),
            open: Family::default(),
            streams: Family::default(),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register("upstream_ping_rtt_seconds", "Last HTTP/2 PING round trip to the origin", self.ping_rtt.clone());
        r.register("upstream_goaways", "GOAWAYs received from origins", self.goaways.clone());
        r.register("upstream_replaced", "Origin connections ended or retired, by reason", self.replaced.clone());
        r.register("upstream_connect_errors", "Failed HTTP/2 origin connects", self.connect_errors.clone());
        r.register(
            "upstream_spills",
            "Connections opened because every one was at its stream limit",
            self.spills.clone(),
        );
        r.register("upstream_connections", "Standing HTTP/2 origin connections open now", self.open.clone());
        r.register("upstream_streams", "Requests in flight on standing origin connections", self.streams.clone());
    }
}

label_enum! {
    /// What became of a request that arrived in TLS early data (0-RTT).
    EarlyOutcome {
        Forwarded => "forwarded",
        Held => "held",
        RetriedAfter425 => "retried_after_425",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteEarly {
    pub route: RouteName,
    pub outcome: EarlyOutcome,
}

/// TLS 1.3 early data (0-RTT) on routes that accept it.
#[derive(Clone, Debug, Default)]
pub struct EarlyMetrics {
    /// Connections whose early data was accepted.
    pub accepted: Family<RouteLabel, Counter>,
    /// Requests that arrived before the handshake completed, by what was done with them.
    pub requests: Family<RouteEarly, Counter>,
    /// Tickets presented a second time: refused as resumptions, their early data unread.
    pub replays: Family<RouteLabel, Counter>,
    /// Sessions evicted from a full store before their time.
    pub evictions: Family<RouteLabel, Counter>,
}

impl EarlyMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "tls_early_data_accepted",
            "Client connections whose 0-RTT data was accepted",
            self.accepted.clone(),
        );
        r.register(
            "tls_early_requests",
            "Requests received in 0-RTT data, by outcome (forwarded at once, held for the handshake, retried after 425)",
            self.requests.clone(),
        );
        r.register(
            "tls_ticket_replays",
            "Session tickets presented again: refused, their early data never read",
            self.replays.clone(),
        );
        r.register(
            "tls_session_evictions",
            "Sessions evicted from a full 0-RTT session store before expiring",
            self.evictions.clone(),
        );
    }
}

label_enum! {
    /// Where a terminated session's records were encrypted (`edgewarm_ktls_connections_total`):
    /// the kernel took it; unsupported (no kernel TLS, or not this cipher or version); busy (no
    /// quiet record boundary in time, or the peer had closed); failed (the kernel refused keys
    /// rustls had given up: connection closed); short (`auto`, ended before `ktls_after`).
    KtlsResult {
        Kernel => "kernel",
        Unsupported => "unsupported",
        Busy => "busy",
        Failed => "failed",
        Short => "short",
    }
}

label_enum! {
    /// Why a relay direction moved from splice to the user-space copy: no pipe could be made
    /// (descriptors or pipe memory ran out), or the kernel refused splice on these sockets.
    RelayFallback {
        NoPipe => "no_pipe",
        SpliceRefused => "splice_refused",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteFallback {
    pub route: RouteName,
    pub reason: RelayFallback,
}

label_enum! {
    /// Which of a connection's two TLS sessions.
    TlsSide {
        Client => "client",
        Origin => "origin",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KtlsLabels {
    pub route: RouteName,
    pub side: TlsSide,
    pub result: KtlsResult,
}

/// 0.5 ms to ~16 s in doublings: covers loopback through a long intercontinental link.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

pub struct Metrics {
    pub accepted: Family<ListenerLabel, Counter>,
    pub active: Gauge,
    pub closed: Family<RouteReason, Counter>,
    pub hello_parsed: Counter,
    pub hello_rejected: Family<ReasonLabel, Counter>,
    pub bytes: Family<RouteDirection, Counter>,
    pub origin_connect_seconds: HistogramFamily<RouteLabel>,
    pub origin_connect_errors: Family<RouteReason, Counter>,
    pub first_origin_byte_seconds: HistogramFamily<RouteLabel>,
    pub accept_errors: Family<AcceptErrorLabel, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    pub pool: PoolMetrics,
    pub http: HttpMetrics,
    pub upstream: UpstreamMetrics,
    pub early: EarlyMetrics,
    pub ktls: Family<KtlsLabels, Counter>,
    pub relay_fallbacks: Family<RouteFallback, Counter>,
    registry: Registry,
}

/// One route's hot-path metric handles (see [`Metrics::route`]).
#[derive(Clone, Debug)]
pub struct RouteMetrics {
    pub route: RouteName,
    closed: Family<RouteReason, Counter>,
    pub bytes_up: Counter,
    pub bytes_down: Counter,
    pub connect: Histogram,
    pub first_byte: Histogram,
    /// `connections_closed{reason="done"}`, the common ending.
    pub done: Counter,
    relay_fallbacks: Family<RouteFallback, Counter>,
    /// Whether a fallback of each reason was logged yet on this route.
    fallback_logged: Arc<[AtomicBool; 2]>,
}

impl RouteMetrics {
    /// Count a relay direction falling back to copy; `true` the first time for this reason on
    /// this route (the one time it is worth a log line).
    pub fn relay_fallback(&self, reason: RelayFallback) -> bool {
        self.relay_fallbacks.get_or_create(&RouteFallback { route: self.route.clone(), reason }).inc();
        !self.fallback_logged[reason as usize].swap(true, Ordering::Relaxed)
    }

    /// Count this route's connection closed for `reason`. The label is a reference count and
    /// an enum: no allocation per connection.
    pub fn closed(&self, reason: CloseReason) {
        match reason {
            CloseReason::Done => self.done.inc(),
            reason => self.closed.get_or_create(&RouteReason { route: self.route.clone(), reason }).inc(),
        };
    }
}

/// Per-pool metrics (labels route, origin, alpn).
pub struct PoolMetrics {
    pub hits: Family<PoolLabels, Counter>,
    pub misses: Family<PoolLabels, Counter>,
    pub ready: Family<PoolLabels, Gauge>,
    pub connecting: Family<PoolLabels, Gauge>,
    pub target: Family<PoolLabels, Gauge>,
    pub opened: Family<PoolLabels, Counter>,
    /// Discarded before use: `dead` (origin closed or reset it), `overflow` (origin sent more
    /// than we buffer).
    pub discarded: Family<PoolDiscard, Counter>,
    /// Closed unused after `max_idle`: the waste.
    pub expired: Family<PoolLabels, Counter>,
    pub connect_errors: Family<PoolReason, Counter>,
    /// Connect attempts made while the origin was failing (after backoff).
    pub retries: Family<PoolLabels, Counter>,
    pub handshake_seconds: HistogramFamily<PoolLabels>,
}

impl PoolMetrics {
    fn new() -> Self {
        Self {
            hits: Family::default(),
            misses: Family::default(),
            ready: Family::default(),
            connecting: Family::default(),
            target: Family::default(),
            opened: Family::default(),
            discarded: Family::default(),
            expired: Family::default(),
            connect_errors: Family::default(),
            retries: Family::default(),
            handshake_seconds: Family::new_with_constructor(latency_histogram),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register("pool_hits", "Clients given a warm origin connection", self.hits.clone());
        r.register("pool_misses", "Clients that found the pool empty and connected on demand", self.misses.clone());
        r.register("pool_ready", "Warm connections ready now", self.ready.clone());
        r.register("pool_connecting", "Origin connections being warmed now", self.connecting.clone());
        r.register("pool_target", "Warm connections the pool aims to hold", self.target.clone());
        r.register("pool_opened", "Origin TLS connections completed (warm and on demand)", self.opened.clone());
        r.register("pool_discarded", "Warm connections discarded before use, by reason", self.discarded.clone());
        r.register("pool_expired", "Warm connections closed unused after max_idle (waste)", self.expired.clone());
        r.register(
            "pool_connect_errors",
            "Failed origin connects or handshakes, by reason",
            self.connect_errors.clone(),
        );
        r.register("pool_retries", "Connect attempts made after a failure (backoff)", self.retries.clone());
        r.register(
            "pool_handshake_duration_seconds",
            "Origin TCP connect + TLS handshake",
            self.handshake_seconds.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgewarm");
        let m = Self {
            accepted: Family::default(),
            active: Gauge::default(),
            closed: Family::default(),
            hello_parsed: Counter::default(),
            hello_rejected: Family::default(),
            bytes: Family::default(),
            origin_connect_seconds: Family::new_with_constructor(latency_histogram),
            origin_connect_errors: Family::default(),
            first_origin_byte_seconds: Family::new_with_constructor(latency_histogram),
            accept_errors: Family::default(),
            config_reloads: Family::default(),
            pool: PoolMetrics::new(),
            http: HttpMetrics::new(),
            upstream: UpstreamMetrics::new(),
            early: EarlyMetrics::default(),
            ktls: Family::default(),
            relay_fallbacks: Family::default(),
            registry: Registry::default(),
        };
        registry.register("connections_accepted", "Client connections accepted", m.accepted.clone());
        registry.register("connections_active", "Client connections open now", m.active.clone());
        registry.register("connections_closed", "Client connections closed, by route and reason", m.closed.clone());
        registry.register("clienthello_parsed", "ClientHellos read completely", m.hello_parsed.clone());
        registry.register(
            "clienthello_rejected",
            "Connections refused at the ClientHello stage, by reason",
            m.hello_rejected.clone(),
        );
        registry.register("bytes", "Bytes relayed, by route and direction", m.bytes.clone());
        registry.register(
            "origin_connect_duration_seconds",
            "Resolve + TCP connect to the origin (with TFO: until the SYN carrying the hello is sent)",
            m.origin_connect_seconds.clone(),
        );
        registry.register(
            "origin_connect_errors",
            "Failed origin connects, by route and reason",
            m.origin_connect_errors.clone(),
        );
        registry.register(
            "accept_to_first_origin_byte_seconds",
            "From accept to the origin's first byte (its ServerHello)",
            m.first_origin_byte_seconds.clone(),
        );
        registry.register("accept_errors", "accept(2) failures, by errno kind", m.accept_errors.clone());
        registry.register("config_reloads", "Configuration reloads, by result", m.config_reloads.clone());
        m.pool.register(&mut registry);
        m.http.register(&mut registry);
        m.upstream.register(&mut registry);
        m.early.register(&mut registry);
        registry.register(
            "ktls_connections",
            "Terminated TLS sessions on routes with ktls, by side and by where their records were encrypted",
            m.ktls.clone(),
        );
        registry.register(
            "relay_copy_fallbacks",
            "Relay directions that fell back from splice to copying through user space, by reason",
            m.relay_fallbacks.clone(),
        );
        Self { registry, ..m }
    }

    /// Handles for one route's per-connection metrics, looked up once per route instead of
    /// once per connection (each lookup allocates label strings and takes a lock).
    pub fn route(&self, route: &RouteName) -> RouteMetrics {
        let label = RouteLabel { route: route.clone() };
        let dir = |direction| self.bytes.get_or_create(&RouteDirection { route: route.clone(), direction }).clone();
        RouteMetrics {
            route: route.clone(),
            closed: self.closed.clone(),
            bytes_up: dir("client_to_origin"),
            bytes_down: dir("origin_to_client"),
            connect: self.origin_connect_seconds.get_or_create(&label).clone(),
            first_byte: self.first_origin_byte_seconds.get_or_create(&label).clone(),
            done: self.closed.get_or_create(&RouteReason { route: route.clone(), reason: CloseReason::Done }).clone(),
            relay_fallbacks: self.relay_fallbacks.clone(),
            fallback_logged: Arc::default(),
        }
    }

    /// Count a connection closed before it had a route (`route="<none>"`).
    pub fn closed_unrouted(&self, reason: CloseReason) {
        static NONE: std::sync::OnceLock<RouteName> = std::sync::OnceLock::new();
        let route = NONE.get_or_init(|| RouteName::new("<none>")).clone();
        self.closed.get_or_create(&RouteReason { route, reason }).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// One sample's value from the exposition, for tests and the lab:
    /// `sample("edgewarm_clienthello_rejected_total", &[("reason", "http")])`.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        sample(&self.encode(), name, labels)
    }
}

/// Find one sample in an OpenMetrics text exposition; missing means not yet incremented.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        if metric != name {
            return None;
        }
        let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        if all {
            value.parse().ok()
        } else {
            None
        }
    })
}
