//! The two-tier lab's hosts: a client and an edge namespace per edge, one shield and one
//! origin, joined by TUN links through the delay box ([`crate::wan::netns`]'s pieces).
//!
//! ```text
//!  client i ── r ── edge i ──────── R ──────── shield ── O (1 ms) ── origin
//!  10.77.(10+i).1   .2 │ 10.77.(20+i).1    10.77.(20+i).2 │ 10.77.30.1    10.77.30.2
//! ```
//!
//! Every link is point to point and every process talks only to its neighbour, so no namespace
//! forwards or routes: a client can reach its own edge and nothing else, and only the shield
//! reaches the origin. The shield's link to the origin goes through the delay box too (0.5 ms
//! each way), like every other link, rather than a veth: one mechanism, one accuracy figure.
//!
//! Names carry the lab's pid like the three-host lab's (`ew<pid>c0`, `ew<pid>e0`, …,
//! `ew<pid>s`, `ew<pid>o`), so a killed run's leftovers are removed by the next lab
//! ([`crate::wan::netns::cleanup_stale`]); [`Tiers`] removes what it made when dropped.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::wan::delaybox::Link;
use crate::wan::impair::{stream_seed, Impairments, LinkImpair};
use crate::wan::netns::{self, add_host, lab_name, End, NetnsError};

/// The shield↔origin round trip: the origin is next to the shield.
pub(crate) const ORIGIN_RTT: Duration = Duration::from_millis(1);

/// Edge `i`'s client.
pub(crate) fn client(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 10 + i, 1)
}

/// Edge `i`'s address toward its clients.
pub(crate) fn edge_front(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 10 + i, 2)
}

fn edge_back(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 20 + i, 1)
}

/// The shield's address toward edge `i` (one link, and one listener, per edge).
pub(crate) fn shield_front(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 20 + i, 2)
}

const SHIELD_BACK: Ipv4Addr = Ipv4Addr::new(10, 77, 30, 1);
pub(crate) const ORIGIN: Ipv4Addr = Ipv4Addr::new(10, 77, 30, 2);

/// The namespaces and links of one two-tier run.
pub(crate) struct Tiers {
    pub(crate) clients: Vec<String>,
    pub(crate) edges: Vec<String>,
    pub(crate) shield: String,
    pub(crate) origin: String,
    links: Vec<Link>,
    torn_down: bool,
}

impl Tiers {
    /// `edges` edges (at most 8: addresses are per edge), client links of RTT `r` impaired by
    /// `impair.a`, edge↔shield links of RTT `big_r` impaired by `impair.b`, the origin link
    /// perfect.
    pub(crate) fn create(edges: u8, r: Duration, big_r: Duration, impair: Impairments) -> Result<Self, NetnsError> {
        netns::preflight()?;
        let mut tiers = Self {
            clients: (0..edges).map(|i| lab_name(&format!("c{i}"))).collect(),
            edges: (0..edges).map(|i| lab_name(&format!("e{i}"))).collect(),
            shield: lab_name("s"),
            origin: lab_name("o"),
            links: Vec::new(),
            torn_down: false,
        };
        // From here on, Drop removes whatever was made, even if a later step fails.
        for ns in &tiers.clients {
            add_host(ns, false)?;
        }
        for ns in tiers.edges.iter().chain([&tiers.shield, &tiers.origin]) {
            add_host(ns, true)?;
        }
        // Each link (and in it each direction) draws from a random stream of its own.
        let mut next = 0;
        let mut plan = |one_way: Duration, link: LinkImpair| {
            next += 1;
            (one_way, link, stream_seed(impair.seed, next))
        };
        for i in 0..edges {
            let (ns_c, ns_e) = (tiers.clients[usize::from(i)].clone(), tiers.edges[usize::from(i)].clone());
            let dev = |end: &str| lab_name(&format!("t{i}{end}"));
            let (c, ea, eb, s) = (dev("c"), dev("a"), dev("b"), dev("s"));
            let front = netns::link(
                End { dev: &c, ns: &ns_c, addr: client(i) },
                End { dev: &ea, ns: &ns_e, addr: edge_front(i) },
                plan(r / 2, impair.a),
            )?;
            tiers.links.push(front);
            let back = netns::link(
                End { dev: &eb, ns: &ns_e, addr: edge_back(i) },
                End { dev: &s, ns: &tiers.shield, addr: shield_front(i) },
                plan(big_r / 2, impair.b),
            )?;
            tiers.links.push(back);
        }
        let (so, o) = (lab_name("tso"), lab_name("too"));
        let origin = netns::link(
            End { dev: &so, ns: &tiers.shield, addr: SHIELD_BACK },
            End { dev: &o, ns: &tiers.origin, addr: ORIGIN },
            plan(ORIGIN_RTT / 2, LinkImpair::default()),
        )?;
        tiers.links.push(origin);
        Ok(tiers)
    }

    /// Cut edge `i`'s link to the shield (`true`: every packet dropped, both ways) or restore
    /// it (the fleet lab's partition). The links were made per edge, client side first.
    pub(crate) fn cut_edge(&self, i: u8, cut: bool) {
        if let Some(link) = self.links.get(2 * usize::from(i) + 1) {
            link.cut(cut);
        }
    }

    /// Worst lateness of the delay box so far, µs (accuracy check).
    pub(crate) fn max_late_us(&self) -> u64 {
        self.links.iter().map(Link::max_late_us).max().unwrap_or(0)
    }

    /// Remove everything; idempotent.
    fn teardown(&mut self) {
        if std::mem::replace(&mut self.torn_down, true) {
            return;
        }
        for ns in self.clients.iter().chain(&self.edges).chain([&self.shield, &self.origin]) {
            netns::kill_all_in(ns);
            let _ = netns::run(&["ip", "netns", "delete", ns]);
        }
        // The delay box threads stop once their devices are gone; join them.
        self.links.clear();
    }
}

impl Drop for Tiers {
    fn drop(&mut self) {
        self.teardown();
    }
}
