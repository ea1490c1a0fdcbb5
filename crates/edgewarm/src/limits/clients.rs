//! Connections open per client address on one listener (`max_connections_per_client`): an
//! exact table, an entry only while the address has a connection open, so its size is bounded
//! by the listener's `max_connections` (about 40 bytes an address in the map).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::config::limits::canonical;

/// The key an address is counted under: IPv4 whole, IPv6 by its first `prefix` bits (one host
/// owns a /64, so /64 by default).
pub(crate) fn client_key(ip: IpAddr, prefix: u8) -> u128 {
    match canonical(ip) {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) | (0xffff << 32),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let keep = u32::from(prefix.min(128));
            if keep == 0 {
                0
            } else {
                bits & (u128::MAX << (128 - keep))
            }
        }
    }
}

/// The address a key stands for, for `/limits` (an IPv6 key is its prefix's first address).
fn key_text(key: u128, prefix: u8) -> String {
    let v6 = std::net::Ipv6Addr::from(key);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => format!("{v6}/{prefix}"),
    }
}

#[derive(Debug, Default)]
pub(crate) struct ClientCounts {
    open: Mutex<HashMap<u128, u32>>,
}

/// One connection's place in its client's count, given back on drop.
pub(crate) struct ClientSlot {
    counts: Arc<ClientCounts>,
    key: u128,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

impl ClientCounts {
    /// A place for one more connection of `key`'s, unless it has `cap` open already.
    pub(crate) fn enter(self: &Arc<Self>, key: u128, cap: usize) -> Option<ClientSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n as usize >= cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot { counts: self.clone(), key })
    }

    /// The `n` clients with the most connections open.
    pub(crate) fn top(&self, n: usize, prefix: u8) -> Vec<(String, u32)> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = open.iter().map(|(&k, &c)| (key_text(k, prefix), c)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

/// Every listener's counts, for `/limits`.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    listeners: Mutex<Vec<(String, u8, Arc<ClientCounts>)>>,
}

impl Tracked {
    /// The counts of the listener `name` (its bound address), made on first use: its TCP
    /// accept loop and its HTTP/3 endpoints count a client's connections together.
    pub(crate) fn listener(&self, name: String, prefix: u8) -> Arc<ClientCounts> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, counts)) = listeners.iter().find(|(n, _, _)| *n == name) {
            return counts.clone();
        }
        let counts = Arc::new(ClientCounts::default());
        listeners.push((name, prefix, counts.clone()));
        counts
    }

    /// Each listener's ten clients with the most connections open.
    pub(crate) fn top(&self) -> serde_json::Value {
        let listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let list: Vec<_> = listeners
            .iter()
            .map(|(name, prefix, counts)| {
                let top: Vec<_> = counts
                    .top(10, *prefix)
                    .into_iter()
                    .map(|(c, n)| serde_json::json!({"client": c, "connections": n}))
                    .collect();
                serde_json::json!({ "listener": name, "clients": top })
            })
            .collect();
        serde_json::Value::Array(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_capped_and_its_places_come_back() {
        let counts = Arc::new(ClientCounts::default());
        let ip = |s: &str| client_key(s.parse().unwrap(), 64);
        let held: Vec<_> = (0..3).map(|_| counts.enter(ip("192.0.2.1"), 3).unwrap()).collect();
        assert!(counts.enter(ip("192.0.2.1"), 3).is_none(), "the fourth is refused");
        assert!(counts.enter(ip("::ffff:192.0.2.1"), 3).is_none(), "the same client over a dual-stack socket");
        let other = counts.enter(ip("192.0.2.2"), 3).unwrap();
        // One host owns a /64: its addresses count together.
        let v6: Vec<_> = ["2001:db8::1", "2001:db8::2"].iter().map(|a| counts.enter(ip(a), 2).unwrap()).collect();
        assert!(counts.enter(ip("2001:db8::ffff"), 2).is_none());
        assert_eq!(counts.top(1, 64), [("192.0.2.1".to_string(), 3)]);
        drop(held);
        drop((other, v6));
        assert!(counts.open.lock().unwrap().is_empty(), "no entry outlives its connections");
        assert!(counts.enter(ip("192.0.2.1"), 3).is_some());
    }
}
