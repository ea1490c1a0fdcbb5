//! How fast a standing set retries a failing origin, and its connects' bookkeeping: the same
//! rules for every kind of standing origin connection.

use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff with jitter for a failing origin: 100 ms doubling to 800 ms, each wait
/// drawn from [½, 1½] of the nominal so many edges do not retry in lockstep. The cap is what an
/// origin's return costs its clients: probed at most 1.2 s apart, a restarted origin is found
/// within about a second (issue 46), where a 30 s cap left a route refusing clients for up to
/// 45 s after its origin was back. One probe a second per set, one connect at a time, is no load
/// for an origin, and clients are refused at once meanwhile (`failing`), not each connecting.
#[derive(Debug, Default, Clone)]
pub(crate) struct Backoff {
    pub failures: u32,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_millis(800);

    /// A failure; returns how long to wait before the next attempt. `jitter` in [0, 1).
    pub(crate) fn failed(&mut self, jitter: f64) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let nominal = Self::BASE.saturating_mul(1u32 << self.failures.min(16)).min(Self::CAP);
        nominal.mul_f64(0.5 + jitter)
    }

    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Clients fail fast (no on-demand connect) once the origin has failed twice in a row:
    /// one failure can be a blip worth a try; two mean "down", and a connect per client would
    /// hammer it at the clients' rate.
    pub(crate) fn failing(&self) -> bool {
        self.failures >= 2
    }
}

/// A number in [0, 1) for backoff jitter. Not for cryptography: std's randomly keyed hasher
/// over the time is plenty to keep edges from retrying in lockstep.
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The connects of one standing set: how many are under way, and the backoff that spaces them
/// out while the origin fails.
#[derive(Debug, Default)]
pub(crate) struct Connects {
    pub(crate) backoff: Backoff,
    /// No attempt before this (the origin is failing).
    retry_at: Option<Instant>,
    /// Connects under way, counted against the set's limits.
    pub(crate) opening: usize,
    /// How the last connect failed, since the last success (the multiplexed kinds note it).
    last: Option<Failed>,
}

/// How a connect failed: what a refused client's log line says, and whether the origin
/// answered at all.
#[derive(Debug)]
struct Failed {
    detail: String,
    /// Nothing came back before the timeout (a black-holed address, a server that accepts and
    /// never speaks TLS). Such an origin may be slow rather than gone: its clients keep their
    /// bounded wait. One that answers "no" (refused, reset, an alert) answers it at once, so
    /// waiting for the next probe only costs the client its wait.
    silent: bool,
}

impl Connects {
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The origin failed recently and its backoff has not passed.
    pub(crate) fn in_backoff(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|t| now < t)
    }

    /// Of `wanted` new connections, how many to start now: all of them, or, while probing a
    /// failing origin, one at a time. Those started count as opening.
    pub(crate) fn start(&mut self, wanted: usize) -> usize {
        let n = if self.backoff.failures > 0 { wanted.min(1).saturating_sub(self.opening) } else { wanted };
        self.opening += n;
        n
    }

    /// A connect succeeded: the backoff is over.
    pub(crate) fn succeeded(&mut self) {
        self.backoff.succeeded();
        self.retry_at = None;
        self.last = None;
    }

    /// A connect failed with `detail`; `silent`: it timed out with no answer. Returns how long
    /// until the next attempt.
    pub(crate) fn failed_with(&mut self, detail: impl std::fmt::Display, silent: bool) -> Duration {
        self.last = Some(Failed { detail: detail.to_string(), silent });
        self.failed()
    }

    /// Why clients should be refused at once without waiting for a connection: the origin is
    /// [`Backoff::failing`] (as prewarm pools refuse) and its last connect was answered with
    /// a refusal, not silence (issue 57). The answer is the last failure's detail.
    pub(crate) fn refusing(&self) -> Option<&str> {
        self.last.as_ref().filter(|l| self.backoff.failing() && !l.silent).map(|l| l.detail.as_str())
    }

    /// How the last connect failed, if one has since the last success.
    pub(crate) fn last_failure(&self) -> Option<&str> {
        self.last.as_ref().map(|l| l.detail.as_str())
    }

    /// A connect failed: returns how long until the next attempt.
    pub(crate) fn failed(&mut self) -> Duration {
        let wait = self.backoff.failed(jitter());
        self.retry_at = Some(Instant::now() + wait);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let mut b = Backoff::default();
        assert!(!b.failing());
        assert_eq!(b.failed(0.5), Duration::from_millis(200));
        assert!(!b.failing());
        assert_eq!(b.failed(0.5), Duration::from_millis(400));
        assert!(b.failing());
        assert_eq!(b.failed(0.0), Duration::from_millis(400));
        for _ in 0..40 {
            b.failed(0.99);
        }
        assert!(b.failed(0.99) <= Duration::from_millis(1200));
        b.succeeded();
        assert!(!b.failing());
    }

    #[test]
    fn a_failing_origin_is_probed_one_connect_at_a_time() {
        let mut c = Connects::default();
        assert_eq!(c.start(3), 3);
        c.opening = 0;
        c.failed();
        assert!(c.in_backoff(Instant::now()));
        assert_eq!(c.start(3), 1, "probing");
        assert_eq!(c.start(3), 0, "one probe at a time");
        c.opening = 0;
        c.succeeded();
        assert!(!c.in_backoff(Instant::now()));
        assert_eq!(c.start(3), 3);
    }

    /// Two refusals in a row refuse clients at once, naming the refusal; silence never does
    /// (its clients keep their bounded wait), and a success ends it.
    #[test]
    fn refused_twice_refuses_at_once_but_silence_does_not() {
        let mut c = Connects::default();
        c.failed_with("connection refused by 127.0.0.1:9", false);
        assert_eq!(c.refusing(), None, "one failure can be a blip");
        c.failed_with("connection refused by 127.0.0.1:9", false);
        assert_eq!(c.refusing(), Some("connection refused by 127.0.0.1:9"));
        c.failed_with("origin connect timed out", true);
        assert_eq!(c.refusing(), None, "a silent origin keeps the bounded wait");
        assert_eq!(c.last_failure(), Some("origin connect timed out"));
        c.failed_with("origin TLS handshake failed: connection reset by peer", false);
        assert!(c.refusing().is_some_and(|d| d.contains("reset")));
        c.succeeded();
        assert_eq!((c.refusing(), c.last_failure()), (None, None));
    }
}
