//! `edgewarm-lab lab --scenario failover` (issue 47): what a route's clients see while one of
//! its two origin servers fails, through edgewarm (`origins:`, `balance: latency`) and, with
//! `--peers`, HAProxy and nginx in front of the same two servers, all at once under the same
//! open-loop GET/POST mix. Three faults on server `b`, one after the other:
//!
//! - (a) SIGKILLed, started again 10 s later;
//! - (b) a brown-out: its answers 200 ms slower for 10 s;
//! - (c) it answers 503 for 10 s.
//!
//! Per proxy and phase: requests, failed ones (an error or a 5xx), 503s, POSTs the servers
//! executed twice (their access logs), p50 and p99, and how long after the fault began the
//! proxy still sent clients there (the last failed, slow or 503 answer). On loopback, without
//! the lab's namespaces: what is measured is the proxies' choices, and a brown-out is the
//! server's own slowness (its link is not delayed). The servers are the lab origin
//! (`edgewarm-lab origin`, one process each, faults from a file it reads per request).

mod load;
mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::harness::hosts::{listening, spawn, Guard, Wait};
use crate::scenarios::opts::LabOpts;
use crate::scenarios::{boxed, Entry};
pub use report::FailoverReport;

/// A proxy under test: its name and where clients reach it.
#[derive(Debug, Clone)]
struct Proxy {
    name: &'static str,
    addr: SocketAddr,
}

/// One fault's window: when it began and when the run stopped counting it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Phase {
    pub name: &'static str,
    /// Seconds from the load's start.
    pub from_s: f64,
    pub to_s: f64,
}

/// `--scenario failover` in [`crate::scenarios::ALL`].
pub const ENTRY: Entry = Entry {
    name: "failover",
    about: "on loopback: a route's two origin servers, one killed, slowed by 200 ms and answering 503 in turn, with `--peers` HAProxy and nginx beside edgewarm",
    requests: "each fault's seconds (10)",
    run: |opts| boxed(run(opts)),
};

pub async fn run(opts: &LabOpts) -> Result<FailoverReport, LabError> {
    // `--requests`: each fault's length in seconds (10 by default; the test runs 2).
    let fault = Duration::from_secs(opts.requests.unwrap_or(10).max(1) as u64);
    let proxy_bin = crate::harness::hosts::proxy_binary(opts.edgewarm.as_deref())?;
    let exe = std::env::current_exe()?.display().to_string();
    let dir = crate::harness::files::run_dir(&opts.out, "failover")?;
    std::fs::create_dir_all(dir.join("nginx-tmp"))?;
    let d = dir.display().to_string();
    let port = || -> Result<u16, LabError> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
    let (a, b) = (port()?, port()?);
    let server = |name: &str, port: u16| -> Result<Guard, LabError> {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["origin", "--listen", &format!("127.0.0.1:{port}")]);
        cmd.args(["--cert", &format!("{d}/origin.pem"), "--key", &format!("{d}/origin.key")]);
        cmd.args(["--access-log", &format!("{d}/{name}.log"), "--fault-file", &format!("{d}/{name}.fault")]);
        spawn(cmd, &dir.join(format!("{name}-server.log")))
    };
    let _a = server("a", a)?;
    let mut b_server = Some(server("b", b)?);
    let mut proxies = vec![Proxy { name: "edgewarm", addr: SocketAddr::from(([127, 0, 0, 1], port()?)) }];
    let admin = port()?;
    std::fs::write(dir.join("edge.yaml"), edge_config(&d, proxies[0].addr, admin, a, b))?;
    let mut edge = std::process::Command::new(&proxy_bin);
    edge.args(["run", "--config", &format!("{d}/edge.yaml")]);
    let mut guards = vec![spawn(edge, &dir.join("edge.log"))?];
    if opts.peers {
        for (name, file, run) in [
            ("haproxy", "haproxy-failover.cfg", &["haproxy", "-db", "-f"][..]),
            ("nginx", "nginx-failover.conf", &["nginx", "-c"][..]),
        ] {
            let addr = SocketAddr::from(([127, 0, 0, 1], port()?));
            let text = peer_config(file)
                .replace("{listen}", &addr.to_string())
                .replace("{server_a}", &format!("127.0.0.1:{a}"))
                .replace("{server_b}", &format!("127.0.0.1:{b}"))
                .replace("{dir}", &d);
            std::fs::write(dir.join(file), text)?;
            let mut args: Vec<String> = run[1..].iter().map(|s| s.to_string()).collect();
            args.push(format!("{d}/{file}"));
            let mut cmd = std::process::Command::new(run[0]);
            cmd.args(&args);
            guards.push(spawn(cmd, &dir.join(format!("{name}.log")))?);
            proxies.push(Proxy { name, addr });
        }
    }
    // `guards` are in `proxies`' order: edgewarm first, then each peer.
    for (p, guard) in proxies.iter().zip(guards.iter_mut()) {
        let log = dir.join(if p.name == "edgewarm" { "edge.log".to_string() } else { format!("{}.log", p.name) });
        let wait =
            Wait::new(p.name, &log).child(guard).within(Duration::from_secs(20)).every(Duration::from_millis(50));
        wait.until(|| listening(p.addr)).await?;
    }
    wait_standing(admin, &dir).await?;
    // The peers' first checks.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let ca = dir.join("ca.pem");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = Instant::now();
    let running: Vec<_> = proxies
        .iter()
        .map(|p| tokio::spawn(load::open_loop(p.name, p.addr, ca.clone(), start, stop.clone())))
        .collect();
    let at = |t: Instant| t.duration_since(start).as_secs_f64();
    let settle = fault;
    let mut phases = Vec::new();
    // Healthy first: the reference p99.
    tokio::time::sleep(fault).await;
    phases.push(Phase { name: "healthy", from_s: 0.0, to_s: at(Instant::now()) });
    // (a) b killed, back after `fault`.
    let from = Instant::now();
    drop(b_server.take());
    tokio::time::sleep(fault).await;
    b_server = Some(server("b", b)?);
    tokio::time::sleep(settle).await;
    phases.push(Phase {
        name: "a: b killed, back after the fault's length",
        from_s: at(from),
        to_s: at(Instant::now()),
    });
    // (b) a brown-out, then (c) 503s, each played from the file b reads per request.
    let fault_file = dir.join("b.fault");
    let play = |what: &'static str, name: &'static str| {
        let fault_file = fault_file.clone();
        async move {
            let from = Instant::now();
            std::fs::write(&fault_file, what)?;
            tokio::time::sleep(fault).await;
            std::fs::write(&fault_file, "")?;
            tokio::time::sleep(settle).await;
            Ok::<_, LabError>(Phase { name, from_s: at(from), to_s: at(Instant::now()) })
        }
    };
    phases.push(play("slow 200ms", "b: b 200 ms slower").await?);
    // Longer, so that what the brown-out taught the proxies has faded before the next fault
    // (edgewarm's average forgets with a 5 s time constant): (c) starts from a trusted b.
    tokio::time::sleep(2 * settle).await;
    phases.push(play("status 503", "c: b answers 503").await?);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut outcomes = Vec::new();
    for r in running {
        outcomes.extend(r.await.map_err(|e| LabError::Load { mode: "failover".into(), detail: e.to_string() })?);
    }
    drop(b_server);
    drop(guards);
    let executed = executed(&dir, &["a", "b"]);
    let report = report::FailoverReport::new(
        &proxies.iter().map(|p| p.name).collect::<Vec<_>>(),
        &phases,
        &outcomes,
        &executed,
        fault,
        dir,
    );
    Ok(report)
}

