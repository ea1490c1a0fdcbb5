//! `edgewarm-lab lab --scenario pages`: headless Chromium in the client namespace loads the
//! lab's pages ([`crate::tools::origin::pages`]) through every mode, as first and returning visits
//! ([`crate::tools::browse`]), on a grid of link delays; [`crate::scenarios::pages::report`] reports them.
//!
//! Names per mode: direct asks the origin for `a.test`; tunnel asks the edge for `a.test` (a
//! tunnel route); prewarm `b.test`; http and h3 `z.test` (an `http` route with `early_data:
//! safe`, so a returning HTTP/3 visit can send its request in 0-RTT); cache `c.test` and
//! cache-no-hints `n.test` (`http` routes with the edge cache, the first with learned Early
//! Hints), which load the pages' cacheable releases ([`crate::tools::origin::pages_cache`]), a release per load
//! pair, and add a warm-edge visit. Each has a `static.` twin for the split page, routed the
//! same way. Chromium is told where each name is
//! (`--host-resolver-rules`) and which certificates to trust (their key hashes).

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::process::Command;

use crate::error::LabError;
use crate::scenarios::model::Mode;
use crate::tools::browse::Load;
use crate::wan::netns::{Topology, EDGE_A, ORIGIN};
pub mod plot;
pub mod report;

use crate::scenarios::opts::LabOpts;
use crate::scenarios::{boxed, Entry};
use report::{PageResult, PagesReport, Setting};

/// The TFO study's client RTTs with R = 100 ms, then the far-origin setting.
const GRID: [Setting; 4] = [
    Setting { r_ms: 20.0, big_r_ms: 100.0 },
    Setting { r_ms: 100.0, big_r_ms: 100.0 },
    Setting { r_ms: 200.0, big_r_ms: 100.0 },
    Setting { r_ms: 16.0, big_r_ms: 265.0 },
];

/// What `--modes` can name; the default is the first five (cache and cache-no-hints measure a
/// different site: cacheable releases, see docs/lab.md).
const MODES: [Mode; 7] =
    [Mode::Direct, Mode::Tunnel, Mode::Prewarm, Mode::Http, Mode::H3, Mode::Cache, Mode::CacheNoHints];

/// What a run measures.
pub struct Plan {
    pub settings: Vec<Setting>,
    pub pages: Vec<&'static str>,
    pub modes: Vec<Mode>,
}

/// The plan from the command line: `--r`/`--big-r` pick grid settings (or name one outside
/// it), `--pages` and `--modes` narrow the rest.
pub fn plan(opts: &LabOpts) -> Result<Plan, LabError> {
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e3);
    let (r, big_r) = (ms(opts.r), ms(opts.big_r));
    let mut settings: Vec<Setting> =
        GRID.into_iter().filter(|s| r.is_none_or(|r| s.r_ms == r) && big_r.is_none_or(|b| s.big_r_ms == b)).collect();
    if settings.is_empty() {
        settings.push(Setting { r_ms: r.unwrap_or(20.0), big_r_ms: big_r.unwrap_or(100.0) });
    }
    let bad = |what: &str, v: &str| LabError::ScenarioFile(format!("--{what}: unknown {v:?}"));
    let pages = match opts.pages.as_slice() {
        [] => crate::tools::origin::pages::PAGES.to_vec(),
        given => given
            .iter()
            .map(|p| crate::tools::origin::pages::PAGES.into_iter().find(|k| k == p).ok_or_else(|| bad("pages", p)))
            .collect::<Result<_, _>>()?,
    };
    let modes = match opts.modes.as_slice() {
        [] => MODES[..5].to_vec(),
        given => given
            .iter()
            .map(|m| MODES.into_iter().find(|k| k.label() == m).ok_or_else(|| bad("modes", m)))
            .collect::<Result<_, _>>()?,
    };
    Ok(Plan { settings, pages, modes })
}

