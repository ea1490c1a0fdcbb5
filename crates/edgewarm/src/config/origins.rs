//! `routes[].origins`: an `http` route's servers, and `upstream.balance`, `upstream.health`
//! and `upstream.slow_start`: how a group of them shares the route's requests and is watched.
//! What each key means, and how HAProxy's and nginx's lines map onto them: docs/config.md
//! ("Several origin servers").

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;

use super::{duration, ConfigError, OriginAddr};

/// One origin server of a route (`origins[]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginServer {
    /// `host:port`. Required.
    pub address: String,
    /// Its share beside the others (1 to 1000).
    #[serde(default = "one")]
    pub weight: u32,
    /// Takes requests only while no primary server is healthy.
    #[serde(default)]
    pub backup: bool,
    /// The `:authority` (`Host`) sent to this server; default: the client's. Many origins
    /// answer only to their own name (object stores, PaaS apps, a shield serving another name).
    #[serde(default)]
    pub host: Option<String>,
    /// The TLS server name sent to and verified against this server; default: `origin_tls.sni`.
    #[serde(default)]
    pub sni: Option<String>,
}

fn one() -> u32 {
    1
}

impl OriginServer {
    /// The one server of a route written with `origin: host:port`.
    pub(crate) fn single(address: &str) -> Self {
        Self { address: address.to_string(), weight: 1, backup: false, host: None, sni: None }
    }
}

/// How a group picks the server for a request (`upstream.balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Of two servers drawn at random (by weight), the one with the lower in-flight requests ×
    /// response-time average: the fastest path, and a slow server sheds load at once.
    #[default]
    Latency,
    /// In turn, by weight (smooth weighted round robin, as nginx does).
    RoundRobin,
    /// By the request's cache key (rendezvous hashing): every edge sends a given object to the
    /// same server, so shields each hold their own share and the origin answers once per object.
    Hash,
}

/// Passive health (`upstream.health`): a server is ejected after `fails` failures in a row
/// (connect failures, resets, timeouts, 500/502/503/504), for `eject`, twice as long each time
/// it is ejected again, at most `max_eject`; never more than half the primaries at once.
/// Active health needs no key: a server whose standing connections are all gone and whose
/// reconnect failed is down at once. With `path`, an application-level probe too: a GET of
/// `path` every `interval` on the server's standing connections; a server whose answer is not
/// `status` is out until one is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    #[serde(default = "default_fails")]
    pub fails: u32,
    #[serde(default = "default_eject", with = "duration")]
    pub eject: Duration,
    #[serde(default = "default_max_eject", with = "duration")]
    pub max_eject: Duration,
    /// The probe's path (`/healthz`); none: no probe.
    #[serde(default)]
    pub path: Option<String>,
    /// The probe's expected status.
    #[serde(default = "default_status")]
    pub status: u16,
    /// Between probes (HAProxy's `inter 2s`).
    #[serde(default = "default_interval", with = "duration")]
    pub interval: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            fails: default_fails(),
            eject: default_eject(),
            max_eject: default_max_eject(),
            path: None,
            status: default_status(),
            interval: default_interval(),
        }
    }
}

fn default_status() -> u16 {
    200
}
fn default_interval() -> Duration {
    Duration::from_secs(2)
}

/// HAProxy's `fall 3`: one failure can be a blip; three in a row is the server.
fn default_fails() -> u32 {
    3
}
/// nginx's `fail_timeout=10s`.
fn default_eject() -> Duration {
    Duration::from_secs(10)
}
/// Envoy's `max_ejection_time`.
fn default_max_eject() -> Duration {
    Duration::from_secs(300)
}

/// A group holds at most this many servers (a request's tried servers are a 64-bit mask).
pub(crate) const MAX_SERVERS: usize = 64;

/// `origins` as written: every entry's key named on error (`key`: beside `origins`; `settings`:
/// in the upstream's settings, where `health` is).
pub(crate) fn validate(
    servers: &[OriginServer],
    health: &HealthConfig,
    key: &dyn Fn(&str) -> String,
    settings: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if servers.is_empty() {
        return Err(ConfigError::invalid(key("origins"), "needs at least one server"));
    }
    if servers.len() > MAX_SERVERS {
        return Err(ConfigError::invalid(key("origins"), format!("at most {MAX_SERVERS} servers")));
    }
    if servers.iter().all(|s| s.backup) {
        return Err(ConfigError::invalid(key("origins"), "every server is a backup: at least one must be primary"));
    }
    let mut seen = HashSet::new();
    for (j, s) in servers.iter().enumerate() {
        let field = |f: &str| key(&format!("origins[{j}].{f}"));
        let addr = OriginAddr::parse(&s.address).map_err(|m| ConfigError::invalid(field("address"), m))?;
        if !seen.insert((addr.host.to_ascii_lowercase(), addr.port)) {
            return Err(ConfigError::invalid(field("address"), format!("{} is listed twice", s.address)));
        }
        if !(1..=1000).contains(&s.weight) {
            return Err(ConfigError::invalid(field("weight"), "must be from 1 to 1000"));
        }
        if let Some(host) = &s.host {
            if host.parse::<http::uri::Authority>().is_err() || host.contains('@') {
                return Err(ConfigError::invalid(field("host"), format!("{host:?} is not a host name (host[:port])")));
            }
        }
        if let Some(sni) = &s.sni {
            rustls::pki_types::ServerName::try_from(sni.as_str())
                .map_err(|_| ConfigError::invalid(field("sni"), format!("invalid server name {sni:?}")))?;
        }
    }
    if health.fails == 0 {
        return Err(ConfigError::invalid(settings("health.fails"), "must be at least 1"));
    }
    if health.eject.is_zero() || health.max_eject < health.eject {
        return Err(ConfigError::invalid(settings("health.eject"), "need 0 < eject <= max_eject"));
    }
    if let Some(path) = &health.path {
        if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(ConfigError::invalid(settings("health.path"), format!("{path:?} is not a path (/healthz)")));
        }
    }
    if !(100..=599).contains(&health.status) {
        return Err(ConfigError::invalid(settings("health.status"), "must be an HTTP status, 100 to 599"));
    }
    if health.interval < Duration::from_millis(100) {
        return Err(ConfigError::invalid(settings("health.interval"), "must be at least 100ms"));
    }
    Ok(())
}
