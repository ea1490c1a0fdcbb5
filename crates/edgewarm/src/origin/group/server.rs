//! One server of a group as the group sees it: its passive health (failures in a row, ejections),
//! when it came back (slow start), its requests in flight and its response-time average. Kept
//! across reloads while the route lists the server, so a reload neither forgives a failing
//! server nor forgets a fast one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use crate::config::HealthConfig;

/// How fast a response-time average forgets: a sample's weight halves in about 3.5 s. A
/// server without requests drifts back towards the group's fastest, so one slow answer does
/// not starve it of the requests that would show it is fast again.
const DECAY: Duration = Duration::from_secs(5);

/// What the group knows of one server.
#[derive(Debug)]
pub(crate) struct ServerState {
    /// `host:port` as configured: its name in metrics, `/origins` and the access log.
    pub(crate) name: std::sync::Arc<str>,
    /// Requests sent to it whose response head has not come yet.
    pub(crate) in_flight: AtomicU64,
    /// `edgewarm_origin_server_up` for it.
    pub(crate) up_gauge: Gauge,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    /// Failures in a row since its last success.
    fails: u32,
    ejected_until: Option<Instant>,
    /// Ejections in a row without a clean spell between: each doubles the next one's length.
    level: u32,
    /// Ejections and downs in all, for `/origins`.
    ejections: u64,
    /// When it last came back into service: its share ramps up from then (`slow_start`).
    back_at: Option<Instant>,
    /// Whether it was in service when last looked at (to see it come back).
    serving: bool,
    /// The application-level probe's last answer was wrong (`health.path`): out until a right
    /// one.
    probe_failed: bool,
    /// Peak-sensitive moving average of the time to a response head, seconds, and when it
    /// was last fed.
    latency: Option<(f64, Instant)>,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Counted; the server stays in.
    Counted,
    /// The server is out until then.
    Ejected(Instant),
}

