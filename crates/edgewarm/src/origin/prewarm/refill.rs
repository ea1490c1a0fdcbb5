//! The refill task: keeps a pool at its target, and makes every origin connection the pool
//! opens (warm-ups and on-demand misses alike), recording outcome, warm time and backoff.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Pool;
use crate::metrics::PoolReason;
use crate::origin::dial::{Dial, WarmError};

impl<D: Dial> Pool<D> {
    /// The refill task: wakes on takes, on its period, and when a backoff ends.
    pub(super) async fn refill_loop(self: Arc<Self>) {
        let schedule = || {
            let st = self.state();
            (st.settings.size.period, st.connects.retry_at())
        };
        let turn = |ticked| {
            if ticked {
                // A period is over: fold its arrivals into the demand estimate.
                let mut st = self.state();
                let period = st.settings.size.period;
                st.demand.tick(period);
                st.period_start = Instant::now();
            }
            self.fill();
        };
        self.core.upkeep(schedule, turn).await;
    }

    /// Start as many warm-ups as the target needs.
    fn fill(self: &Arc<Self>) {
        let mut st = self.state();
        let now = Instant::now();
        if st.connects.in_backoff(now) {
            return;
        }
        let s = &st.settings.size;
        let min = floor(s.min, st.settings.shared, now - st.last_arrival, s.max_idle);
        let target = st.demand.target(min, s.max, now - st.period_start);
        self.core.metrics.pool.target.get_or_create(&self.core.labels).set(target as i64);
        let have = st.idle.len() + st.connects.opening;
        let start = st.connects.start(target.saturating_sub(have));
        drop(st);
        self.core.metrics.pool.connecting.get_or_create(&self.core.labels).inc_by(start as i64);
        for _ in 0..start {
            let pool = self.clone();
            tokio::spawn(async move {
                let result = pool.warm_one().await;
                pool.state().connects.opening -= 1;
                pool.core.metrics.pool.connecting.get_or_create(&pool.core.labels).dec();
                match result {
                    Ok(stream) => pool.add_idle(stream),
                    // The backoff is recorded; the refill loop retries when it ends.
                    Err(e) => tracing::warn!(
                        route = %pool.core.labels.route, origin = %pool.core.labels.server, alpn = %pool.core.labels.alpn,
                        reason = e.close_reason().label(), error = %e, "warming an origin connection failed"
                    ),
                }
                pool.core.wake.notify_one();
            });
        }
    }

    /// Connect one origin connection, recording the outcome.
    pub(super) async fn warm_one(&self) -> Result<D::Conn, WarmError> {
        let (timeout, retrying) = {
            let st = self.state();
            (st.settings.connect_timeout, st.connects.backoff.failures > 0)
        };
        if retrying {
            self.core.metrics.pool.retries.get_or_create(&self.core.labels).inc();
        }
        let started = Instant::now();
        let result = self.core.dial.dial(timeout).await;
        let mut st = self.state();
        match &result {
            Ok(_) => {
                let took = started.elapsed();
                st.connects.succeeded();
                st.demand.warmed(took);
                self.core.opened(took);
            }
            Err(e) => {
                if matches!(e, WarmError::AlpnMismatch { .. }) {
                    st.alpn_refused = true;
                }
                st.connects.failed();
                drop(st);
                self.core.count_failure(e.failure());
                let l = &self.core.labels;
                let label = PoolReason {
                    route: l.route.clone(),
                    alpn: l.alpn.clone(),
                    reason: e.close_reason(),
                    server: l.server.clone(),
                };
                // The deprecated alias, counted as before for one release.
                self.core.metrics.pool.connect_errors.get_or_create(&label).inc();
            }
        }
        result
    }
}

/// The pool's floor: `min`, except for one of several ALPN pools of a route that has had no
/// client for `max_idle` (by then its surplus has expired unused once): one connection, so the
/// first client of that protocol still finds a warm one while the others' demand is served.
fn floor(min: usize, shared: bool, quiet: Duration, max_idle: Duration) -> usize {
    if shared && quiet >= max_idle {
        min.min(1)
    } else {
        min
    }
}

#[cfg(test)]
mod tests {
    use super::floor;
    use std::time::Duration;

    #[test]
    fn unused_alpn_pools_shrink_to_one() {
        let (s, idle) = (Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(floor(4, false, 3600 * s, idle), 4, "a route's only pool keeps min");
        assert_eq!(floor(4, true, 59 * s, idle), 4, "not yet quiet for max_idle");
        assert_eq!(floor(4, true, 60 * s, idle), 1);
        assert_eq!(floor(0, true, 60 * s, idle), 0, "min 0 stays 0");
    }
}
