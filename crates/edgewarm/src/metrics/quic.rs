//! HTTP/3 listeners' metrics, registered under the `quic` prefix: what arrives on the UDP
//! socket and what becomes of it. Requests are counted with everyone else's (`http_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{latency_histogram, ListenerLabel, RouteName};

label_enum! {
    /// What became of a QUIC connection attempt (`edgewarm_quic_handshakes_total`): completed;
    /// answered with a Retry (the client must prove its address first); refused before any
    /// handshake work (over the listener's connection limit); failed (no `http` route for its
    /// name, bad TLS, or timed out).
    QuicHandshake {
        Ok => "ok",
        Retry => "retry",
        Refused => "refused",
        Failed => "failed",
    }
}
label_enum! {
    /// Why a datagram to an HTTP/3 listener was dropped before any decryption: shorter than any
    /// packet for us, impossible header fields, or a client Initial under 1200 bytes.
    QuicDropped {
        Truncated => "truncated",
        Malformed => "malformed",
        SmallInitial => "small_initial",
    }
}
label_enum! {
    /// What became of a returning client's 0-RTT (`edgewarm_quic_zero_rtt_total`): its early
    /// data read; or its ticket not honoured (presented again, expired, or never ours), so any
    /// 0-RTT packets it sent are dropped and it completes a full handshake first.
    ZeroRtt {
        Accepted => "accepted",
        Rejected => "rejected",
    }
}
label_enum! {
    /// What became of a datagram for the previous process's connections, after an upgrade
    /// (`edgewarm_quic_relayed_datagrams_total`): passed on to it; or dropped because it was
    /// behind (its queue full).
    QuicRelayed {
        Sent => "sent",
        Dropped => "dropped",
    }
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuicRelayLabel {
    pub listener: String,
    pub result: QuicRelayed,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuicZeroRttLabel {
    pub listener: String,
    pub result: ZeroRtt,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuicDroppedLabel {
    pub listener: String,
    pub reason: QuicDropped,
}
/// A QUIC connection's listener and route, for what its path measured.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuicRouteLabel {
    pub listener: String,
    pub route: RouteName,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuicResult {
    pub listener: String,
    pub result: QuicHandshake,
}

#[derive(Clone)]
pub struct Rtt;
impl MetricConstructor<Histogram> for Rtt {
    fn new_metric(&self) -> Histogram {
        latency_histogram()
    }
}

#[derive(Clone, Debug)]
pub struct QuicMetrics {
    /// Connection attempts (Initial packets from a new client), by outcome.
    pub handshakes: Family<QuicResult, Counter>,
    /// Packets the edge sent that were declared lost, over every ended connection.
    pub lost_packets: Family<QuicRouteLabel, Counter>,
    /// Packets the edge sent, over every ended connection (the denominator for loss).
    pub sent_packets: Family<QuicRouteLabel, Counter>,
    /// Smoothed round-trip time of each connection when it ended.
    pub rtt: Family<QuicRouteLabel, Histogram, Rtt>,
    /// Datagrams that cannot be QUIC for us, by why.
    pub dropped: Family<QuicDroppedLabel, Counter>,
    /// Handshakes that resumed a session (a returning client, which may send 0-RTT).
    pub resumed: Family<ListenerLabel, Counter>,
    /// 0-RTT accepted, and tickets refused (whose 0-RTT, if sent, was dropped).
    pub zero_rtt: Family<QuicZeroRttLabel, Counter>,
    /// Datagrams for the previous process's connections, after an upgrade.
    pub relayed: Family<QuicRelayLabel, Counter>,
}

impl QuicMetrics {
    pub(crate) fn new() -> Self {
        Self {
            handshakes: Family::default(),
            lost_packets: Family::default(),
            sent_packets: Family::default(),
            rtt: Family::new_with_constructor(Rtt),
            dropped: Family::default(),
            resumed: Family::default(),
            zero_rtt: Family::default(),
            relayed: Family::default(),
        }
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "handshakes",
            "QUIC connection attempts, by outcome (ok, retry: address validation asked, refused: over the limit, failed)",
            self.handshakes.clone(),
        );
        r.register("lost_packets", "Packets sent to HTTP/3 clients and declared lost", self.lost_packets.clone());
        r.register("sent_packets", "Packets sent to HTTP/3 clients", self.sent_packets.clone());
        r.register("rtt_seconds", "Smoothed round-trip time of HTTP/3 connections as they ended", self.rtt.clone());
        r.register(
            "resumed",
            "HTTP/3 handshakes that resumed a session (returning clients; those may send 0-RTT)",
            self.resumed.clone(),
        );
        r.register(
            "zero_rtt",
            "Returning HTTP/3 clients' 0-RTT: accepted (early data read), rejected (ticket replayed, expired or unknown; early data dropped)",
            self.zero_rtt.clone(),
        );
        r.register(
            "relayed_datagrams",
            "After an upgrade, datagrams for the previous process's HTTP/3 connections: sent on to it, or dropped (it was behind)",
            self.relayed.clone(),
        );
        r.register(
            "dropped_datagrams",
            "Datagrams dropped unread: truncated, malformed header, or a client Initial under 1200 bytes",
            self.dropped.clone(),
        );
    }
}
