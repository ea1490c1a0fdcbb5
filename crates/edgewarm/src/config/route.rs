//! A route as configured: the SNI pattern and one sub-struct per action.
//!
//! The YAML stays flat (`action: prewarm` next to `cert:`, `pool:`, …) because that is what
//! operators write; serde reads it into [`RouteFile`] and it is split by action at once, so the
//! rest of edgewarm sees only the fields its action has. A key the action does not take is
//! remembered and reported by validation, naming the key.

use std::path::PathBuf;

use serde::Deserialize;

use super::{OriginTls, PoolConfig, TlsVersion};

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RouteFile")]
pub struct RouteConfig {
    /// `a.example.com` exact, `*.example.com` any name below example.com (most specific wins),
    /// `""` a ClientHello without SNI, `"*"` the default.
    pub sni: String,
    pub action: ActionConfig,
    /// The first key set that this action does not take, and why: a validation error.
    pub(crate) misplaced: Option<(&'static str, &'static str)>,
}

#[derive(Debug, Clone)]
pub enum ActionConfig {
    /// Refuse with an `unrecognized_name` alert.
    Reject,
    /// Splice the client's bytes to the origin without decrypting.
    Tunnel(TunnelConfig),
    /// Terminate TLS here and continue on an origin TLS connection handshaked in advance.
    Prewarm(Box<PrewarmConfig>),
}

impl ActionConfig {
    /// The action's name as written in the config.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Tunnel(_) => "tunnel",
            Self::Prewarm(_) => "prewarm",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// `host:port`, resolved at connect time; every address is tried in turn. Required.
    pub origin: Option<String>,
    /// Send the replayed ClientHello in the SYN (TCP_FASTOPEN_CONNECT).
    pub origin_tcp_fastopen: bool,
}

#[derive(Debug, Clone)]
pub struct PrewarmConfig {
    /// `host:port` of the origin. Required.
    pub origin: Option<String>,
    /// Certificate chain (PEM) presented to clients. Required.
    pub cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC). Required.
    pub key: Option<PathBuf>,
    /// ALPN protocols offered to clients, in preference order; each gets its own pool.
    pub alpn: Vec<String>,
    /// Oldest TLS version accepted from clients.
    pub min_tls: TlsVersion,
    /// The TLS client side towards the origin.
    pub origin_tls: OriginTls,
    /// Pool sizing.
    pub pool: PoolConfig,
}

/// The flat form operators write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Tunnel,
    Reject,
    Prewarm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    sni: String,
    action: Action,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default)]
    origin_tcp_fastopen: bool,
    #[serde(default)]
    cert: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
    #[serde(default)]
    alpn: Vec<String>,
    #[serde(default)]
    min_tls: Option<TlsVersion>,
    #[serde(default)]
    origin_tls: Option<OriginTls>,
    #[serde(default)]
    pool: Option<PoolConfig>,
}

impl From<RouteFile> for RouteConfig {
    fn from(r: RouteFile) -> Self {
        let prewarm_only = [
            ("cert", r.cert.is_some()),
            ("key", r.key.is_some()),
            ("alpn", !r.alpn.is_empty()),
            ("min_tls", r.min_tls.is_some()),
            ("origin_tls", r.origin_tls.is_some()),
            ("pool", r.pool.is_some()),
        ];
        let first_prewarm_only =
            prewarm_only.iter().find(|(_, set)| *set).map(|(k, _)| (*k, "only for action prewarm"));
        let (action, misplaced) = match r.action {
            Action::Reject => {
                let misplaced = if r.origin.is_some() {
                    Some(("origin", "action reject takes no origin"))
                } else if r.origin_tcp_fastopen {
                    Some(("origin_tcp_fastopen", "action reject has no origin"))
                } else {
                    first_prewarm_only
                };
                (ActionConfig::Reject, misplaced)
            }
            Action::Tunnel => (
                ActionConfig::Tunnel(TunnelConfig { origin: r.origin, origin_tcp_fastopen: r.origin_tcp_fastopen }),
                first_prewarm_only,
            ),
            Action::Prewarm => {
                let misplaced = r.origin_tcp_fastopen.then_some((
                    "origin_tcp_fastopen",
                    "prewarm connects before clients arrive; Fast Open would shorten no client's wait",
                ));
                let prewarm = PrewarmConfig {
                    origin: r.origin,
                    cert: r.cert,
                    key: r.key,
                    alpn: r.alpn,
                    min_tls: r.min_tls.unwrap_or_default(),
                    origin_tls: r.origin_tls.unwrap_or_default(),
                    pool: r.pool.unwrap_or_default(),
                };
                (ActionConfig::Prewarm(Box::new(prewarm)), misplaced)
            }
        };
        Self { sni: r.sni, action, misplaced }
    }
}
