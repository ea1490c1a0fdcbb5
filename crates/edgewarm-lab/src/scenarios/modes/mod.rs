//! `edgewarm-lab lab`: build the three-host topology, run an origin and edgewarm in it
//! ([`crate::harness::hosts`]), measure TTFB of new connections per mode from the client namespace, and
//! report against the round-trip minimum ([`crate::scenarios::model`]).
//!
//! Every process runs in its namespace as a child of the lab (`ip netns exec`), so the lab
//! measures exactly what a deployment would: real kernels, real TCP (Fast Open included), real
//! TLS. Children are killed when their guard drops and the topology removes the namespaces when
//! it drops, so an error, a panic or Ctrl-C (the caller drops the future) leave nothing behind.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

pub(crate) mod impair_report;
pub mod peers;
pub mod plot;
pub mod report;

use crate::error::LabError;
use crate::harness::hosts::{admin, proxy_binary, spawn, start_hosts};
use crate::scenarios::client::load;
use crate::scenarios::model::{self, Mode};
use crate::scenarios::opts::LabOpts;
use crate::scenarios::spec::{ModeRun, Scenario};
use crate::scenarios::{boxed, Entry};
use crate::wan::netns::{Topology, EDGE_A, ORIGIN};
use peers::Peer;
pub use report::{LabReport, ModeResult, PoolSample};

/// What `--requests` counts in every scenario of modes.
const REQUESTS: &str = "new connections per mode (40)";

const fn entry(name: &'static str, about: &'static str) -> Entry {
    Entry { name, about, requests: REQUESTS, run: |opts| boxed(run(opts)) }
}

// The scenarios that measure modes, each a preset of [`Scenario::named`].
pub const DEFAULT: Entry = entry("default", "r 20 ms, R 100 ms, TLS 1.3");
pub const ATS_POC: Entry = entry("ats-poc", "r 58 ms, R 10 ms, TLS 1.2");
pub const FAR_ORIGIN: Entry = entry("far-origin", "r 16 ms, R 265 ms, TLS 1.2");
pub const RAMP: Entry = entry(
    "ramp",
    "prewarm only, arrivals rising from 5 to 150 per second over 30 s, the pool's size followed over time",
);
pub const TFO: Entry = entry("tfo", "TCP Fast Open with a hello that fits in a SYN, at R 20, 100 and 200 ms");
pub const FLOOR: Entry = entry("floor", "the staircase from 3(r+R) down to r+R, each step a round trip off");
pub const LOSSY: Entry = entry(
    "lossy",
    "r 20 ms, R 150 ms: page loads of direct, prewarm and http at 40 new clients a second for 20 s while link B loses 0, 0.5, 1 and 2 % of its packets",
);

