//! Idle connections a full listener takes back (`max_connections`): without it, one address —
//! or a crowd of idle keep-alive clients — that holds every place leaves a new client waiting
//! in the kernel backlog until an idle timeout frees one, while the edge does nothing.
//!
//! Only HTTP connections are reclaimable, and only while idle: no request in flight, no
//! upgraded relay, and nothing asked for [`GRACE`] (a connection that has just completed its
//! handshake sends its first request at once; a browser between two page loads is idle for
//! longer). A reclaimed connection is asked to finish as a reload asks it (HTTP/2 GOAWAY,
//! HTTP/1.1 close after the current response), so a request that races the close is answered
//! or retried by the client, never cut halfway. Tunnels carry bytes the edge cannot judge and
//! are never reclaimed.
//!
//! The address holding the most connections gives up its idle ones first: a client that
//! filled the listener pays for it before anyone else does (nginx takes its reusable
//! connections oldest first; the flooder is the one whose connections are oldest anyway, but
//! the count says so directly).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a connection must have asked nothing before it counts as idle.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// Connections finishing at once for a full listener of `max_connections`: about one in 64,
/// from 1 to 32. More than one client is usually waiting in the backlog of a big listener; a
/// batch frees places for several without emptying it of everyone's keep-alive connections.
pub(crate) fn batch(max_connections: usize) -> usize {
    (max_connections / 64).clamp(1, 32)
}

/// One connection's activity, written by its request service and read by [`Idle::reclaim`].
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    /// Requests being handled now (to their response head: a long body still being written is
    /// finished by the graceful close, not cut).
    in_flight: AtomicU32,
    /// When it was registered or last finished a request, in milliseconds after `base`.
    last: AtomicU64,
    /// Asked to finish by a reclaim: it skips the first-request grace a shutdown gives.
    reclaimed: AtomicBool,
}

impl Activity {
    fn new(base: Instant) -> Self {
        let activity =
            Self { base, in_flight: AtomicU32::new(0), last: AtomicU64::new(0), reclaimed: AtomicBool::new(false) };
        activity.touch();
        activity
    }

    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    /// A request begins: the connection is busy until the guard drops. No clock is read here:
    /// a busy connection is never idle, and its idle time starts when its last request ends.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Whether a reclaim asked this connection to finish.
    pub(crate) fn reclaimed(&self) -> bool {
        self.reclaimed.load(Ordering::Relaxed)
    }

    fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(now.saturating_duration_since(self.base + last))
    }
}

/// A request in flight; the connection's activity is stamped again when it ends.
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Entry {
    client: u128,
    activity: Arc<Activity>,
    /// Cancelled to ask the connection to finish (a child of the shutdown token).
    finish: CancellationToken,
    /// The connection's upgraded relays: while one lives, the connection is in use.
    upgrades: TaskTracker,
}

/// One listener's reclaimable connections.
pub(crate) struct Idle {
    base: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
}

impl Default for Idle {
    fn default() -> Self {
        Self { base: Instant::now(), next: AtomicU64::new(0), open: Mutex::new(HashMap::new()) }
    }
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("open", &self.open.lock().map(|o| o.len()).unwrap_or(0)).finish()
    }
}

/// A connection's place among the reclaimable ones, given up on drop.
pub(crate) struct Reclaimable {
    idle: Arc<Idle>,
    id: u64,
}

impl Drop for Reclaimable {
    fn drop(&mut self) {
        self.idle.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// What a reclaim asked: connections, and the addresses they belonged to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    pub connections: usize,
    pub clients: usize,
    /// When the next connection not yet idle long enough will be, if it stays idle.
    pub next: Option<Duration>,
}

impl Idle {
    /// Register a connection of `client` (its [`super::clients::client_key`]) that finishes
    /// when `finish` is cancelled, in use while any of `upgrades` runs.
    pub(crate) fn register(
        self: &Arc<Self>,
        client: u128,
        finish: CancellationToken,
        upgrades: TaskTracker,
    ) -> (Reclaimable, Arc<Activity>) {
        let activity = Arc::new(Activity::new(self.base));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Entry { client, activity: activity.clone(), finish, upgrades };
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id, entry);
        (Reclaimable { idle: self.clone(), id }, activity)
    }

