//! `edgewarm-lab lab --scenario fleet` (issue #49, "a fleet that acts as one"): the two-tier
//! lab's hosts ([`crate::harness::tiers`], [`crate::wan::tiers`]: edges in namespaces of their own, r from their clients
//! and R from a caching shield next to the origin), every edgewarm in one fleet whose NATS
//! ([`nats`]) runs in the shield's namespace. With every edge's cache warm, edge 0 purges one
//! object after another by URL with `&wait=fleet` while a client of every edge reads (the
//! object just purged, then the next in turn: [`probe`]); meanwhile the last edge's link to
//! the shield, and so to NATS, is cut (the delay box drops everything) and restored.
//!
//! What it reports ([`report`]): per node, the time from the purge call to the node applying
//! it (its log, [`applied`]), p50/p99 against R + 50 ms; reads that got a copy older than a
//! purge acknowledged before they began (stale: the origin stamps each response with its
//! generation); the cut node's catch-up after its link returned. The shield is a node of the
//! fleet too: an edge's miss after a purge is filled through it, so it must purge as well.
//! Options: [`opts`]. Every loop is bounded; children are killed by their guards and the
//! namespaces removed when the lab's hosts drop.

pub mod opts;

mod applied;
mod nats;
mod probe;
mod report;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::error::LabError;
use crate::harness::hosts::{proxy_binary, Wait};
use crate::harness::tiers::config::NAME;
use crate::scenarios::opts::LabOpts;
use crate::scenarios::spec::Scenario;
use crate::scenarios::{boxed, Entry};
use crate::wan::tiers::{self as net, edge_front, shield_front, Tiers};
use applied::{applied_at, ms_since};
pub use opts::FleetOpts;
pub use report::{CatchUp, Cut, FleetReport, NodeRow, Purge, Read, Reads};

/// Warm objects unless `--requests`.
const OBJECTS: usize = 20;
/// The objects' paths.
const OBJECT_PATH: &str = "/obj/";
/// A client read's limit: a hit takes 3r, a miss 3r + R + O.
const READ_LIMIT: Duration = Duration::from_secs(2);
/// Reads per client at most (they stop when the purges end).
const MAX_READS: usize = 5000;
/// A client's pause between reads: the machine's cores are the delay box's too.
const READ_PAUSE: Duration = Duration::from_millis(25);

/// `--scenario fleet` in [`crate::scenarios::ALL`].
pub const ENTRY: Entry = Entry {
    name: "fleet",
    about: "the two-tier hosts purging as one through NATS, one edge cut off for a while",
    requests: "warm objects (20)",
    run: |opts| boxed(run(opts)),
};

pub async fn run(opts: &LabOpts) -> Result<FleetReport, LabError> {
    let scenario = Scenario::for_lab(opts)?;
    let (tiers, fleet) = (&opts.tiers, &opts.fleet);
    if scenario.parts().len() > 1 || scenario.bandwidth.is_some() {
        return Err(LabError::Fleet("one R and one loss rate at a time, without --bandwidth".into()));
    }
    if tiers.edges < 2 || fleet.purges < 2 {
        return Err(LabError::Fleet("--edges 2 or more (one is cut) and --purges 2 or more".into()));
    }
    nats::installed()?;
    let objects = opts.requests.unwrap_or(OBJECTS).max(1);
    let proxy = proxy_binary(opts.edgewarm.as_deref())?;
    let dir = crate::harness::tiers::write_configs(&opts.out, tiers, &scenario.name, &proxy, |tier| match tier {
        None => nats::section(std::net::Ipv4Addr::LOCALHOST, "shield"),
        Some(i) => nats::section(shield_front(i), &format!("edge{i}")),
    })?;
    let d = dir.display().to_string();
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
    let net = Tiers::create(tiers.edges, scenario.r(), ms(scenario.big_r_ms), scenario.impair)?;
    let _nats = nats::start(&net.shield, &dir).await?;
    let _hosts = crate::harness::tiers::start(&net, &exe, &proxy, &dir, tiers).await?;
    let lab = Lab { net: &net, dir: &dir, ca: format!("{d}/ca.pem"), objects, t0: SystemTime::now() };
    lab.fleet_ready().await?;
    lab.warm().await?;
    let call_overhead_ms = lab.admin_call_ms().await;
    let cut_edge = tiers.edges - 1;
    let (purges, reads, cut) = lab.purges_and_reads(fleet, cut_edge).await?;
    // The last applications logged (a purge answered 504 may still be on its way).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut nodes = Vec::new();
    let mut catch_up = None;
    for (i, name) in (0..tiers.edges).map(|i| (Some(i), format!("edge{i}"))).chain([(None, "shield".to_string())]) {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let at = applied_at(&log, lab.t0);
        let is_cut = i == Some(cut_edge);
        nodes.push(NodeRow::new(&name, &at, &purges, is_cut.then_some(&cut)));
        if is_cut {
            // Each connection after the first raised the fence until it had caught up.
            let reconnections = log.matches("fleet: connected to NATS").count().saturating_sub(1);
            catch_up = Some(CatchUp { reconnections, ..CatchUp::new(&cut, &at, &purges) });
        }
    }
    let sorted = |f: fn(&Purge) -> f64| {
        let mut v: Vec<f64> = purges.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (calls, waited) = (sorted(|p| p.acked_ms - p.at_ms), sorted(|p| p.answer.waited_ms));
    let pct = report::percentile;
    let report = FleetReport {
        edges: tiers.edges,
        objects,
        purge_every_ms: fleet.purge_every.as_secs_f64() * 1e3,
        target_ms: scenario.big_r_ms + 50.0,
        origin_rtt_ms: net::ORIGIN_RTT.as_secs_f64() * 1e3,
        nodes,
        call_overhead_ms,
        call_p50_ms: pct(&calls, 0.5),
        call_p99_ms: pct(&calls, 0.99),
        waited_p50_ms: pct(&waited, 0.5),
        waited_p99_ms: pct(&waited, 0.99),
        answered_504: purges.iter().filter(|p| p.answer.status == 504).count(),
        answered_without_all: purges
            .iter()
            .filter(|p| p.answer.status == 200 && p.answer.applied.len() < usize::from(tiers.edges) + 1)
            .count(),
        reads: Reads::tally(&reads, &purges, &cut),
        catch_up: catch_up.unwrap_or_else(|| CatchUp::new(&cut, &Default::default(), &purges)),
        cut,
        purges,
        delay_box_max_late_us: net.max_late_us(),
        run_dir: dir.clone(),
        scenario,
    };
    Ok(report)
}

/// A running fleet lab.
struct Lab<'a> {
    net: &'a Tiers,
    dir: &'a std::path::Path,
    ca: String,
    objects: usize,
    /// The run's start: every time is ms after it.
    t0: SystemTime,
}

