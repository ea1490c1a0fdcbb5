//! Who may connect and how much: address lists (`allow`, `deny`) on listeners, routes and the
//! admin listener, the per-client connection cap's grouping, and a route's request rate.

use std::net::IpAddr;

use serde::Deserialize;

/// An address range, `10.0.0.0/8`, `2001:db8::/32`, or one address (`/32`, `/128` implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|_| format!("{text:?} is not an address or CIDR range"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {max}"))?,
            None => max,
        };
        Ok(Self { net, len })
    }

    /// Whether `ip` is inside (an IPv4-mapped IPv6 client counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.len),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.len),
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack socket's IPv4 client) as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let (whole, rest) = (usize::from(len / 8), len % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `allow` and `deny` lists: deny wins; a non-empty `allow` admits only what it names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AccessList {
    #[serde(default)]
    pub allow: Vec<Cidr>,
    #[serde(default)]
    pub deny: Vec<Cidr>,
}

/// Whether `allow` and `deny` admit `ip`: deny wins; a non-empty `allow` admits only what it names.
pub(crate) fn admits(allow: &[Cidr], deny: &[Cidr], ip: IpAddr) -> bool {
    !deny.iter().any(|c| c.contains(ip)) && (allow.is_empty() || allow.iter().any(|c| c.contains(ip)))
}

impl AccessList {
    pub fn admits(&self, ip: IpAddr) -> bool {
        admits(&self.allow, &self.deny, ip)
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// `routes[].limits`: a request rate, per client or per value of a header.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// The sustained rate a key may send.
    pub requests_per_second: f64,
    /// Requests a key may send at once above the rate (the bucket's size); at least 1.
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// What a rate belongs to: `client` (its address, IPv6 by /64) or `header NAME`.
    #[serde(default)]
    pub by: RateKey,
    /// The rate state's budget (1 MiB: 65,536 keys a row at 16 bytes a key).
    #[serde(default, deserialize_with = "super::size::deserialize_opt")]
    pub memory: Option<u64>,
}

fn default_burst() -> u32 {
    1
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RateKey {
    #[default]
    Client,
    /// The header's value (lower-cased name); requests without it are keyed by client.
    Header(String),
}

impl<'de> Deserialize<'de> for RateKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["client"] => Ok(Self::Client),
            ["header", name] if http::HeaderName::from_bytes(name.as_bytes()).is_ok() => {
                Ok(Self::Header(name.to_ascii_lowercase()))
            }
            _ => Err(serde::de::Error::custom(format!("{text:?}: write `client` or `header NAME`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_match_by_prefix_and_lists_let_deny_win() {
        let c = |s: &str| Cidr::parse(s).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(c("10.0.0.0/8").contains(ip("10.200.1.1")));
        assert!(!c("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(c("127.0.0.2").contains(ip("127.0.0.2")) && !c("127.0.0.2").contains(ip("127.0.0.1")));
        assert!(c("192.168.1.128/25").contains(ip("192.168.1.200")));
        assert!(!c("192.168.1.128/25").contains(ip("192.168.1.100")));
        assert!(c("2001:db8::/32").contains(ip("2001:db8:1::5")));
        assert!(!c("2001:db8::/32").contains(ip("10.0.0.1")));
        assert!(c("0.0.0.0/0").contains(ip("8.8.8.8")));
        // A dual-stack socket's IPv4 client.
        assert!(c("127.0.0.0/8").contains(ip("::ffff:127.0.0.2")));
        for bad in ["10.0.0.0/33", "::/129", "host", "10.0.0.0/x"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        let list = AccessList { allow: vec![c("127.0.0.0/8")], deny: vec![c("127.0.0.2")] };
        assert!(list.admits(ip("127.0.0.1")));
        assert!(!list.admits(ip("127.0.0.2")), "deny wins");
        assert!(!list.admits(ip("10.0.0.1")), "allow admits only what it names");
        assert!(AccessList::default().admits(ip("10.0.0.1")));
    }
}
