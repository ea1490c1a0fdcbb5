//! How many warm connections a pool should hold, and how fast to retry a failing origin.
//! Pure logic on explicit timestamps, so it is tested without sockets or real time.
//!
//! # The target
//!
//! Every take starts a replacement, so at any moment the pool's `ready + connecting` is what it
//! holds against demand, and a replacement takes the *warm time* `W` (TCP connect + TLS
//! handshake to the origin, measured). With arrivals at rate `λ`, the takes that happen while a
//! replacement is under way are Poisson with mean `m = λ·W` (Little's law gives the same mean
//! for the number connecting). The pool runs dry only if more than `ready` clients arrive
//! within one warm time, so we size for the mean plus three standard deviations:
//!
//! ```text
//! target = clamp(min, max, ceil(m + 3·√m) + HEADROOM)     m = λ·W
//! ```
//!
//! `P(Poisson(m) > m + 3√m)` is about 0.1 % for the means that matter, which is what the
//! ≥ 99.5 % hit-rate goal needs, and the surplus (`3√m + HEADROOM`) grows only with the square
//! root of the load: at 500 conn/s over a 200 ms warm time (m = 100) the pool holds ~132, not
//! a multiple of the load.
//!
//! `λ` rises at once and decays slowly: each period's rate enters in full if it is higher than
//! the estimate, else through an EWMA with a half-life of a few periods. Under-provisioning
//! costs clients a long-haul handshake (misses); over-provisioning costs idle connections that
//! expire after `max_idle` (waste), so following rises fast and falls lazily is the cheaper
//! mistake. Surplus is not closed actively: the pool hands out its newest connections first
//! (LIFO), so the oldest ones are the unneeded ones and expire on their own.
//!
//! # Why not ATS's or Envoy's schemes
//!
//! ATS's pre-warm v1 kept per-thread pools refilled at a configured rate, so the origin sees
//! `threads × min` connections and a hit needs the client to land on a thread with one left;
//! v2 sizes from the previous period's misses, reacting one period late to a ramp. Envoy's
//! preconnect ratios scale connections by a fixed multiple of current streams, with no notion
//! of how long warming takes, so a far origin (large `W`) is under-provisioned and a near one
//! over-provisioned. Here the one shared pool sizes itself from the two quantities that
//! actually decide a hit, the arrival rate and the warm time.

use std::time::Duration;

/// Keep this many beyond the statistical need whenever there is any demand: covers the first
/// arrivals of a burst while `λ` is still small.
pub(crate) const HEADROOM: usize = 2;

/// Weight of a new lower rate sample (half-life ≈ 3 periods).
const DECAY: f64 = 0.2;

#[derive(Debug, Clone)]
pub(crate) struct Demand {
    /// Estimated arrivals per second.
    pub rate: f64,
    /// Estimated warm time (connect + handshake), seconds.
    pub warm: f64,
    arrivals: u64,
}

impl Default for Demand {
    fn default() -> Self {
        // Until the first handshake completes, assume a long-haul 300 ms warm time.
        Self { rate: 0.0, warm: 0.3, arrivals: 0 }
    }
}

impl Demand {
    /// A client arrived (hit or miss).
    pub(crate) fn arrival(&mut self) {
        self.arrivals += 1;
    }

    /// A warm connection finished its handshake in `took`.
    pub(crate) fn warmed(&mut self, took: Duration) {
        self.warm = 0.7 * self.warm + 0.3 * took.as_secs_f64();
    }

    /// End of a period of length `period`: fold its arrivals into the rate.
    pub(crate) fn tick(&mut self, period: Duration) {
        let sample = self.arrivals as f64 / period.as_secs_f64().max(1e-3);
        self.arrivals = 0;
        self.rate = if sample >= self.rate { sample } else { self.rate + DECAY * (sample - self.rate) };
        // Below one arrival a minute, call it idle so an unused pool falls back to `min`.
        if self.rate < 1.0 / 60.0 {
            self.rate = 0.0;
        }
    }

    /// Warm connections to hold. Also counts arrivals of the running period, so a burst raises the target before the
    /// period ends: `elapsed` is how much of the period has passed.
    pub(crate) fn target(&self, min: usize, max: usize, elapsed: Duration) -> usize {
        let running = self.arrivals as f64 / elapsed.as_secs_f64().max(0.05);
        let rate = self.rate.max(running);
        if rate == 0.0 {
            // No demand seen (or it has decayed away): only the configured floor.
            return min.min(max);
        }
        let m = rate * self.warm;
        let need = (m + 3.0 * m.sqrt()).ceil() as usize + HEADROOM;
        need.clamp(min, max)
    }
}

