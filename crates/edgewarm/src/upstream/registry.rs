//! The upstreams of the running configuration, kept across reloads by key.
//!
//! Like the prewarm pools ([`crate::pool::registry`]): a reload keeps every upstream whose key
//! is still wanted (its connections stay open, new settings apply), starts the new ones before
//! the new routes are published, and retires the rest gracefully (streams in flight finish).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Upstream, UpstreamStatus};
use crate::config::UpstreamConfig;
use crate::metrics::{Metrics, PoolLabels, RouteName};
use crate::pool::dial::TlsDial;
use crate::tls::origin::PoolKey;

/// An upstream the new configuration needs.
pub struct Wanted {
    pub route: RouteName,
    pub dial: TlsDial,
    pub settings: UpstreamConfig,
    pub connect_timeout: Duration,
}

pub struct Upstreams {
    map: Mutex<HashMap<PoolKey, Arc<Upstream>>>,
    metrics: Arc<Metrics>,
}

impl Upstreams {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { map: Mutex::default(), metrics }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Arc<Upstream>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make the set of upstreams exactly `wanted`; returns each wanted key's upstream.
    pub fn sync(&self, wanted: Vec<Wanted>) -> HashMap<PoolKey, Arc<Upstream>> {
        let mut map = self.map();
        let mut next = HashMap::new();
        for w in wanted {
            let key = w.dial.key.clone();
            if let Some(u) = map.get(&key).or_else(|| next.get(&key)) {
                u.update(w.settings, w.connect_timeout);
                next.insert(key, u.clone());
                continue;
            }
            if !key.verify {
                tracing::warn!(route = %w.route, origin = %key.origin, "origin_tls.verify is false: origin certificates are NOT verified");
            }
            let labels = PoolLabels { route: w.route, origin: key.origin.to_string(), alpn: key.alpn_label() };
            let u = Upstream::start(w.dial, labels, w.settings, w.connect_timeout, self.metrics.clone());
            next.insert(key, u);
        }
        for (key, u) in map.drain() {
            if !next.contains_key(&key) {
                u.retire();
            }
        }
        map.clone_from(&next);
        next
    }

    /// Stop every upstream (shutdown): no new streams; open ones finish.
    pub fn retire_all(&self) {
        for (_, u) in self.map().drain() {
            u.retire();
        }
    }

    pub fn status(&self) -> Vec<UpstreamStatus> {
        let mut all: Vec<_> = self.map().values().map(|u| u.status()).collect();
        all.sort_by(|a, b| (&a.route, &a.origin).cmp(&(&b.route, &b.origin)));
        all
    }
}
