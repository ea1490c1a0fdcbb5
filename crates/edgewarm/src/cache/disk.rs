//! The disk tier (`routes[].cache.disk`): one file per stored response under the route's
//! directory ([`super::record`]), named by a hash of its key, written to a temporary file and
//! renamed, so a reader or a restart sees a whole file or none. In memory only a compact index
//! (key hash → length, URL, tags, when it stops being servable, last use), loaded from the
//! directory at start: that is what lets a restarted or upgraded edgewarm serve what the last
//! one stored.
//!
//! Every entry the memory tier stores is written here too, off the request path (a blocking
//! task), rather than only what memory evicts: the entries most worth keeping across a restart
//! are the popular ones, which are exactly those memory never evicts. Over `max_size`, the
//! tier drops entries that can no longer be served even stale first, then the least recently
//! used.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::HeaderName;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::key::Key;
use super::record::{self, RecordError};
use super::store::{Entry, Lower};
use crate::config::DiskConfig;
use crate::metrics::RouteName;

/// The disk tier's counters and gauge, for one route.
pub(crate) struct DiskMetrics {
    pub(crate) hit: Counter,
    pub(crate) miss: Counter,
    pub(crate) corrupt: Counter,
    pub(crate) bytes: Gauge,
    pub(crate) written: Counter,
}

/// One file, as the index knows it (what purge and eviction read, and no more).
struct Meta {
    len: u64,
    url: Arc<str>,
    tags: Box<[Box<str>]>,
    useless_at: SystemTime,
    used: u64,
}

/// A write under way: a purge that matches it cancels it, so the file never appears.
struct Writing {
    url: Arc<str>,
    tags: Box<[Box<str>]>,
    cancelled: bool,
}

#[derive(Default)]
struct Index {
    files: HashMap<u128, Meta>,
    writing: HashMap<u64, Writing>,
    bytes: u64,
    tick: u64,
}

/// One route's disk tier.
pub(crate) struct Disk {
    dir: PathBuf,
    max_size: u64,
    route: RouteName,
    index: Mutex<Index>,
    next_write: AtomicU64,
    metrics: DiskMetrics,
    /// The `Vary` names of the URLs found at start, for the memory tier's map (taken once).
    found_vary: Mutex<Vec<(Arc<str>, Vec<HeaderName>)>>,
}