/// How many keep-alive connections an HTTP/1.1 origin pool should hold.
///
/// A keep-alive connection is reused, so what decides whether a request waits for a handshake
/// is not the arrival rate but how many requests are in flight at once: the pool needs as many
/// connections as the busiest moment. Each period's peak of leased connections is folded in
/// the way [`Demand`] folds rates (a higher peak at once, a lower one through the same slow
/// decay), and the target adds `√peak` plus one for the peaks between samples:
///
/// ```text
/// target = clamp(min, max, ceil(p + √p) + 1)     p = smoothed peak of connections in use
/// ```
///
/// With no request in flight for a while the pool falls back to `min`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Concurrency {
    /// Smoothed peak of connections in use.
    pub level: f64,
    /// The running period's peak so far.
    peak: usize,
}

impl Concurrency {
    /// `n` connections are in use now.
    pub(crate) fn in_use(&mut self, n: usize) {
        self.peak = self.peak.max(n);
    }

    /// End of a period; `now` connections are in use as the next one starts.
    pub(crate) fn tick(&mut self, now: usize) {
        let sample = self.peak as f64;
        self.peak = now;
        self.level = if sample >= self.level { sample } else { self.level + DECAY * (sample - self.level) };
        if self.level < 0.05 {
            self.level = 0.0;
        }
    }

    /// Connections to hold, idle and in use together.
    pub(crate) fn target(&self, min: usize, max: usize) -> usize {
        let p = self.level.max(self.peak as f64);
        if p == 0.0 {
            return min.min(max);
        }
        ((p + p.sqrt()).ceil() as usize + 1).clamp(min.min(max), max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn idle_pool_keeps_min() {
        let d = Demand::default();
        assert_eq!(d.target(0, 200, S), 0);
        assert_eq!(d.target(5, 200, S), 5);
        assert_eq!(d.target(5, 3, S), 3, "max wins over min");
    }

    #[test]
    fn target_follows_rate_times_warm_time_with_sqrt_surplus() {
        let mut d = Demand { warm: 0.2, ..Default::default() };
        for _ in 0..500 {
            d.arrival();
        }
        d.tick(S);
        assert_eq!(d.rate, 500.0);
        // m = 100: 100 + 30 + 2.
        assert_eq!(d.target(2, 1000, S), 132);
        assert_eq!(d.target(2, 50, S), 50);
    }

    #[test]
    fn rises_at_once_decays_slowly() {
        let mut d = Demand::default();
        for _ in 0..100 {
            d.arrival();
        }
        d.tick(S);
        assert_eq!(d.rate, 100.0);
        d.tick(S);
        assert!((d.rate - 80.0).abs() < 1e-9, "{}", d.rate);
        for _ in 0..30 {
            d.tick(S);
        }
        assert!(d.rate < 0.2);
        // A trickle still gets headroom over the statistical need.
        assert_eq!(d.target(0, 200, S), 1 + HEADROOM);
    }

    #[test]
    fn a_burst_counts_before_the_period_ends() {
        let mut d = Demand { warm: 0.1, ..Default::default() };
        for _ in 0..200 {
            d.arrival();
        }
        // 200 arrivals in the first 100 ms of a period: 2000/s, m = 200.
        assert!(d.target(0, 10_000, Duration::from_millis(100)) > 200);
    }

    #[test]
    fn keep_alive_pools_follow_the_peak_in_use() {
        let mut c = Concurrency::default();
        assert_eq!(c.target(2, 50), 2, "no demand: the floor");
        for n in 1..=16 {
            c.in_use(n);
        }
        // Counted before the period ends: 16 + 4 + 1.
        assert_eq!(c.target(2, 50), 21);
        c.tick(0);
        assert_eq!(c.target(2, 50), 21);
        assert_eq!(c.target(2, 10), 10, "capped at max");
        // Quiet periods: decays slowly, then back to the floor.
        c.tick(0);
        assert!(c.target(2, 50) < 21 && c.target(2, 50) > 10);
        for _ in 0..40 {
            c.tick(0);
        }
        assert_eq!(c.target(2, 50), 2);
    }
}
