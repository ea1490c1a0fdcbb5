//! `edgewarm-lab lab --scenario upgrade`: what replacing the running edgewarm costs its first
//! clients, on the emulated WAN (r and R of the default scenario unless `--r`/`--big-r`). Each
//! round, alternating: the first client before an upgrade; `run --upgrade` (timed from its start
//! until it says it took over); the first client after it; a plain restart (the process killed,
//! a new one started, the client sent as soon as `/ready` answers 200); the first client after
//! that. Each "first client" is one new TLS connection through the prewarm route (`b.test`) and,
//! at the same moment, one through the http route (`h.test`). A warm process answers them at the mode's round-trip
//! minimum; a cold one makes them wait for its origin handshakes.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::LabError;
use crate::harness::hosts::{admin, spawn, wait_ready, Guard, Wait};
use crate::scenarios::client::load;
use crate::scenarios::model::Mode;
use crate::scenarios::opts::LabOpts;
use crate::scenarios::spec::{ModeRun, Scenario};
use crate::scenarios::{boxed, Entry};
use crate::wan::netns::{Topology, EDGE_A, ORIGIN};

/// The two routes a first client takes.
const ROUTES: [(&str, Mode); 2] = [("b.test", Mode::Prewarm), ("h.test", Mode::Http)];

#[derive(Debug, Serialize)]
pub struct UpgradeReport {
    pub r_ms: f64,
    pub big_r_ms: f64,
    pub rounds: usize,
    /// `run --upgrade` started → it took over (ms), per round.
    pub upgrade_ms: Vec<f64>,
    /// Per route: the first client's TTFB (ms) before an upgrade, after it, after a restart.
    pub routes: Vec<RouteTtfb>,
    /// The prewarm route's pool misses (first clients that waited for an origin handshake),
    /// summed over the rounds: in the processes that upgraded, and in those that restarted.
    pub misses_after_upgrade: f64,
    pub misses_after_restart: f64,
    pub run_dir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct RouteTtfb {
    pub route: &'static str,
    pub before: Vec<f64>,
    pub after_upgrade: Vec<f64>,
    pub after_restart: Vec<f64>,
}

/// `--scenario upgrade` in [`crate::scenarios::ALL`].
pub const ENTRY: Entry = Entry {
    name: "upgrade",
    about: "the first clients' TTFB before and after `run --upgrade` and after a restart",
    requests: "rounds (7)",
    run: |opts| boxed(run(opts)),
};

pub async fn run(opts: &LabOpts) -> Result<UpgradeReport, LabError> {
    let mut scenario = Scenario::named("default").ok_or_else(|| crate::scenarios::unknown("default"))?;
    if let Some(r) = opts.r {
        scenario.r_ms = r.as_secs_f64() * 1e3;
    }
    if let Some(r) = opts.big_r {
        scenario.big_r_ms = r.as_secs_f64() * 1e3;
    }
    let rounds = opts.requests.unwrap_or(7).max(1);
    let proxy = crate::harness::hosts::proxy_binary(opts.edgewarm.as_deref())?;
    let dir = crate::harness::files::run_dir(&opts.out, "upgrade")?;
    let d = dir.display().to_string();
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    std::fs::write(dir.join("edge.yaml"), crate::harness::files::edge_config(&d, false))?;

    let topo = Topology::create(scenario.r(), Duration::from_secs_f64(scenario.big_r_ms / 1e3), None)?;
    let origin_args = ["origin", "--listen", &format!("{ORIGIN}:443"), "--cert", &format!("{d}/origin.pem")];
    let mut origin_cmd: Vec<&str> = vec![&exe];
    let key = format!("{d}/origin.key");
    origin_cmd.extend(origin_args.iter().copied().chain(["--key", &key]));
    let _origin = spawn(topo.command(&topo.origin, &origin_cmd), &dir.join("origin.log"))?;
    let _far = crate::harness::hosts::far_edge(&topo, &proxy, &dir, "")?;
    let edge = |n: usize, upgrade: bool| -> Result<(Guard, PathBuf), LabError> {
        let config = format!("{d}/edge.yaml");
        let mut args = vec![proxy.as_str(), "run", "--config", &config];
        if upgrade {
            args.push("--upgrade");
        }
        let log = dir.join(format!("edge-{n}.log"));
        Ok((spawn(topo.command(&topo.edge, &args), &log)?, log))
    };
    let (mut running, log) = edge(0, false)?;
    wait_ready(&topo, &log).await?;
    let first = |route: &'static str, mode: Mode| {
        let (topo, exe, d, scenario) = (&topo, &exe, &d, &scenario);
        async move {
            let run = ModeRun { mode, pq_hello: true, client_tfo: false, zero_rtt: false };
            let report = load(topo, exe, d, scenario, route, SocketAddrV4::new(EDGE_A, 443), 1, run).await?;
            if report.ok != 1 {
                return Err(LabError::Load { mode: route.into(), detail: format!("{:?}", report.errors) });
            }
            Ok::<f64, LabError>(report.ttfb_ms.p50)
        }
    };
    // Both routes' first clients at once, so that neither finds what the other's wait warmed.
    let both = || async {
        let (b, h) = tokio::join!(first(ROUTES[0].0, ROUTES[0].1), first(ROUTES[1].0, ROUTES[1].1));
        Ok::<_, LabError>((b?, h?))
    };
    let mut report = UpgradeReport {
        r_ms: scenario.r_ms,
        big_r_ms: scenario.big_r_ms,
        rounds,
        upgrade_ms: Vec::new(),
        routes: ROUTES
            .iter()
            .map(|&(route, _)| RouteTtfb { route, before: vec![], after_upgrade: vec![], after_restart: vec![] })
            .collect(),
        misses_after_upgrade: 0.0,
        misses_after_restart: 0.0,
        run_dir: dir.clone(),
    };
    let mut n = 1;
    for _ in 0..rounds {
        // Idle for a moment, as between real clients: nothing measured rides on the last one.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (b, h) = both().await?;
        report.routes[0].before.push(b);
        report.routes[1].before.push(h);
        let started = Instant::now();
        let (new, log) = edge(n, true)?;
        n += 1;
        took_over(&log).await?;
        report.upgrade_ms.push(started.elapsed().as_secs_f64() * 1e3);
        running = new;
        let (b, h) = both().await?;
        report.routes[0].after_upgrade.push(b);
        report.routes[1].after_upgrade.push(h);
        report.misses_after_upgrade += misses(&topo).await;
        // A restart: the old process gone, a new one accepting; clients come at once.
        drop(running);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (new, log) = edge(n, false)?;
        n += 1;
        running = new;
        accepting(&topo, &log).await?;
        let (b, h) = both().await?;
        report.routes[0].after_restart.push(b);
        report.routes[1].after_restart.push(h);
        report.misses_after_restart += misses(&topo).await;
        // The next round's upgrade starts from a warm process.
        wait_ready(&topo, &log).await?;
    }
    drop(running);
    Ok(report)
}

