//! The failover lab's report: per proxy and phase, what its clients got.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::load::Outcome;
use super::Phase;

/// An answer slower than this during a fault counts as the proxy still sending clients to the
/// faulty server (the brown-out adds 200 ms; a healthy answer on loopback takes a few).
const SLOW_MS: f64 = 100.0;

#[derive(Debug, Serialize)]
pub struct FailoverReport {
    pub fault_s: f64,
    pub phases: Vec<Phase>,
    pub rows: Vec<Row>,
    pub run_dir: PathBuf,
}

/// One proxy in one phase.
#[derive(Debug, Serialize)]
pub struct Row {
    pub proxy: &'static str,
    pub phase: &'static str,
    pub requests: usize,
    /// An error (no status) or a 5xx.
    pub failed: usize,
    pub failed_get: usize,
    pub failed_post: usize,
    pub status_503: usize,
    /// POSTs the servers executed more than once.
    pub posts_twice: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// From the fault's start to the last answer that failed, was a 503 or was slow: how long
    /// the proxy kept sending clients to the faulty server (none: it never did).
    pub last_hit_s: Option<f64>,
}

impl crate::harness::report::Report for FailoverReport {
    fn markdown(&self) -> String {
        FailoverReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    fn failed(&self) -> usize {
        FailoverReport::failed(self)
    }
}

impl FailoverReport {
    pub(super) fn new(
        proxies: &[&'static str],
        phases: &[Phase],
        outcomes: &[Outcome],
        executed: &HashMap<String, usize>,
        fault: Duration,
        run_dir: PathBuf,
    ) -> Self {
        let mut rows = Vec::new();
        for &proxy in proxies {
            for phase in phases {
                let mine: Vec<&Outcome> = outcomes
                    .iter()
                    .filter(|o| o.proxy == proxy && o.at_s >= phase.from_s && o.at_s < phase.to_s)
                    .collect();
                let failed = |o: &&&Outcome| o.error.is_some() || o.status.is_some_and(|s| s >= 500);
                let bad = |o: &&&Outcome| failed(o) || o.ms > SLOW_MS;
                let mut ms: Vec<f64> = mine.iter().filter(|o| o.error.is_none()).map(|o| o.ms).collect();
                ms.sort_by(f64::total_cmp);
                let pct = |p: f64| if ms.is_empty() { 0.0 } else { ms[((ms.len() - 1) as f64 * p).round() as usize] };
                rows.push(Row {
                    proxy,
                    phase: phase.name,
                    requests: mine.len(),
                    failed: mine.iter().filter(failed).count(),
                    failed_get: mine.iter().filter(|o| !o.post).filter(failed).count(),
                    failed_post: mine.iter().filter(|o| o.post).filter(failed).count(),
                    status_503: mine.iter().filter(|o| o.status == Some(503)).count(),
                    posts_twice: mine
                        .iter()
                        .filter(|o| o.post && executed.get(&format!("POST {}", o.path)).is_some_and(|n| *n > 1))
                        .count(),
                    p50_ms: pct(0.5),
                    p99_ms: pct(0.99),
                    last_hit_s: (phase.name != "healthy")
                        .then(|| {
                            mine.iter()
                                .filter(bad)
                                .map(|o| o.at_s + o.ms / 1e3 - phase.from_s)
                                .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))))
                        })
                        .flatten(),
                });
            }
        }
        Self { fault_s: fault.as_secs_f64(), phases: phases.to_vec(), rows, run_dir }
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "failover, loopback: two servers, faults on b of {} s each (then as long to settle); an open loop of 50 requests/s per proxy, 3 GETs to 1 POST\n\n\
             | proxy | phase | requests | failed (GET / POST) | 503 | POSTs executed twice | p50 ms | p99 ms | p99 / healthy | last hit after the fault began |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
            self.fault_s
        );
        for r in &self.rows {
            let healthy =
                self.rows.iter().find(|h| h.proxy == r.proxy && h.phase == "healthy").map_or(0.0, |h| h.p99_ms);
            let ratio = if healthy > 0.0 { format!("{:.2}", r.p99_ms / healthy) } else { "-".into() };
            let hit = r.last_hit_s.map_or("-".to_string(), |s| format!("{s:.2} s"));
            out += &format!(
                "| {} | {} | {} | {} ({} / {}) | {} | {} | {:.1} | {:.1} | {ratio} | {hit} |\n",
                r.proxy,
                r.phase,
                r.requests,
                r.failed,
                r.failed_get,
                r.failed_post,
                r.status_503,
                r.posts_twice,
                r.p50_ms,
                r.p99_ms
            );
        }
        out
    }

    /// The edgewarm rows that break a promise no target bends: a failed GET while a server was
    /// killed, or a POST executed twice anywhere.
    pub fn failed(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.proxy == "edgewarm")
            .filter(|r| r.posts_twice > 0 || (r.phase.starts_with("a:") && r.failed_get > 0))
            .count()
    }
}