impl Lab<'_> {
    fn now_ms(&self) -> f64 {
        ms_since(self.t0, SystemTime::now())
    }

    /// Every node connected and caught up, and edge 0 hearing every node (else `?wait=fleet`
    /// would not wait for the ones it has not heard yet).
    async fn fleet_ready(&self) -> Result<(), LabError> {
        let nodes: Vec<&String> = self.net.edges.iter().chain([&self.net.shield]).collect();
        let last = std::cell::RefCell::new(Vec::new());
        let up = || async {
            let status = futures_util::future::join_all(nodes.iter().map(|ns| nats::status(ns))).await;
            let up = status.iter().all(|s| s["connected"] == true && s["caught_up"] == true)
                && status[0]["peers"].as_array().map_or(0, Vec::len) == nodes.len();
            *last.borrow_mut() = status;
            up
        };
        let what = "the fleet (every node connected to NATS and heard)";
        let waited = Wait::new(what, &self.dir.join("nats.log")).within(Duration::from_secs(15)).until(up).await;
        // What each node said last, before the NATS log's end.
        waited.map_err(|e| match e {
            LabError::NotReady { what, detail } => {
                LabError::NotReady { what, detail: format!("{:?}; nats: {detail}", last.borrow()) }
            }
            e => e,
        })
    }

    /// A client of edge `edge` reads object `object` (a new connection).
    async fn read(&self, edge: u8, object: usize) -> Read {
        let at_ms = self.now_ms();
        let ns = &self.net.clients[usize::from(edge)];
        let got = probe::get(ns, edge_front(edge), &self.ca, &format!("{OBJECT_PATH}{object}"), READ_LIMIT).await;
        Read { edge, object, at_ms, got }
    }

    /// Every edge's cache holds every object: read twice, the second a hit.
    async fn warm(&self) -> Result<(), LabError> {
        let edge = |e: u8| async move {
            for o in 0..self.objects {
                self.read(e, o).await;
                let again = self.read(e, o).await;
                if !again.got.is_some_and(|g| g.status == 200 && g.edge_hit) {
                    return Err(format!("edge {e}, object {o}: {:?}", again.got));
                }
            }
            Ok(())
        };
        let done = futures_util::future::join_all((0..self.net.edges.len() as u8).map(edge)).await;
        let failed: Vec<String> = done.into_iter().filter_map(Result::err).collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(LabError::NotReady { what: "the edges' caches (a second read a hit)", detail: failed.join("; ") })
    }

    /// What a call to edge 0's admin listener costs the lab before edgewarm does anything
    /// (curl started in its namespace, one local round trip): the median of five `/ready`.
    async fn admin_call_ms(&self) -> f64 {
        let mut v = Vec::new();
        for _ in 0..5 {
            let at = Instant::now();
            crate::harness::hosts::admin_in(&self.net.edges[0], "/ready").await;
            v.push(at.elapsed().as_secs_f64() * 1e3);
        }
        v.sort_by(f64::total_cmp);
        report::percentile(&v, 0.5)
    }

    /// Responses the origin has made so far (its access log's lines).
    fn origin_answers(&self) -> u64 {
        let log = std::fs::read_to_string(self.dir.join("origin-access.log")).unwrap_or_default();
        log.lines().count() as u64
    }

    /// The purges on edge 0, the clients' reads on every edge and the cut, side by side.
    async fn purges_and_reads(&self, o: &FleetOpts, cut_edge: u8) -> Result<(Vec<Purge>, Vec<Read>, Cut), LabError> {
        let (start_cut, restored, stop) = (Notify::new(), Notify::new(), AtomicBool::new(false));
        // The object last purged, once acknowledged: what every client reads next.
        let last = std::sync::Mutex::new(None::<usize>);
        let purging = async {
            let out = self.purge_loop(o, &last, (&start_cut, &restored)).await;
            // Whatever happened, nothing waits for a cut that will not come.
            start_cut.notify_one();
            out
        };
        let cutting = self.cut(cut_edge, o.cut, (&start_cut, &restored));
        let reading =
            futures_util::future::join_all((0..self.net.edges.len() as u8).map(|e| self.reader(e, &last, &stop)));
        let stopping = async {
            let both = futures_util::future::join(purging, cutting).await;
            stop.store(true, Ordering::Relaxed);
            both
        };
        let ((purges, cut), reads) = futures_util::future::join(stopping, reading).await;
        Ok((purges?, reads.into_iter().flatten().collect(), cut))
    }

    /// `o.purges` purges by URL, one every `o.purge_every` (or as soon as the last answered);
    /// the cut starts at the fifth of them, and the last fifth waits for the link to return.
    async fn purge_loop(
        &self,
        o: &FleetOpts,
        last: &std::sync::Mutex<Option<usize>>,
        (start_cut, restored): (&Notify, &Notify),
    ) -> Result<Vec<Purge>, LabError> {
        let (cut_at, after) = (o.purges / 5, o.purges - (o.purges / 5).max(1));
        let start = Instant::now();
        let mut purges = Vec::new();
        for k in 0..o.purges {
            tokio::time::sleep_until((start + o.purge_every * k as u32).into()).await;
            if k == cut_at {
                start_cut.notify_one();
            }
            if k == after {
                restored.notified().await;
            }
            let object = k % self.objects;
            let threshold = self.origin_answers();
            let at_ms = self.now_ms();
            let url = format!("https://{NAME}{OBJECT_PATH}{object}");
            let answer = probe::purge(&self.net.edges[0], &url)
                .await
                .map_err(|detail| LabError::Load { mode: format!("fleet, purge {k} of {url}"), detail })?;
            *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(object);
            purges.push(Purge { object, at_ms, acked_ms: self.now_ms(), threshold, answer });
        }
        Ok(purges)
    }

    /// Cut edge `edge`'s link to the shield for `length` once told to `start` (at most a
    /// minute later), restore it and say so (`restored`), then follow its `/fleet` (every
    /// 20 ms, at most 30 s) until it has applied the stream's last purge and caught up.
    async fn cut(&self, edge: u8, length: Duration, (start, restored): (&Notify, &Notify)) -> Cut {
        let _ = tokio::time::timeout(Duration::from_secs(60), start.notified()).await;
        self.net.cut_edge(edge, true);
        let from_ms = self.now_ms();
        tokio::time::sleep(length).await;
        self.net.cut_edge(edge, false);
        let to_ms = self.now_ms();
        restored.notify_one();
        let last_seq = nats::status(&self.net.edges[0]).await["applied"].as_u64().unwrap_or(0);
        let ns = &self.net.edges[usize::from(edge)];
        let mut caught_up_ms = None;
        for _ in 0..1500 {
            let s = nats::status(ns).await;
            if s["applied"].as_u64().unwrap_or(0) >= last_seq && s["caught_up"] == true {
                caught_up_ms = Some(self.now_ms());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Cut { edge, from_ms, to_ms, last_seq, caught_up_ms }
    }

    /// A client of edge `edge` reading until `stop`: the object last purged (once per purge),
    /// else the next object in turn.
    async fn reader(&self, edge: u8, last: &std::sync::Mutex<Option<usize>>, stop: &AtomicBool) -> Vec<Read> {
        let mut reads = Vec::new();
        let (mut next, mut seen) = (usize::from(edge), None);
        while !stop.load(Ordering::Relaxed) && reads.len() < MAX_READS {
            let purged = *last.lock().unwrap_or_else(|p| p.into_inner());
            let object = if purged != seen {
                seen = purged;
                purged.unwrap_or(0)
            } else {
                next = (next + 1) % self.objects;
                next
            };
            reads.push(self.read(edge, object).await);
            tokio::time::sleep(READ_PAUSE).await;
        }
        reads
    }
}
