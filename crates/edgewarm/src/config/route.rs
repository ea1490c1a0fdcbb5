//! A route as configured: the SNI pattern and one sub-struct per action.
//!
//! The YAML stays flat (`action: prewarm` next to `cert:`, `pool:`, …) because that is what
//! operators write; serde reads it into [`RouteFile`] and it is split by action at once, so the
//! rest of edgewarm sees only the fields its action has. A key the action does not take is
//! remembered and reported by validation, naming the key.

use std::path::PathBuf;

use serde::Deserialize;

use super::limits::{AccessList, Cidr, RateConfig};
use super::origins::OriginServer;
use super::rules::{EncodedSlash, RuleConfig};
use super::upstream::UpstreamConfig;
use super::upstreams::{UpstreamChoice, BESIDE_NAMED};
use super::{
    size, CacheConfig, EarlyHintsConfig, ForwardHeader, ForwardHeaders, HeadersConfig, OriginTls, PoolConfig,
    TlsVersion,
};

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "RouteFile")]
pub struct RouteConfig {
    /// `a.example.com` exact, `*.example.com` any name below example.com (most specific wins),
    /// `""` a ClientHello without SNI, `"*"` the default.
    pub sni: String,
    pub action: ActionConfig,
    /// `allow` and `deny`: who may use the route (checked after routing).
    pub access: AccessList,
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
    /// Terminate TLS and HTTP here; carry requests over standing origin connections (HTTP/2,
    /// HTTP/1.1 or HTTP/3; over TLS or cleartext).
    Http(Box<HttpConfig>),
}

#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// `host:port`, resolved at connect time; every address is tried in turn. Required.
    pub origin: Option<String>,
    /// Send the replayed ClientHello in the SYN (TCP_FASTOPEN_CONNECT).
    pub origin_tcp_fastopen: bool,
    /// Tell the origin who the client is with a PROXY protocol header before the hello.
    pub origin_proxy_protocol: Option<ProxyVersion>,
}

/// PROXY protocol version sent to origins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyVersion {
    V1,
    V2,
}

/// The client-facing TLS of a route that terminates it (`prewarm`, `http`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateConfig {
    /// Certificate chain (PEM) presented to clients. Required.
    pub cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC). Required.
    pub key: Option<PathBuf>,
    /// ALPN protocols offered to clients, in preference order.
    pub alpn: Vec<String>,
    /// Oldest TLS version accepted from clients.
    pub min_tls: TlsVersion,
    /// TLS 1.3 0-RTT from returning clients (`off` by default).
    pub early_data: EarlyData,
    /// Most early-data bytes accepted in one client's first flight.
    pub max_early_data_size: u32,
    /// Whether the record layer moves to the kernel after the handshake (`prewarm` only).
    pub ktls: Ktls,
    /// `ktls: auto`: bytes relayed in user space before the hand-off.
    pub ktls_after: u64,
    /// `ktls_after` was written in the file (it only means something with `auto`).
    pub(crate) ktls_after_set: bool,
}

impl TerminateConfig {
    /// `cert: acme`: the certificate comes from the ACME server (`acme:`), not a file.
    pub fn cert_from_acme(&self) -> bool {
        self.cert.as_deref().is_some_and(|c| c.as_os_str() == super::acme::ACME_CERT)
    }
}

/// Kernel TLS for a route's terminated connections, both sides (`routes[].ktls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ktls {
    /// rustls encrypts and decrypts in user space throughout.
    #[default]
    Off,
    /// Hand both sessions to the kernel right after the handshake, and splice between them.
    On,
    /// Start in user space; hand over once `ktls_after` bytes have been relayed, so short flows
    /// never pay the hand-off.
    Auto,
}

/// `ktls_after` when not set: where kernel TLS overtook user-space TLS in the measurements our
/// background material cites (responses above about 128 KiB).
pub(super) const DEFAULT_KTLS_AFTER: u64 = 128 * 1024;

