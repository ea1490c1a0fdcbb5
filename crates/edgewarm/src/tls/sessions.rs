//! The session store of routes that accept 0-RTT: stateful, single-use, sharded, bounded, TTL'd.
//!
//! rustls offers early data only with stateful resumption: the ticket a client holds is just an
//! id, and the session it names lives here. A resumption *takes* the session (removes it), so
//! a ticket resumes once: that is the anti-replay guarantee 0-RTT needs (RFC 8446 §8.1). A
//! replayed first flight names a ticket already taken, is refused as a resumption (rustls falls
//! back to a full handshake and discards the early data unread) and is counted here: the ids
//! of taken sessions are remembered (tombstones) for as long as a session could have lived,
//! so a replay is told apart from a ticket that merely expired.
//!
//! What this does not protect: a flight replayed to *another* edge (each node has its own
//! store), and the first, legitimate use of a ticket racing a copy of itself on this node (one
//! wins, the other falls back). It is also why 0-RTT is per node behind anycast: a client that
//! lands on another node resumes nothing there.
//!
//! Sharded by the id's first byte (ids are random) so connections on different cores rarely
//! share a lock. Bounded: the capacity follows the rate of sessions stored (sessions per second
//! × `ttl`, the number that can be alive at once), between a floor and a ceiling; past it the
//! oldest are evicted and counted. Every session expires after `ttl`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use rustls::server::StoresServerSessions;

const SHARDS: usize = 16;
/// Sessions kept per route whatever the rate (about 250 bytes each).
const MIN_CAPACITY: usize = 4096;
/// The most kept per route: 64 MiB or so.
const MAX_CAPACITY: usize = 256 * 1024;
/// How often the store re-estimates its capacity from the rate of stores.
const RESIZE_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Shard {
    live: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Insertion order, for expiry and eviction (entries already taken are skipped).
    order: VecDeque<(Vec<u8>, Instant)>,
    taken: HashMap<Vec<u8>, Instant>,
    taken_order: VecDeque<(Vec<u8>, Instant)>,
}

impl Shard {
    /// Drop what is older than `ttl`, then the oldest beyond `cap`; returns how many live
    /// sessions were evicted early.
    fn trim(&mut self, now: Instant, ttl: Duration, cap: usize) -> u64 {
        let mut evicted = 0;
        while let Some((key, at)) = self.order.front() {
            let expired = now.duration_since(*at) >= ttl;
            if !expired && self.live.len() <= cap {
                break;
            }
            // The same key may have been stored again since: only remove the entry this
            // order slot stands for.
            if self.live.get(key).is_some_and(|(_, t)| t == at) {
                self.live.remove(key);
                if !expired {
                    evicted += 1;
                }
            }
            self.order.pop_front();
        }
        while let Some((key, at)) = self.taken_order.front() {
            if now.duration_since(*at) < ttl && self.taken.len() <= cap {
                break;
            }
            if self.taken.get(key) == Some(at) {
                self.taken.remove(key);
            }
            self.taken_order.pop_front();
        }
        evicted
    }
}

/// One route's store (shared by its ALPN configurations).
pub struct SessionStore {
    shards: [Mutex<Shard>; SHARDS],
    ttl: Duration,
    /// Per shard.
    capacity: AtomicUsize,
    stored: AtomicU64,
    sized: Mutex<(Instant, u64)>,
    replays: Counter,
    evictions: Counter,
    /// Handed to the next process ([`SessionStore::hand_over`]): nothing resumes here any more.
    frozen: AtomicBool,
}

