//! The lab's three hosts: network namespaces joined by TUN links through the delay box.
//!
//! ```text
//!  client ns                 edge ns                          origin ns
//!  10.77.1.1 ─ link A (r) ─ 10.77.1.2 │ 10.77.2.1 ─ link B (R) ─ 10.77.2.2
//!   tun c                      tun ea  ip_forward  tun eb           tun o
//! ```
//!
//! The direct path client → origin is forwarded by the edge namespace's kernel, so it crosses
//! both links (RTT r + R) exactly like the path through the proxy does. Every namespace gets
//! `lo` up and `net.ipv4.tcp_fastopen=3` (client and server Fast Open); the edge and the origin
//! `net.ipv4.tcp_slow_start_after_idle=0` (long-lived connections keep their window).
//!
//! The TUN devices are created in the lab's own namespace, where the delay box keeps their file
//! descriptors, then moved into their namespaces (`ip link set … netns …`): the descriptors
//! stay valid across the move, so one process relays for all three hosts.
//!
//! Names carry the lab's pid (`ew<pid>c`, …), so parallel labs do not collide and leftovers of
//! a killed lab can be recognised: [`cleanup_stale`] removes namespaces whose pid is gone.
//! [`Topology`] removes what it created when dropped (namespaces, and with them the TUN devices
//! and any process still running inside); the `lab` command drops it on success, on error and
//! on Ctrl-C.

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::time::Duration;

use crate::delaybox::{self, Link};
use crate::impair::{Impairments, LinkCounts, LinkImpair};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
pub const EDGE_A: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
pub const EDGE_B: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 1);
pub const ORIGIN: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 2);

const PREFIX: &str = "ew";

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("the lab needs root (network namespaces, TUN devices): run it as root")]
    NotRoot,
    #[error("`{cmd}` failed: {detail}")]
    Command { cmd: String, detail: String },
    #[error("TUN device {name}: {source}")]
    Tun { name: String, source: std::io::Error },
}

