//! The pools of the running configuration.
//!
//! [`Pools::sync`] runs at start and on every reload: it starts pools for keys the new route
//! table needs, passes new sizes to pools that stay (their connections are untouched), and
//! retires pools no route needs any more (refill stops, idle connections close; clients already
//! attached keep theirs). So a reload never drops a connection in use and never leaks one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_rustls::TlsConnector;

use super::{Pool, Settings, Target};
use crate::metrics::{Metrics, PoolLabels};
use crate::route::RouteTable;
use crate::tls::origin::PoolKey;

pub struct Pools {
    map: Mutex<HashMap<PoolKey, Arc<Pool>>>,
    metrics: Arc<Metrics>,
}

impl Pools {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { map: Mutex::default(), metrics }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Arc<Pool>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.map().get(key).cloned()
    }

    /// Make the set of pools match `routes`. Must run inside the tokio runtime.
    pub fn sync(&self, routes: &RouteTable, connect_timeout: Duration) {
        let mut map = self.map();
        let mut wanted = HashMap::new();
        for (name, route) in routes.prewarm_routes() {
            for alpn in route.pool_alpns() {
                let key = route.origin.key(alpn);
                let settings = Settings { size: route.pool.clone(), connect_timeout };
                if let Some(pool) = map.get(&key) {
                    pool.update(settings);
                    wanted.insert(key, pool.clone());
                    continue;
                }
                if wanted.contains_key(&key) {
                    continue;
                }
                if !key.verify {
                    tracing::warn!(route = name, origin = %key.origin, "origin_tls.verify is false: origin certificates are NOT verified");
                }
                let labels =
                    PoolLabels { route: name.to_string(), origin: key.origin.to_string(), alpn: key.alpn_label() };
                let target = Target {
                    connector: TlsConnector::from(route.origin.config(alpn)),
                    server_name: route.origin.server_name.clone(),
                    key: key.clone(),
                };
                let pool = Pool::start(target, labels, settings, self.metrics.clone());
                wanted.insert(key, pool);
            }
        }
        for (key, pool) in map.drain() {
            if !wanted.contains_key(&key) {
                pool.retire();
            }
        }
        *map = wanted;
    }

    /// Stop every pool (shutdown).
    pub fn retire_all(&self) {
        for (_, pool) in self.map().drain() {
            pool.retire();
        }
    }

    /// `/pools`: every pool's key and numbers.
    pub fn status(&self) -> serde_json::Value {
        let map = self.map();
        let mut pools: Vec<_> = map.values().map(|p| p.status()).collect();
        pools.sort_by_key(|p| (p["route"].to_string(), p["alpn"].to_string()));
        serde_json::json!({ "pools": pools })
    }
}