/// The page's host name and where it is, and whether the browser speaks QUIC to it.
fn route(mode: Mode) -> (&'static str, Ipv4Addr, bool) {
    match mode {
        Mode::Direct => ("a.test", ORIGIN, false),
        Mode::Tunnel | Mode::TunnelTfo => ("a.test", EDGE_A, false),
        Mode::Prewarm => ("b.test", EDGE_A, false),
        Mode::Http => ("z.test", EDGE_A, false),
        Mode::H3 => ("z.test", EDGE_A, true),
        Mode::HttpH3Origin => ("q.test", EDGE_A, false),
        Mode::Cache => ("c.test", EDGE_A, false),
        Mode::CacheNoHints => ("n.test", EDGE_A, false),
    }
}

/// Whether a mode loads the cached site: releases, the browser's cache on, a warm-edge visit.
fn cached(mode: Mode) -> bool {
    matches!(mode, Mode::Cache | Mode::CacheNoHints)
}

/// The visits a mode's cells report, in order.
pub(crate) fn visits(mode: Mode) -> &'static [&'static str] {
    if cached(mode) {
        &["first", "returning", "warm-edge"]
    } else {
        &["first", "returning"]
    }
}

/// `--scenario pages` in [`crate::scenarios::ALL`].
pub const ENTRY: Entry = Entry {
    name: "pages",
    about: "headless Chromium loads four real-shaped pages through every mode, first and returning visits, at r 20/100/200 ms with R 100 ms and at r 16 ms with R 265 ms",
    requests: "loads per page, mode and visit (10)",
    run: |opts| boxed(run(opts)),
};