/// A store's sessions and tombstones as they cross to the next process at an upgrade: keys and
/// values in base64, ages in milliseconds.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Exported {
    pub live: Vec<(String, String, u64)>,
    pub taken: Vec<(String, u64)>,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl SessionStore {
    pub fn new(ttl: Duration, replays: Counter, evictions: Counter) -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
            ttl,
            capacity: AtomicUsize::new(MIN_CAPACITY / SHARDS),
            stored: AtomicU64::new(0),
            sized: Mutex::new((Instant::now(), 0)),
            replays,
            evictions,
            frozen: AtomicBool::new(false),
        }
    }

    /// Every live session and every tombstone, for the next process of an upgrade. From then
    /// on this store resumes nothing (a client falls back to a full handshake, its early data
    /// unread): a ticket can then be used once in one of the two processes, never in both.
    pub fn hand_over(&self) -> Exported {
        use base64::Engine;
        self.frozen.store(true, Ordering::SeqCst);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let now = Instant::now();
        let age = |at: &Instant| u64::try_from(now.duration_since(*at).as_millis()).unwrap_or(u64::MAX);
        let mut out = Exported::default();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            out.live.extend(shard.live.iter().map(|(k, (v, at))| (b64(k), b64(v), age(at))));
            out.taken.extend(shard.taken.iter().map(|(k, at)| (b64(k), age(at))));
        }
        out
    }

    /// The previous process's [`SessionStore::hand_over`]: its sessions resume here, once; its
    /// tombstones still catch replays. Entries past the TTL or undecodable are skipped.
    pub fn adopt(&self, exported: &Exported) -> usize {
        use base64::Engine;
        let decode = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).ok();
        let now = Instant::now();
        let at = |age: u64| now.checked_sub(Duration::from_millis(age)).filter(|at| now.duration_since(*at) < self.ttl);
        let mut adopted = 0;
        for (k, v, age) in &exported.live {
            let (Some(k), Some(v), Some(at)) = (decode(k), decode(v), at(*age)) else { continue };
            let mut shard = self.shard(&k);
            shard.order.push_back((k.clone(), at));
            shard.live.insert(k, (v, at));
            adopted += 1;
        }
        for (k, age) in &exported.taken {
            let (Some(k), Some(at)) = (decode(k), at(*age)) else { continue };
            let mut shard = self.shard(&k);
            shard.taken_order.push_back((k.clone(), at));
            shard.taken.insert(k, at);
        }
        adopted
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let i = key.first().map_or(0, |b| usize::from(*b) % SHARDS);
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every `RESIZE_EVERY`: capacity = sessions stored per second × ttl, within bounds.
    fn resize(&self, now: Instant) {
        let stored = self.stored.load(Ordering::Relaxed);
        let mut sized = self.sized.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.duration_since(sized.0);
        if elapsed < RESIZE_EVERY {
            return;
        }
        let rate = (stored - sized.1) as f64 / elapsed.as_secs_f64();
        let want = ((rate * self.ttl.as_secs_f64()) as usize).clamp(MIN_CAPACITY, MAX_CAPACITY);
        self.capacity.store(want.div_ceil(SHARDS), Ordering::Relaxed);
        *sized = (now, stored);
    }

    /// Sessions held now (tests, status).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).live.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StoresServerSessions for SessionStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let now = Instant::now();
        self.stored.fetch_add(1, Ordering::Relaxed);
        self.resize(now);
        let cap = self.capacity.load(Ordering::Relaxed);
        let mut shard = self.shard(&key);
        shard.order.push_back((key.clone(), now));
        shard.live.insert(key, (value, now));
        let evicted = shard.trim(now, self.ttl, cap);
        drop(shard);
        self.evictions.inc_by(evicted);
        true
    }

    /// TLS 1.2 session ids: looked up, not consumed (no early data in TLS 1.2).
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.frozen.load(Ordering::SeqCst) {
            return None;
        }
        let shard = self.shard(key);
        shard.live.get(key).filter(|(_, at)| at.elapsed() < self.ttl).map(|(v, _)| v.clone())
    }

    /// TLS 1.3 tickets: single use.
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        if self.frozen.load(Ordering::SeqCst) {
            return None;
        }
        let now = Instant::now();
        let cap = self.capacity.load(Ordering::Relaxed);
        let mut shard = self.shard(key);
        match shard.live.remove(key) {
            Some((value, at)) if now.duration_since(at) < self.ttl => {
                shard.taken.insert(key.to_vec(), now);
                shard.taken_order.push_back((key.to_vec(), now));
                shard.trim(now, self.ttl, cap);
                Some(value)
            }
            Some(_) => None,
            None => {
                if shard.taken.contains_key(key) {
                    drop(shard);
                    self.replays.inc();
                    tracing::info!("a TLS session ticket was presented again and refused (replay)");
                }
                None
            }
        }
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(ttl: Duration) -> SessionStore {
        SessionStore::new(ttl, Counter::default(), Counter::default())
    }

    #[test]
    fn a_ticket_resumes_once_and_a_replay_is_counted() {
        let s = store(Duration::from_secs(60));
        s.put(b"id-1".to_vec(), b"session".to_vec());
        assert_eq!(s.get(b"id-1").as_deref(), Some(&b"session"[..]), "TLS 1.2 lookups do not consume");
        assert_eq!(s.take(b"id-1").as_deref(), Some(&b"session"[..]));
        assert_eq!(s.take(b"id-1"), None);
        assert_eq!(s.replays.get(), 1);
        assert_eq!(s.take(b"never-issued"), None);
        assert_eq!(s.replays.get(), 1, "an unknown ticket is not a replay");
    }

    #[test]
    fn sessions_and_tombstones_cross_to_the_next_process_once() {
        let old = store(Duration::from_secs(60));
        old.put(b"live".to_vec(), b"session".to_vec());
        old.put(b"used".to_vec(), b"other".to_vec());
        assert!(old.take(b"used").is_some());
        let exported = old.hand_over();
        assert_eq!(old.take(b"live"), None, "the old process resumes nothing once it handed over");
        let new = store(Duration::from_secs(60));
        assert_eq!(new.adopt(&exported), 1);
        assert_eq!(new.take(b"live").as_deref(), Some(&b"session"[..]));
        assert_eq!(new.take(b"live"), None);
        assert_eq!(new.take(b"used"), None);
        assert_eq!(new.replays.get(), 2, "both second uses are replays, the old process's one too");
        let short = store(Duration::from_millis(1));
        assert_eq!(
            short.adopt(&Exported { live: vec![("YQ==".into(), "YQ==".into(), 5)], taken: vec![] }),
            0,
            "expired"
        );
    }

    #[test]
    fn sessions_expire_after_the_ttl() {
        let s = store(Duration::from_millis(30));
        s.put(b"a".to_vec(), b"x".to_vec());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(s.take(b"a"), None);
        s.put(b"b".to_vec(), b"y".to_vec());
        assert_eq!(s.len(), 1, "the expired one was dropped when the next was stored");
    }

    #[test]
    fn the_oldest_are_evicted_past_capacity() {
        let s = store(Duration::from_secs(3600));
        // All in one shard (same first byte): its share of the floor is MIN_CAPACITY / SHARDS.
        let per_shard = MIN_CAPACITY / SHARDS;
        for i in 0..per_shard + 10 {
            s.put(format!("k{i}").into_bytes(), vec![0; 8]);
        }
        assert_eq!(s.len(), per_shard);
        assert_eq!(s.evictions.get(), 10);
        assert_eq!(s.take(b"k0"), None, "the oldest went first");
        assert!(s.take(format!("k{}", per_shard + 9).as_bytes()).is_some());
    }
}
