//! A group as `/origins` shows it: each server's state (the plainest reason it is out first),
//! weight, response-time average, requests in flight and ejections.

use tokio::time::Instant;

use super::Group;
use crate::config::Balance;

impl Group {
    /// Numbers for `/origins`.
    pub(super) fn status(&self) -> serde_json::Value {
        let now = Instant::now();
        let serving = self.observe(now);
        let servers: Vec<_> = self
            .members
            .iter()
            .zip(serving)
            .map(|(m, serving)| {
                let ejected = m.state.ejected_until(now);
                // What keeps it out, the plainest reason first: down, then failing its probe,
                // then ejected for failures (`ejected_for_ms` is shown whatever the state).
                let state = if serving {
                    "healthy"
                } else if !m.set.up() {
                    "down"
                } else if m.state.probe_failed() {
                    "probe_failed"
                } else {
                    "ejected"
                };
                serde_json::json!({
                    "server": &*m.state.name,
                    "state": state,
                    "ejected_for_ms": ejected.map(|t| t.duration_since(now).as_millis() as u64),
                    "backup": m.backup,
                    "weight": m.weight,
                    "host": m.host.as_ref().map(|h| h.as_str()),
                    "rtt_ms": m.state.latency(now, f64::MAX).map(|s| (s * 1e4).round() / 10.0),
                    "in_flight": m.state.in_flight(),
                    "ejections": m.state.ejections(),
                })
            })
            .collect();
        serde_json::json!({
            "route": self.route.to_string(),
            "kind": "group",
            "balance": match self.balance {
                Balance::Latency => "latency",
                Balance::RoundRobin => "round_robin",
                Balance::Hash => "hash",
            },
            "servers": servers,
        })
    }
}
