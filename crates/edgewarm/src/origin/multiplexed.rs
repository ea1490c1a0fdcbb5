//! What the multiplexed kinds (HTTP/2, HTTP/3) share, whose standing connections each carry
//! many streams: a connection as the upkeep holds it ([`Held`]), a stream's place on one
//! ([`Slot`]), and their connections' life on the set's [`Core`]: the upkeep ([`Core::keep`]:
//! age out, then how many to open), a connect's landing ([`Core::landed`]), an end ([`Core::forget`]) and
//! the set's retirement ([`Core::retire_all`]). Written once, so a connection's life means the
//! same in the metrics (joined, failed, ended and why) for both kinds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::backoff::Connects;
use super::supervisor::{lock, Core};
use crate::config::UpstreamConfig;
use crate::metrics::{ConnectFailure, UpstreamEnd};

/// A standing connection of a multiplexed set, as the upkeep handles it.
pub(crate) trait Held {
    fn id(&self) -> u64;
    fn age(&self) -> Duration;
    /// Takes no new requests; finishing those it has.
    fn retiring(&self) -> bool;
    fn is_closed(&self) -> bool;
    /// Take no new requests; close once those on it have ended.
    fn retire(&self);
    /// Retire it, the reason counted by the upkeep (its end is then not counted again).
    fn retire_counted(&self);
}

/// What a multiplexed set's lock guards, as the bookkeeping here reaches into it.
pub(crate) trait SetState {
    type Conn: Held;
    /// Its standing connections, its connects (under way, and the backoff), its settings.
    fn parts(&mut self) -> (&mut Vec<Arc<Self::Conn>>, &mut Connects, &UpstreamConfig);
}

/// A multiplexed kind's failed connect, as its set notes, logs and counts it.
pub(crate) trait Refused: std::fmt::Display {
    /// What the backoff notes of it (a refused request's error quotes it), and whether nothing
    /// came back from the origin (see [`Connects::refusing`]).
    fn noted(&self) -> (String, bool);
    /// How it failed, for `origin_connect_failures`.
    fn failure(&self) -> ConnectFailure;
}

/// What became of a connect of a multiplexed set ([`Core::landed`]).
pub(crate) enum Landed<C, E> {
    /// The connection joined the set.
    Joined(Arc<C>),
    /// The set was retired while it opened: the caller retires it (it must not outlive the set).
    Late(Arc<C>),
    Failed(E),
}