/// Whether a route accepts TLS 1.3 early data (0-RTT), and how it treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EarlyData {
    /// Declined: clients send their request after the handshake.
    #[default]
    Off,
    /// `http` routes: safe requests (GET, HEAD, OPTIONS without a body) in early data are
    /// forwarded at once with `Early-Data: 1`; anything else waits for the handshake.
    Safe,
    /// `prewarm` routes: early bytes are relayed to the origin at once, unseen. Replayable.
    Opaque,
}

/// `max_early_data_size` when not set: one request head with room to spare.
pub(super) const DEFAULT_MAX_EARLY_DATA: u32 = 16 * 1024;

#[derive(Debug, Clone)]
pub struct PrewarmConfig {
    /// `host:port` of the origin. Required.
    pub origin: Option<String>,
    /// Client-facing TLS; each ALPN protocol gets its own pool.
    pub tls: TerminateConfig,
    /// The TLS client side towards the origin.
    pub origin_tls: OriginTls,
    /// Pool sizing.
    pub pool: PoolConfig,
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// `host:port` of the origin: one server. Required, or `origins`.
    pub origin: Option<String>,
    /// Several servers (`origins:`), instead of `origin` ([`HttpConfig::servers`]).
    pub origins: Option<Vec<OriginServer>>,
    /// Client-facing TLS; ALPN defaults to `h2, http/1.1`.
    pub tls: TerminateConfig,
    /// The TLS client side towards the origin (ALPN as `upstream.protocol` asks: `h2`,
    /// `http/1.1` or `h3`).
    pub origin_tls: OriginTls,
    /// `origin_tls` was written in the file (refused beside `upstream.tls: false`).
    pub(crate) origin_tls_set: bool,
    pub upstream: UpstreamConfig,
    /// `upstream: NAME`: the named upstream (`upstreams:`) whose servers, TLS and settings the
    /// fields above are (copied at load); the routes naming one share its standing
    /// connections and its servers' health. `None`: the route's own upstream.
    pub upstream_name: Option<String>,
    /// Request bodies larger than this are refused with 413 (none by default, like HAProxy;
    /// nginx's default is 1 MiB).
    pub max_request_body: Option<u64>,
    /// Which forwarding headers edgewarm adds (all four by default).
    pub forward_headers: ForwardHeaders,
    /// The edge cache in front of the origin (`cache: {}`); none by default.
    pub cache: Option<CacheConfig>,
    /// `103 Early Hints` learned per URL (`early_hints: {}`); without it, only the origin's own
    /// 103s are passed on.
    pub early_hints: Option<EarlyHintsConfig>,
    /// A request rate per client or header value (`limits:`); none by default.
    pub limits: Option<RateConfig>,
    /// The route's `allow` and `deny`, answered with 403 here.
    pub access: AccessList,
    /// Header policy: requests to the origin, every response the edge sends on the route;
    /// merged into its listener's (`listeners[].headers`).
    pub headers: HeadersConfig,
    /// Its requests by path, method, headers and query ([`super::rules`]): a route with rules
    /// normalizes every request's path before matching and sends on the path it matched.
    pub rules: Vec<RuleConfig>,
    /// What a route with rules does with `%2F` in a path.
    pub encoded_slash: EncodedSlash,
}

impl HttpConfig {
    /// The route's servers: `origins`, or the one `origin` (none while neither is set, which
    /// validation refuses).
    pub fn servers(&self) -> Vec<OriginServer> {
        match (&self.origins, &self.origin) {
            (Some(list), _) => list.clone(),
            (None, Some(one)) => vec![OriginServer::single(one)],
            (None, None) => Vec::new(),
        }
    }
}