/// Run a command, turning failure into an error that shows the command and its stderr.
pub fn run(args: &[&str]) -> Result<Output, NetnsError> {
    let cmd = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| NetnsError::Command { cmd: cmd.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(NetnsError::Command { cmd, detail: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    Ok(out)
}

/// The three namespaces and the two delayed links.
pub struct Topology {
    pub client: String,
    pub edge: String,
    pub origin: String,
    links: Vec<Link>,
    torn_down: bool,
}

impl Topology {
    /// Build it with client↔edge RTT `r` and edge↔origin RTT `big_r`; `bandwidth` (tc syntax,
    /// e.g. `100mbit`) caps every link in both directions with a token bucket (tbf).
    pub fn create(r: Duration, big_r: Duration, bandwidth: Option<&str>) -> Result<Self, NetnsError> {
        Self::create_impaired(r, big_r, bandwidth, Impairments::default())
    }

    /// [`Self::create`] with lossy or jittery links ([`crate::impair`]).
    pub fn create_impaired(
        r: Duration,
        big_r: Duration,
        bandwidth: Option<&str>,
        impair: Impairments,
    ) -> Result<Self, NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        cleanup_stale();
        let pid = std::process::id();
        let name = |role: &str| format!("{PREFIX}{pid}{role}");
        let mut topo =
            Self { client: name("c"), edge: name("e"), origin: name("o"), links: Vec::new(), torn_down: false };
        // From here on, Drop cleans up whatever was made, even if a later step fails.
        for ns in [&topo.client, &topo.edge, &topo.origin] {
            run(&["ip", "netns", "add", ns])?;
            topo.exec_ok(ns, &["ip", "link", "set", "lo", "up"])?;
            topo.exec_ok(ns, &["sysctl", "-qw", "net.ipv4.tcp_fastopen=3"])?;
        }
        topo.exec_ok(&topo.edge, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        // Standing origin connections keep their congestion window between bursts, as on a
        // tuned edge and origin: otherwise one idle for longer than its RTO starts again from
        // the initial window, and a page's responses queue behind each other for round trips.
        for ns in [&topo.edge, &topo.origin] {
            topo.exec_ok(ns, &["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"])?;
        }
        let (c, ea, eb, o) = (name("tc"), name("ta"), name("tb"), name("to"));
        // Each link, and in it each direction (`Link::start`), draws from a stream of its own.
        let seed = |link| crate::impair::stream_seed(impair.seed, link);
        let (a, b) = ((r / 2, impair.a, seed(0)), (big_r / 2, impair.b, seed(1)));
        let link_a = topo.link(&c, &topo.client.clone(), CLIENT, &ea, &topo.edge.clone(), EDGE_A, a)?;
        topo.links.push(link_a);
        let link_b = topo.link(&eb, &topo.edge.clone(), EDGE_B, &o, &topo.origin.clone(), ORIGIN, b)?;
        topo.links.push(link_b);
        // Client reaches the origin's subnet via link A; origin reaches the client's via link B.
        topo.exec_ok(&topo.client, &["ip", "route", "add", "10.77.2.0/24", "dev", &c])?;
        topo.exec_ok(&topo.origin, &["ip", "route", "add", "10.77.1.0/24", "dev", &o])?;
        if let Some(rate) = bandwidth {
            // A queue of ~50 ms at the cap: enough for TCP to fill the link, small enough not
            // to add bufferbloat to the RTTs being measured.
            let [client, edge, origin] = [topo.client.clone(), topo.edge.clone(), topo.origin.clone()];
            for (ns, dev) in [(&client, &c), (&edge, &ea), (&edge, &eb), (&origin, &o)] {
                let args =
                    ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "50ms"];
                topo.exec_ok(ns, &args)?;
            }
        }
        Ok(topo)
    }

    /// One point-to-point link: two TUN devices, each moved into its namespace, delay box between,
    /// with `(one-way delay, impairment, seed)`.
    #[expect(clippy::too_many_arguments)]
    fn link(
        &self,
        a: &str,
        ns_a: &str,
        addr_a: Ipv4Addr,
        b: &str,
        ns_b: &str,
        addr_b: Ipv4Addr,
        (one_way, impair, seed): (Duration, LinkImpair, u64),
    ) -> Result<Link, NetnsError> {
        let dev_a = delaybox::tun(a).map_err(|source| NetnsError::Tun { name: a.into(), source })?;
        let dev_b = delaybox::tun(b).map_err(|source| NetnsError::Tun { name: b.into(), source })?;
        for (dev, ns, addr, peer) in [(a, ns_a, addr_a, addr_b), (b, ns_b, addr_b, addr_a)] {
            run(&["ip", "link", "set", dev, "netns", ns])?;
            let (addr, peer) = (addr.to_string(), format!("{peer}/32"));
            self.exec_ok(ns, &["ip", "addr", "add", &addr, "peer", &peer, "dev", dev])?;
            self.exec_ok(ns, &["ip", "link", "set", dev, "up"])?;
        }
        Link::start(dev_a, dev_b, one_way, impair, seed).map_err(|source| NetnsError::Tun { name: a.into(), source })
    }

    /// `ip netns exec NS args…`, as a Command to spawn.
    pub fn command(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    fn exec_ok(&self, ns: &str, args: &[&str]) -> Result<Output, NetnsError> {
        let mut all = vec!["ip", "netns", "exec", ns];
        all.extend_from_slice(args);
        run(&all)
    }

    /// Forget TCP metrics (RTT estimates, Fast Open cookies) in every namespace, so one mode's
    /// connections do not shape the next mode's.
    pub fn flush_tcp_metrics(&self) -> Result<(), NetnsError> {
        for ns in [&self.client, &self.edge, &self.origin] {
            self.exec_ok(ns, &["ip", "tcp_metrics", "flush", "all"])?;
        }
        Ok(())
    }

    /// Worst lateness of the delay box so far, µs (accuracy check).
    pub fn max_late_us(&self) -> u64 {
        self.links
            .iter()
            .flat_map(|l| [&l.forward, &l.backward])
            .map(|c| c.max_late_us.load(std::sync::atomic::Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Packets carried and dropped so far by link A (client ↔ edge) and link B (edge ↔ origin).
    pub fn link_counts(&self) -> [LinkCounts; 2] {
        let mut out = [LinkCounts::default(); 2];
        for (link, counts) in self.links.iter().zip(out.iter_mut()) {
            for c in [&link.forward, &link.backward] {
                let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                counts.packets += get(&c.packets);
                counts.lost += get(&c.lost);
                counts.drops += get(&c.drops);
            }
        }
        out
    }

    /// Remove everything; idempotent.
    pub fn teardown(&mut self) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        for ns in [&self.client, &self.edge, &self.origin] {
            kill_all_in(ns);
            let _ = run(&["ip", "netns", "delete", ns]);
        }
        // The delay box threads stop once their devices are gone; join them.
        self.links.clear();
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Kill every process left inside a namespace (a child that outlived its handle, or a browser
/// whose driver gave up).
pub(crate) fn kill_all_in(ns: &str) {
    if let Ok(out) = run(&["ip", "netns", "pids", ns]) {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).output();
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Remove what the lab with process id `pid` left (it was killed, so it could not): its
/// namespaces and anything still running in them.
pub fn cleanup_lab(pid: u32) {
    for role in ["c", "e", "o"] {
        let name = format!("{PREFIX}{pid}{role}");
        if std::path::Path::new("/run/netns").join(&name).exists() {
            kill_all_in(&name);
            let _ = run(&["ip", "netns", "delete", &name]);
        }
    }
}

/// Remove namespaces left by labs whose process no longer exists (killed with SIGKILL, say).
pub fn cleanup_stale() {
    let Ok(out) = run(&["ip", "netns", "list"]) else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let role = &rest[digits.len()..];
        let Ok(pid) = digits.parse::<u32>() else { continue };
        if !matches!(role, "c" | "e" | "o") || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        kill_all_in(name);
        let _ = run(&["ip", "netns", "delete", name]);
    }
}