pub async fn run(opts: &LabOpts) -> Result<LabReport, LabError> {
    let scenario = Scenario::for_lab(opts)?;
    let mut proxies =
        opts.proxies.iter().map(|p| Peer::parse(p)).collect::<Result<Vec<_>, _>>().map_err(LabError::ScenarioFile)?;
    if opts.peers {
        proxies.extend(crate::scenarios::modes::peers::shipped());
    }
    let proxy = proxy_binary(opts.edgewarm.as_deref())?;
    let dir = crate::harness::files::run_dir(&opts.out, &scenario.name)?;
    let exe = std::env::current_exe()?;
    let exe = exe.to_string_lossy().to_string();

    let parts = scenario.parts();
    let bar = indicatif::ProgressBar::new((parts.len() * (2 + scenario.modes.len() + proxies.len())) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let (mut results, mut timeline, mut late) = (Vec::new(), Vec::new(), 0);
    for (i, &(big_r_ms, loss)) in parts.iter().enumerate() {
        let logs = if parts.len() > 1 { format!("-{i}") } else { String::new() };
        // This part's link B loss, and random streams of its own.
        let mut impair = scenario.impair;
        impair.b.loss = loss;
        impair.seed = crate::wan::impair::stream_seed(scenario.impair.seed, i as u64);
        let part = Part {
            scenario: &scenario,
            big_r_ms,
            impair,
            sample_pool: i == 0,
            dir: &dir,
            exe: &exe,
            proxy: &proxy,
            logs,
            requests: opts.requests.unwrap_or(40),
            bar: &bar,
            proxies: &proxies,
        };
        let (r, t, l) = run_part(part).await?;
        results.extend(r);
        timeline.extend(t);
        late = late.max(l);
    }
    bar.finish_and_clear();
    let report = LabReport {
        delay_box_max_late_us: late,
        scenario,
        requests_per_mode: opts.requests.unwrap_or(40),
        results,
        timeline,
        run_dir: dir.clone(),
    };
    if let Err(e) = crate::scenarios::modes::plot::ttfb_cdf(&report, &dir.join("ttfb-cdf.svg")) {
        tracing::warn!(error = %e, "could not draw the TTFB plot");
    }
    if !report.timeline.is_empty() {
        if let Err(e) = crate::scenarios::modes::plot::pool_timeline(&report, &dir.join("pool-ramp.svg")) {
            tracing::warn!(error = %e, "could not draw the pool plot");
        }
    }
    Ok(report)
}

/// One topology of a scenario: everything for one edge↔origin RTT.
struct Part<'a> {
    scenario: &'a Scenario,
    big_r_ms: f64,
    /// The links' loss and jitter in this part.
    impair: crate::wan::impair::Impairments,
    /// Whether to follow the prewarm pool during a ramp: in the first part only, so the pool
    /// plot shows one run rather than several laid over each other.
    sample_pool: bool,
    dir: &'a Path,
    /// This program (origin, load generator).
    exe: &'a str,
    /// The proxy binary.
    proxy: &'a str,
    /// Suffix for this part's log files.
    logs: String,
    requests: usize,
    bar: &'a indicatif::ProgressBar,
    /// Other proxies.
    proxies: &'a [Peer],
}

/// First port for other proxies in the edge namespace (edgewarm has 443).
const PROXY_PORT: u16 = 8443;

