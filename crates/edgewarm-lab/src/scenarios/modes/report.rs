//! What a lab run found: per-mode results against the round-trip minimum, the JSON and
//! Markdown report.

use std::path::PathBuf;

use serde::Serialize;

use crate::scenarios::model::Mode;
use crate::scenarios::spec::Scenario;
use crate::tools::load::LoadReport;
use crate::wan::impair::LinkCounts;

#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    pub mode: Mode,
    pub label: String,
    pub r_ms: f64,
    pub big_r_ms: f64,
    pub formula: String,
    pub min_ms: f64,
    pub ratio_p50: f64,
    pub hit_rate: Option<f64>,
    pub waste: Option<f64>,
    /// Origin connections the edge opened while the mode ran, per 1000 client connections
    /// (`prewarm` and `http`).
    pub origin_conns_per_1000: Option<f64>,
    /// Link B's loss rate while the mode ran (a fraction).
    #[serde(default)]
    pub loss_big_r: f64,
    /// What link A (client↔edge) and link B (edge↔origin) carried and dropped while the mode's
    /// measured load ran (not its warm-up connections; the edge's pool traffic too).
    #[serde(default)]
    pub link_a: LinkCounts,
    #[serde(default)]
    pub link_b: LinkCounts,
    pub load: LoadReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    pub scenario: Scenario,
    pub requests_per_mode: usize,
    pub delay_box_max_late_us: u64,
    pub results: Vec<ModeResult>,
    /// Ramp scenarios: the prewarm pool sampled every 500 ms.
    pub timeline: Vec<PoolSample>,
    pub run_dir: PathBuf,
}

/// The prewarm pool at one moment of a ramp.
#[derive(Debug, Clone, Serialize)]
pub struct PoolSample {
    pub t_s: f64,
    pub target: f64,
    pub ready: f64,
    pub connecting: f64,
    pub hits: f64,
    pub misses: f64,
}

impl crate::harness::report::Report for LabReport {
    fn markdown(&self) -> String {
        LabReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }
}

impl LabReport {
    /// What load each mode got, as the header says it: a count for sequential runs, the
    /// arrival ramp (and the connections it made, in the table's `ok` column) for ramps.
    fn load_description(&self) -> String {
        match &self.scenario.ramp {
            Some(r) if r.from == r.to => {
                format!("Open-loop arrivals at a fixed {} new connections per second for {} s per mode", r.from, r.secs)
            }
            Some(r) => format!(
                "Open-loop arrivals rising from {} to {} new connections per second over {} s per mode",
                r.from, r.to, r.secs
            ),
            None => format!("{} new connections per mode", self.requests_per_mode),
        }
    }

    pub fn markdown(&self) -> String {
        let s = &self.scenario;
        // A loss column only where there is loss: the lossless report stays as it was.
        let lossy = s.impaired();
        let loss = |m: &ModeResult| {
            if lossy {
                format!(" {} |", crate::wan::impair::pct(m.loss_big_r))
            } else {
                String::new()
            }
        };
        let mut t = format!(
            "# edgewarm lab: {} (r = {} ms, R = {} ms, TLS {})\n\n{}, each a new connection (TCP + TLS; QUIC for h3) and one request. \
             TTFB is from the start of the TCP connect to the first response byte. Delay box worst lateness: {:.2} ms.\n\n{}\
             | mode | R ms |{} ok | errors | TTFB p50 ms | TTFB p99 ms | minimum | minimum ms | p50 / minimum | pool hit rate | waste | origin conns / 1000 clients |\n\
             |---|---|{}---|---|---|---|---|---|---|---|---|---|\n",
            s.name,
            s.r_ms,
            s.big_r_ms,
            if s.tls12 { "1.2" } else { "1.3" },
            self.load_description(),
            self.delay_box_max_late_us as f64 / 1e3,
            self.impair_markdown(),
            if lossy { " loss on R |" } else { "" },
            if lossy { "---|" } else { "" },
        );
        for m in &self.results {
            let opt = |v: Option<f64>, pct: bool| match v {
                Some(v) if pct => format!("{:.1} %", v * 100.0),
                Some(v) => format!("{v:.3}"),
                None => "-".into(),
            };
            t += &format!(
                "| {} | {} |{} {} | {} | {:.1} | {:.1} | {} | {:.0} | {:.3} | {} | {} | {} |\n",
                m.label,
                m.big_r_ms,
                loss(m),
                m.load.ok,
                m.load.errors.values().sum::<usize>(),
                m.load.ttfb_ms.p50,
                m.load.ttfb_ms.p99,
                m.formula,
                m.min_ms,
                m.ratio_p50,
                opt(m.hit_rate, true),
                opt(m.waste, false),
                m.origin_conns_per_1000.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
            );
        }
        if s.page > 0 {
            // The sub-resources go out together once the page is in: one more r + R.
            t += &format!(
                "\nPage time: the page, then {} sub-resources at once on the same HTTP/2 connection; \
                 minimum = TTFB minimum + (r + R).\n\n| mode | R ms |{} page p50 ms | page p90 ms | page p99 ms | minimum ms | p50 / minimum |\n|---|---|{}---|---|---|---|---|\n",
                s.page,
                if lossy { " loss on R |" } else { "" },
                if lossy { "---|" } else { "" },
            );
            for m in &self.results {
                let min = m.min_ms + m.r_ms + m.big_r_ms;
                t += &format!(
                    "| {} | {} |{} {:.1} | {:.1} | {:.1} | {:.0} | {:.3} |\n",
                    m.label,
                    m.big_r_ms,
                    loss(m),
                    m.load.total_ms.p50,
                    m.load.total_ms.p90,
                    m.load.total_ms.p99,
                    min,
                    m.load.total_ms.p50 / min
                );
            }
        }
        t += &self.by_loss_markdown();
        t += &self.links_markdown();
        t
    }
}
