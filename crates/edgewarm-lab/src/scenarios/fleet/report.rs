//! What a fleet run found: per node, how long after the purge call it applied each purge
//! (p50/p99 against R + 50 ms); the clients' reads after each acknowledged purge, and those
//! that got a copy older than the purge (stale), by where and when; the cut node's catch-up.
//! JSON and a Markdown table. Times are ms after the run's start, on the clock every
//! namespace shares.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::probe::{Acked, Got};
use crate::scenarios::spec::Scenario;

/// One purge as the lab made it.
#[derive(Debug, Clone, Serialize)]
pub struct Purge {
    /// The object purged (`/obj/{object}`).
    pub object: usize,
    /// When the call started and when its answer came.
    pub at_ms: f64,
    pub acked_ms: f64,
    /// Responses the origin had made when the call started: a copy of a generation up to
    /// this one is older than the purge.
    pub threshold: u64,
    pub answer: Acked,
}

/// One client read.
#[derive(Debug, Clone, Serialize)]
pub struct Read {
    pub edge: u8,
    pub object: usize,
    pub at_ms: f64,
    pub got: Option<Got>,
}

/// The cut: edge `edge`'s link to the shield (and NATS) dark from `from_ms` to `to_ms`.
#[derive(Debug, Clone, Serialize)]
pub struct Cut {
    pub edge: u8,
    pub from_ms: f64,
    pub to_ms: f64,
    /// The stream's last sequence when the link came back (edge 0's `/fleet` applied).
    pub last_seq: u64,
    /// When the cut node's `/fleet` showed `applied` ≥ `last_seq` and `caught_up` (polled).
    pub caught_up_ms: Option<f64>,
}

/// Reads, by what they got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reads {
    pub total: usize,
    /// Answered 200.
    pub ok: usize,
    /// No response, or not 200 (the cut node's misses while its link was dark).
    pub failed: usize,
    /// Served from the edge's own cache.
    pub edge_hits: usize,
    /// Passed on as the node caught up (`detail=fleet-catch-up`).
    pub catch_up_passes: usize,
    /// A copy older than a purge acknowledged before the read began: on a connected node
    /// (the target: 0), on the cut node while cut, on the cut node after its link came back
    /// and before it had caught up.
    pub stale_connected: usize,
    pub stale_cut_during_cut: usize,
    pub stale_cut_catching_up: usize,
    /// Every stale read, for the record.
    pub stale: Vec<Read>,
}

impl Reads {
    /// Count `reads` against the `purges` acknowledged before each began.
    pub(crate) fn tally(reads: &[Read], purges: &[Purge], cut: &Cut) -> Self {
        let mut t = Self { total: reads.len(), ..Self::default() };
        for r in reads {
            let Some(got) = r.got.filter(|g| g.status == 200) else {
                t.failed += 1;
                continue;
            };
            t.ok += 1;
            t.edge_hits += usize::from(got.edge_hit);
            t.catch_up_passes += usize::from(got.catch_up);
            let last = purges.iter().rfind(|p| p.object == r.object && p.acked_ms <= r.at_ms);
            let older = last.zip(got.generation).is_some_and(|(p, g)| g <= p.threshold);
            if !older {
                continue;
            }
            let caught_up = cut.caught_up_ms.unwrap_or(f64::INFINITY);
            match r.edge == cut.edge {
                true if r.at_ms < cut.to_ms => t.stale_cut_during_cut += 1,
                true if r.at_ms < caught_up => t.stale_cut_catching_up += 1,
                _ => t.stale_connected += 1,
            }
            t.stale.push(r.clone());
        }
        t
    }
}