impl Disk {
    /// Open (creating it if need be) the directory and index what is there: files of another
    /// format version and leftover temporary files are removed, unreadable ones too (counted
    /// as corrupt, and logged in one line).
    pub(crate) fn open(config: &DiskConfig, route: RouteName, metrics: DiskMetrics) -> std::io::Result<Self> {
        std::fs::create_dir_all(&config.path)?;
        let mut index = Index::default();
        let mut found_vary = Vec::new();
        let (mut unreadable, mut other_version) = (0u64, 0u64);
        for item in std::fs::read_dir(&config.path)? {
            let item = item?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(item.path());
                continue;
            }
            let Some(id) = record::parse_name(&name) else { continue };
            match record::summary(&item.path()) {
                Ok((s, len)) => {
                    let url: Arc<str> = s.url.as_str().into();
                    if record::id(&Key { url: url.clone(), variant: s.variant.as_str().into() }) != id {
                        unreadable += 1;
                        let _ = std::fs::remove_file(item.path());
                        continue;
                    }
                    if !s.vary.is_empty() {
                        let names = s.vary.iter().filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()).collect();
                        found_vary.push((url.clone(), names));
                    }
                    let tags = s.tags.iter().map(|t| Box::from(t.as_str())).collect();
                    index.bytes += len;
                    index.files.insert(id, Meta { len, url, tags, useless_at: s.useless_at(), used: 0 });
                }
                Err(RecordError::Version(_)) => {
                    other_version += 1;
                    let _ = std::fs::remove_file(item.path());
                }
                Err(_) => {
                    unreadable += 1;
                    let _ = std::fs::remove_file(item.path());
                }
            }
        }
        if unreadable + other_version > 0 {
            tracing::warn!(
                route = %route, dir = %config.path.display(), unreadable, other_version,
                "cache disk tier: files that could not be used were removed"
            );
        }
        metrics.corrupt.inc_by(unreadable);
        metrics.bytes.set(i64::try_from(index.bytes).unwrap_or(i64::MAX));
        let disk = Self {
            dir: config.path.clone(),
            max_size: config.max_size,
            route,
            index: Mutex::new(index),
            next_write: AtomicU64::new(0),
            metrics,
            found_vary: Mutex::new(found_vary),
        };
        let gone = disk.make_room(&mut disk.lock());
        disk.unlink(&gone);
        Ok(disk)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        // Whoever panicked holding it left whole values behind.
        self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn path(&self, id: u128) -> PathBuf {
        self.dir.join(record::file_name(id))
    }

    /// The entry stored for `key`, read whole in a blocking task; `None` on a miss. A file that
    /// cannot be read back is removed, counted and logged, and is a miss.
    async fn read(&self, key: &Key) -> Option<Entry> {
        let id = record::id(key);
        let found = {
            let mut index = self.lock();
            index.tick += 1;
            let tick = index.tick;
            index.files.get_mut(&id).filter(|m| *m.url == *key.url).map(|m| m.used = tick).is_some()
        };
        if !found {
            self.metrics.miss.inc();
            return None;
        }
        let path = self.path(id);
        let read = tokio::task::spawn_blocking(move || record::read(&path)).await;
        match read {
            // Still indexed: a purge that came while the file was being read wins.
            Ok(Ok((stored, _, entry))) if stored == *key && self.lock().files.contains_key(&id) => {
                self.metrics.hit.inc();
                Some(entry)
            }
            // Another key under the same hash prefix (not ours to serve, nor to remove), or purged.
            Ok(Ok(_)) => {
                self.metrics.miss.inc();
                None
            }
            Ok(Err(why)) => {
                tracing::warn!(route = %self.route, url = %key.url, error = %why, "cache disk tier: unreadable entry removed");
                self.metrics.corrupt.inc();
                self.remove(|i, _| i == id);
                None
            }
            Err(_) => None,
        }
    }

    fn write(&self, write: u64, key: &Key, vary: &[HeaderName], entry: &Entry) {
        let id = record::id(key);
        let tmp = self.dir.join(format!("{}.{write}.tmp", record::file_name(id)));
        let written = record::write(&tmp, key, vary, entry);
        let mut index = self.lock();
        let cancelled = index.writing.remove(&write).is_none_or(|w| w.cancelled);
        let len = match written {
            Ok(len) if !cancelled && len <= self.max_size => len,
            Ok(_) => return drop(std::fs::remove_file(&tmp)),
            Err(e) => {
                drop(index);
                let _ = std::fs::remove_file(&tmp);
                return tracing::warn!(route = %self.route, dir = %self.dir.display(), error = %e, "cache disk tier: write failed");
            }
        };
        // Renamed under the lock: a purge or eviction of this id cannot interleave.
        if let Err(e) = std::fs::rename(&tmp, self.path(id)) {
            let _ = std::fs::remove_file(&tmp);
            return tracing::warn!(route = %self.route, error = %e, "cache disk tier: write failed");
        }
        self.metrics.written.inc_by(len);
        index.tick += 1;
        let meta = Meta {
            len,
            url: key.url.clone(),
            tags: entry.tags.clone().into(),
            useless_at: entry.stale_at + entry.grace.while_revalidate.max(entry.grace.if_error),
            used: index.tick,
        };
        index.bytes += len;
        if let Some(old) = index.files.insert(id, meta) {
            index.bytes -= old.len;
        }
        let gone = self.make_room(&mut index);
        drop(index);
        self.unlink(&gone);
    }

    /// Over budget: down to 90 % of it (so that eviction runs once per many writes), the
    /// entries that can no longer be served first, then the least recently used. Returns the
    /// ids to [`Disk::unlink`] once the lock is released.
    #[must_use]
    fn make_room(&self, index: &mut Index) -> Vec<u128> {
        let mut gone = Vec::new();
        if index.bytes > self.max_size {
            let now = SystemTime::now();
            let mut order: Vec<(bool, u64, u128)> =
                index.files.iter().map(|(id, m)| (m.useless_at > now, m.used, *id)).collect();
            order.sort_unstable();
            let target = self.max_size - self.max_size / 10;
            for (_, _, id) in order {
                if index.bytes <= target {
                    break;
                }
                if let Some(m) = index.files.remove(&id) {
                    index.bytes -= m.len;
                    gone.push(id);
                }
            }
        }
        self.metrics.bytes.set(i64::try_from(index.bytes).unwrap_or(i64::MAX));
        gone
    }

    /// Delete the files of ids already out of the index, one short lock each rather than one
    /// long one (readers take the lock on the runtime's threads): a file written again for
    /// the same id meanwhile is in the index again, and stays.
    fn unlink(&self, ids: &[u128]) {
        for id in ids {
            let index = self.lock();
            if !index.files.contains_key(id) {
                let _ = std::fs::remove_file(self.path(*id));
            }
        }
    }

    /// Remove every file `doomed` accepts (by id and URL); returns the ids of the files
    /// removed. Out of the index (unreachable) at once, then deleted.
    fn remove(&self, doomed: impl Fn(u128, &Meta) -> bool) -> Vec<u128> {
        let mut index = self.lock();
        let ids: Vec<u128> = index.files.iter().filter(|(id, m)| doomed(**id, m)).map(|(id, _)| *id).collect();
        for id in &ids {
            if let Some(m) = index.files.remove(id) {
                index.bytes -= m.len;
            }
        }
        self.metrics.bytes.set(i64::try_from(index.bytes).unwrap_or(i64::MAX));
        drop(index);
        self.unlink(&ids);
        ids
    }
}