async fn run_part(part: Part<'_>) -> Result<(Vec<ModeResult>, Vec<PoolSample>, u64), LabError> {
    let Part { scenario, big_r_ms, impair, sample_pool, dir, exe, proxy, logs, requests, bar, proxies } = part;
    let exe = exe.to_string();
    bar.set_message("building namespaces and links");
    let big_r = Duration::from_secs_f64(big_r_ms / 1e3);
    let topo = Topology::create_impaired(scenario.r(), big_r, scenario.bandwidth.as_deref(), impair)?;
    let d = dir.display().to_string();
    bar.set_message("waiting for edgewarm and its pools");
    let _hosts = start_hosts(&topo, &exe, proxy, dir, &logs, scenario.page > 0, &[]).await?;
    bar.inc(2);

    // What to measure: the scenario's modes, then each other proxy like a tunnel.
    let mut jobs: Vec<(ModeRun, String, &str, SocketAddrV4, Option<&str>)> = scenario
        .modes
        .iter()
        .map(|&run| {
            let (name, ip) = match (run.mode, run.zero_rtt) {
                (Mode::Direct, _) => ("a.test", ORIGIN),
                (Mode::Tunnel, _) => ("a.test", EDGE_A),
                (Mode::TunnelTfo, _) => ("t.test", EDGE_A),
                (Mode::Prewarm, false) => ("b.test", EDGE_A),
                (Mode::Prewarm, true) => ("p.test", EDGE_A),
                (Mode::Http | Mode::H3, false) => ("h.test", EDGE_A),
                (Mode::Http | Mode::H3, true) => ("z.test", EDGE_A),
                (Mode::HttpH3Origin, _) => ("q.test", EDGE_A),
                // The browser lab's own modes: no scenario name parses to them.
                (Mode::Cache | Mode::CacheNoHints, _) => ("c.test", EDGE_A),
            };
            (run, run.label(), name, SocketAddrV4::new(ip, 443), None)
        })
        .collect();
    let mut _proxies = Vec::new();
    // Absolute: peers resolve relative paths against their own prefix (nginx: /usr/share/nginx).
    let abs = std::fs::canonicalize(dir)?.display().to_string();
    for (i, peer) in proxies.iter().enumerate() {
        let listen = SocketAddrV4::new(EDGE_A, PROXY_PORT + i as u16);
        let fill =
            |t: &str| crate::scenarios::modes::peers::render(t, &listen.to_string(), &format!("{ORIGIN}:443"), &abs);
        if let Some((file, template)) = peer.config {
            std::fs::write(dir.join(file), fill(template))?;
        }
        let log = dir.join(format!("{}{logs}.log", peer.name));
        _proxies.push(spawn(topo.command(&topo.edge, &["sh", "-c", &fill(&peer.command)]), &log)?);
        let run = ModeRun { mode: peer.mode, pq_hello: true, client_tfo: false, zero_rtt: false };
        jobs.push((run, format!("{} (other proxy)", peer.name), peer.server_name(), listen, peer.stats_url));
    }
    if !proxies.is_empty() {
        // Proxies start in their own time: wait until each answers a request.
        for &(run, ref label, name, target, _) in &jobs[scenario.modes.len()..] {
            let mut up = false;
            for _ in 0..60 {
                if load(&topo, &exe, &d, scenario, name, target, 1, run).await.is_ok_and(|r| r.ok == 1) {
                    up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            if !up {
                return Err(LabError::NotReady { what: "other proxy", detail: label.clone() });
            }
        }
    }

    let mut results = Vec::new();
    let mut timeline = Vec::new();
    let own = scenario.modes.len();
    for (job, (run, label, name, target, stats_url)) in jobs.into_iter().enumerate() {
        let mode = run.mode;
        // Pool and origin-connection counts come from edgewarm's metrics: not for peers.
        let peer = job >= own;
        let lossy = if impair.b.loss > 0.0 {
            format!(", loss {}", crate::wan::impair::pct(impair.b.loss))
        } else {
            String::new()
        };
        bar.set_message(format!("measuring {label} (R = {big_r_ms} ms{lossy})"));
        topo.flush_tcp_metrics()?;
        // Two unmeasured connections first: Fast Open needs a cookie from a first contact.
        load(&topo, &exe, &d, scenario, name, target, 2, run).await?;
        // The 0-RTT routes verify the origin under another of its names, so they have origin
        // connections (and counts) of their own: pools and upstreams are shared by origin key.
        let route = match (mode, run.zero_rtt) {
            (Mode::Http | Mode::H3, false) => "h.test",
            (Mode::Http | Mode::H3, true) => "z.test",
            (Mode::HttpH3Origin, _) => "q.test",
            (_, true) => "p.test",
            _ => "b.test",
        };
        let before = pool_counts(&topo, route).await;
        let peer_before = match stats_url {
            Some(url) => peer_pool_counts(&topo, url).await,
            None => None,
        };
        let requests = if scenario.ramp.is_some() { 1_000_000 } else { requests };
        // During a ramp, sample the pool every 500 ms for as long as the load runs.
        let samples = std::sync::Mutex::new(Vec::new());
        let links_before = topo.link_counts();
        let sampling = async {
            if scenario.ramp.is_none() || !sample_pool || mode != Mode::Prewarm || peer {
                return std::future::pending().await;
            }
            let t0 = tokio::time::Instant::now();
            loop {
                let s = pool_sample(&topo, t0.elapsed().as_secs_f64()).await;
                samples.lock().unwrap_or_else(|p| p.into_inner()).push(s);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        let report = tokio::select! {
            r = load(&topo, &exe, &d, scenario, name, target, requests, run) => r?,
            () = sampling => return Err(LabError::NotReady { what: "pool sampler", detail: "stopped".into() }),
        };
        timeline.extend(samples.into_inner().unwrap_or_else(|p| p.into_inner()));
        let [link_a, link_b] = topo.link_counts();
        let after = pool_counts(&topo, route).await;
        let peer_after = match stats_url {
            Some(url) => {
                // ATS publishes its counters once a second (the peer script sets 1 s).
                tokio::time::sleep(Duration::from_millis(1500)).await;
                peer_pool_counts(&topo, url).await
            }
            None => None,
        };
        let min = model::min_ttfb(mode, scenario.tls12, scenario.r(), big_r, run.client_tfo, run.zero_rtt);
        let min_ms = min.as_secs_f64() * 1e3;
        let (hit_rate, waste) = if !peer && mode == Mode::Prewarm && after[0] + after[1] > before[0] + before[1] {
            let (hits, misses, opened) = (after[0] - before[0], after[1] - before[1], after[2] - before[2]);
            let clients = (hits + misses).max(1.0);
            (Some(hits / clients), Some(opened / clients))
        } else {
            (None, None)
        };
        let clients = (report.ok + report.errors.values().sum::<usize>()).max(1) as f64;
        let mut origin_conns_per_1000 = (!peer
            && matches!(mode, Mode::Prewarm | Mode::Http | Mode::H3 | Mode::HttpH3Origin))
        .then(|| (after[3] - before[3]) / clients * 1000.0);
        // A peer that exposes its pool (ATS): its own hits, misses and origin handshakes.
        let (mut hit_rate, mut waste) = (hit_rate, waste);
        if let (Some(b), Some(a)) = (peer_before, peer_after) {
            let (hits, misses, handshakes) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
            if hits + misses > 0.0 {
                hit_rate = Some(hits / (hits + misses));
                waste = Some(handshakes / (hits + misses));
            }
            origin_conns_per_1000 = Some(handshakes / clients * 1000.0);
        }
        results.push(ModeResult {
            mode,
            label,
            r_ms: scenario.r_ms,
            big_r_ms,
            formula: model::formula(model::round_trips(mode, scenario.tls12, run.client_tfo, run.zero_rtt)),
            min_ms,
            ratio_p50: report.ttfb_ms.p50 / min_ms,
            hit_rate,
            waste,
            origin_conns_per_1000,
            loss_big_r: impair.b.loss,
            link_a: link_a.since(links_before[0]),
            link_b: link_b.since(links_before[1]),
            load: report,
        });
        bar.inc(1);
    }
    Ok((results, timeline, topo.max_late_us()))
}

/// hits, misses, opened − ready, and origin connections opened, for a route: each summed over
/// its pools (one per ALPN).
async fn pool_counts(topo: &Topology, route: &str) -> [f64; 4] {
    let m = admin(topo, "/metrics").await.unwrap_or_default();
    let sum = |name: &str| -> f64 {
        let prefix = format!("{name}{{");
        let label = format!("route=\"{route}\"");
        m.lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(&label))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    let opened = sum("edgewarm_pool_opened_total");
    [sum("edgewarm_pool_hits_total"), sum("edgewarm_pool_misses_total"), opened - sum("edgewarm_pool_ready"), opened]
}

/// A peer's pool counters from its stats URL in the edge namespace (see
/// [`crate::scenarios::modes::peers::ats_pool_counts`]).
async fn peer_pool_counts(topo: &Topology, url: &str) -> Option<[f64; 3]> {
    let cmd = topo.command(&topo.edge, &["curl", "-sf", "--max-time", "2", url]);
    let out = Command::from(cmd).output().await.ok()?;
    out.status
        .success()
        .then(|| crate::scenarios::modes::peers::ats_pool_counts(&String::from_utf8_lossy(&out.stdout)))?
}

async fn pool_sample(topo: &Topology, t_s: f64) -> PoolSample {
    let m = admin(topo, "/metrics").await.unwrap_or_default();
    let get = |name| edgewarm::metrics::sample(&m, name, &[("route", "b.test")]).unwrap_or(0.0);
    PoolSample {
        t_s,
        target: get("edgewarm_pool_target"),
        ready: get("edgewarm_pool_ready"),
        connecting: get("edgewarm_pool_connecting"),
        hits: get("edgewarm_pool_hits_total"),
        misses: get("edgewarm_pool_misses_total"),
    }
}