/// The flat form operators write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Tunnel,
    Reject,
    Prewarm,
    Http,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    sni: String,
    action: Action,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default)]
    origins: Option<Vec<OriginServer>>,
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
    #[serde(default)]
    upstream: Option<UpstreamChoice>,
    #[serde(default)]
    origin_proxy_protocol: Option<ProxyVersion>,
    #[serde(default, deserialize_with = "size::deserialize_opt")]
    max_request_body: Option<u64>,
    #[serde(default)]
    forward_headers: Option<Vec<ForwardHeader>>,
    #[serde(default)]
    cache: Option<CacheConfig>,
    #[serde(default)]
    early_hints: Option<EarlyHintsConfig>,
    #[serde(default)]
    early_data: Option<EarlyData>,
    #[serde(default, deserialize_with = "size::deserialize_opt")]
    max_early_data_size: Option<u64>,
    #[serde(default)]
    ktls: Option<Ktls>,
    #[serde(default, deserialize_with = "size::deserialize_opt")]
    ktls_after: Option<u64>,
    #[serde(default)]
    limits: Option<RateConfig>,
    #[serde(default)]
    headers: Option<HeadersConfig>,
    #[serde(default)]
    rules: Option<Vec<RuleConfig>>,
    #[serde(default)]
    encoded_slash: Option<EncodedSlash>,
    #[serde(default)]
    allow: Vec<Cidr>,
    #[serde(default)]
    deny: Vec<Cidr>,
}

