//! Prometheus metrics, registered in an explicit registry (no globals) so tests can run many
//! servers in one process and read each one's numbers. This file keeps what every stage shares
//! (the route label, label enums, the latency buckets, the registry and its exposition); each
//! stage's families are in their own file and registered under the stage's prefix: [`http`],
//! [`origin`] (`origin_connect_failures`, `pool_*`, `upstream_*`), [`tls`].
use crate::error::CloseReason;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

        impl prometheus_client::encoding::EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
                prometheus_client::encoding::EncodeLabelValue::encode(&self.label(), encoder)
            }
        }
    };
}

mod cache;
mod http;
mod origin;
mod quic;
mod tls;

pub use cache::*;
pub use http::*;
pub use origin::*;
pub use quic::*;
pub use tls::*;
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
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
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
pub(crate) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
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
/// 0.5 ms to ~16 s in doublings: covers loopback through a long intercontinental link.
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}
pub struct Metrics {
    pub accepted: Family<ListenerLabel, Counter>,
    /// Idle connections a full listener asked to finish (`limits::reclaim`).
    pub reclaimed: Family<ListenerLabel, Counter>,
    pub active: Gauge,
    pub closed: Family<RouteReason, Counter>,
    pub hello_parsed: Counter,
    pub hello_rejected: Family<ReasonLabel, Counter>,
    pub bytes: Family<RouteDirection, Counter>,
    pub origin_connect_seconds: HistogramFamily<RouteLabel>,
    /// Deprecated alias of `origin_connect_failures{kind="tunnel"}`, kept for one release.
    pub origin_connect_errors: Family<RouteReason, Counter>,
    /// Every failed connect to an origin server, whatever was connecting (see
    /// [`Metrics::origin_connect_failed`]).
    pub origin_connect_failures: Family<ConnectFailureLabels, Counter>,
    pub first_origin_byte_seconds: HistogramFamily<RouteLabel>,
    pub accept_errors: Family<AcceptErrorLabel, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// Upgrades: as the old process `handed_over` or `abandoned`; as the new one `took_over`,
    /// and `cold` when its warm-up ran out first.
    pub upgrades: Family<ResultLabel, Counter>,
    pub pool: PoolMetrics,
    pub http: HttpMetrics,
    pub cache: CacheMetrics,
    pub upstream: UpstreamMetrics,
    pub servers: ServerMetrics,
    pub early: EarlyMetrics,
    pub quic: QuicMetrics,
    pub ktls: Family<KtlsLabels, Counter>,
    pub relay_fallbacks: Family<RouteFallback, Counter>,
    /// When each route's certificate expires (Unix seconds; `prewarm` and `http` routes).
    pub cert_expiry: Family<RouteLabel, Gauge>,
    /// ACME orders, by how they ended.
    pub acme_orders: Family<AcmeResult, Counter>,
    /// ACME accounts registered, by why.
    pub acme_accounts: Family<AcmeAccount, Counter>,
    /// Clients limited, by where and why.
    pub limited: Family<LimitedLabel, Counter>,
    /// The fleet's purge stream had lost purges this node had not applied: its caches dropped.
    pub fleet_cache_drops: Counter,
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
            reclaimed: Family::default(),
            active: Gauge::default(),
            closed: Family::default(),
            hello_parsed: Counter::default(),
            hello_rejected: Family::default(),
            bytes: Family::default(),
            origin_connect_seconds: Family::new_with_constructor(latency_histogram),
            origin_connect_errors: Family::default(),
            origin_connect_failures: Family::default(),
            first_origin_byte_seconds: Family::new_with_constructor(latency_histogram),
            accept_errors: Family::default(),
            config_reloads: Family::default(),
            upgrades: Family::default(),
            pool: PoolMetrics::new(),
            http: HttpMetrics::new(),
            cache: CacheMetrics::default(),
            upstream: UpstreamMetrics::new(),
            servers: ServerMetrics::default(),
            early: EarlyMetrics::default(),
            quic: QuicMetrics::new(),
            ktls: Family::default(),
            relay_fallbacks: Family::default(),
            cert_expiry: Family::default(),
            acme_orders: Family::default(),
            acme_accounts: Family::default(),
            limited: Family::default(),
            fleet_cache_drops: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("connections_accepted", "Client connections accepted", m.accepted.clone());
        registry.register(
            "connections_reclaimed",
            "Idle HTTP connections a listener at max_connections asked to finish, to admit new clients",
            m.reclaimed.clone(),
        );
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
            "Failed tunnel origin connects, by route and reason (deprecated: use edgewarm_origin_connect_failures_total)",
            m.origin_connect_errors.clone(),
        );
        registry.register(
            "origin_connect_failures",
            "Failed connects to origin servers, by route, server, kind (tunnel, prewarm, http/1.1, h2, h2c, h3) and reason",
            m.origin_connect_failures.clone(),
        );
        registry.register(
            "accept_to_first_origin_byte_seconds",
            "From accept to the origin's first byte (its ServerHello)",
            m.first_origin_byte_seconds.clone(),
        );
        registry.register("accept_errors", "accept(2) failures, by errno kind", m.accept_errors.clone());
        registry.register("config_reloads", "Configuration reloads, by result", m.config_reloads.clone());
        registry.register(
            "upgrades",
            "Upgrades: handed_over or abandoned (this process was the old one), took_over, cold (this process was the new one; cold: accepting before its origin connections were all up)",
            m.upgrades.clone(),
        );
        m.pool.register(registry.sub_registry_with_prefix("pool"));
        m.http.register(registry.sub_registry_with_prefix("http"));
        m.cache.register(registry.sub_registry_with_prefix("cache"));
        m.upstream.register(registry.sub_registry_with_prefix("upstream"));
        m.servers.register(registry.sub_registry_with_prefix("origin"));
        m.early.register(registry.sub_registry_with_prefix("tls"));
        m.quic.register(registry.sub_registry_with_prefix("quic"));
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
        registry.register(
            "tls_certificate_expiry_seconds",
            "When each route's certificate expires, in Unix seconds (alert on it minus time())",
            m.cert_expiry.clone(),
        );
        registry.register(
            "acme_orders",
            "ACME certificate orders, by result (valid, rejected by the server, failed to complete)",
            m.acme_orders.clone(),
        );
        registry.register(
            "acme_accounts_registered",
            "ACME accounts registered, by reason (none stored, the stored one unreadable, refused by the server)",
            m.acme_accounts.clone(),
        );
        registry.register(
            "limited",
            "Connections and requests refused by a limit: scope listener or route, reason client_connections, denied or rate",
            m.limited.clone(),
        );
        registry.register(
            "fleet_cache_drops",
            "Caches dropped whole because the fleet's purge stream no longer held purges this node had missed",
            m.fleet_cache_drops.clone(),
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

    /// One connect to `server` of `route` failed (`kind`: what was connecting, see
    /// [`ConnectFailureLabels`]). Every kind counts each failed attempt here once, so one query
    /// graphs every origin connect failure; the deprecated per-kind families are counted
    /// beside it by their callers.
    pub fn origin_connect_failed(&self, route: &RouteName, server: &str, kind: &'static str, reason: ConnectFailure) {
        let labels = ConnectFailureLabels { route: route.clone(), server: server.to_owned(), kind, reason };
        self.origin_connect_failures.get_or_create(&labels).inc();
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
/// The sum of a metric's samples whose labels include `labels`, in an OpenMetrics text
/// exposition (labels left out are summed over, as in PromQL's `sum`); `None` when no series
/// matches yet.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (metric == name && all).then(|| value.parse::<f64>().ok()).flatten()
        })
        .reduce(|a, b| a + b)
}