/// The disk tier as the memory tier sees it: `Arc<Disk>`, so that a write can run on the
/// blocking pool past the request that caused it.
pub(crate) struct Tier(pub(crate) Arc<Disk>);

impl Lower for Tier {
    /// Written in the background; a purge matching it before the write ends cancels it.
    fn put(&self, key: Key, vary: Vec<HeaderName>, entry: Arc<Entry>) {
        let write = self.0.next_write.fetch_add(1, Ordering::Relaxed);
        let writing = Writing { url: key.url.clone(), tags: entry.tags.clone().into(), cancelled: false };
        self.0.lock().writing.insert(write, writing);
        let disk = self.0.clone();
        let job = move || disk.write(write, &key, &vary, &entry);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(job)),
            Err(_) => job(),
        }
    }

    fn get<'a>(
        &'a self,
        key: &'a Key,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Entry>> + Send + 'a>> {
        Box::pin(self.0.read(key))
    }

    /// Files go at once (under the index lock), and writes under way for a matching URL or tag
    /// are cancelled.
    fn purge(&self, matches: &dyn Fn(&str) -> bool, tagged: &dyn Fn(&[Box<str>]) -> bool, also: &[Arc<Key>]) -> u64 {
        {
            let mut index = self.0.lock();
            for w in index.writing.values_mut() {
                if matches(&w.url) || tagged(&w.tags) {
                    w.cancelled = true;
                }
            }
        }
        let gone = self.0.remove(|_, m| matches(&m.url) || tagged(&m.tags));
        let counted: std::collections::HashSet<u128> = also.iter().map(|k| record::id(k)).collect();
        gone.iter().filter(|id| !counted.contains(id)).count() as u64
    }

    fn take_found_vary(&self) -> Vec<(Arc<str>, Vec<HeaderName>)> {
        std::mem::take(&mut *self.0.found_vary.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn occupancy(&self) -> (u64, u64) {
        let index = self.0.lock();
        (index.files.len() as u64, index.bytes)
    }
}

#[cfg(test)]
mod tests;
