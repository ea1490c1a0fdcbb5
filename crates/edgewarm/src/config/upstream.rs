//! `routes[].upstream` and the blocks of `upstreams:`: an `http` route's standing origin
//! connections (how many, kept how long, which protocol, TLS or cleartext, the congestion
//! control) and how its servers are chosen and checked. A named block holds its servers too
//! (`origin`, `origins`, `origin_tls`: [`super::upstreams`]).

use std::time::Duration;

use serde::Deserialize;

use super::duration;
use super::origins::{Balance, HealthConfig, OriginServer};
use super::OriginTls;

/// The standing origin connections of an `http` route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Connections opened at start-up and on reload, before any client, and kept open.
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// Ceiling when every connection's stream limit is reached.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// PING interval on each connection (liveness, and the link's RTT): HTTP/2 PINGs, or QUIC
    /// PINGs for `h3` (there at most every 333 ms: a dead origin is found in a second).
    #[serde(default = "default_keepalive", with = "duration")]
    pub keepalive: Duration,
    /// A connection is replaced after this long (before the origin's own limits close it);
    /// it is retired gracefully: no new streams, open ones finish.
    #[serde(default = "default_max_age", with = "duration")]
    pub max_age: Duration,
    /// Connections opened beyond `connections` for demand are closed after this long without a
    /// stream.
    #[serde(default = "default_idle_timeout", with = "duration")]
    pub idle_timeout: Duration,
    /// `h2` (default): multiplexed streams. `http/1.1`: for origins without HTTP/2, a pool of
    /// keep-alive connections, one request at a time each.
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// `true` (default): TLS to the origin, certificates verified (`origin_tls`). `false`:
    /// cleartext, for an origin on the edge's own network (HTTP/1.1, or HTTP/2 with prior
    /// knowledge, h2c).
    #[serde(default = "yes")]
    pub tls: bool,
    /// TCP congestion control of the origin sockets (`bbr`, `cubic`, …); default: the
    /// system's (`net.ipv4.tcp_congestion_control`).
    #[serde(default)]
    pub congestion: Option<String>,
    /// How a route with several `origins` picks a request's server (`latency` by default).
    #[serde(default)]
    pub balance: Balance,
    /// A server that returns (from down or ejected) gets its share back over this long, from a
    /// tenth (0: at once, the default, as HAProxy's and Envoy's).
    #[serde(default, with = "duration")]
    pub slow_start: Duration,
    /// When a server of several is ejected (passive health).
    #[serde(default)]
    pub health: HealthConfig,
    /// The servers and their TLS, written only in an `upstreams:` block (a route's own are the
    /// route's keys; validation refuses them in a route's `upstream:` map). One struct for both
    /// forms, because serde's `flatten` cannot go with `deny_unknown_fields`: a misspelt key
    /// in either is refused by name and line. Moved to the route's [`super::HttpConfig`] at
    /// load, so the settings the sets are given never hold them.
    #[serde(default)]
    pub origin: Option<String>,
    #[serde(default)]
    pub origins: Option<Vec<OriginServer>>,
    #[serde(default)]
    pub origin_tls: Option<OriginTls>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum UpstreamProtocol {
    #[default]
    #[serde(rename = "h2")]
    H2,
    #[serde(rename = "http/1.1")]
    Http11,
    /// HTTP/3 over QUIC: every request a stream of its own on standing QUIC connections, so a
    /// lost packet stalls only the streams whose data it carried (no head-of-line blocking
    /// across requests, as on TCP); the natural peer is another edgewarm's `http3` listener.
    #[serde(rename = "h3")]
    H3,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            connections: default_connections(),
            max_connections: default_max_connections(),
            keepalive: default_keepalive(),
            max_age: default_max_age(),
            idle_timeout: default_idle_timeout(),
            protocol: UpstreamProtocol::default(),
            tls: true,
            congestion: None,
            balance: Balance::default(),
            slow_start: Duration::ZERO,
            health: HealthConfig::default(),
            origin: None,
            origins: None,
            origin_tls: None,
        }
    }
}

/// Eight: enough that a loss on one holds few clients' requests (each client's ride one
/// connection), few enough that each keeps carrying traffic (docs/benchmarks.md, "standing
/// connections under loss").
fn default_connections() -> usize {
    8
}
fn default_max_connections() -> usize {
    32
}
fn default_keepalive() -> Duration {
    Duration::from_secs(20)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_max_age() -> Duration {
    Duration::from_secs(50 * 60)
}

/// The congestion controllers QUIC origin connections can use (quinn's, in user space): the
/// kernel's list does not apply to them.
pub(crate) const QUIC_CONGESTION: [&str; 3] = ["bbr", "cubic", "reno"];

/// Whether `name` is a congestion control this kernel has (`tcp_available_congestion_control`;
/// when that cannot be read, any well-formed name): the reason if not. (The kernel takes names
/// of up to 15 bytes.)
pub(crate) fn congestion_available(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{name:?} is not a congestion control name"));
    }
    let Ok(list) = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control") else {
        return Ok(());
    };
    if list.split_whitespace().any(|n| n == name) {
        Ok(())
    } else {
        Err(format!("{name:?} is not available in this kernel (available: {})", list.trim()))
    }
}
