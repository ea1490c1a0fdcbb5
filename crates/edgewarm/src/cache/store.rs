//! The memory tier: stored responses under their [`Key`], in a `moka` cache (TinyLFU
//! admission, so one scan of cold URLs does not flush what is popular) weighed in bytes
//! against `cache.max_size`; the `Vary` names last seen per URL (to find a request's variant
//! before any response is at hand); and the URLs recently found uncacheable (hit-for-miss).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, StatusCode};
use http_cache_semantics::CachePolicy;
use moka::notification::RemovalCause;
use moka::sync::Cache;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::decide::{Grace, Refusal};
use super::key::{self, Key};
use crate::config::CacheConfig;

/// What an entry costs beyond its header and body bytes: the policy's parsed directives and
/// maps, the header maps' tables, the key, the index. Measured, not estimated: the real
/// growth per tiny entry less what the weigher counts of it (`ENTRIES=20000
/// scripts/bench-cache.sh`, docs/benchmarks.md), so `max_size` bounds real memory.
const ENTRY_OVERHEAD: u64 = 2880;

/// One stored response.
#[derive(Debug)]
pub(crate) struct Entry {
    /// RFC 9111's view of it (freshness, validators, Vary), from `http-cache-semantics`.
    pub(crate) policy: CachePolicy,
    pub(crate) status: StatusCode,
    /// As the origin sent them (less `Set-Cookie` where `store_set_cookie` strips it).
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<Bytes>,
    pub(crate) trailers: Option<HeaderMap>,
    /// Body bytes.
    pub(crate) size: u64,
    /// `Cache-Tag` values, for purge by tag.
    pub(crate) tags: Vec<Box<str>>,
    /// When it may still be served stale, past its freshness lifetime.
    pub(crate) grace: Grace,
    /// When it stopped being fresh (`stored + lifetime`).
    pub(crate) stale_at: SystemTime,
    /// The request head the policy keeps a copy of (set when stored).
    pub(crate) request_bytes: u64,
}

/// Headers copied out of whatever buffer they were parsed from: a parsed value is a slice of
/// its connection's read buffer, and a stored copy of it would keep that buffer alive whole
/// (measured: 12 KB per tiny entry before, docs/benchmarks.md).
pub(crate) fn owned(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut copy = http::HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        copy.set_sensitive(value.is_sensitive());
        out.append(name.clone(), copy);
    }
    out
}