/// edgewarm's configuration: route h.test over the two servers.
fn edge_config(d: &str, listen: SocketAddr, admin: u16, a: u16, b: u16) -> String {
    let head = crate::harness::edge_yaml::head(
        format!("127.0.0.1:{admin}"),
        format!("{d}/upgrade.sock"),
        &[format!("listen: \"{listen}\"")],
    );
    head + &format!(
        "timeouts: {{connect: 2s}}\nroutes:\n\
         \x20 - sni: h.test\n    action: http\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: origin.test, ca: {d}/ca.pem}}\n\
         \x20   origins: [{{address: \"127.0.0.1:{a}\"}}, {{address: \"127.0.0.1:{b}\"}}]\n\
         \x20   upstream: {{connections: 2}}\n"
    )
}

/// A peer's configuration as shipped (examples/peers/).
fn peer_config(file: &str) -> &'static str {
    match file {
        "haproxy-failover.cfg" => include_str!("../../../../../examples/peers/haproxy-failover.cfg"),
        _ => include_str!("../../../../../examples/peers/nginx-failover.conf"),
    }
}

/// Until edgewarm has its standing connections to both servers (at most 20 s).
async fn wait_standing(admin: u16, dir: &Path) -> Result<(), LabError> {
    let url = format!("http://127.0.0.1:{admin}/metrics");
    let standing = || async {
        let Ok(out) = tokio::process::Command::new("curl").args(["-sf", "--max-time", "2", &url]).output().await else {
            return false;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        edgewarm::metrics::sample(&text, "edgewarm_pool_opened_total", &[("route", "h.test")]).unwrap_or(0.0) >= 4.0
    };
    Wait::new("edgewarm", &dir.join("edge.log")).within(Duration::from_secs(20)).until(standing).await
}

/// How many times each request line reached the servers.
fn executed(dir: &Path, names: &[&str]) -> std::collections::HashMap<String, usize> {
    let mut seen = std::collections::HashMap::new();
    for name in names {
        let path: PathBuf = dir.join(format!("{name}.log"));
        for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
            *seen.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    seen
}
