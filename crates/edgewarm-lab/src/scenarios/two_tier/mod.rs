//! `edgewarm-lab lab --scenario two-tier`: edges near the users, each an edgewarm with an
//! `http` route and its cache on, whose origin is a *shield*: one more edgewarm with its cache
//! on, next to the origin. Clients — r — edge — R — shield — O (1 ms) — origin, with several
//! edges ([`crate::harness::tiers::opts::TierOpts::edges`]) sharing the shield, each with clients of its own
//! ([`net`]).
//!
//! What it shows: (a) the origin answers one request per object per shield, however many
//! edges ask (counted in the lab origin's access log); (b) what a visit costs by what the
//! caches hold: *cold* (nothing cached: r, R and O), *warm shield* (another edge's clients
//! asked first: r and R, not O), *warm edge* (r only). The visits, one after the other, each
//! every object once and each object on a new connection: edge 0's clients cold, then every
//! other edge's clients (warm shield), then every edge's clients again (warm edge). Around each
//! visit the origin's log and both caches' counters are read, so every row says what reached
//! each tier.
//!
//! The protocol between the tiers is an option ([`crate::harness::tiers::opts::TierProtocol`]); every configuration
//! is written and checked with `edgewarm check` before anything is built, so one this
//! edgewarm cannot run (the HTTP/3 origin kind, until it exists) is a usage error naming it.
//! Children are killed when their guards drop and [`net::Tiers`] removes the namespaces when
//! it drops: an error or Ctrl-C leaves nothing behind.
//!
//! The hosts, their configurations and their start are [`crate::harness::tiers`]'s, shared with
//! the fleet lab.

mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::error::LabError;
use crate::harness::hosts::{admin_in, log_tail, proxy_binary};
use crate::harness::tiers::config::NAME;
use crate::harness::tiers::{start, write_configs};
use crate::scenarios::opts::LabOpts;
use crate::scenarios::spec::Scenario;
use crate::scenarios::{boxed, Entry};
use crate::tools::load::LoadReport;
use crate::wan::tiers::{self as net, Tiers};
pub use report::{CacheCounts, TwoTierReport, Visit, VisitRow};

/// Objects (or pages) per visit unless `--requests`.
const OBJECTS: usize = 40;
/// The object paths (`{i}`: the load generator's request index). Only these are counted at
/// the origin: probes and warm-up requests have other paths.
const OBJECT_PATH: &str = "/obj/";

/// `--scenario two-tier` in [`crate::scenarios::ALL`].
pub const ENTRY: Entry = Entry {
    name: "two-tier",
    about: "r 20 ms, R 100 ms: caching edges whose origin is a caching shield 1 ms from the origin; cold, warm shield and warm edge visits, and the origin's request count",
    requests: "objects (40)",
    run: |opts| boxed(run(opts)),
};

pub async fn run(opts: &LabOpts) -> Result<TwoTierReport, LabError> {
    let scenario = Scenario::for_lab(opts)?;
    if scenario.parts().len() > 1 || scenario.bandwidth.is_some() {
        return Err(LabError::Tiers("two-tier measures one R and one loss rate at a time, without --bandwidth".into()));
    }
    let tiers = &opts.tiers;
    let pages = opts.requests.unwrap_or(OBJECTS).max(1);
    let proxy = proxy_binary(opts.edgewarm.as_deref())?;
    let dir = write_configs(&opts.out, tiers, &scenario.name, &proxy, |_| String::new())?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();

    let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
    let net = Tiers::create(tiers.edges, scenario.r(), ms(scenario.big_r_ms), scenario.impair)?;
    let _hosts = start(&net, &exe, &proxy, &dir, tiers).await?;
    let lab = Lab { net: &net, exe: &exe, dir: &dir, scenario: &scenario, pages };
    for edge in 0..tiers.edges {
        // Unmeasured: each edge's path through the shield to the origin used once, on paths of
        // its own (not counted), so the first measured request meets no first-use cost.
        let warm = lab.load(edge, &format!("/warm/{edge}/{{i}}"), 2).await?;
        if warm.ok != 2 {
            let logs = format!(
                "edge: {} | shield: {}",
                log_tail(&dir.join(format!("edge{edge}.log"))),
                log_tail(&dir.join("shield.log"))
            );
            return Err(LabError::NotReady {
                what: "the path through both tiers",
                detail: format!("{:?}; {logs}", warm.errors),
            });
        }
    }
    let visits = std::iter::once((Visit::Cold, 0))
        .chain((1..tiers.edges).map(|e| (Visit::WarmShield, e)))
        .chain((0..tiers.edges).map(|e| (Visit::WarmEdge, e)));
    let mut rows = Vec::new();
    for (visit, edge) in visits {
        rows.push(lab.visit(visit, edge).await?);
    }
    let counted = lab.origin_counts();
    let report = TwoTierReport {
        edges: tiers.edges,
        visits_per_row: pages,
        objects: pages * (1 + scenario.page),
        tier_protocol: tiers.tier_protocol,
        origin_protocol: tiers.origin_protocol,
        origin_rtt_ms: net::ORIGIN_RTT.as_secs_f64() * 1e3,
        rows,
        origin_requests: counted.values().sum(),
        origin_objects: counted.len(),
        origin_max_per_object: counted.values().copied().max().unwrap_or(0),
        delay_box_max_late_us: net.max_late_us(),
        run_dir: dir.clone(),
        scenario,
    };
    Ok(report)
}

