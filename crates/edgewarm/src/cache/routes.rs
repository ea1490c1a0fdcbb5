//! Every route's cache, kept across reloads: a route whose `cache` settings did not change
//! keeps what it stored (a reload must not empty the edge), one whose settings changed gets
//! a new store, one that lost its `cache` key drops it. Read by the admin API (`/cache`,
//! `/cache/purge`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

use http::{Method, Request, Response};

use super::disk::{Disk, DiskMetrics, Tier};
use super::fill::{Fill, FillBody, FillHead, Fills};
use super::key::Key;
use super::status::Status;
use super::store::{Lower, Store};
use crate::config::{CacheConfig, DiskConfig};
use crate::metrics::{CacheMetrics, CacheResult, DiskLabels, DiskRead, RouteLabel, RouteName};
use crate::origin::body::OriginBody;
use crate::origin::per_route::PerRoute;
use crate::origin::seam::Sent;

/// One route's cache: its store, the fetches in flight, the background revalidations.
pub(crate) struct RouteCache {
    pub(crate) route: RouteName,
    pub(crate) store: Arc<Store>,
    pub(crate) fills: Arc<Fills>,
    revalidating: Mutex<HashSet<Key>>,
    counters: Vec<(CacheResult, Counter)>,
}

impl RouteCache {
    pub(crate) fn count(&self, result: CacheResult) {
        if let Some((_, c)) = self.counters.iter().find(|(r, _)| *r == result) {
            c.inc();
        }
    }

    /// A response the cache made or passed on, counted and marked with `Cache-Status`.
    pub(crate) fn answer(&self, mut response: Response<OriginBody>, result: CacheResult, status: &Status) -> Sent {
        status.append_to(response.headers_mut());
        self.count(result);
        Sent::local(response).noted(result)
    }

    /// The origin's answer `from`, as the cache passes it on (`make`: its response as sent, and
    /// the `Cache-Status` to mark it with), counted like [`RouteCache::answer`]'s. What the
    /// origin side noted stays on it (the connection, a group's server): the access log names
    /// them for a miss as for an uncached route.
    pub(crate) fn relay(
        &self,
        from: Sent,
        result: CacheResult,
        make: impl FnOnce(Response<OriginBody>) -> (Response<OriginBody>, Status),
    ) -> Sent {
        let (mut response, status) = make(from.response);
        status.append_to(response.headers_mut());
        self.count(result);
        Sent { response, ..from }.noted(result)
    }

    /// A request that joined another's fetch: its head, and its body as it arrives (`fwd`:
    /// why that fetch went to the origin).
    pub(crate) fn collapsed(&self, shared: &FillHead, fill: Arc<Fill>, head: &Request<()>, fwd: &'static str) -> Sent {
        let body = if head.method() == Method::HEAD {
            OriginBody::new(http_body_util::Empty::new(), Box::new(()))
        } else {
            OriginBody::new(FillBody::new(fill), Box::new(()))
        };
        let mut response = Response::new(body);
        *response.status_mut() = shared.status;
        *response.headers_mut() = shared.headers.clone();
        let status = Status { fwd: Some(fwd), collapsed: true, ..Status::default() };
        self.answer(response, CacheResult::Collapsed, &status)
    }

    /// `false` when a revalidation of `key` is already under way.
    pub(crate) fn start_revalidating(&self, key: &Key) -> bool {
        self.revalidating.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.clone())
    }

    pub(crate) fn done_revalidating(&self, key: &Key) {
        self.revalidating.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}

/// What to purge (`POST /cache/purge?url=…|prefix=…|tag=…`).
#[derive(Debug, Clone)]
pub enum Purge {
    /// Every variant of one URL, as the cache keys it: `https://host[:port]/path?query`.
    Url(String),
    Prefix(String),
    /// Responses whose `Cache-Tag` names it.
    Tag(String),
}

/// One route's occupancy, for `/cache`.
#[derive(Debug, Serialize)]
pub struct Occupancy {
    pub route: String,
    pub entries: u64,
    pub bytes: u64,
    pub max_size: u64,
    /// The disk tier's files and their bytes (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskOccupancy>,
}