impl From<RouteFile> for RouteConfig {
    fn from(r: RouteFile) -> Self {
        use Action::{Http, Prewarm, Reject, Tunnel};
        const TERMINATING: &[Action] = &[Prewarm, Http];
        const TERMINATING_ONLY: &str = "only for actions prewarm and http";
        const REQUESTS: &str = "only for action http: other actions do not see requests";
        let fastopen_why = if r.action == Reject {
            "action reject has no origin"
        } else {
            "origin connections are made before clients arrive; Fast Open would shorten no client's wait"
        };
        // Every flat key but `sni` and `action`: whether it is set, the actions that take it,
        // and what an operator who set it on another action is told. A new route key is one
        // row here (and its field): the first row set that the action does not take is the
        // error.
        let keys: [(&'static str, bool, &[Action], &'static str); 23] = [
            ("origin", r.origin.is_some(), &[Tunnel, Prewarm, Http], "action reject takes no origin"),
            (
                "origins",
                r.origins.is_some(),
                &[Http],
                "only for action http (a list of servers; others take one origin)",
            ),
            ("origin_tcp_fastopen", r.origin_tcp_fastopen, &[Tunnel], fastopen_why),
            ("cert", r.cert.is_some(), TERMINATING, TERMINATING_ONLY),
            ("key", r.key.is_some(), TERMINATING, TERMINATING_ONLY),
            ("alpn", !r.alpn.is_empty(), TERMINATING, TERMINATING_ONLY),
            ("min_tls", r.min_tls.is_some(), TERMINATING, TERMINATING_ONLY),
            ("origin_tls", r.origin_tls.is_some(), TERMINATING, TERMINATING_ONLY),
            ("early_data", r.early_data.is_some(), TERMINATING, TERMINATING_ONLY),
            ("max_early_data_size", r.max_early_data_size.is_some(), TERMINATING, TERMINATING_ONLY),
            ("ktls", r.ktls.is_some(), TERMINATING, TERMINATING_ONLY),
            ("ktls_after", r.ktls_after.is_some(), TERMINATING, TERMINATING_ONLY),
            ("pool", r.pool.is_some(), &[Prewarm], "only for action prewarm"),
            ("upstream", r.upstream.is_some(), &[Http], "only for action http"),
            ("max_request_body", r.max_request_body.is_some(), &[Http], REQUESTS),
            ("forward_headers", r.forward_headers.is_some(), &[Http], REQUESTS),
            ("cache", r.cache.is_some(), &[Http], REQUESTS),
            ("early_hints", r.early_hints.is_some(), &[Http], REQUESTS),
            ("limits", r.limits.is_some(), &[Http], REQUESTS),
            ("headers", r.headers.is_some(), &[Http], REQUESTS),
            ("rules", r.rules.is_some(), &[Http], REQUESTS),
            ("encoded_slash", r.encoded_slash.is_some(), &[Http], REQUESTS),
            (
                "origin_proxy_protocol",
                r.origin_proxy_protocol.is_some(),
                &[Tunnel],
                "only for action tunnel: prewarm and http origin connections exist before the client \
                 (http routes tell the origin in X-Forwarded-For and Forwarded)",
            ),
        ];
        let (upstream_name, upstream) = match r.upstream.clone() {
            Some(UpstreamChoice::Named(name)) => (Some(name), None),
            Some(UpstreamChoice::Own(own)) => (None, Some(*own)),
            None => (None, None),
        };
        // A named upstream holds the servers: the route's own beside it would be ignored.
        let beside_named =
            [("origin", r.origin.is_some()), ("origins", r.origins.is_some()), ("origin_tls", r.origin_tls.is_some())]
                .into_iter()
                .find(|&(_, set)| set && upstream_name.is_some())
                .map(|(k, _)| (k, BESIDE_NAMED));
        let misplaced = keys
            .iter()
            .find(|(_, set, takes, _)| *set && !takes.contains(&r.action))
            .map(|&(k, _, _, why)| (k, why))
            .or(beside_named);
        let tls = || TerminateConfig {
            cert: r.cert.clone(),
            key: r.key.clone(),
            alpn: r.alpn.clone(),
            min_tls: r.min_tls.unwrap_or_default(),
            early_data: r.early_data.unwrap_or_default(),
            // Out of range is reported by validation (as 0: "must be 1 byte to 4 GiB").
            max_early_data_size: r
                .max_early_data_size
                .map_or(DEFAULT_MAX_EARLY_DATA, |n| u32::try_from(n).unwrap_or(0)),
            ktls: r.ktls.unwrap_or_default(),
            ktls_after: r.ktls_after.unwrap_or(DEFAULT_KTLS_AFTER),
            ktls_after_set: r.ktls_after.is_some(),
        };
        let action = match r.action {
            Action::Reject => ActionConfig::Reject,
            Action::Tunnel => ActionConfig::Tunnel(TunnelConfig {
                origin: r.origin.clone(),
                origin_tcp_fastopen: r.origin_tcp_fastopen,
                origin_proxy_protocol: r.origin_proxy_protocol,
            }),
            Action::Prewarm => {
                let prewarm = PrewarmConfig {
                    origin: r.origin.clone(),
                    tls: tls(),
                    origin_tls: r.origin_tls.clone().unwrap_or_default(),
                    pool: r.pool.clone().unwrap_or_default(),
                };
                ActionConfig::Prewarm(Box::new(prewarm))
            }
            Action::Http => {
                let mut tls = tls();
                if tls.alpn.is_empty() {
                    tls.alpn = vec!["h2".into(), "http/1.1".into()];
                }
                let http = HttpConfig {
                    origin: r.origin.clone(),
                    origins: r.origins.clone(),
                    tls,
                    origin_tls: r.origin_tls.clone().unwrap_or_default(),
                    origin_tls_set: r.origin_tls.is_some(),
                    upstream: upstream.unwrap_or_default(),
                    upstream_name,
                    max_request_body: r.max_request_body,
                    forward_headers: r.forward_headers.as_deref().map(ForwardHeaders::from).unwrap_or_default(),
                    cache: r.cache.clone(),
                    early_hints: r.early_hints.clone(),
                    limits: r.limits.clone(),
                    access: AccessList { allow: r.allow.clone(), deny: r.deny.clone() },
                    headers: r.headers.clone().unwrap_or_default(),
                    rules: r.rules.clone().unwrap_or_default(),
                    encoded_slash: r.encoded_slash.unwrap_or_default(),
                };
                ActionConfig::Http(Box::new(http))
            }
        };
        let access = AccessList { allow: r.allow, deny: r.deny };
        Self { sni: r.sni, action, access, misplaced }
    }
}
