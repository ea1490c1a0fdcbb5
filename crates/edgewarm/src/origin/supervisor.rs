//! What every kind of standing set has, whatever it holds: how it dials, its labels, the upkeep
//! task that keeps it at its target, its retirement, and its connects' bookkeeping. Each kind
//! (prewarm pool, HTTP/2 set, HTTP/1.1 pool, HTTP/3 set) embeds one [`Core`] and supplies only what differs:
//! what it holds, how many it wants, and how it hands them out. The multiplexed kinds (HTTP/2,
//! HTTP/3), whose connections are [`Held`], also share here the turn of their upkeep (age out,
//! how many to open) and a connection's life in the metrics (joined, failed, ended and why),
//! so those metrics mean the same for both.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backoff::Connects;
use super::dial::Dial;
use crate::metrics::{ConnectFailure, Metrics, PoolEvent, PoolLabels, UpstreamConn, UpstreamEnd};
use crate::tls::origin::PoolKey;

/// The parts of a standing set that every kind shares.
pub(crate) struct Core<D> {
    pub(crate) dial: D,
    /// Route, origin and ALPN: the labels of every metric the set touches.
    pub(crate) labels: PoolLabels,
    /// What the set is (`prewarm`, `http/1.1`, `h2`, `h2c`, `h3`): the `kind` of its failed
    /// connects in `origin_connect_failures`.
    pub(crate) kind: &'static str,
    /// Wakes the upkeep task (a connection was taken or ended, settings changed).
    pub(crate) wake: Notify,
    /// Cancelled when the set is retired (reload, shutdown): the upkeep stops, and users are
    /// told to come back afresh.
    pub(crate) retired: CancellationToken,
    pub(crate) metrics: Arc<Metrics>,
}

impl<D: Dial> Core<D> {
    pub(crate) fn key(&self) -> &PoolKey {
        self.dial.key()
    }
}

/// What does not need the dialer's connection type (the HTTP/3 kind dials QUIC, not a byte
/// stream).
impl<D> Core<D> {
    pub(crate) fn new(dial: D, labels: PoolLabels, kind: &'static str, metrics: Arc<Metrics>) -> Self {
        Self { dial, labels, kind, wake: Notify::new(), retired: CancellationToken::new(), metrics }
    }

    /// The upkeep task's loop: `turn(ticked)` runs at once (the set starts filling before any
    /// client asks), then whenever the set is woken, when a backoff ends, and at least once a
    /// `period` (then with `ticked` set), until the set is retired. `schedule` gives the
    /// current period and the end of the backoff, if any.
    pub(crate) async fn upkeep(
        &self,
        mut schedule: impl FnMut() -> (Duration, Option<Instant>),
        mut turn: impl FnMut(bool),
    ) {
        let mut period_start = Instant::now();
        turn(false);
        loop {
            let (period, backoff_ends) = schedule();
            let period_end = period_start + period;
            let until = backoff_ends.map_or(period_end, |at| at.min(period_end));
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(until) => {}
                () = self.retired.cancelled() => return,
            }
            let ticked = Instant::now() >= period_end;
            if ticked {
                period_start = Instant::now();
            }
            turn(ticked);
        }
    }

    /// A connect completed in `took`: counted, and its time observed.
    pub(crate) fn opened(&self, took: Duration) {
        let m = &self.metrics.pool;
        m.opened.get_or_create(&self.labels).inc();
        m.handshake_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
    }

    /// A connect of a multiplexed set completed in `took` and its connection joined the set.
    pub(crate) fn joined(&self, took: Duration) {
        self.metrics.upstream.open.get_or_create(&self.conn_label()).inc();
        self.opened(took);
    }

    /// A connect of this set failed, for `reason`: counted in `origin_connect_failures`, the
    /// one family every kind counts its failed connects in (once per attempt, here).
    pub(crate) fn count_failure(&self, reason: ConnectFailure) {
        let l = &self.labels;
        self.metrics.origin_connect_failed(&l.route, &l.server.0, self.kind, reason);
    }

    /// A connect of a multiplexed set (`what`: its protocol) failed: counted (also in the
    /// deprecated `upstream_connect_errors`) and logged.
    pub(crate) fn connect_failed(&self, what: &str, error: &dyn std::fmt::Display, reason: ConnectFailure) {
        let l = &self.labels;
        tracing::warn!(route = %l.route, origin = %l.server, error = %error, "opening an {what} origin connection failed");
        self.count_failure(reason);
        self.metrics.upstream.connect_errors.get_or_create(l).inc();
    }

    /// The upkeep's first step on a multiplexed set: retire the connections past `max_age`
    /// (counted: `max_age`) and forget the closed ones.
    pub(crate) fn age_out<C: Held>(&self, conns: &mut Vec<Arc<C>>, max_age: Duration) {
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

    /// A standing connection ended or was retired, by `why`.
    pub(crate) fn replaced(&self, why: UpstreamEnd) {
        self.metrics.upstream.replaced.get_or_create(&self.reason(why)).inc();
    }

    pub(crate) fn conn_label(&self) -> UpstreamConn {
        UpstreamConn { route: self.labels.route.clone(), server: self.labels.server.clone() }
    }

    pub(crate) fn reason(&self, reason: UpstreamEnd) -> PoolEvent {
        PoolEvent { route: self.labels.route.clone(), server: self.labels.server.clone(), reason }
    }
}