/// One node's purge → applied times.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub name: String,
    /// Purges it applied, of those made.
    pub applied: usize,
    /// Sequences it never applied.
    pub never: Vec<u64>,
    /// Over the purges it was connected for (the cut node's missed ones are its catch-up).
    pub measured: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl NodeRow {
    /// From when it applied each sequence (`at`, ms): the cut node's purges made before its
    /// link came back and applied after it went dark are left out (`missed`).
    pub(crate) fn new(name: &str, at: &BTreeMap<u64, f64>, purges: &[Purge], cut: Option<&Cut>) -> Self {
        let mut delays = Vec::new();
        let mut never = Vec::new();
        for p in purges {
            let Some(&when) = at.get(&p.answer.sequence) else {
                never.push(p.answer.sequence);
                continue;
            };
            if !cut.is_some_and(|c| missed(c, p, when)) {
                delays.push(when - p.at_ms);
            }
        }
        delays.sort_by(f64::total_cmp);
        Self {
            name: name.into(),
            applied: purges.len() - never.len(),
            never,
            measured: delays.len(),
            p50_ms: percentile(&delays, 0.50),
            p99_ms: percentile(&delays, 0.99),
            max_ms: delays.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Whether the cut node missed purge `p` (made before its link came back, applied at `when`
/// after it went dark).
fn missed(cut: &Cut, p: &Purge, when: f64) -> bool {
    p.at_ms < cut.to_ms && when >= cut.from_ms
}

/// The cut node's return.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUp {
    pub edge: u8,
    pub cut_ms: f64,
    /// Purges it missed, and how long after its link came back it had applied them all (its
    /// log), and its `/fleet` said so (applied ≥ the stream's last, caught up).
    pub missed: usize,
    pub applied_ms: Option<f64>,
    pub fleet_ms: Option<f64>,
    /// Times it connected to NATS again (its log): each raises the fence until caught up.
    pub reconnections: usize,
}

impl CatchUp {
    pub(crate) fn new(cut: &Cut, at: &BTreeMap<u64, f64>, purges: &[Purge]) -> Self {
        let missed: Vec<Option<f64>> = purges
            .iter()
            .filter_map(|p| match at.get(&p.answer.sequence) {
                Some(&when) => missed(cut, p, when).then_some(Some(when)),
                None => Some(None),
            })
            .collect();
        let all: Option<Vec<f64>> = missed.iter().copied().collect();
        Self {
            edge: cut.edge,
            cut_ms: cut.to_ms - cut.from_ms,
            missed: missed.len(),
            applied_ms: all.map(|a| a.into_iter().fold(cut.to_ms, f64::max) - cut.to_ms),
            fleet_ms: cut.caught_up_ms.map(|c| c - cut.to_ms),
            reconnections: 0,
        }
    }
}

/// Nearest rank; NaN when empty.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub scenario: Scenario,
    pub edges: u8,
    pub objects: usize,
    pub purge_every_ms: f64,
    /// R + 50 ms: what every connected node's p99 is held to.
    pub target_ms: f64,
    pub origin_rtt_ms: f64,
    pub nodes: Vec<NodeRow>,
    /// What starting a call costs the lab (curl in edge 0's namespace, `/ready`'s median):
    /// part of every purge → applied time.
    pub call_overhead_ms: f64,
    /// The `?wait=fleet` call, as the lab timed it (curl in edge 0's namespace), and as edgewarm
    /// did (`waited_ms`: stored to applied by every live node); calls answered 504.
    pub call_p50_ms: f64,
    pub call_p99_ms: f64,
    pub waited_p50_ms: f64,
    pub waited_p99_ms: f64,
    pub answered_504: usize,
    /// Calls answered 200 without every node among `applied` (one not heard from for 5 s no
    /// longer counts as live).
    pub answered_without_all: usize,
    pub reads: Reads,
    pub catch_up: CatchUp,
    pub cut: Cut,
    pub purges: Vec<Purge>,
    pub delay_box_max_late_us: u64,
    pub run_dir: PathBuf,
}

impl crate::harness::report::Report for FleetReport {
    fn markdown(&self) -> String {
        FleetReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    fn failed(&self) -> usize {
        FleetReport::failed(self)
    }
}

impl FleetReport {
    /// What fails the run: purges some node never applied.
    pub fn failed(&self) -> usize {
        self.nodes.iter().map(|n| n.never.len()).sum()
    }

    pub fn markdown(&self) -> String {
        let s = &self.scenario;
        let (c, n) = (&self.catch_up, self.purges.len());
        let mut out = format!(
            "## fleet: r = {} ms, R = {} ms, O = {} ms, {} edges + the shield, NATS beside the shield\n\n\
             {n} purges by URL on edge 0 (`&wait=fleet`), one every {} ms, over {} warm objects, while a \
             client of every edge reads (the object last purged, then the next in turn). Edge {}'s link to \
             the shield and NATS cut for {:.1} s during the purges.\n\n\
             | node | purges applied | purge → applied p50 | p99 | max | p99 ≤ R + 50 ms ({} ms) |\n\
             |---|---:|---:|---:|---:|---|\n",
            s.r_ms,
            s.big_r_ms,
            self.origin_rtt_ms,
            self.edges,
            self.purge_every_ms,
            self.objects,
            c.edge,
            c.cut_ms / 1e3,
            self.target_ms,
        );
        for node in &self.nodes {
            let ok = if node.p99_ms <= self.target_ms { "yes" } else { "**no**" };
            let over = if node.measured < node.applied {
                format!(" ({} while connected)", node.measured)
            } else {
                String::new()
            };
            out += &format!(
                "| {} | {}/{n}{over} | {:.1} | {:.1} | {:.1} | {ok} |\n",
                node.name, node.applied, node.p50_ms, node.p99_ms, node.max_ms
            );
        }
        let r = &self.reads;
        let ms = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v:.0} ms"));
        out += &format!(
            "\nPurge → applied: from the start of the purge call (curl in edge 0's namespace) to the node's \
             `fleet purge applied` log line for its sequence; starting a call costs the lab {:.1} ms of it \
             (curl in the namespace and a local round trip, `/ready`'s median). The `?wait=fleet` call took p50 {:.1} ms, p99 \
             {:.1} ms (edgewarm's `waited_ms`: p50 {:.1}, p99 {:.1}); {} answered 504 (a live node missing), {} answered 200 without every node (one not heard \
             from for 5 s is not waited for).\n\n\
             | reads | ok | edge hits | failed | stale, connected nodes | stale, cut node while cut | stale, cut node back, not caught up |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n\
             | {} | {} | {} | {} | **{}** | **{}** | **{}** |\n\n\
             Stale: a copy the origin made before a purge of it was called, read after that purge was \
             acknowledged. **Catch-up**: edge {} missed {} purge(s) while cut; it had applied them all {} \
             after its link came back (its log), and its `/fleet` said applied ≥ {} and caught up {} \
             after (target: 1 s); it connected to NATS again {} time(s) meanwhile.\n\nDelay box worst lateness: {} µs.\n",
            self.call_overhead_ms, self.call_p50_ms, self.call_p99_ms, self.waited_p50_ms, self.waited_p99_ms, self.answered_504,
            self.answered_without_all,
            r.total, r.ok, r.edge_hits, r.failed, r.stale_connected, r.stale_cut_during_cut, r.stale_cut_catching_up,
            c.edge, c.missed, ms(c.applied_ms), self.cut.last_seq, ms(c.fleet_ms), c.reconnections,
            self.delay_box_max_late_us,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purge(object: usize, at_ms: f64, seq: u64, threshold: u64) -> Purge {
        let answer = Acked { status: 200, sequence: seq, ..Acked::default() };
        Purge { object, at_ms, acked_ms: at_ms + 200.0, threshold, answer }
    }

    fn read(edge: u8, object: usize, at_ms: f64, generation: u64, edge_hit: bool) -> Read {
        let got = Got { status: 200, generation: Some(generation), edge_hit, catch_up: false };
        Read { edge, object, at_ms, got: Some(got) }
    }

    const CUT: Cut = Cut { edge: 2, from_ms: 1000.0, to_ms: 2000.0, last_seq: 3, caught_up_ms: Some(2500.0) };

    /// A copy made before the purge was called, read after it was acknowledged, is stale;
    /// where and when says which count; reads before the answer or of newer copies are not.
    #[test]
    fn stale_reads_are_counted_by_where_and_when() {
        let purges = [purge(0, 0.0, 1, 10), purge(1, 1100.0, 2, 20)];
        let reads = [
            read(0, 0, 100.0, 5, true),  // before the answer
            read(0, 0, 300.0, 11, true), // a new copy
            read(1, 0, 300.0, 10, true), // stale, connected
            read(2, 1, 1400.0, 15, true),
            read(2, 1, 2100.0, 15, true),
            read(2, 1, 2600.0, 15, true),
            Read { edge: 2, object: 1, at_ms: 1500.0, got: None },
        ];
        let t = Reads::tally(&reads, &purges, &CUT);
        assert_eq!((t.total, t.ok, t.failed, t.edge_hits), (7, 6, 1, 6));
        assert_eq!((t.stale_connected, t.stale_cut_during_cut, t.stale_cut_catching_up), (2, 1, 1));
        assert_eq!(t.stale.len(), 4);
    }

    #[test]
    fn the_cut_node_s_missed_purges_are_its_catch_up() {
        let purges = [purge(0, 0.0, 1, 0), purge(0, 1200.0, 2, 0), purge(0, 2300.0, 3, 0)];
        let at: BTreeMap<u64, f64> = [(1, 100.0), (2, 2300.0), (3, 2400.0)].into();
        let row = NodeRow::new("edge2", &at, &purges, Some(&CUT));
        assert_eq!((row.applied, row.measured, row.never.len()), (3, 2, 0));
        assert_eq!((row.p50_ms, row.max_ms), (100.0, 100.0));
        let c = CatchUp::new(&CUT, &at, &purges);
        assert_eq!((c.missed, c.applied_ms, c.fleet_ms), (1, Some(300.0), Some(500.0)));
        let other = NodeRow::new("edge0", &[(1, 100.0)].into(), &purges, None);
        assert_eq!((other.applied, other.never.clone()), (1, vec![2, 3]));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
