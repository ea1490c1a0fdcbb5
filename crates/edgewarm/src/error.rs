//! Why a connection ended: one small set of kinds that is at once the `reason` metric label,
//! the access log's `reason` field and the log level of that line.
//!
//! Levels follow who has to act: INFO for what clients do (bad bytes, unknown names, resets —
//! the internet is noisy, an operator cannot fix it), WARN for origin trouble (the operator's
//! own infrastructure), ERROR for edgewarm's own failures.

use tracing::Level;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both directions reached end of file.
    Done,
    IdleTimeout,
    ClientReset,
    OriginReset,
    /// The ClientHello (or PROXY header) was refused; the label says why.
    BadHello(&'static str),
    HelloTimeout,
    /// EOF before the ClientHello was complete.
    Truncated,
    UnknownSni,
    /// A route with `action: reject` matched.
    RouteReject,
    OriginRefused,
    OriginUnreachable,
    OriginTimeout,
    /// The client's TLS handshake with edgewarm failed (prewarm routes).
    ClientTls,
    /// The origin side of a prewarm route failed; the label says how.
    Origin(&'static str),
    /// Still open when the shutdown grace period ran out.
    Shutdown,
    /// A local resource failed (pipe, socket option).
    Internal,
}

impl CloseReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::IdleTimeout => "idle_timeout",
            Self::ClientReset => "client_reset",
            Self::OriginReset => "origin_reset",
            Self::BadHello(reason) => reason,
            Self::HelloTimeout => "hello_timeout",
            Self::Truncated => "truncated",
            Self::UnknownSni => "unknown_sni",
            Self::RouteReject => "route_reject",
            Self::OriginRefused => "origin_refused",
            Self::OriginUnreachable => "origin_unreachable",
            Self::OriginTimeout => "origin_timeout",
            Self::ClientTls => "client_tls",
            Self::Origin(reason) => reason,
            Self::Shutdown => "shutdown",
            Self::Internal => "internal",
        }
    }

    pub fn level(self) -> Level {
        match self {
            Self::OriginRefused
            | Self::OriginUnreachable
            | Self::OriginTimeout
            | Self::OriginReset
            | Self::Origin(_) => Level::WARN,
            Self::Internal => Level::ERROR,
            _ => Level::INFO,
        }
    }

    /// Whether the client never got past the ClientHello stage (counted in
    /// `edgewarm_clienthello_rejected_total`).
    pub fn is_hello_rejection(self) -> bool {
        matches!(self, Self::BadHello(_) | Self::HelloTimeout | Self::Truncated | Self::UnknownSni | Self::RouteReject)
    }
}
