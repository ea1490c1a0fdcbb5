//! The edge cache's metrics, registered under the `cache` prefix: requests by result, and per
//! route the bytes held and the entries evicted for room.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{RouteLabel, RouteName};

label_enum! {
    /// What the cache did with a request (also the access log's `cache=`).
    CacheResult {
        // Served fresh from storage.
        Hit => "hit",
        // Served fresh from the disk tier (not in memory).
        HitDisk => "hit_disk",
        // Served stale: while one request revalidates it, or because the origin failed.
        Stale => "stale",
        // Stale, confirmed by the origin (304), served from storage.
        Revalidated => "revalidated",
        // Fetched from the origin, stored or not.
        Miss => "miss",
        // Read from another request's fetch of the same object as it arrived.
        Collapsed => "collapsed",
        // Not a request the cache serves: another method, a range on a miss, a URL known to
        // be uncacheable.
        Bypass => "bypass",
    }
}

label_enum! {
    /// What a look on the disk tier found (a memory miss).
    DiskRead {
        // An entry for the key, read whole.
        Hit => "hit",
        // No entry for the key.
        Miss => "miss",
        // A file that could not be read back (damaged, truncated, another key): removed, a miss.
        Corrupt => "corrupt",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiskLabels {
    pub route: RouteName,
    pub result: DiskRead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub route: RouteName,
    pub result: CacheResult,
}

#[derive(Clone, Debug, Default)]
pub struct CacheMetrics {
    pub requests: Family<CacheLabels, Counter>,
    pub stored_bytes: Family<RouteLabel, Gauge>,
    pub evictions: Family<RouteLabel, Counter>,
    pub disk_reads: Family<DiskLabels, Counter>,
    pub disk_bytes: Family<RouteLabel, Gauge>,
    pub disk_written_bytes: Family<RouteLabel, Counter>,
}

impl CacheMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register("requests", "Requests on routes with a cache, by what the cache did", self.requests.clone());
        registry.register(
            "stored_bytes",
            "Bytes the cache holds (bodies, headers and index), by route",
            self.stored_bytes.clone(),
        );
        registry.register("evictions", "Entries evicted to make room, by route", self.evictions.clone());
        registry.register(
            "disk_reads",
            "Looks on the disk tier after a memory miss, by result",
            self.disk_reads.clone(),
        );
        registry.register("disk_bytes", "Bytes of files the disk tier holds, by route", self.disk_bytes.clone());
        registry.register(
            "disk_written_bytes",
            "Bytes written to the disk tier, by route",
            self.disk_written_bytes.clone(),
        );
    }

    /// One route's counter for each result, looked up once.
    pub fn for_route(&self, route: &RouteName) -> Vec<(CacheResult, Counter)> {
        use CacheResult::*;
        [Hit, HitDisk, Stale, Revalidated, Miss, Collapsed, Bypass]
            .into_iter()
            .map(|result| (result, self.requests.get_or_create(&CacheLabels { route: route.clone(), result }).clone()))
            .collect()
    }
}