impl<D> Core<D> {
    /// The set's upkeep task ([`Core::upkeep`], once a second): each turn retires the
    /// connections past `max_age` and forgets the closed ones, then `fill`, given the set's
    /// lock, starts what is missing ([`to_open`]).
    pub(crate) async fn keep<S: SetState>(&self, state: &Mutex<S>, fill: impl Fn(MutexGuard<'_, S>)) {
        let schedule = || (Duration::from_secs(1), lock(state).parts().1.retry_at());
        let turn = |_| {
            let mut st = lock(state);
            let (conns, _, settings) = st.parts();
            let max_age = settings.max_age;
            self.age_out(conns, max_age);
            fill(st);
        };
        self.upkeep(schedule, turn).await;
    }

    /// A connect of this set (`what`: its protocol), begun at `started`, ended with `result`:
    /// it is no longer opening; a connection joins the set (the backoff cleared), a failure is
    /// noted in the backoff. `st` is the set's lock, released before anything is counted or
    /// logged.
    pub(crate) fn landed<S: SetState, E: Refused>(
        &self,
        mut st: MutexGuard<'_, S>,
        what: &str,
        started: Instant,
        result: Result<Arc<S::Conn>, E>,
    ) -> Landed<S::Conn, E> {
        let (conns, connects, _) = st.parts();
        connects.opening -= 1;
        match result {
            Ok(conn) => {
                connects.succeeded();
                if self.retired.is_cancelled() {
                    return Landed::Late(conn);
                }
                conns.push(conn.clone());
                drop(st);
                self.joined(started.elapsed());
                Landed::Joined(conn)
            }
            Err(e) => {
                let (noted, silent) = e.noted();
                connects.failed_with(noted, silent);
                drop(st);
                self.connect_failed(what, &e, e.failure());
                Landed::Failed(e)
            }
        }
    }

    /// A connect of this set completed in `took` and its connection joined the set.
    fn joined(&self, took: Duration) {
        self.metrics.upstream.open.get_or_create(&self.conn_label()).inc();
        self.opened(took);
    }

    /// A connect of this set (`what`: its protocol) failed: counted (also in the deprecated
    /// `upstream_connect_errors`) and logged.
    fn connect_failed(&self, what: &str, error: &dyn std::fmt::Display, reason: ConnectFailure) {
        let l = &self.labels;
        tracing::warn!(route = %l.route, origin = %l.server, error = %error, "opening an {what} origin connection failed");
        self.count_failure(reason);
        self.metrics.upstream.connect_errors.get_or_create(l).inc();
    }

    /// The upkeep's first step: retire the connections past `max_age` (counted: `max_age`)
    /// and forget the closed ones.
    fn age_out<C: Held>(&self, conns: &mut Vec<Arc<C>>, max_age: Duration) {
        for c in conns.iter() {
            if !c.retiring() && c.age() >= max_age {
                c.retire_counted();
                self.replaced(UpstreamEnd::MaxAge);
            }
        }
        conns.retain(|c| !c.is_closed());
    }

    /// Connection `id`'s driver ended: forget it, count why (unless the upkeep retired it and
    /// counted that already), and have the upkeep replace it.
    pub(crate) fn forget<C: Held>(&self, conns: &mut Vec<Arc<C>>, id: u64, why: UpstreamEnd, counted: bool) {
        let before = conns.len();
        conns.retain(|c| c.id() != id);
        if conns.len() < before {
            self.metrics.upstream.open.get_or_create(&self.conn_label()).dec();
        }
        if !counted {
            self.replaced(why);
        }
        self.wake.notify_one();
    }

    /// Retire the set (a reload removed it, or shutdown): its upkeep stops, no connect under
    /// way joins it any more, and its connections take no new requests: the streams on them
    /// finish first, then they close.
    pub(crate) fn retire_all<S: SetState>(&self, state: &Mutex<S>) {
        // Cancelled before the connections are taken, under the same lock a landing connect
        // looks at it: each one either is taken here or sees the set retired.
        self.retired.cancel();
        let taken = std::mem::take(lock(state).parts().0);
        for c in taken {
            c.retire();
        }
    }
}

/// How many connects to start now so that `connections` are live or opening: none during
/// a backoff, one at a time while probing a failing origin. Those started count as opening.
pub(crate) fn to_open<S: SetState>(st: &mut S) -> usize {
    let (conns, connects, settings) = st.parts();
    if connects.in_backoff(Instant::now()) {
        return 0;
    }
    let live = conns.iter().filter(|c| !c.retiring()).count();
    connects.start(settings.connections.saturating_sub(live + connects.opening))
}

/// One stream's place on a multiplexed connection, taken when a request is put on it:
/// dropping it (when the response body has ended or the request failed) frees the place and
/// tells whoever waits for one (HTTP/2: requests waiting for room on full connections; HTTP/3:
/// a retiring connection's drain).
pub struct Slot {
    /// The connection's streams open now (its own count: the protocol crates do not expose
    /// theirs).
    active: Arc<AtomicUsize>,
    freed: Arc<dyn Freed>,
    /// `edgewarm_upstream_streams` for the origin.
    gauge: Gauge,
}

impl Slot {
    /// Take a place: counted in `active` and `gauge` until the slot is dropped.
    pub(crate) fn take(active: &Arc<AtomicUsize>, freed: Arc<dyn Freed>, gauge: &Gauge) -> Self {
        // SeqCst, as the release in `drop` (HTTP/2's `Room::wait` relies on it there).
        active.fetch_add(1, Ordering::SeqCst);
        gauge.inc();
        Self { active: active.clone(), freed, gauge: gauge.clone() }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
        self.gauge.dec();
        self.freed.freed();
    }
}

/// Told when a stream's place on a connection is freed (its count already lowered).
pub(crate) trait Freed: Send + Sync + 'static {
    fn freed(&self);
}

/// A plain wake-up: the one task that waits (HTTP/3's connection driver) looks again.
impl Freed for Notify {
    fn freed(&self) {
        self.notify_one();
    }
}
