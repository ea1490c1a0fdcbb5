//! The YAML configuration: its types, loading, and validation.
//!
//! Loading is two steps so that every error names the key it is about and nothing is bound
//! before the whole file is known to be good: [`Config::parse`] (syntax, unknown keys, types —
//! the YAML parser gives the key path and line) then [`Config::validate`] (meaning: addresses,
//! SNI patterns, duplicates, required fields). `edgewarm check` runs exactly the same code.
//! Every key and its default is documented in docs/config.md.

pub(crate) mod acme;
mod addr;
mod cache;
mod duration;
pub(crate) mod fleet;
pub(crate) mod forward;
mod headers;
mod hints;
pub(crate) mod limits;
pub(crate) mod origins;
mod route;
pub(crate) mod rules;
mod size;
mod timeouts;
mod upstream;
mod upstreams;
mod validate;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use acme::{AcmeConfig, Challenge};
pub use addr::OriginAddr;
pub use cache::{CacheConfig, DiskConfig};
pub use fleet::FleetConfig;
pub use forward::{ForwardHeader, ForwardHeaders};
pub use headers::{Edits, HeaderPolicy, HeadersConfig};
pub use hints::EarlyHintsConfig;
pub use origins::{Balance, HealthConfig, OriginServer};
pub use route::{
    ActionConfig, EarlyData, HttpConfig, Ktls, PrewarmConfig, ProxyVersion, RouteConfig, TerminateConfig, TunnelConfig,
};
pub use rules::{EncodedSlash, RedirectConfig, RespondConfig, RuleConfig, RuleTimeouts, ValueCondition};
pub use timeouts::Timeouts;
pub use upstream::{UpstreamConfig, UpstreamProtocol};
pub(crate) use validate::sni_pattern;

/// A configuration problem, always naming the key (`routes[2].origin`) it is about.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { key: key.into(), message: message.into() }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub admin: AdminConfig,
    pub listeners: Vec<ListenerConfig>,
    #[serde(default)]
    pub timeouts: Timeouts,
    pub routes: Vec<RouteConfig>,
    /// Named upstreams: each a name holding its servers and how to reach them, for routes to
    /// name with `upstream: NAME` ([`upstreams`]). Ordered, so validation reports in order.
    #[serde(default)]
    pub upstreams: std::collections::BTreeMap<String, UpstreamConfig>,
    /// How tunnels move bytes: `splice` (kernel pipe, no copy to user space) or `copy`.
    #[serde(default)]
    pub relay: RelayMode,
    #[serde(default)]
    pub dns: DnsConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    /// Worker threads serving connections, one single-threaded runtime each
    /// ([`crate::workers`]); `None`: one per core.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Binary upgrades without dropping a connection ([`crate::upgrade`]).
    #[serde(default)]
    pub upgrade: UpgradeConfig,
    /// Certificates from an ACME server for `cert: acme` routes ([`crate::acme`]).
    #[serde(default)]
    pub acme: Option<AcmeConfig>,
    /// Purges shared with the other nodes through NATS JetStream ([`crate::fleet`]).
    #[serde(default)]
    pub fleet: Option<FleetConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeConfig {
    /// The Unix socket a new process (`edgewarm run --upgrade`) asks for the listening sockets
    /// on. Only the same user (or root) may connect.
    #[serde(default = "default_upgrade_socket")]
    pub socket: std::path::PathBuf,
    /// How long a new process waits for its pools and standing origin connections to be warm
    /// before it accepts (and the old one stops): past this it takes over anyway, warm or not.
    #[serde(default = "default_warm_timeout", with = "duration")]
    pub warm_timeout: std::time::Duration,
}

impl Default for UpgradeConfig {
    fn default() -> Self {
        Self { socket: default_upgrade_socket(), warm_timeout: default_warm_timeout() }
    }
}

fn default_upgrade_socket() -> std::path::PathBuf {
    "/run/edgewarm/upgrade.sock".into()
}

fn default_warm_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(10)
}

impl Config {
    /// Worker threads to start: `workers`, or one per core.
    pub fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(crate::workers::Workers::per_core)
    }
}

/// Client-facing TLS settings shared by every terminating route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Session-ticket keys shared by a fleet (see [`crate::tls::ticket_keys`]); read at start
    /// and at every reload. Without it each route has random keys of its own.
    #[serde(default)]
    pub ticket_keys: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// How long a resolved origin name is reused (the system resolver reports no TTL); `0s`
    /// resolves for every connection. Failures are never cached.
    #[serde(default = "default_dns_cache_ttl", with = "duration")]
    pub cache_ttl: Duration,
}

