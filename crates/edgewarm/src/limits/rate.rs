//! Request rates in a fixed budget: token buckets in two rows of hashed slots, a key's state
//! spread over one slot per row (a count-min sketch of what each key has spent). A key may
//! send while its least-shared slot has a token, so a collision can only make a key's limit
//! stricter by what its neighbour spent, never looser; with the default budget (1 MiB a route:
//! 65,536 slots a row) that takes tens of thousands of keys active in the same second.
//!
//! Each slot is one `AtomicU64` (16 bytes a key across both rows): the millisecond it was last
//! touched (32 bits, from the limiter's start) and the milli-tokens spent (32 bits). An
//! untouched slot is a full bucket.
//!
//! A client's connections are served on several workers' threads at once, so one key is taken
//! concurrently: its check and its spend are one step, under one of [`STRIPES`] small locks (by
//! its row-0 slot), so two requests never both spend its last token; and a slot stamped by a
//! thread that read the clock a moment later reads as no time elapsed, not as the clock's
//! wrap-around (49 days: a full bucket, which let four threads take 1,300 tokens where 310
//! could pass). Keys of other stripes sharing a row-1 slot update it lock-free: what they add
//! only makes the key's judgement stricter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const ROWS: usize = 2;
const SEEDS: [u64; ROWS] = [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f];
/// One token, in the slots' unit.
const TOKEN: u64 = 1000;
/// Locks serializing a key's check and spend (64 × 8 bytes a route).
const STRIPES: usize = 64;
/// How far (ms) a slot's time may be ahead of a request's clock reading: another thread read the
/// clock later and wrote first. That is no time elapsed, not a wrap-around of 49 days (which
/// would read as a full bucket).
const AHEAD_MS: u32 = 60_000;

pub(crate) struct Rate {
    rows: [Box<[AtomicU64]>; ROWS],
    /// Milli-tokens regained per millisecond (= requests per second).
    per_ms: f64,
    /// The bucket's size, in milli-tokens.
    burst: u64,
    start: Instant,
    stripes: [Mutex<()>; STRIPES],
}

fn pack(ms: u32, spent: u64) -> u64 {
    (u64::from(ms) << 32) | spent.min(u64::from(u32::MAX))
}

impl Rate {
    /// `per_second` sustained, `burst` at once, in about `memory` bytes.
    pub(crate) fn new(per_second: f64, burst: u32, memory: usize) -> Self {
        let slots = (memory / (ROWS * 8)).clamp(64, 1 << 24);
        let row = || (0..slots).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        Self {
            rows: [row(), row()],
            per_ms: per_second,
            burst: u64::from(burst.max(1)) * TOKEN,
            start: Instant::now(),
            stripes: std::array::from_fn(|_| Mutex::new(())),
        }
    }

    /// Bytes of state (what `/limits` and the benchmarks report).
    pub(crate) fn bytes(&self) -> usize {
        self.rows.iter().map(|r| r.len() * 8).sum()
    }

    /// Spend a token of `key`'s; `Err(wait)` when it has none, `wait` being how long until it does.
    pub(crate) fn take(&self, key: &[u8]) -> Result<(), Duration> {
        let index: [usize; ROWS] =
            std::array::from_fn(|r| (xxh3_64_with_seed(key, SEEDS[r]) % self.rows[r].len() as u64) as usize);
        let slots: [&AtomicU64; ROWS] = std::array::from_fn(|r| &self.rows[r][index[r]]);
        let _key = self.stripes[index[0] % STRIPES].lock().unwrap_or_else(|p| p.into_inner());
        // Milliseconds modulo 2^32 (49.7 days), compared by wrapping difference: the clock
        // never stops. Read under the lock, so a key's requests read it in the order they spend.
        let now = self.start.elapsed().as_millis() as u32;
        // What each slot has spent now, after what it regained since it was last touched, and
        // the time to stamp it with (never earlier than it was: time a slot has counted is not
        // regained twice).
        let spent_now = |state: u64| -> (u32, u64) {
            let (then, spent) = ((state >> 32) as u32, state & u64::from(u32::MAX));
            let elapsed = now.wrapping_sub(then);
            if elapsed > u32::MAX - AHEAD_MS {
                return (then, spent);
            }
            let regained = (f64::from(elapsed) * self.per_ms) as u64;
            (now, spent.saturating_sub(regained))
        };
        let least = slots.iter().map(|s| spent_now(s.load(Ordering::Relaxed)).1).min().unwrap_or(0);
        if least + TOKEN > self.burst {
            let short = least + TOKEN - self.burst;
            // Validation keeps the rate above 0; the wait is capped at a day all the same.
            let secs = (short as f64 / self.per_ms / 1000.0).min(86_400.0);
            return Err(Duration::from_secs_f64(if secs.is_finite() { secs } else { 86_400.0 }));
        }
        for slot in slots {
            // A lost race (another stripe's key on a shared slot) re-reads and spends again:
            // never more than a token a request.
            let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |state| {
                let (stamp, spent) = spent_now(state);
                Some(pack(stamp, (spent + TOKEN).min(self.burst)))
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 5 a second with a burst of 5: five at once, then one every 200 ms; keys apart.
    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_and_each_key_its_own() {
        let rate = Rate::new(5.0, 5, 1 << 20);
        for i in 0..5 {
            assert_eq!(rate.take(b"a"), Ok(()), "request {i} of the burst");
        }
        let wait = rate.take(b"a").unwrap_err();
        assert_eq!(wait, Duration::from_millis(200));
        assert_eq!(rate.take(b"b"), Ok(()), "another key has its own bucket");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(rate.take(b"a"), Ok(()));
        assert!(rate.take(b"a").is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..5 {
            assert_eq!(rate.take(b"a"), Ok(()), "refilled to the burst, not beyond");
        }
        assert!(rate.take(b"a").is_err());
        assert_eq!(rate.bytes(), 1 << 20);
    }

    /// Many keys in a small table: collisions only ever make a key stricter, and most keys
    /// still get their whole burst.
    #[tokio::test(start_paused = true)]
    async fn collisions_in_a_small_budget_only_make_limits_stricter() {
        let rate = Rate::new(1.0, 2, 64 * 16);
        let mut whole = 0;
        for k in 0..50u32 {
            let key = k.to_be_bytes();
            let granted = (0..4).filter(|_| rate.take(&key).is_ok()).count();
            assert!(granted <= 2, "never more than the burst: {granted}");
            whole += usize::from(granted == 2);
        }
        assert!(whole > 25, "most of 50 keys in 64 slots get their burst: {whole}");
    }

    /// One key taken from four threads at once (a client's connections on several workers):
    /// never more than the burst plus what the time it took refilled. Real threads and the real
    /// clock: the bound is computed from the elapsed time, measured around the limiter's life.
    #[test]
    fn one_key_on_many_threads_gets_no_more_than_its_bucket() {
        let started = std::time::Instant::now();
        let rate = Rate::new(1000.0, 10, 1 << 20);
        let granted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while started.elapsed() < Duration::from_millis(300) {
                        if rate.take(b"one client").is_ok() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let elapsed = started.elapsed();
        let granted = granted.into_inner();
        let bound = 10 + (elapsed.as_secs_f64() * 1000.0) as u64;
        assert!(granted <= bound, "{granted} granted in {elapsed:?}: at most {bound}");
        assert!(granted >= 10, "the burst at least: {granted}");
    }
}