    /// Ask idle connections to finish until `want` are finishing (those asked earlier and not
    /// yet closed count), those of the address holding the most first (the longest idle first
    /// within an address).
    pub(crate) fn reclaim(&self, want: usize) -> Reclaimed {
        let now = Instant::now();
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut held: HashMap<u128, usize> = HashMap::new();
        let mut finishing = 0;
        for e in open.values() {
            *held.entry(e.client).or_default() += 1;
            finishing += usize::from(e.activity.reclaimed());
        }
        let want = want.saturating_sub(finishing);
        let held = |client: &u128| held.get(client).copied().unwrap_or(0);
        let mut next: Option<Duration> = None;
        let mut idle: Vec<(&Entry, Duration)> = Vec::new();
        for e in open.values() {
            if e.activity.reclaimed() || e.finish.is_cancelled() || !e.upgrades.is_empty() {
                continue;
            }
            match e.activity.idle_for(now) {
                Some(d) if d >= GRACE => idle.push((e, d)),
                Some(d) => next = Some(next.map_or(GRACE - d, |n| n.min(GRACE - d))),
                None => {}
            }
        }
        idle.sort_by(|(a, da), (b, db)| held(&b.client).cmp(&held(&a.client)).then(db.cmp(da)));
        let mut clients: Vec<u128> = Vec::new();
        let mut done = Reclaimed { next, ..Reclaimed::default() };
        for (e, _) in idle.into_iter().take(want) {
            e.activity.reclaimed.store(true, Ordering::Relaxed);
            e.finish.cancel();
            done.connections += 1;
            if !clients.contains(&e.client) {
                clients.push(e.client);
            }
        }
        done.clients = clients.len();
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(idle: &Arc<Idle>, client: u128) -> (Reclaimable, Arc<Activity>, CancellationToken) {
        let token = CancellationToken::new();
        let (place, activity) = idle.register(client, token.clone(), TaskTracker::new());
        (place, activity, token)
    }

    #[tokio::test(start_paused = true)]
    async fn only_connections_idle_past_the_grace_are_reclaimed_the_biggest_holder_first() {
        let idle = Arc::new(Idle::default());
        let flooder: Vec<_> = (0..3).map(|_| register(&idle, 1)).collect();
        let other = register(&idle, 2);
        let early = idle.reclaim(10);
        assert_eq!((early.connections, early.next), (0, Some(GRACE)), "nothing is idle before the grace");
        tokio::time::advance(GRACE / 4).await;
        assert_eq!(idle.reclaim(10).next, Some(GRACE * 3 / 4), "the wait is until the first is idle long enough");
        tokio::time::advance(GRACE * 3 / 4).await;
        // One of the flooder's is in the middle of a request: never reclaimed.
        let busy = flooder[0].1.begin();
        assert_eq!(idle.reclaim(1), Reclaimed { connections: 1, clients: 1, next: None });
        assert!(!flooder[0].2.is_cancelled() && !other.2.is_cancelled(), "the busy one and the other client are kept");
        assert!(flooder[1].2.is_cancelled() || flooder[2].2.is_cancelled());
        // Asked once is asked: the next reclaim takes the flooder's last idle one, then the other's.
        assert_eq!(idle.reclaim(10), Reclaimed { connections: 2, clients: 2, next: None });
        assert!(other.2.is_cancelled() && !flooder[0].2.is_cancelled());
        // The request ends: idle again only a grace later.
        drop(busy);
        assert_eq!(idle.reclaim(10), Reclaimed { next: Some(GRACE), ..Reclaimed::default() });
        tokio::time::advance(GRACE).await;
        assert_eq!(idle.reclaim(10).connections, 1);
        assert!(flooder[0].1.reclaimed());
        drop((flooder, other));
        assert!(idle.open.lock().unwrap().is_empty(), "no entry outlives its connection");
    }

    #[tokio::test(start_paused = true)]
    async fn an_upgraded_connection_is_never_idle() {
        let idle = Arc::new(Idle::default());
        let token = CancellationToken::new();
        let upgrades = TaskTracker::new();
        let relay = upgrades.spawn(std::future::pending::<()>());
        let (_place, _activity) = idle.register(1, token.clone(), upgrades);
        tokio::time::advance(GRACE * 10).await;
        assert_eq!(idle.reclaim(10), Reclaimed::default());
        assert_eq!((batch(20), batch(10_000), batch(1_000_000)), (1, 32, 32));
        assert!(!token.is_cancelled());
        relay.abort();
    }
}