impl Default for DnsConfig {
    fn default() -> Self {
        Self { cache_ttl: default_dns_cache_ttl() }
    }
}

fn default_dns_cache_ttl() -> Duration {
    Duration::from_secs(30)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelayMode {
    #[default]
    Splice,
    Copy,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `/metrics`, `/ready`, `/live`.
    #[serde(default = "default_admin_listen")]
    pub listen: SocketAddr,
    /// The admin listener must be on loopback unless this is set: metrics name every route and
    /// origin, which is not for the public.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// Who may connect (beyond loopback, say which monitoring hosts): deny wins; a non-empty
    /// `allow` admits only what it names.
    #[serde(default)]
    pub allow: Vec<limits::Cidr>,
    #[serde(default)]
    pub deny: Vec<limits::Cidr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { listen: default_admin_listen(), allow_non_loopback: false, allow: Vec::new(), deny: Vec::new() }
    }
}

fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9900))
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    pub listen: SocketAddr,
    /// TCP Fast Open queue length (pending TFO requests); 0 turns server-side TFO off.
    #[serde(default = "default_tfo_queue")]
    pub tcp_fastopen: u32,
    /// Expect a PROXY protocol v1 or v2 header before the ClientHello.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// Connections open at once on this listener; beyond it, new ones wait in the kernel backlog.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// `http` routes: the peers of this listener are load balancers the operator trusts; their
    /// X-Forwarded-For / Forwarded / X-Forwarded-Proto are kept and edgewarm's hop appended.
    /// Off: a client's own forwarding headers are replaced, never trusted.
    #[serde(default)]
    pub trust_forwarded: bool,
    /// Serve this listener's `http` routes over HTTP/3 (QUIC) too, on a UDP socket at the same
    /// address and port; its HTTP/1.1 and HTTP/2 responses then carry `Alt-Svc`.
    #[serde(default)]
    pub http3: bool,
    /// Congestion control of the listener's QUIC connections: `bbr`, `cubic` or `reno`
    /// (quinn's, in user space); default cubic.
    #[serde(default)]
    pub quic_congestion: Option<String>,
    /// How long a browser may remember that HTTP/3 is here (`Alt-Svc: h3=":PORT"; ma=...`).
    #[serde(default = "default_alt_svc_max_age", with = "duration")]
    pub alt_svc_max_age: Duration,
    /// Connections one client address may have open on this listener: unset,
    /// [`DEFAULT_CLIENT_CAP`] (none behind trusted load balancers without the PROXY protocol,
    /// whose peers are the balancers); `null`, no cap. Read it with [`Self::client_cap`].
    #[serde(default, deserialize_with = "set_or_null")]
    pub max_connections_per_client: Option<Option<usize>>,
    /// IPv6 clients are counted for `max_connections_per_client` by this many leading bits: one
    /// host owns a /64 (a route's rate always keys IPv6 clients by /64: `limits::layer`).
    #[serde(default = "default_ipv6_prefix")]
    pub ipv6_prefix: u8,
    /// Address ranges admitted (none: all) and refused (deny wins), checked on accept.
    #[serde(default)]
    pub allow: Vec<limits::Cidr>,
    #[serde(default)]
    pub deny: Vec<limits::Cidr>,
    /// Header policy for this listener's `http` routes: the defaults each route's own
    /// `headers` merges into, and the whole policy of an answer given before a request's route
    /// is known (400, 421). Changes on reload, unlike the listener's other keys.
    #[serde(default)]
    pub headers: HeadersConfig,
    /// Where the listener is in `listeners` (set by [`Config::parse`]): the place of its header
    /// policy in a snapshot, which a reload may change while the listeners stay as they are.
    #[serde(skip)]
    pub(crate) place: usize,
}

fn default_ipv6_prefix() -> u8 {
    64
}

/// `max_connections_per_client` when the key is not set. A carrier-grade NAT address stands for
/// hundreds of subscribers, each browser holding one HTTP/2 connection (six over HTTP/1.1) per
/// site: a thousand places serve them, while one address can never hold more than a tenth of
/// the default `max_connections` (10,000).
pub const DEFAULT_CLIENT_CAP: usize = 1000;

/// A key that may be set to `null` on purpose: missing is `None`, `null` is `Some(None)`.
fn set_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<usize>>, D::Error> {
    Option::<usize>::deserialize(d).map(Some)
}

