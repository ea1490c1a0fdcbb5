//! Why a connection ended: one small set of kinds that is at once the `reason` metric label,
//! the access log's `reason` field and the log level of that line.
//!
//! Levels follow who has to act: INFO for what clients do (bad bytes, unknown names, resets —
//! the internet is noisy, an operator cannot fix it), WARN for origin trouble (the operator's
//! own infrastructure), ERROR for edgewarm's own failures.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use tracing::Level;

use crate::peek::clienthello::HelloError;
use crate::peek::PeekError;

/// Equal and hashed by its label: it keys metric families, and two reasons that print the
/// same label (a malformed hello's detail differs from case to case) must be one series, or
/// `/metrics` would show the same labels twice.
#[derive(Debug, Clone, Copy)]
pub enum CloseReason {
    /// Both directions reached end of file.
    Done,
    IdleTimeout,
    ClientReset,
    OriginReset,
    /// The ClientHello was refused; the label says why.
    BadHello(HelloError),
    /// The PROXY protocol header was invalid.
    ProxyHeader,
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
    /// A `cert: acme` route has no certificate yet (its first order is pending or failing):
    /// the handshake was refused with an alert.
    NoCertificate,
    /// The client address has `max_connections_per_client` open on the listener already.
    ClientLimit,
    /// The listener's or the route's `allow`/`deny` refused the client's address.
    Denied,
    /// The origin's certificate was rejected (prewarm routes).
    OriginCertificate,
    /// The origin TLS handshake failed (prewarm routes).
    OriginTls,
    /// The origin does not speak the ALPN protocol the pool needs.
    AlpnMismatch,
    /// The origin is failing and edgewarm is backing off; clients are refused at once.
    OriginBackoff,
    /// Still open when the shutdown grace period ran out.
    Shutdown,
    /// Idle when its listener was full: asked to finish so that a new client could be admitted
    /// (`limits::reclaim`).
    Reclaimed,
    /// A local resource failed (pipe, socket option).
    Internal,
    /// A peer sent a TLS KeyUpdate on a kernel TLS socket, which cannot follow it.
    KtlsKeyUpdate,
    /// A session given up by rustls was refused by the kernel (kernel TLS hand-off).
    KtlsFailed,
}

impl CloseReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::IdleTimeout => "idle_timeout",
            Self::ClientReset => "client_reset",
            Self::OriginReset => "origin_reset",
            Self::BadHello(e) => e.reason(),
            Self::ProxyHeader => "proxy_header",
            Self::HelloTimeout => "hello_timeout",
            Self::Truncated => "truncated",
            Self::UnknownSni => "unknown_sni",
            Self::RouteReject => "route_reject",
            Self::OriginRefused => "origin_refused",
            Self::OriginUnreachable => "origin_unreachable",
            Self::OriginTimeout => "origin_timeout",
            Self::ClientTls => "client_tls",
            Self::NoCertificate => "no_certificate",
            Self::ClientLimit => "client_limit",
            Self::Denied => "denied",
            Self::OriginCertificate => "origin_certificate",
            Self::OriginTls => "origin_tls",
            Self::AlpnMismatch => "alpn_mismatch",
            Self::OriginBackoff => "origin_backoff",
            Self::Shutdown => "shutdown",
            Self::Reclaimed => "reclaimed",
            Self::Internal => "internal",
            Self::KtlsKeyUpdate => "ktls_key_update",
            Self::KtlsFailed => "ktls_failed",
        }
    }

    pub fn level(self) -> Level {
        match self {
            Self::OriginRefused
            | Self::OriginUnreachable
            | Self::OriginTimeout
            | Self::OriginReset
            | Self::OriginCertificate
            | Self::OriginTls
            | Self::AlpnMismatch
            | Self::OriginBackoff => Level::WARN,
            Self::Internal | Self::KtlsFailed => Level::ERROR,
            _ => Level::INFO,
        }
    }

    /// Whether the client never got past the ClientHello stage (counted in
    /// `edgewarm_clienthello_rejected_total`).
    pub fn is_hello_rejection(self) -> bool {
        matches!(
            self,
            Self::BadHello(_)
                | Self::ProxyHeader
                | Self::HelloTimeout
                | Self::Truncated
                | Self::UnknownSni
                | Self::RouteReject
        )
    }
}

impl PartialEq for CloseReason {
    fn eq(&self, other: &Self) -> bool {
        self.label() == other.label()
    }
}

impl Eq for CloseReason {}

impl std::hash::Hash for CloseReason {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.label().hash(state);
    }
}

/// The `reason` label: the label set is exactly this enum's, never an open string.
impl EncodeLabelValue for CloseReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.label(), encoder)
    }
}

/// Why a connection whose hello could not be read ended. Here rather than in `peek`, so that
/// the peek stage depends on nothing but its parser.
impl From<&PeekError> for CloseReason {
    fn from(e: &PeekError) -> Self {
        match e {
            PeekError::Hello(e) => Self::BadHello(*e),
            PeekError::ProxyHeader => Self::ProxyHeader,
            PeekError::Truncated => Self::Truncated,
            PeekError::Io(_) => Self::ClientReset,
        }
    }
}