/// A request head as an entry's policy keeps it: only what RFC 9111's rules read of it
/// (`Host`, `Authorization`, `Cache-Control`, `Pragma`, the headers the response varies on),
/// copied ([`owned`]). Forwarding headers, cookies and the rest are not kept.
pub(crate) fn kept_head(head: &Request<()>, vary: &[HeaderName]) -> Request<()> {
    use http::header::{AUTHORIZATION, CACHE_CONTROL, HOST, PRAGMA};
    let mut kept = HeaderMap::new();
    for name in [HOST, AUTHORIZATION, CACHE_CONTROL, PRAGMA].iter().chain(vary) {
        for value in head.headers().get_all(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    let mut out = Request::new(());
    *out.method_mut() = head.method().clone();
    *out.uri_mut() = head.uri().to_string().parse().unwrap_or_else(|_| head.uri().clone());
    *out.headers_mut() = owned(&kept);
    out
}

fn header_bytes(headers: &HeaderMap) -> u64 {
    headers.iter().map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64).sum()
}

impl Entry {
    /// How long it has been stale at `now` (zero while fresh).
    pub(crate) fn staleness(&self, now: SystemTime) -> Duration {
        now.duration_since(self.stale_at).unwrap_or_default()
    }

    /// What it holds: the body, the response headers twice (ours and the policy's copy), the
    /// request headers the policy keeps, and the rest of the index.
    fn weight(&self) -> u32 {
        let total = self.size + 2 * header_bytes(&self.headers) + self.request_bytes + ENTRY_OVERHEAD;
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}

/// A tier under the memory tier (the disk tier, [`super::disk`]): told of every entry stored,
/// asked on a memory miss, purged with it. A trait so that the memory tier does not depend on
/// how the tier under it keeps entries.
pub(crate) trait Lower: Send + Sync {
    /// Keep `entry` under `key` (in the background: it must not hold up the request).
    fn put(&self, key: Key, vary: Vec<HeaderName>, entry: Arc<Entry>);
    /// The entry under `key`, if held.
    fn get<'a>(
        &'a self,
        key: &'a Key,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Entry>> + Send + 'a>>;
    /// Remove every entry whose URL `matches` or whose tags `tagged` accepts; returns how many
    /// of them are not among `also` (removed from memory, so counted already).
    fn purge(&self, matches: &dyn Fn(&str) -> bool, tagged: &dyn Fn(&[Box<str>]) -> bool, also: &[Arc<Key>]) -> u64;
    /// The `Vary` names of the URLs it held when opened (once).
    fn take_found_vary(&self) -> Vec<(Arc<str>, Vec<HeaderName>)>;
    /// Entries and bytes held.
    fn occupancy(&self) -> (u64, u64);
}

/// One route's stored responses.
pub(crate) struct Store {
    pub(crate) config: CacheConfig,
    entries: Cache<Key, Arc<Entry>>,
    vary: Cache<Arc<str>, Arc<[HeaderName]>>,
    uncacheable: Cache<Arc<str>, Refusal>,
    bytes: Gauge,
    /// The disk tier under this one, if configured.
    pub(crate) disk: Option<Arc<dyn Lower>>,
}

impl Store {
    /// An empty store; `evicted` counts entries pushed out for room (or refused admission),
    /// `bytes` follows what it holds. With a disk tier, the `Vary` names of the URLs it holds
    /// are known at once, so their variants are found on disk after a restart.
    pub(crate) fn new(config: CacheConfig, evicted: Counter, bytes: Gauge, disk: Option<Arc<dyn Lower>>) -> Self {
        let held = bytes.clone();
        let entries = Cache::builder()
            .max_capacity(config.max_size)
            .weigher(|_, e: &Arc<Entry>| e.weight())
            .eviction_listener(move |_, e: Arc<Entry>, cause| {
                held.dec_by(i64::from(e.weight()));
                if cause == RemovalCause::Size {
                    evicted.inc();
                }
            })
            .build();
        let vary = Cache::builder().max_capacity(100_000).time_to_idle(Duration::from_secs(24 * 3600)).build();
        let uncacheable = Cache::builder().max_capacity(100_000).time_to_live(config.remember_uncacheable).build();
        for (url, names) in disk.iter().flat_map(|d| d.take_found_vary()) {
            vary.insert(url, names.into());
        }
        Self { config, entries, vary, uncacheable, bytes, disk }
    }

    /// The key a request's response would be stored under, as far as this URL's `Vary` is
    /// known.
    /// (The request's headers named by that `Vary` are normalised on the way, [`key::normalise`].)
    pub(crate) fn key(&self, url: &Arc<str>, head: &mut Request<()>) -> Key {
        let variant = match self.vary.get(url) {
            Some(names) => {
                key::normalise(head, &names);
                key::variant(&names, head.headers())
            }
            None => Arc::from(""),
        };
        Key { url: url.clone(), variant }
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.entries.get(key)
    }

    /// A memory miss looked up on the disk tier; a hit is promoted to memory (where the
    /// memory tier's admission decides whether it stays) and is not written back.
    pub(crate) async fn get_disk(&self, key: &Key) -> Option<Arc<Entry>> {
        let entry = Arc::new(self.disk.as_ref()?.get(key).await?);
        if entry.size <= self.config.max_object_size {
            self.bytes.inc_by(i64::from(entry.weight()));
            self.entries.insert(key.clone(), entry.clone());
        }
        Some(entry)
    }

    /// Store `entry` for a request whose response varies on `names`; returns its key.
    pub(crate) fn insert(&self, url: Arc<str>, names: Vec<HeaderName>, head: &Request<()>, mut entry: Entry) -> Key {
        entry.request_bytes = header_bytes(head.headers());
        let key = Key { url: url.clone(), variant: key::variant(&names, head.headers()) };
        self.uncacheable.invalidate(&url);
        // Most responses vary on nothing: their URLs need no entry here (the empty variant).
        if names.is_empty() {
            self.vary.invalidate(&url);
        } else {
            self.vary.insert(url, names.as_slice().into());
        }
        self.bytes.inc_by(i64::from(entry.weight()));
        let entry = Arc::new(entry);
        if let Some(disk) = &self.disk {
            disk.put(key.clone(), names, entry.clone());
        }
        self.entries.insert(key.clone(), entry);
        key
    }

    pub(crate) fn remember_uncacheable(&self, url: Arc<str>, why: Refusal) {
        self.uncacheable.insert(url, why);
    }

    /// Why the URL's last response was not stored, while that is remembered.
    pub(crate) fn uncacheable(&self, url: &str) -> Option<Refusal> {
        self.uncacheable.get(url)
    }

    /// Forget that a URL was uncacheable (purged: the next request may store it).
    pub(crate) fn forget(&self, url: &str) {
        self.uncacheable.invalidate(url);
    }

    /// Remove every variant of every URL `matches` accepts, or whose `Cache-Tag`s `tagged`
    /// accepts, from memory and disk; returns how many (an entry in both tiers counts once).
    /// Immediate: the next request for any of them is a miss. The disk tier's index keeps each
    /// file's URL and tags, so a prefix or tag purge reaches entries that are only on disk.
    pub(crate) fn purge(&self, matches: impl Fn(&str) -> bool, tagged: impl Fn(&[Box<str>]) -> bool) -> u64 {
        let doomed: Vec<Arc<Key>> =
            self.entries.iter().filter(|(k, e)| matches(&k.url) || tagged(&e.tags)).map(|(k, _)| k).collect();
        for key in &doomed {
            self.entries.invalidate(&**key);
            self.uncacheable.invalidate(&key.url);
        }
        let on_disk = self.disk.as_ref().map_or(0, |d| d.purge(&matches, &tagged, &doomed));
        doomed.len() as u64 + on_disk
    }

    /// Entries and weighed bytes held now.
    pub(crate) fn occupancy(&self) -> (u64, u64) {
        self.entries.run_pending_tasks();
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}