impl ListenerConfig {
    /// The cap on one client address's connections, if any (`max_connections_per_client`).
    pub fn client_cap(&self) -> Option<usize> {
        match self.max_connections_per_client {
            Some(set) => set,
            // Behind load balancers the peer address is a balancer's: capping it would cap
            // every client behind it together.
            None if self.trust_forwarded && !self.proxy_protocol => None,
            None => Some(DEFAULT_CLIENT_CAP),
        }
    }

    /// The listener's `allow` and `deny`.
    pub fn access(&self) -> limits::AccessList {
        limits::AccessList { allow: self.allow.clone(), deny: self.deny.clone() }
    }

    /// Whether `other` binds and admits as this one does: everything but its header policy,
    /// which a reload may change (new connections take it from the snapshot).
    pub fn same_but_headers(&self, other: &Self) -> bool {
        let bare = |l: &Self| Self { headers: HeadersConfig::default(), ..l.clone() };
        bare(self) == bare(other)
    }
}

/// Keys an earlier version took and this one refuses, with why: an old file's error then says
/// what became of the key, instead of listing the keys there are.
const REMOVED: &[(&str, &str)] =
    &[("quic_driver", "removed: an HTTP/3 listener has one QUIC driver now, quinn's; delete this key")];

fn default_alt_svc_max_age() -> Duration {
    Duration::from_secs(24 * 3600)
}

fn default_tfo_queue() -> u32 {
    256
}
fn default_max_connections() -> usize {
    10_000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    #[default]
    Tls12,
    #[serde(rename = "1.3")]
    Tls13,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OriginTls {
    /// Server name sent to and verified against the origin; default: the route's name.
    /// Required on wildcard, default and no-SNI routes, which have no single name (one pool
    /// per route, never one per name a client makes up).
    #[serde(default)]
    pub sni: Option<String>,
    /// CA bundle (PEM) to verify the origin with; default: the system roots.
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
    /// `false` disables origin certificate verification. Insecure; logged at start-up.
    #[serde(default = "yes")]
    pub verify: bool,
    /// Client certificate chain (PEM) for mTLS to the origin.
    #[serde(default)]
    pub client_cert: Option<std::path::PathBuf>,
    #[serde(default)]
    pub client_key: Option<std::path::PathBuf>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Warm connections kept ready even without demand.
    #[serde(default = "default_pool_min")]
    pub min: usize,
    /// Ceiling on ready + connecting.
    #[serde(default = "default_pool_max")]
    pub max: usize,
    /// A warm connection unused for this long is closed (keep it below the origin's own idle
    /// timeout so the origin never closes one first).
    #[serde(default = "default_pool_max_idle", with = "duration")]
    pub max_idle: Duration,
    /// How often the pool re-predicts demand.
    #[serde(default = "default_pool_period", with = "duration")]
    pub period: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min: default_pool_min(),
            max: default_pool_max(),
            max_idle: default_pool_max_idle(),
            period: default_pool_period(),
        }
    }
}

fn default_pool_min() -> usize {
    2
}
fn default_pool_max() -> usize {
    200
}
fn default_pool_max_idle() -> Duration {
    Duration::from_secs(60)
}
fn default_pool_period() -> Duration {
    Duration::from_secs(1)
}

impl Config {
    /// Parse YAML text: syntax, types and unknown keys.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        // serde_path_to_error names the full key (`timeouts.idle`) even for errors raised inside
        // a field's own deserializer, where the YAML parser alone only knows the parent.
        let de = serde_norway::Deserializer::from_str(text);
        let parsed: Result<Self, _> = serde_path_to_error::deserialize(de);
        let mut config = parsed.map(Self::placed).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            // The YAML error may already start with (part of) the path; say it once.
            let message = match inner.split_once(": ") {
                Some((prefix, rest)) if path.starts_with(prefix) => rest,
                _ => &inner,
            };
            let key = path.rsplit('.').next().unwrap_or_default();
            let removed = REMOVED.iter().find(|(k, _)| *k == key && message.starts_with("unknown field"));
            let message = removed.map_or(message, |(_, why)| why);
            if path.is_empty() || path == "." {
                ConfigError::Syntax(inner.clone())
            } else {
                ConfigError::Syntax(format!("{path}: {message}"))
            }
        })?;
        config.resolve_upstreams();
        Ok(config)
    }

    /// Each listener told its place in the list.
    fn placed(mut self) -> Self {
        for (i, l) in self.listeners.iter_mut().enumerate() {
            l.place = i;
        }
        self
    }

    /// Read, parse and validate a file: what `check`, `run` and SIGHUP all use.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        let config = Self::parse(&text)?;
        config.validate()?;
        Ok(config)
    }
}
