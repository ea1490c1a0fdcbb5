//! The origin side's metrics: every kind's failed connects in one family
//! (`origin_connect_failures`), the `pool_*` families (every kind: warm connections, hits,
//! handshakes) and the `upstream_*` ones (the multiplexed sets, HTTP/2 and HTTP/3: PINGs,
//! GOAWAYs, replacements), each registered under its own prefix.

use std::fmt;

use prometheus_client::encoding::{EncodeLabelKey, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{latency_histogram, HistogramFamily, RouteName};
use crate::error::CloseReason;

label_enum! {
    /// How a connect to an origin failed, as far as the edge can tell: nothing listens
    /// (`refused`), the origin closed or reset the connection before it was up (`reset`), no
    /// answer in time (`timeout`), the name has no address (`resolve`), no route to it or
    /// another socket error (`unreachable`), its certificate was rejected (`certificate`),
    /// another TLS failure (`tls`), it would not speak the protocol asked for (`alpn`), or the
    /// connection was up and the HTTP/2 or HTTP/3 handshake on it failed (`protocol`).
    ConnectFailure {
        Refused => "refused",
        Reset => "reset",
        Timeout => "timeout",
        Resolve => "resolve",
        Unreachable => "unreachable",
        Certificate => "certificate",
        Tls => "tls",
        Alpn => "alpn",
        Protocol => "protocol",
    }
}
/// One failed connect to an origin server: the route, the server's address, what was
/// connecting (`tunnel`, `prewarm`, or the request kind: `http/1.1`, `h2`, `h2c`, `h3`) and how
/// it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectFailureLabels {
    pub route: RouteName,
    pub server: String,
    pub kind: &'static str,
    pub reason: ConnectFailure,
}
/// An origin server's address as labels: `server`, the one name every origin-side family
/// uses, and `origin`, the name the `pool_*` and `upstream_*` families had for it before `server`
/// came, still written for one release (deprecated) so a dashboard that selects by it keeps
/// working. Flatten it as the last field of a label set (the derive hands a flattened field
/// the set's encoder itself).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Server(pub String);
impl EncodeLabelSet for Server {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), fmt::Error> {
        for key in ["server", "origin"] {
            let mut label = encoder.encode_label();
            let mut key_encoder = label.encode_label_key()?;
            EncodeLabelKey::encode(&key, &mut key_encoder)?;
            let mut value = key_encoder.encode_label_value()?;
            EncodeLabelValue::encode(&self.0.as_str(), &mut value)?;
            value.finish()?;
        }
        Ok(())
    }
}
impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
/// A warm-connection pool: the route it serves, the ALPN it speaks, the origin server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub route: RouteName,
    pub alpn: String,
    #[prometheus(flatten)]
    pub server: Server,
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
    pub alpn: String,
    pub reason: Discard,
    #[prometheus(flatten)]
    pub server: Server,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReason {
    pub route: RouteName,
    pub alpn: String,
    pub reason: CloseReason,
    #[prometheus(flatten)]
    pub server: Server,
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
    pub reason: UpstreamEnd,
    #[prometheus(flatten)]
    pub server: Server,
}
/// One `http` route's origin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamConn {
    pub route: RouteName,
    #[prometheus(flatten)]
    pub server: Server,
}
/// The standing multiplexed origin connections of `http` routes, HTTP/2 (`h2`, `h2c`) and
/// HTTP/3 (opened connections and handshake times are in the pool metrics, labelled
/// `alpn="h2"`, `"h2c"` or `"h3"`).
pub struct UpstreamMetrics {
    /// Last PING round trip on any of an HTTP/2 origin's connections: the live R of the link
    /// (HTTP/3 connections do not set it).
    pub ping_rtt: Family<UpstreamConn, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub goaways: Family<PoolEvent, Counter>,
    /// Connections that ended or were retired, by why (`max_age`, `goaway`, `ping_timeout`…).
    pub replaced: Family<PoolEvent, Counter>,
    /// Deprecated alias of `origin_connect_failures{kind="h2"|"h2c"|"h3"}`, kept for one release.
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
    pub result: super::ZeroRtt,
    #[prometheus(flatten)]
    pub server: Server,
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
        r.register(
            "connect_errors",
            "Failed HTTP/2 and HTTP/3 origin connects (deprecated: use edgewarm_origin_connect_failures_total)",
            self.connect_errors.clone(),
        );
        r.register("spills", "Connections opened because every one was at its stream limit", self.spills.clone());
        r.register("connections", "Standing HTTP/2 and HTTP/3 origin connections open now", self.open.clone());
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
/// Per-pool metrics (labels route, alpn, server; and `origin`, deprecated, the same as `server`).
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
    /// Deprecated alias of `origin_connect_failures{kind="prewarm"}`, kept for one release.
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
        r.register(
            "connect_errors",
            "Failed prewarm origin connects or handshakes, by reason (deprecated: use edgewarm_origin_connect_failures_total)",
            self.connect_errors.clone(),
        );
        r.register("retries", "Connect attempts made after a failure (backoff)", self.retries.clone());
        r.register("handshake_duration_seconds", "Origin TCP connect + TLS handshake", self.handshake_seconds.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Metrics, RouteName};
    use super::*;

    /// Every kind's failed connect is one sample of one family; the origin-side families
    /// write the address as `server` and, for one release, as `origin` too.
    #[test]
    fn connect_failures_are_one_family_and_servers_are_named_server() {
        let m = Metrics::new();
        let route = RouteName::new("b.test");
        m.origin_connect_failed(&route, "127.0.0.1:9", "http/1.1", ConnectFailure::Refused);
        m.origin_connect_failed(&route, "127.0.0.1:9", "h2", ConnectFailure::Refused);
        m.origin_connect_failed(&route, "127.0.0.1:9", "h2", ConnectFailure::Timeout);
        let family = "edgewarm_origin_connect_failures_total";
        assert_eq!(m.sample(family, &[("route", "b.test"), ("server", "127.0.0.1:9")]), Some(3.0));
        assert_eq!(m.sample(family, &[("kind", "h2"), ("reason", "refused")]), Some(1.0));
        let labels = PoolLabels { route, alpn: "h2".into(), server: Server("127.0.0.1:9".into()) };
        m.pool.opened.get_or_create(&labels).inc();
        let text = m.encode();
        assert!(
            text.contains(
                r#"edgewarm_pool_opened_total{route="b.test",alpn="h2",server="127.0.0.1:9",origin="127.0.0.1:9"} 1"#
            ),
            "{text}"
        );
    }
}
