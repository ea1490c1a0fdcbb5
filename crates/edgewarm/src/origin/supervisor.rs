//! What every kind of standing set has, whatever it holds: how it dials, its labels, the upkeep
//! task that keeps it at its target, new settings from a reload, its retirement, and its
//! connects' bookkeeping. Each kind (prewarm pool, HTTP/2 set, HTTP/1.1 pool, HTTP/3 set)
//! embeds one [`Core`] and supplies only what differs: what it holds, how many it wants, and
//! how it hands them out. What the multiplexed kinds (HTTP/2, HTTP/3) share besides, their
//! connections' life, is [`super::multiplexed`]'s.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

    /// New settings from a reload, put in place by `set` under the set's lock (`state`):
    /// connections stay, and the upkeep is woken to act on them.
    pub(crate) fn update<S>(&self, state: &Mutex<S>, set: impl FnOnce(&mut S)) {
        set(&mut lock(state));
        self.wake.notify_one();
    }

    /// A connect completed in `took`: counted, and its time observed.
    pub(crate) fn opened(&self, took: Duration) {
        let m = &self.metrics.pool;
        m.opened.get_or_create(&self.labels).inc();
        m.handshake_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
    }

    /// A connect of this set failed, for `reason`: counted in `origin_connect_failures`, the
    /// one family every kind counts its failed connects in (once per attempt, here).
    pub(crate) fn count_failure(&self, reason: ConnectFailure) {
        let l = &self.labels;
        self.metrics.origin_connect_failed(&l.route, &l.server.0, self.kind, reason);
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

/// A set's lock. A panic while it was held cannot leave the state half-updated in a way that
/// matters more than losing the set: keep serving.
pub(crate) fn lock<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state.lock().unwrap_or_else(|p| p.into_inner())
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
