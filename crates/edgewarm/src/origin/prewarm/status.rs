//! A pool's numbers as the admin listener's `/pools` shows them.

use serde::Serialize;
use tokio::time::Instant;

use super::Pool;
use crate::origin::dial::Dial;

/// One pool: its key, its sizing and what it holds now.
#[derive(Debug, Clone, Serialize)]
pub struct PoolStatus {
    pub route: String,
    pub origin: String,
    pub sni: String,
    pub alpn: String,
    pub verify: bool,
    pub ready: usize,
    pub connecting: usize,
    pub target: usize,
    pub min: usize,
    pub max: usize,
    pub max_idle_ms: u64,
    pub arrival_rate: f64,
    pub warm_time_ms: f64,
    pub consecutive_failures: u32,
    pub alpn_refused: bool,
}

impl<D: Dial> Pool<D> {
    pub fn status(&self) -> PoolStatus {
        let st = self.state();
        let k = self.core.dial.key();
        let s = &st.settings.size;
        PoolStatus {
            route: self.core.labels.route.to_string(),
            origin: k.origin.to_string(),
            sni: k.sni().to_owned(),
            alpn: self.core.labels.alpn.clone(),
            verify: k.verified(),
            ready: st.idle.len(),
            connecting: st.connects.opening,
            target: st.demand.target(s.min, s.max, Instant::now() - st.period_start),
            min: s.min,
            max: s.max,
            max_idle_ms: u64::try_from(s.max_idle.as_millis()).unwrap_or(u64::MAX),
            arrival_rate: st.demand.rate,
            warm_time_ms: st.demand.warm * 1e3,
            consecutive_failures: st.connects.backoff.failures,
            alpn_refused: st.alpn_refused,
        }
    }
}