impl ServerState {
    pub(crate) fn new(name: &str, up_gauge: Gauge) -> Self {
        up_gauge.set(1);
        Self {
            name: name.into(),
            in_flight: AtomicU64::new(0),
            up_gauge,
            health: Mutex::new(Health { serving: true, ..Health::default() }),
        }
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Passively ejected at `now`.
    pub(crate) fn ejected(&self, now: Instant) -> bool {
        self.health().ejected_until.is_some_and(|t| now < t)
    }

    pub(crate) fn ejected_until(&self, now: Instant) -> Option<Instant> {
        self.health().ejected_until.filter(|t| now < *t)
    }

    /// Note whether the server is in service at `now` (`up`: its standing set can carry a
    /// request, and it is not ejected). Returns true when it has just gone out of service
    /// without an ejection (found down): the caller counts that.
    pub(crate) fn observe(&self, up: bool, now: Instant) -> bool {
        let mut h = self.health();
        let serving = up && !h.probe_failed && h.ejected_until.is_none_or(|t| now >= t);
        let was = std::mem::replace(&mut h.serving, serving);
        if serving && !was {
            h.back_at = Some(now);
            h.fails = 0;
        }
        if serving != was {
            self.up_gauge.set(i64::from(serving));
        }
        let found_down = was && !serving && !up;
        if found_down {
            h.ejections += 1;
        }
        found_down
    }

    /// A response or failure that says the server works: its failures in a row start over,
    /// and after a clean spell as long as its last ejection, so does the doubling.
    pub(crate) fn succeeded(&self, took: Duration, now: Instant, health: &HealthConfig) {
        let mut h = self.health();
        h.fails = 0;
        if h.level > 0 && h.back_at.is_some_and(|b| now.duration_since(b) >= eject_for(health, h.level)) {
            h.level = 0;
        }
        let sample = took.as_secs_f64();
        h.latency = Some(match h.latency {
            // Peak-leaning: a slower answer moves it at least halfway at once (a brown-out shows
            // in one answer; one stray slow answer does not make a server look like it), a
            // faster one is averaged in over time, each answer at least a tenth of the way.
            Some((avg, at)) => {
                let moved = (1.0 - decay(now.duration_since(at))).max(if sample > avg { 0.5 } else { 0.1 });
                (avg * (1.0 - moved) + sample * moved, now)
            }
            None => (sample, now),
        });
    }

    /// A failure. `may_eject`: ejecting it would keep at most half the group's servers of its
    /// kind (primary or backup) out.
    pub(crate) fn failed(&self, now: Instant, health: &HealthConfig, may_eject: bool) -> Verdict {
        let mut h = self.health();
        if h.ejected_until.is_some_and(|t| now < t) {
            return Verdict::Counted;
        }
        h.fails = h.fails.saturating_add(1);
        if h.fails < health.fails || !may_eject {
            return Verdict::Counted;
        }
        h.level = h.level.saturating_add(1);
        let until = now + eject_for(health, h.level);
        h.ejected_until = Some(until);
        h.fails = 0;
        h.ejections += 1;
        h.serving = false;
        self.up_gauge.set(0);
        Verdict::Ejected(until)
    }

    /// The probe's answer: right (`true`) or not. Returns whether that changed its verdict.
    pub(crate) fn probed(&self, right: bool) -> bool {
        let mut h = self.health();
        let changed = h.probe_failed == right;
        h.probe_failed = !right;
        if changed && !right {
            // Counted once per wrong turn, as `/origins` and the metric both show it.
            h.ejections += 1;
            if h.serving {
                h.serving = false;
                self.up_gauge.set(0);
            }
        }
        changed
    }

    pub(crate) fn probe_failed(&self) -> bool {
        self.health().probe_failed
    }

    /// Its share at `now`: its weight, ramped up from a tenth over `slow_start` since it came
    /// back.
    pub(crate) fn share(&self, weight: u32, slow_start: Duration, now: Instant) -> f64 {
        let w = f64::from(weight);
        if slow_start.is_zero() {
            return w;
        }
        match self.health().back_at {
            Some(b) => w * (now.duration_since(b).as_secs_f64() / slow_start.as_secs_f64()).clamp(0.1, 1.0),
            None => w,
        }
    }

    /// Its response-time average at `now`, drifting towards `floor` (the group's fastest)
    /// while it gets no requests; `None` before its first answer.
    pub(crate) fn latency(&self, now: Instant, floor: f64) -> Option<f64> {
        let (avg, at) = self.health().latency?;
        let w = decay(now.duration_since(at));
        Some(avg * w + floor.min(avg) * (1.0 - w))
    }

    pub(crate) fn ejections(&self) -> u64 {
        self.health().ejections
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// An ejection's length: `eject`, doubled for each ejection in a row before it, at most
/// `max_eject`.
fn eject_for(health: &HealthConfig, level: u32) -> Duration {
    health.eject.saturating_mul(1u32 << level.saturating_sub(1).min(16)).min(health.max_eject)
}

/// The weight an old sample keeps after `age`.
fn decay(age: Duration) -> f64 {
    (-age.as_secs_f64() / DECAY.as_secs_f64()).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ServerState {
        ServerState::new("a:443", Gauge::default())
    }

    /// Three failures in a row eject for 10 s, the next ejection lasts 20 s, a success between
    /// failures starts the count over, and a server already out is not ejected again.
    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_eject_for_longer_each_time() {
        let (s, cfg) = (state(), HealthConfig::default());
        assert_eq!(s.failed(Instant::now(), &cfg, true), Verdict::Counted);
        assert_eq!(s.failed(Instant::now(), &cfg, true), Verdict::Counted);
        s.succeeded(Duration::from_millis(5), Instant::now(), &cfg);
        assert_eq!(s.failed(Instant::now(), &cfg, true), Verdict::Counted, "the count started over");
        assert_eq!(s.failed(Instant::now(), &cfg, true), Verdict::Counted);
        let t0 = Instant::now();
        assert_eq!(s.failed(t0, &cfg, true), Verdict::Ejected(t0 + Duration::from_secs(10)));
        assert!(s.ejected(t0));
        assert_eq!(s.failed(t0, &cfg, true), Verdict::Counted, "already out");
        assert!(!s.observe(true, t0) && s.up_gauge.get() == 0, "ejected is not found down, but out");
        tokio::time::advance(Duration::from_secs(10)).await;
        let t1 = Instant::now();
        assert!(!s.ejected(t1));
        s.observe(true, t1);
        assert_eq!(s.up_gauge.get(), 1, "back");
        for _ in 0..2 {
            assert_eq!(s.failed(t1, &cfg, true), Verdict::Counted);
        }
        assert_eq!(s.failed(t1, &cfg, true), Verdict::Ejected(t1 + Duration::from_secs(20)), "doubled");
        assert_eq!(s.ejections(), 2);
    }

    /// Where ejecting would take out more than half the group, the failures are counted but the
    /// server stays in.
    #[tokio::test(start_paused = true)]
    async fn never_ejected_past_the_limit() {
        let (s, cfg) = (state(), HealthConfig::default());
        for _ in 0..5 {
            assert_eq!(s.failed(Instant::now(), &cfg, false), Verdict::Counted);
        }
        assert!(!s.ejected(Instant::now()));
    }

    /// A clean spell as long as the last ejection resets the doubling.
    #[tokio::test(start_paused = true)]
    async fn a_clean_spell_forgives() {
        let (s, cfg) = (state(), HealthConfig::default());
        let eject = |s: &ServerState| {
            for _ in 0..cfg.fails {
                s.failed(Instant::now(), &cfg, true);
            }
            s.ejected_until(Instant::now()).map(|t| t - Instant::now())
        };
        assert_eq!(eject(&s), Some(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(10)).await;
        s.observe(true, Instant::now());
        tokio::time::advance(Duration::from_secs(11)).await;
        s.succeeded(Duration::from_millis(5), Instant::now(), &cfg);
        assert_eq!(eject(&s), Some(Duration::from_secs(10)), "forgiven: not 20 s");
    }

    /// A server found down (its set cannot carry requests) is out of service and counted once;
    /// once back, its share ramps up from a tenth over `slow_start`.
    #[tokio::test(start_paused = true)]
    async fn down_counted_once_and_slow_start_ramps() {
        let s = state();
        let slow = Duration::from_secs(10);
        assert!(s.observe(false, Instant::now()));
        assert!(!s.observe(false, Instant::now()), "once");
        assert_eq!((s.up_gauge.get(), s.ejections()), (0, 1));
        assert!(!s.observe(true, Instant::now()));
        assert_eq!(s.share(4, slow, Instant::now()), 0.4);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(s.share(4, slow, Instant::now()), 2.0);
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(s.share(4, slow, Instant::now()), 4.0);
    }

    /// A slow answer moves the average halfway at once; with no answers since, it drifts to
    /// the floor.
    #[tokio::test(start_paused = true)]
    async fn latency_leans_to_the_peak_and_forgets() {
        let (s, cfg) = (state(), HealthConfig::default());
        assert_eq!(s.latency(Instant::now(), 0.001), None);
        s.succeeded(Duration::from_millis(10), Instant::now(), &cfg);
        s.succeeded(Duration::from_millis(210), Instant::now(), &cfg);
        assert_eq!(s.latency(Instant::now(), 0.001), Some(0.11), "halfway to the peak at once");
        s.succeeded(Duration::from_millis(10), Instant::now(), &cfg);
        assert!((s.latency(Instant::now(), 0.001).unwrap() - 0.1).abs() < 1e-9, "a tenth of the way back");
        tokio::time::advance(Duration::from_secs(60)).await;
        let drifted = s.latency(Instant::now(), 0.001).unwrap();
        assert!(drifted < 0.002, "{drifted}");
    }
}