/// How many connects to start now so that `connections` are live or opening: none during
/// a backoff, one at a time while probing a failing origin. Those started count as opening.
pub(crate) fn to_open<C: Held>(conns: &[Arc<C>], connects: &mut Connects, connections: usize) -> usize {
    if connects.in_backoff(Instant::now()) {
        return 0;
    }
    let live = conns.iter().filter(|c| !c.retiring()).count();
    connects.start(connections.saturating_sub(live + connects.opening))
}

/// A standing connection of a multiplexed set (HTTP/2, HTTP/3), as the upkeep handles it.
pub(crate) trait Held {
    fn id(&self) -> u64;
    fn age(&self) -> Duration;
    /// Takes no new requests; finishing those it has.
    fn retiring(&self) -> bool;
    fn is_closed(&self) -> bool;
    /// Retire it, the reason counted by the upkeep (its end is then not counted again).
    fn retire_counted(&self);
}

/// One stream's place on a multiplexed connection, taken when a request is put on it:
/// dropping it (when the response body has ended or the request failed) frees the place and
/// tells whoever waits for one (HTTP/2: requests waiting for room on full connections; HTTP/3:
/// a retiring connection's drain).
pub struct Slot {
    /// The connection's streams open now (its `Conn`'s count: the protocol crates do not
    /// expose theirs).
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

impl<D> std::fmt::Debug for Core<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("labels", &self.labels).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{RouteName, Server};
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Nowhere(PoolKey);

    impl Dial for Nowhere {
        type Conn = tokio::net::TcpStream;
        fn key(&self) -> &PoolKey {
            &self.0
        }
        async fn dial(&self, _: Duration) -> Result<Self::Conn, super::super::dial::WarmError> {
            Err(super::super::dial::WarmError::HandshakeTimeout)
        }
    }

    /// The upkeep turns at once, then once a period (ticked) and at once when woken (not ticked),
    /// and stops when the set is retired.
    #[tokio::test(start_paused = true)]
    async fn upkeep_turns_per_period_and_when_woken_until_retired() {
        let labels = PoolLabels { route: RouteName::new("r"), alpn: "h2".into(), server: Server("o".into()) };
        let core = Arc::new(Core::new(
            Nowhere(PoolKey {
                origin: crate::config::OriginAddr { host: "127.0.0.1".into(), port: 9 },
                alpn: None,
                tls: None,
            }),
            labels,
            "h2",
            Arc::new(Metrics::new()),
        ));
        let (ticks, turns) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let task = {
            let (core, ticks, turns) = (core.clone(), ticks.clone(), turns.clone());
            tokio::spawn(async move {
                core.upkeep(
                    || (Duration::from_secs(1), None),
                    |ticked| {
                        turns.fetch_add(1, Ordering::Relaxed);
                        if ticked {
                            ticks.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                )
                .await;
            })
        };
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!((ticks.load(Ordering::Relaxed), turns.load(Ordering::Relaxed)), (3, 4));
        core.wake.notify_one();
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!((ticks.load(Ordering::Relaxed), turns.load(Ordering::Relaxed)), (3, 5));
        core.retired.cancel();
        task.await.unwrap();
    }
}
