//! The pools of the running configuration.
//!
//! [`Pools::sync`] runs at start and on every reload: it starts pools for keys the new route
//! table needs, passes new sizes to pools that stay (their connections are untouched), and
//! retires pools no route needs any more (refill stops, idle connections close; clients already
//! attached keep theirs). So a reload never drops a connection in use and never leaks one.
//!
//! The map here serves reloads, shutdown and `/pools` only. Connections never look a pool up
//! in it: each route holds its own pools (see [`crate::route::PrewarmRoute::pool`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::dial::TlsDial;
use super::status::PoolStatus;
use super::{Settings, TlsPool};
use crate::metrics::{Metrics, PoolLabels, RouteName};
use crate::tls::origin::PoolKey;

/// A pool the new configuration needs: the route that first asked for it, how to dial, sizes.
pub struct Wanted {
    pub route: RouteName,
    pub dial: TlsDial,
    pub settings: Settings,
}

pub struct Pools {
    map: Mutex<HashMap<PoolKey, Arc<TlsPool>>>,
    metrics: Arc<Metrics>,
}

impl Pools {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { map: Mutex::default(), metrics }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Arc<TlsPool>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make the set of pools exactly `wanted` (the first entry for a key wins, as routes with
    /// equal keys share a pool). Returns every wanted key's pool. Must run inside the runtime.
    pub fn sync(&self, wanted: Vec<Wanted>) -> HashMap<PoolKey, Arc<TlsPool>> {
        let mut map = self.map();
        let mut next = HashMap::new();
        for w in wanted {
            let key = w.dial.key.clone();
            if let Some(pool) = map.get(&key) {
                pool.update(w.settings);
                next.insert(key, pool.clone());
                continue;
            }
            if next.contains_key(&key) {
                continue;
            }
            if !key.verify {
                tracing::warn!(route = %w.route, origin = %key.origin, "origin_tls.verify is false: origin certificates are NOT verified");
            }
            let labels = PoolLabels { route: w.route, origin: key.origin.to_string(), alpn: key.alpn_label() };
            next.insert(key, TlsPool::start(w.dial, labels, w.settings, self.metrics.clone()));
        }
        for (key, pool) in map.drain() {
            if !next.contains_key(&key) {
                pool.retire();
            }
        }
        map.clone_from(&next);
        next
    }

    /// Stop every pool (shutdown).
    pub fn retire_all(&self) {
        for (_, pool) in self.map().drain() {
            pool.retire();
        }
    }

    /// Every pool's key and numbers, in a stable order (route, then ALPN).
    pub fn status(&self) -> Vec<PoolStatus> {
        let mut pools: Vec<_> = self.map().values().map(|p| p.status()).collect();
        pools.sort_by(|a, b| (&a.route, &a.alpn).cmp(&(&b.route, &b.alpn)));
        pools
    }
}
