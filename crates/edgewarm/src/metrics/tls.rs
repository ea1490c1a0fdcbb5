//! Terminated TLS's metrics: early data (0-RTT), registered under the `tls` prefix, and where
//! records were encrypted (kernel TLS); beside them the labels of ACME's orders and of clients
//! refused by the limits.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{RouteLabel, RouteName};

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
    pub(super) fn register(&self, r: &mut Registry) {
        r.register("early_data_accepted", "Client connections whose 0-RTT data was accepted", self.accepted.clone());
        r.register("early_requests",
            "Requests received in 0-RTT data, by outcome (forwarded at once, held for the handshake, retried after 425)",
            self.requests.clone(),
        );
        r.register(
            "ticket_replays",
            "Session tickets presented again: refused, their early data never read",
            self.replays.clone(),
        );
        r.register(
            "session_evictions",
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
label_enum! {
    /// How an ACME order ended (`edgewarm_acme_orders_total`): a certificate installed; the
    /// server said no (a problem document: a failed challenge, a refused name, a rate limit);
    /// failed otherwise (the server unreachable, a local error).
    AcmeOutcome {
        Valid => "valid",
        Rejected => "rejected",
        Failed => "failed",
    }
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AcmeResult {
    pub result: AcmeOutcome,
}
label_enum! {
    /// Why an ACME account was registered (`edgewarm_acme_accounts_registered_total`): none
    /// was stored (the first order); the stored one did not parse; the server refused the
    /// stored one (`accountDoesNotExist`: it forgot it, a CA reset; `unauthorized`: deactivated).
    AcmeAccountReason {
        Missing => "none",
        Unreadable => "unreadable",
        Refused => "refused",
    }
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AcmeAccount {
    pub reason: AcmeAccountReason,
}
label_enum! {
    /// Why a client was limited (`edgewarm_limited_total`): over its listener's
    /// `max_connections_per_client`; refused by an `allow`/`deny` list; over a route's rate.
    LimitReason {
        ClientConnections => "client_connections",
        Denied => "denied",
        Rate => "rate",
    }
}
/// Where a limit applied: `scope` is `listener` (`name` its address) or `route` (its name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitedLabel {
    pub scope: &'static str,
    pub name: String,
    pub reason: LimitReason,
}
