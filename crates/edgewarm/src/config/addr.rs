//! An origin as written in the config (`routes[].origin`), checked without touching the network.

use std::fmt;

/// An origin as written in the config: a host name or IP literal and a port. Resolution happens
/// at connect time (every address tried), so DNS changes are picked up without a reload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OriginAddr {
    pub host: String,
    pub port: u16,
}

impl OriginAddr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (host, port) = text.rsplit_once(':').ok_or("expected host:port, e.g. origin.internal:443")?;
        let port: u16 = port.parse().map_err(|_| format!("invalid port {port:?}"))?;
        if port == 0 {
            return Err("port 0 is not a destination".into());
        }
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => {
                v6.parse::<std::net::Ipv6Addr>().map_err(|_| format!("invalid IPv6 address {v6:?}"))?;
                v6
            }
            None if host.contains(':') => return Err("write IPv6 origins as [addr]:port".into()),
            None => host,
        };
        if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b) || b == b':') {
            return Err(format!("invalid host {host:?}"));
        }
        Ok(Self { host: host.to_string(), port })
    }
}

impl fmt::Display for OriginAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}
