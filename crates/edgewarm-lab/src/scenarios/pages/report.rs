//! What the browser lab found: per page, mode and visit, the page load time and the document's
//! TTFB (p50, p90) against direct and against the round-trip model; JSON, Markdown, a bar
//! chart of page load times per setting and a waterfall of the news page per mode.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::scenarios::model::{self, Mode};
use crate::tools::browse::Load;

/// One point of the grid: client↔edge and edge↔origin RTT.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setting {
    pub r_ms: f64,
    pub big_r_ms: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        // Nearest rank.
        let at = |q: f64| v.get(((q * v.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
        Self { p50: at(0.5), p90: at(0.9) }
    }
}

/// One cell: a page through a mode, first or returning visits.
#[derive(Debug, Clone, Serialize)]
pub struct PageResult {
    pub client: &'static str,
    pub mode: Mode,
    pub page: String,
    pub visit: String,
    pub r_ms: f64,
    pub big_r_ms: f64,
    pub loads: usize,
    pub plt_ms: Spread,
    pub ttfb_ms: Spread,
    /// The document's least TTFB by the round-trip model (a returning HTTP/3 visit: 0-RTT).
    pub ttfb_min_ms: f64,
    pub ttfb_formula: String,
    /// Median connections per load.
    pub connections: f64,
    /// Every `nextHopProtocol` seen (document and resources).
    pub protocols: Vec<String>,
    /// Loads whose document got a 103 Early Hints before its response.
    pub early_hints: usize,
    /// Resources fetched because a 103 preloaded them (`initiatorType` `early-hints`), per load
    /// (median).
    pub early_hinted: f64,
    /// Why the cell has no loads (the browser failed, or a resource did).
    pub error: Option<String>,
    /// Every load of the cell as the browser reported it (resource timings included): in
    /// `loads.json` beside the report, too large for report.json.
    #[serde(skip)]
    pub samples: Vec<Load>,
}

impl PageResult {
    pub fn new(s: Setting, page: &str, mode: Mode, visit: &str, loads: Vec<Load>) -> Self {
        let zero_rtt = mode == Mode::H3 && visit == "returning";
        let secs = |ms: f64| std::time::Duration::from_secs_f64(ms / 1e3);
        let min = model::min_ttfb(mode, false, secs(s.r_ms), secs(s.big_r_ms), false, zero_rtt);
        let mut protocols: Vec<String> = loads
            .iter()
            .flat_map(|l| std::iter::once(&l.protocol).chain(l.resources.iter().map(|r| &r.protocol)))
            .cloned()
            .collect();
        protocols.sort();
        protocols.dedup();
        Self {
            client: "chromium",
            mode,
            page: page.into(),
            visit: visit.into(),
            r_ms: s.r_ms,
            big_r_ms: s.big_r_ms,
            loads: loads.len(),
            plt_ms: Spread::of(loads.iter().map(|l| l.plt_ms).collect()),
            ttfb_ms: Spread::of(loads.iter().map(|l| l.ttfb_ms).collect()),
            ttfb_min_ms: min.as_secs_f64() * 1e3,
            ttfb_formula: model::formula(model::round_trips(mode, false, false, zero_rtt)),
            connections: Spread::of(loads.iter().map(|l| l.connections as f64).collect()).p50,
            protocols,
            early_hints: loads.iter().filter(|l| l.early_hints_ms > 0.0).count(),
            early_hinted: Spread::of(
                loads
                    .iter()
                    .map(|l| l.resources.iter().filter(|r| r.initiator == "early-hints").count() as f64)
                    .collect(),
            )
            .p50,
            error: None,
            samples: loads,
        }
    }

    /// The load with the median page load time (the waterfall's).
    pub(crate) fn median(&self) -> Option<&Load> {
        let mut by_plt: Vec<&Load> = self.samples.iter().collect();
        by_plt.sort_by(|a, b| a.plt_ms.total_cmp(&b.plt_ms));
        by_plt.get(by_plt.len().saturating_sub(1) / 2).copied()
    }

    pub(crate) fn setting(&self) -> Setting {
        Setting { r_ms: self.r_ms, big_r_ms: self.big_r_ms }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PagesReport {
    pub loads_per_cell: usize,
    pub results: Vec<PageResult>,
    pub run_dir: PathBuf,
}

impl crate::harness::report::Report for PagesReport {
    fn markdown(&self) -> String {
        PagesReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    fn failed(&self) -> usize {
        PagesReport::failed(self)
    }
}

impl PagesReport {
    /// The settings measured, in order.
    pub fn settings(&self) -> Vec<Setting> {
        let mut out: Vec<Setting> = Vec::new();
        for r in &self.results {
            if !out.contains(&r.setting()) {
                out.push(r.setting());
            }
        }
        out
    }

    /// The same page and visit loaded directly. A new visitor who meets no edge is a first
    /// visitor, so a warm-edge visit is held against direct's first visits.
    fn direct(&self, of: &PageResult) -> Option<&PageResult> {
        let visit = if of.visit == "warm-edge" { "first" } else { of.visit.as_str() };
        self.results
            .iter()
            .find(|d| d.mode == Mode::Direct && d.page == of.page && d.visit == visit && d.setting() == of.setting())
    }

    /// A table per setting, like the TFO study's: page, mode, visit, PLT and TTFB, against
    /// direct and against the model.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "# Browser lab: Chromium page loads, {} per page, mode and visit\n\n\
             First visit: a fresh browser context. Returning: the same context after its connections \
             are closed and its cache cleared (session tickets and 0-RTT state kept). Warm-edge \
             (cache modes): a new context after that pair, so an empty browser cache and an edge \
             cache an earlier visitor filled; held against direct's first visits. TTFB: the \
             document's, from the navigation's start; min: the round-trip model's. 103s: loads \
             whose document got Early Hints (resources the 103 preloaded, median).\n",
            self.loads_per_cell
        );
        for s in self.settings() {
            out += &format!(
                "\n## r = {} ms, R = {} ms\n\n| page | mode | visit | PLT p50 | PLT p90 | vs direct | improvement | TTFB p50 | min | TTFB/min | conns | 103s | protocols |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
                s.r_ms, s.big_r_ms
            );
            for r in self.results.iter().filter(|r| r.setting() == s) {
                if let Some(e) = &r.error {
                    out += &format!(
                        "| {} | {} | {} | failed: {} ||||||||||\n",
                        r.page,
                        r.mode.label(),
                        r.visit,
                        e.replace('|', "/")
                    );
                    continue;
                }
                let (ratio, gain) = match self.direct(r) {
                    Some(d) if d.plt_ms.p50 > 0.0 && d.error.is_none() => {
                        let q = r.plt_ms.p50 / d.plt_ms.p50;
                        (format!("{q:.2}"), format!("{:.0} %", (1.0 - q) * 100.0))
                    }
                    _ => ("-".into(), "-".into()),
                };
                out += &format!(
                    "| {} | {} | {} | {:.0} | {:.0} | {ratio} | {gain} | {:.1} | {:.0} ({}) | {:.3} | {} | {} ({}) | {} |\n",
                    r.page,
                    r.mode.label(),
                    r.visit,
                    r.plt_ms.p50,
                    r.plt_ms.p90,
                    r.ttfb_ms.p50,
                    r.ttfb_min_ms,
                    r.ttfb_formula,
                    r.ttfb_ms.p50 / r.ttfb_min_ms,
                    r.connections,
                    r.early_hints,
                    r.early_hinted,
                    r.protocols.join(" ")
                );
            }
        }
        out
    }

    /// Cells the browser could not measure.
    pub fn failed(&self) -> usize {
        self.results.iter().filter(|r| r.error.is_some()).count()
    }

    /// loads.json (every load of every cell), in the run folder, beside the report.json and
    /// report.md every scenario's run saves ([`crate::scenarios::boxed`]; the plots:
    /// [`crate::scenarios::pages::plot::draw`]).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let loads: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "mode": r.mode, "page": r.page, "visit": r.visit,
                    "r_ms": r.r_ms, "big_r_ms": r.big_r_ms, "loads": r.samples,
                })
            })
            .collect();
        std::fs::write(dir.join("loads.json"), serde_json::to_string(&loads).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = Spread::of((1..=10).map(f64::from).rev().collect());
        assert_eq!((s.p50, s.p90), (5.0, 9.0));
        let one = Spread::of(vec![7.0]);
        assert_eq!((one.p50, one.p90), (7.0, 7.0));
    }
}
