//! The load generator's report: every request's phases in histograms, their percentiles,
//! and the counts (resumed, early data, retried, errors by kind).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::tools::load::target::Sample;

/// Milliseconds at the percentiles that matter.
#[derive(Debug, Default, Serialize, serde::Deserialize, Clone)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[derive(Debug, Default, Serialize, serde::Deserialize, Clone)]
pub struct LoadReport {
    pub requests: usize,
    pub ok: usize,
    pub errors: std::collections::BTreeMap<String, usize>,
    pub connect_ms: Percentiles,
    pub tls_ms: Percentiles,
    pub ttfb_ms: Percentiles,
    pub total_ms: Percentiles,
    pub resumed: usize,
    /// Connections whose TLS 1.3 early data (the request) the server accepted.
    #[serde(default)]
    pub early_data: usize,
    /// Requests refused unprocessed (HTTP/3: after a GOAWAY) and sent again on a new
    /// connection, as a browser does; their connection counts as ok if the retry succeeded.
    #[serde(default)]
    pub retried: usize,
    /// Every request's TTFB in ms, in start order (failed ones absent), for CDF plots.
    pub ttfb_samples: Vec<f64>,
    /// Scheduled start of each request in `ttfb_samples`, ms after the run began.
    #[serde(default)]
    pub start_ms: Vec<f64>,
    /// Every request's total time in ms (the page time with `--page`), in the same order.
    #[serde(default)]
    pub total_samples: Vec<f64>,
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Percentiles { p50: ms(0.5), p90: ms(0.9), p99: ms(0.99), p999: ms(0.999), max: h.max() as f64 / 1e3 }
}

pub(crate) fn summarise(results: Vec<Option<Result<Sample, &'static str>>>) -> LoadReport {
    // 1 µs to 10 minutes at 3 significant digits: constant, valid bounds.
    let new = || Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds");
    let (mut c, mut t, mut f, mut a) = (new(), new(), new(), new());
    let mut report = LoadReport::default();
    for r in results.into_iter().flatten() {
        report.requests += 1;
        match r {
            Ok(s) => {
                report.ok += 1;
                report.resumed += usize::from(s.resumed);
                report.early_data += usize::from(s.early);
                report.retried += s.retried;
                let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
                let _ = c.record(us(s.connect));
                let _ = t.record(us(s.tls));
                let _ = f.record(us(s.ttfb));
                let _ = a.record(us(s.total));
                report.ttfb_samples.push(s.ttfb.as_secs_f64() * 1e3);
                report.start_ms.push(s.at.as_secs_f64() * 1e3);
                report.total_samples.push(s.total.as_secs_f64() * 1e3);
            }
            Err(kind) => *report.errors.entry(kind.to_string()).or_default() += 1,
        }
    }
    report.connect_ms = percentiles(&c);
    report.tls_ms = percentiles(&t);
    report.ttfb_ms = percentiles(&f);
    report.total_ms = percentiles(&a);
    report
}

impl LoadReport {
    pub fn render_text(&self) -> String {
        let row = |name: &str, p: &Percentiles| {
            format!("{name:<8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n", p.p50, p.p90, p.p99, p.p999, p.max)
        };
        let mut s = format!(
            "{} requests, {} ok, {} resumed, {} with early data accepted, {} retried, errors {:?}\nphase (ms)     p50       p90       p99     p99.9       max\n",
            self.requests, self.ok, self.resumed, self.early_data, self.retried, self.errors
        );
        s += &row("connect", &self.connect_ms);
        s += &row("tls", &self.tls_ms);
        s += &row("ttfb", &self.ttfb_ms);
        s += &row("total", &self.total_ms);
        s
    }
}