pub async fn run(opts: &LabOpts) -> Result<PagesReport, LabError> {
    let Plan { settings, pages, modes } = plan(opts)?;
    // Every cell of the grid would fail on it, one warning each: say it once, before any host
    // starts.
    require_chromium(std::path::Path::new(crate::tools::browse::CHROMIUM))?;
    let loads = opts.requests.unwrap_or(10).max(1);
    let proxy = crate::harness::hosts::proxy_binary(opts.edgewarm.as_deref())?;
    let dir = crate::harness::files::run_dir(&opts.out, "pages")?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let spki: Vec<String> = ["origin", "edge"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(format!("{f}.spki"))))
        .collect::<Result<_, _>>()?;

    let bar = indicatif::ProgressBar::new((settings.len() * pages.len() * modes.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    for (i, &setting) in settings.iter().enumerate() {
        bar.set_message(format!("r {} ms, R {} ms: starting the hosts", setting.r_ms, setting.big_r_ms));
        let secs = |ms: f64| Duration::from_secs_f64(ms / 1e3);
        let topo = Topology::create(secs(setting.r_ms), secs(setting.big_r_ms), None)?;
        let logs = format!("-{i}");
        // Every request the origin answers, per setting: what the edge cache kept from it.
        let mut origin_args =
            vec!["--access-log".to_owned(), dir.join(format!("origin{logs}.access")).display().to_string()];
        if let Some(think) = opts.html_think {
            origin_args.extend(["--html-think".to_owned(), format!("{}ms", think.as_millis())]);
        }
        let _hosts = crate::harness::hosts::start_hosts(&topo, &exe, &proxy, &dir, &logs, true, &origin_args).await?;
        for page in &pages {
            for &mode in &modes {
                bar.set_message(format!(
                    "r {} ms, R {} ms: {page} through {}",
                    setting.r_ms,
                    setting.big_r_ms,
                    mode.label()
                ));
                topo.flush_tcp_metrics()?;
                // A cell that fails is reported as failed; the rest of the grid still runs.
                let (measured, error) = match browse(&topo, &exe, &spki, page, mode, loads).await {
                    Ok(m) => (m, None),
                    Err(e) => {
                        tracing::warn!(page, mode = mode.label(), error = %e, "page load failed");
                        (Vec::new(), Some(e.to_string()))
                    }
                };
                for &visit in visits(mode) {
                    let of_visit: Vec<Load> = measured.iter().filter(|l| l.visit == visit).cloned().collect();
                    let mut cell = PageResult::new(setting, page, mode, visit, of_visit);
                    cell.error.clone_from(&error);
                    results.push(cell);
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let report = PagesReport { loads_per_cell: loads, results, run_dir: dir.clone() };
    report.write(&dir)?;
    crate::scenarios::pages::plot::draw(&report, &dir);
    Ok(report)
}

/// The browser the grid's loads need.
fn require_chromium(path: &std::path::Path) -> Result<(), LabError> {
    if path.is_file() {
        return Ok(());
    }
    let why = "the pages scenario loads its pages in headless Chromium";
    Err(LabError::Missing { what: "chromium", path: path.display().to_string(), why })
}

/// `edgewarm-lab browse` in the client namespace: `loads` first and returning visits (and
/// warm-edge ones on the cached site).
async fn browse(
    topo: &Topology,
    exe: &str,
    spki: &[String],
    page: &str,
    mode: Mode,
    loads: usize,
) -> Result<Vec<Load>, LabError> {
    let (host, ip, quic) = route(mode);
    // The cached site: release `r<pair>` of the page (`browse` fills in the pair), so each
    // pair's first visit finds the edge cold (each setting starts a new edge, each mode has a
    // route and a cache of its own).
    let url = if cached(mode) { format!("https://{host}/r{{n}}/{page}/") } else { format!("https://{host}/{page}/") };
    // One pair more, discarded: the browser's first navigation after it starts, and the
    // standing origin connections' first burst (their windows still at the initial size),
    // are not what a visitor of a serving edge meets.
    let n = (loads + 1).to_string();
    let mut args: Vec<String> = vec![exe.into(), "browse".into(), url, "--loads".into(), n];
    if cached(mode) {
        args.extend(["--warm-edge".into(), "--browser-cache".into()]);
    }
    for name in [host.to_owned(), format!("static.{host}")] {
        args.extend(["--resolve".into(), format!("{name}={ip}")]);
        if quic {
            args.extend(["--quic".into(), format!("{name}:443")]);
        }
    }
    for key in spki {
        args.extend(["--spki".into(), key.trim().to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let fail = |detail: String| LabError::Load { mode: format!("{} ({page})", mode.label()), detail };
    // `browse` gives up on a page after a minute; this bounds the browser's start and a stuck
    // DevTools session too (the child is killed when the wait is dropped).
    let limit = Duration::from_secs(60 + 3 * 60 * (loads as u64 + 1));
    let run = Command::from(topo.command(&topo.client, &args)).kill_on_drop(true).output();
    let Ok(out) = tokio::time::timeout(limit, run).await else {
        // `browse` is killed with the wait; its browser is its child, in the client namespace.
        crate::wan::netns::kill_all_in(&topo.client);
        return Err(fail(format!("no result within {limit:?}")));
    };
    let out = out?;
    if !out.status.success() {
        return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    let mut loads: Vec<Load> = serde_json::from_slice(&out.stdout).map_err(|e| fail(e.to_string()))?;
    loads.drain(..loads.len().min(visits(mode).len()));
    if let Some(bad) = loads.iter().find(|l| l.failed > 0) {
        return Err(fail(format!("{} of the page's resources failed on a {} visit", bad.failed, bad.visit)));
    }
    Ok(loads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without Chromium the run stops at once with one line that names it and where to get it.
    #[test]
    fn a_missing_chromium_is_named_once() {
        let e = require_chromium(std::path::Path::new("/nonexistent/chromium")).unwrap_err().to_string();
        assert_eq!(
            e,
            "chromium not found at /nonexistent/chromium: the pages scenario loads its pages in headless Chromium; \
             scripts/deps.sh installs it"
        );
        let here = std::env::current_exe().unwrap();
        require_chromium(&here).unwrap();
    }
}
