//! The standing origin connections' metrics: the `pool_*` families (every kind: warm
//! connections, hits, handshakes) and the `upstream_*` ones (HTTP/2 sets: PINGs, GOAWAYs,
//! replacements), each registered under its own prefix.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{latency_histogram, HistogramFamily, RouteName};
use crate::error::CloseReason;

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
    /// HTTP/3 origin connections that resumed with 0-RTT, by whether the origin took it.
    pub zero_rtt: Family<UpstreamZeroRttLabel, Counter>,
}
/// An `http` route's origin, and what became of a 0-RTT reconnect to it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamZeroRttLabel {
    pub route: RouteName,
    pub origin: String,
    pub result: super::ZeroRtt,
}
impl UpstreamMetrics {
    pub(super) fn new() -> Self {
        Self {
            ping_rtt: Family::default(),
            goaways: Family::default(),
            replaced: Family::default(),
            connect_errors: Family::default(),
            spills: Family::default(),
            open: Family::default(),
            streams: Family::default(),
            zero_rtt: Family::default(),
        }
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register("ping_rtt_seconds", "Last HTTP/2 PING round trip to the origin", self.ping_rtt.clone());
        r.register("goaways", "GOAWAYs received from origins", self.goaways.clone());
        r.register("replaced", "Origin connections ended or retired, by reason", self.replaced.clone());
        r.register("connect_errors", "Failed HTTP/2 origin connects", self.connect_errors.clone());
        r.register("spills", "Connections opened because every one was at its stream limit", self.spills.clone());
        r.register("connections", "Standing HTTP/2 origin connections open now", self.open.clone());
        r.register("streams", "Requests in flight on standing origin connections", self.streams.clone());
        r.register("zero_rtt", "HTTP/3 origin reconnects that sent 0-RTT, by result", self.zero_rtt.clone());
    }
}
/// One server of a route's group (`origins:`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub route: RouteName,
    pub server: String,
}
label_enum! {
    /// Why a server of a group was taken out: its standing connections gone and a reconnect
    /// refused (`down`, active), a wrong answer to the health probe (`probe`), or failures in a
    /// row (passive): connects, timeouts, resets, 5xx answers.
    ServerFault {
        Down => "down",
        Connect => "connect",
        Timeout => "timeout",
        Reset => "reset",
        Status => "5xx",
        Probe => "probe",
    }
}
impl ServerFault {
    /// Every reason (to remove a server's series when a reload drops it).
    pub const ALL: [Self; 6] = [Self::Down, Self::Connect, Self::Timeout, Self::Reset, Self::Status, Self::Probe];
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerEjection {
    pub route: RouteName,
    pub server: String,
    pub reason: ServerFault,
}
/// The servers of routes with several (`origin_*`).
#[derive(Default)]
pub struct ServerMetrics {
    /// 1 while the server takes requests (healthy), 0 while it is down or ejected.
    pub up: Family<ServerLabels, Gauge>,
    pub ejections: Family<ServerEjection, Counter>,
    /// Attempts a server was sent after another of its group failed them before a response
    /// (or answered 425 to early data), by the server that took them.
    pub retried_elsewhere: Family<ServerLabels, Counter>,
}
impl ServerMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register("server_up", "1 while a server of a route's group takes requests", self.up.clone());
        r.register("ejections", "Servers taken out of a route's group, by reason", self.ejections.clone());
        r.register(
            "retried_elsewhere",
            "Requests sent to this server after another of the group failed them before a response",
            self.retried_elsewhere.clone(),
        );
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
    pub(super) fn new() -> Self {
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

    pub(super) fn register(&self, r: &mut Registry) {
        r.register("hits", "Clients given a warm origin connection", self.hits.clone());
        r.register("misses", "Clients that found the pool empty and connected on demand", self.misses.clone());
        r.register("ready", "Warm connections ready now", self.ready.clone());
        r.register("connecting", "Origin connections being warmed now", self.connecting.clone());
        r.register("target", "Warm connections the pool aims to hold", self.target.clone());
        r.register("opened", "Origin TLS connections completed (warm and on demand)", self.opened.clone());
        r.register("discarded", "Warm connections discarded before use, by reason", self.discarded.clone());
        r.register("expired", "Warm connections closed unused after max_idle (waste)", self.expired.clone());
        r.register("connect_errors", "Failed origin connects or handshakes, by reason", self.connect_errors.clone());
        r.register("retries", "Connect attempts made after a failure (backoff)", self.retries.clone());
        r.register("handshake_duration_seconds", "Origin TCP connect + TLS handshake", self.handshake_seconds.clone());
    }
}