/// Until the upgrading process says it took over (at most 30 s).
async fn took_over(log: &Path) -> Result<(), LabError> {
    let said = || async { std::fs::read_to_string(log).is_ok_and(|t| t.contains("upgrade: took over")) };
    Wait::new("the upgraded edgewarm", log)
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(10))
        .until(said)
        .await
}

/// Until the new process's `/ready` answers 200: it accepts (its pools may still be cold).
async fn accepting(topo: &Topology, log: &Path) -> Result<(), LabError> {
    let ready = || async { admin(topo, "/ready").await.is_some() };
    Wait::new("the restarted edgewarm", log)
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(10))
        .until(ready)
        .await
}

/// The serving process's pool misses on the prewarm route (each process counts from 0).
async fn misses(topo: &Topology) -> f64 {
    let m = admin(topo, "/metrics").await.unwrap_or_default();
    edgewarm::metrics::sample(&m, "edgewarm_pool_misses_total", &[("route", ROUTES[0].0)]).unwrap_or(0.0)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

impl crate::harness::report::Report for UpgradeReport {
    fn markdown(&self) -> String {
        UpgradeReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }
}

impl UpgradeReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# Upgrade lab: r = {} ms, R = {} ms, {} rounds (medians)\n\n`run --upgrade` to taking over: {:.0} ms\n\n\
             | route | first client before an upgrade | after an upgrade | after a restart |\n|---|---:|---:|---:|\n",
            self.r_ms,
            self.big_r_ms,
            self.rounds,
            median(&self.upgrade_ms)
        );
        for r in &self.routes {
            s += &format!(
                "| {} | {:.1} ms | {:.1} ms | {:.1} ms |\n",
                r.route,
                median(&r.before),
                median(&r.after_upgrade),
                median(&r.after_restart)
            );
        }
        s += &format!(
            "\nPool misses of the prewarm route's first clients: {} after upgrades, {} after restarts.\n",
            self.misses_after_upgrade, self.misses_after_restart
        );
        s
    }
}