/// A running two-tier lab: where things are, and what each visit asks for.
struct Lab<'a> {
    net: &'a Tiers,
    exe: &'a str,
    dir: &'a Path,
    scenario: &'a Scenario,
    /// Objects (pages) per visit.
    pages: usize,
}

impl Lab<'_> {
    /// Edge `edge`'s clients ask for every object once, each on a new connection; the row says
    /// what it cost them and what reached each tier meanwhile.
    async fn visit(&self, visit: Visit, edge: u8) -> Result<VisitRow, LabError> {
        let before = self.counters(edge).await;
        let load = self.load(edge, &format!("{OBJECT_PATH}{{i}}"), self.pages).await?;
        let after = self.counters(edge).await;
        let s = self.scenario;
        let o = net::ORIGIN_RTT.as_secs_f64() * 1e3;
        let min_ms = visit.min_ms(s.tls12, s.r_ms, s.big_r_ms, o);
        Ok(VisitRow {
            visit,
            label: visit.label(),
            edge,
            formula: visit.formula(s.tls12),
            min_ms,
            ratio_p50: load.ttfb_ms.p50 / min_ms,
            page_min_ms: (s.page > 0).then(|| visit.page_min_ms(s.tls12, s.r_ms, s.big_r_ms, o)),
            origin_requests: after.0 - before.0,
            shield: after.1.since(before.1),
            edge_cache: after.2.since(before.2),
            load,
        })
    }

    /// The origin's object requests so far, the shield's cache counters and edge `edge`'s.
    async fn counters(&self, edge: u8) -> (u64, CacheCounts, CacheCounts) {
        let cache = |ns: String| async move {
            CacheCounts::from_metrics(&admin_in(&ns, "/metrics").await.unwrap_or_default(), NAME)
        };
        let shield = cache(self.net.shield.clone()).await;
        let edge = cache(self.net.edges[usize::from(edge)].clone()).await;
        (self.origin_counts().values().sum(), shield, edge)
    }

    /// Requests the origin answered per object (its access log: `GET /obj/…` lines).
    fn origin_counts(&self) -> BTreeMap<String, u64> {
        let log = std::fs::read_to_string(self.dir.join("origin-access.log")).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in log.lines() {
            if let Some(target) = line.strip_prefix("GET ").filter(|t| t.starts_with(OBJECT_PATH)) {
                *counts.entry(target.to_string()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// The load generator in edge `edge`'s client namespace: `n` requests (pages) of `path`
    /// (`{i}`: each request's index), one at a time, each on a new connection to that edge.
    async fn load(&self, edge: u8, path: &str, n: usize) -> Result<LoadReport, LabError> {
        let s = self.scenario;
        let url = format!("https://{NAME}{path}");
        let to = format!("{}:443", net::edge_front(edge));
        let ca = self.dir.join("ca.pem").display().to_string();
        let (n_arg, page) = (n.to_string(), s.page.to_string());
        // Bounded in time as in count: far more than a visit takes (a request is at most a
        // few round trips), so only a run gone wrong meets it.
        let limit = format!("{}s", 30 + 2 * n);
        let tls = if s.tls12 { "1.2" } else { "1.3" };
        let mut args =
            vec![self.exe, "load", &url, "--connect-to", &to, "--cacert", &ca, "--requests", &n_arg, "--tls", tls];
        args.extend(["--duration", &limit, "--json"]);
        if s.page > 0 {
            args.extend(["--alpn", "h2", "--page", &page]);
        }
        let cmd = crate::wan::netns::command(&self.net.clients[usize::from(edge)], &args);
        let out = Command::from(cmd).kill_on_drop(true).output().await?;
        let fail = |detail: String| LabError::Load { mode: format!("two-tier, edge {edge}"), detail };
        if !out.status.success() {
            return Err(fail(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| fail(e.to_string()))
    }
}
