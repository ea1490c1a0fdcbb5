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
//!
//! The pieces ([`add_host`], [`link`], [`exec`], [`lab_name`]) also build other shapes: the
//! two-tier lab's edges and shield ([`crate::scenarios::two_tier`]), under the same names and clean-up.

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::time::Duration;

use crate::wan::delaybox::{self, Link};
use crate::wan::impair::{Impairments, LinkCounts, LinkImpair};

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

    /// [`Self::create`] with lossy or jittery links ([`crate::wan::impair`]).
    pub fn create_impaired(
        r: Duration,
        big_r: Duration,
        bandwidth: Option<&str>,
        impair: Impairments,
    ) -> Result<Self, NetnsError> {
        preflight()?;
        let name = lab_name;
        let mut topo =
            Self { client: name("c"), edge: name("e"), origin: name("o"), links: Vec::new(), torn_down: false };
        // From here on, Drop cleans up whatever was made, even if a later step fails.
        add_host(&topo.client, false)?;
        add_host(&topo.edge, true)?;
        add_host(&topo.origin, true)?;
        topo.exec_ok(&topo.edge, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        let (c, ea, eb, o) = (name("tc"), name("ta"), name("tb"), name("to"));
        // Each link, and in it each direction (`Link::start`), draws from a stream of its own.
        let seed = |link| crate::wan::impair::stream_seed(impair.seed, link);
        let (a, b) = ((r / 2, impair.a, seed(0)), (big_r / 2, impair.b, seed(1)));
        let link_a =
            link(End { dev: &c, ns: &topo.client, addr: CLIENT }, End { dev: &ea, ns: &topo.edge, addr: EDGE_A }, a)?;
        topo.links.push(link_a);
        let link_b =
            link(End { dev: &eb, ns: &topo.edge, addr: EDGE_B }, End { dev: &o, ns: &topo.origin, addr: ORIGIN }, b)?;
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

    /// `ip netns exec NS args…`, as a Command to spawn.
    pub fn command(&self, ns: &str, args: &[&str]) -> Command {
        command(ns, args)
    }

    fn exec_ok(&self, ns: &str, args: &[&str]) -> Result<Output, NetnsError> {
        exec(ns, args)
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
        self.links.iter().map(Link::max_late_us).max().unwrap_or(0)
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

/// `ip netns exec NS args…`, as a Command to spawn.
pub fn command(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Run `args` in namespace `ns`, failing as [`run`] does.
pub(crate) fn exec(ns: &str, args: &[&str]) -> Result<Output, NetnsError> {
    let mut all = vec!["ip", "netns", "exec", ns];
    all.extend_from_slice(args);
    run(&all)
}

/// The name of this lab's namespace for `role` (`c`, `e`, `o`; the two-tier lab's `c0`, `e1`,
/// `s`, …): the pid in it lets [`cleanup_stale`] recognise a killed lab's leftovers.
pub(crate) fn lab_name(role: &str) -> String {
    format!("{PREFIX}{}{role}", std::process::id())
}

/// A new namespace: `lo` up, client and server Fast Open; a `server` (an edge, a shield, an
/// origin) also keeps its congestion window when idle. The caller removes it (its guard's
/// teardown), also when this fails half-way.
pub(crate) fn add_host(ns: &str, server: bool) -> Result<(), NetnsError> {
    run(&["ip", "netns", "add", ns])?;
    exec(ns, &["ip", "link", "set", "lo", "up"])?;
    exec(ns, &["sysctl", "-qw", "net.ipv4.tcp_fastopen=3"])?;
    if server {
        // Standing origin connections keep their congestion window between bursts, as on a
        // tuned edge and origin: otherwise one idle for longer than its RTO starts again from
        // the initial window, and a page's responses queue behind each other for round trips.
        exec(ns, &["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"])?;
    }
    Ok(())
}

/// One end of a point-to-point link: its TUN device's name, namespace and address.
pub(crate) struct End<'a> {
    pub(crate) dev: &'a str,
    pub(crate) ns: &'a str,
    pub(crate) addr: Ipv4Addr,
}

/// One point-to-point link: two TUN devices, each moved into its namespace, the delay box
/// between, with `(one-way delay, impairment, seed)`.
pub(crate) fn link(
    a: End<'_>,
    b: End<'_>,
    (one_way, impair, seed): (Duration, LinkImpair, u64),
) -> Result<Link, NetnsError> {
    let dev_a = delaybox::tun(a.dev).map_err(|source| NetnsError::Tun { name: a.dev.into(), source })?;
    let dev_b = delaybox::tun(b.dev).map_err(|source| NetnsError::Tun { name: b.dev.into(), source })?;
    for (end, peer) in [(&a, b.addr), (&b, a.addr)] {
        run(&["ip", "link", "set", end.dev, "netns", end.ns])?;
        let (addr, peer) = (end.addr.to_string(), format!("{peer}/32"));
        exec(end.ns, &["ip", "addr", "add", &addr, "peer", &peer, "dev", end.dev])?;
        exec(end.ns, &["ip", "link", "set", end.dev, "up"])?;
    }
    Link::start(dev_a, dev_b, one_way, impair, seed).map_err(|source| NetnsError::Tun { name: a.dev.into(), source })
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

/// Before a lab builds anything: it runs as root, and what killed labs left is gone.
pub(crate) fn preflight() -> Result<(), NetnsError> {
    if !is_root() {
        return Err(NetnsError::NotRoot);
    }
    cleanup_stale();
    Ok(())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// The pid of the lab that made namespace `name`, if it is one of a lab's: `ew`, the pid, then
/// a role (`c`, `e`, `o`, `s`, each maybe followed by an index: `c0`, `e1`).
pub fn lab_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (pid, role) = rest.split_at(digits);
    let mut role = role.chars();
    let known = matches!(role.next(), Some('c' | 'e' | 'o' | 's')) && role.all(|c| c.is_ascii_digit());
    known.then(|| pid.parse().ok()).flatten()
}

/// The namespaces of lab `pid` that exist now.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let Ok(out) = run(&["ip", "netns", "list"]) else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| lab_of(name) == Some(pid))
        .map(str::to_owned)
        .collect()
}

/// Remove what the lab with process id `pid` left (it was killed, so it could not): its
/// namespaces and anything still running in them.
pub fn cleanup_lab(pid: u32) {
    for name in namespaces_of(pid) {
        kill_all_in(&name);
        let _ = run(&["ip", "netns", "delete", &name]);
    }
}

/// Remove namespaces left by labs whose process no longer exists (killed with SIGKILL, say).
pub fn cleanup_stale() {
    let Ok(out) = run(&["ip", "netns", "list"]) else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(pid) = lab_of(name) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        kill_all_in(name);
        let _ = run(&["ip", "netns", "delete", name]);
    }
}

#[cfg(test)]
mod tests {
    use super::lab_of;

    #[test]
    fn lab_namespaces_are_recognised_by_name() {
        assert_eq!(lab_of("ew123c"), Some(123));
        assert_eq!(lab_of("ew123o"), Some(123));
        assert_eq!(lab_of("ew42e1"), Some(42));
        assert_eq!(lab_of("ew42c10"), Some(42));
        assert_eq!(lab_of("ew42s"), Some(42));
        for other in ["ew42", "ew42x", "ew42cc", "ew42c1a", "ewc", "xy42c", "ew42tc"] {
            assert_eq!(lab_of(other), None, "{other}");
        }
    }
}