/// A disk tier's occupancy, for `/cache`.
#[derive(Debug, Serialize)]
pub struct DiskOccupancy {
    pub entries: u64,
    pub bytes: u64,
    pub max_size: u64,
}

/// The server's caches, by route.
pub struct Caches {
    metrics: CacheMetrics,
    routes: PerRoute<CacheConfig, RouteCache>,
    /// Raised while the node's fleet has not caught up with its purges: no stored response is
    /// served (requests pass to the origin) ([`crate::fleet`]).
    fence: Arc<std::sync::atomic::AtomicBool>,
}

impl Caches {
    pub fn new(metrics: CacheMetrics) -> Self {
        Self { metrics, routes: PerRoute::default(), fence: Arc::default() }
    }

    /// The fence ([`Caches::fence`] raised: no hits).
    pub fn fence(&self) -> &Arc<std::sync::atomic::AtomicBool> {
        &self.fence
    }

    /// `route`'s cache with `config`: the one it had if the settings are the same.
    pub(crate) fn route(&self, route: &RouteName, config: &CacheConfig) -> Arc<RouteCache> {
        self.routes.get_or_make(route, config, || {
            let label = RouteLabel { route: route.clone() };
            let evicted = self.metrics.evictions.get_or_create(&label).clone();
            let bytes = self.metrics.stored_bytes.get_or_create(&label).clone();
            let disk = config.disk.as_ref().and_then(|d| self.open_disk(route, d));
            RouteCache {
                route: route.clone(),
                store: Arc::new(Store::new(config.clone(), evicted, bytes, disk)),
                fills: Arc::default(),
                revalidating: Mutex::default(),
                counters: self.metrics.for_route(route),
            }
        })
    }

    /// `route`'s disk tier, its index loaded from the directory; without one (logged) when the
    /// directory cannot be made or read: the memory tier still serves.
    fn open_disk(&self, route: &RouteName, config: &DiskConfig) -> Option<Arc<dyn Lower>> {
        let m = &self.metrics;
        let read = |result| m.disk_reads.get_or_create(&DiskLabels { route: route.clone(), result }).clone();
        let label = RouteLabel { route: route.clone() };
        let metrics = DiskMetrics {
            hit: read(DiskRead::Hit),
            miss: read(DiskRead::Miss),
            corrupt: read(DiskRead::Corrupt),
            bytes: m.disk_bytes.get_or_create(&label).clone(),
            written: m.disk_written_bytes.get_or_create(&label).clone(),
        };
        match Disk::open(config, route.clone(), metrics) {
            Ok(disk) => Some(Arc::new(Tier(Arc::new(disk)))),
            Err(e) => {
                tracing::error!(%route, dir = %config.path.display(), error = %e, "cache disk tier not opened: memory only");
                None
            }
        }
    }

    /// Drop the caches of routes not in `keep` (no longer configured, or without `cache`).
    pub(crate) fn keep_only(&self, keep: &HashSet<RouteName>) {
        self.routes.retain(keep);
    }

    /// Purge across every route; returns how many stored responses went.
    pub fn purge(&self, what: &Purge) -> u64 {
        let routes = self.routes.each(|_, _, cache| cache.clone());
        let mut n = 0;
        for cache in routes {
            let store = &cache.store;
            n += match what {
                Purge::Url(url) => {
                    store.forget(url);
                    store.purge(|u| u == url, |_| false)
                }
                Purge::Prefix(prefix) => store.purge(|u| u.starts_with(prefix.as_str()), |_| false),
                Purge::Tag(tag) => store.purge(|_| false, |tags| tags.iter().any(|t| **t == **tag)),
            };
        }
        n
    }

    pub fn occupancy(&self) -> Vec<Occupancy> {
        let mut out: Vec<Occupancy> = self.routes.each(|name, config, cache| {
            let (entries, bytes) = cache.store.occupancy();
            let disk = cache.store.disk.as_ref().zip(config.disk.as_ref()).map(|(d, c)| {
                let (entries, bytes) = d.occupancy();
                DiskOccupancy { entries, bytes, max_size: c.max_size }
            });
            Occupancy { route: name.to_string(), entries, bytes, max_size: config.max_size, disk }
        });
        out.sort_by(|a, b| a.route.cmp(&b.route));
        out
    }
}
