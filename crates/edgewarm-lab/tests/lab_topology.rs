//! The lab's namespaces and delay box: RTTs as configured (generously bounded: shared noisy
//! machines), nothing left behind after drop, after a SIGKILL, or after a whole lab run.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use edgewarm_lab::wan::netns::{self, Topology, EDGE_A, ORIGIN};

/// Median TCP connect time from `from` to a listener at `to` in namespace `to_ns`, in ms.
fn connect_rtt(topo: &Topology, from: &str, to_ns: &str, to: std::net::Ipv4Addr) -> f64 {
    let listener = format!(
        "import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('{to}',7777));s.listen(64)\nwhile True:\n  c,_=s.accept();c.close()"
    );
    let mut server = topo.command(to_ns, &["python3", "-c", &listener]).stdout(Stdio::null()).spawn().unwrap();
    let probe = format!(
        "import socket,time\nr=[]\nfor i in range(9):\n  for a in range(100):\n    try:\n      s=socket.socket();t=time.perf_counter();s.connect(('{to}',7777));r.append(time.perf_counter()-t);s.close();break\n    except OSError:\n      time.sleep(0.05)\nr.sort();print(r[len(r)//2]*1000)"
    );
    let out = topo.command(from, &["python3", "-c", &probe]).output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("{out:?}"))
}

fn namespaces() -> String {
    String::from_utf8(netns::run(&["ip", "netns", "list"]).unwrap().stdout).unwrap()
}

/// How many of lab `pid`'s three namespaces exist.
fn lab_namespaces(pid: u32) -> usize {
    common::lab_namespaces(pid).len()
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn rtts_match_the_configuration_and_nothing_is_left_behind() {
    let (r, big_r) = (Duration::from_millis(20), Duration::from_millis(60));
    let topo = Topology::create(r, big_r, None).expect("the lab needs root");
    let names = [topo.client.clone(), topo.edge.clone(), topo.origin.clone()];
    let to_edge = connect_rtt(&topo, &topo.client, &topo.edge, EDGE_A);
    let direct = connect_rtt(&topo, &topo.client, &topo.origin, ORIGIN);
    println!(
        "client→edge {to_edge:.2} ms (r = 20), client→origin {direct:.2} ms (r + R = 80), max late {} µs",
        topo.max_late_us()
    );
    // Never faster than configured; slower only by scheduling noise (generous bound).
    assert!((20.0..40.0).contains(&to_edge), "client→edge RTT {to_edge} ms for r = 20 ms");
    assert!((80.0..100.0).contains(&direct), "client→origin RTT {direct} ms for r + R = 80 ms");
    let tfo = topo.command(&topo.client, &["sysctl", "-n", "net.ipv4.tcp_fastopen"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&tfo.stdout).trim(), "3");
    drop(topo);
    let list = namespaces();
    for n in &names {
        assert!(!list.contains(n.as_str()), "{n} left behind: {list}");
    }
}

/// A lossy link B loses about the configured share of what crosses it, counted as `lost`, and
/// link A, left perfect, loses nothing.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_lossy_link_counts_what_it_loses() {
    use edgewarm_lab::wan::impair::{Impairments, LinkImpair};
    let b = LinkImpair { loss: 0.2, burst: None, jitter_ms: 1.0 };
    let impair = Impairments { b, seed: 1, ..Impairments::default() };
    let (r, big_r) = (Duration::from_millis(2), Duration::from_millis(4));
    let topo = Topology::create_impaired(r, big_r, None, impair).expect("the lab needs root");
    // 2000 datagrams to a closed port: they cross A then B (the origin's ICMP replies come back).
    let send = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(2000):\n  s.sendto(b'x'*100,('{ORIGIN}',9));time.sleep(0.0005)"
    );
    let out = topo.command(&topo.client, &["python3", "-c", &send]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // Let the last packets through the delay box before reading its counters.
    std::thread::sleep(Duration::from_millis(200));
    let [a, b] = topo.link_counts();
    println!("link A {a:?}, link B {b:?}");
    assert_eq!((a.lost, a.drops, b.drops), (0, 0, 0));
    assert!(a.packets >= 2000, "link A carried {} packets", a.packets);
    let share = b.lost as f64 / (b.lost + b.packets) as f64;
    assert!((0.15..0.25).contains(&share), "link B lost {share:.3} of its packets for 20 %");
}

/// Start a long lab run and wait until its three namespaces exist.
fn long_lab(out: &std::path::Path) -> (std::process::Child, u32) {
    let lab = Command::new(env!("CARGO_BIN_EXE_edgewarm-lab"))
        .args(["lab", "--requests", "1000", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = lab.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lab_namespaces(pid) < 3 {
        assert!(Instant::now() < deadline, "lab never created its namespaces");
        std::thread::sleep(Duration::from_millis(50));
    }
    (lab, pid)
}

/// A lab killed with SIGKILL cannot clean up; the next one removes its leftovers.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_killed_lab_is_cleaned_up_by_the_next() {
    let out = tempfile::tempdir().unwrap();
    let (mut lab, pid) = long_lab(out.path());
    lab.kill().unwrap();
    lab.wait().unwrap();
    assert!(lab_namespaces(pid) > 0, "SIGKILL leaves them (nothing ran to remove them)");
    netns::cleanup_stale();
    assert_eq!(lab_namespaces(pid), 0, "stale namespaces removed: {}", namespaces());
}

/// The whole lab, small and quick (links capped with tbf): every mode measured without errors, the report saved, the
/// pre-warmed and http modes faster than the tunnel (3r+R against 3(r+R): 120 ms apart here), HTTP/3 faster than
/// HTTP/2 (2r+R against 3r+R: 40 ms apart), and nothing left behind. r is as long as R so that each comparison is
/// a whole round trip or more apart: CPU noise on a loaded 2-core runner (the Python HTTP/3 client's handshake) once
/// covered a 10 ms gap.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_short_lab_run_reports_every_mode_and_cleans_up() {
    let run = common::run_lab(
        &["lab", "--r", "40ms", "--big-r", "40ms", "--requests", "5", "--bandwidth", "200mbit", "--json"],
        Duration::from_secs(300),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    // direct, tunnel, tunnel + origin TFO (PQ and X25519 hellos), prewarm, http, h3.
    assert_eq!(results.len(), 7);
    for m in results {
        assert_eq!(m["load"]["ok"], 5, "{m}");
        assert!(m["min_ms"].as_f64().unwrap() > 0.0);
    }
    let p50 =
        |label: &str| results.iter().find(|m| m["label"] == label).unwrap()["load"]["ttfb_ms"]["p50"].as_f64().unwrap();
    assert!(p50("prewarm") < p50("tunnel"), "prewarm {} ms vs tunnel {} ms", p50("prewarm"), p50("tunnel"));
    assert!(p50("http") < p50("tunnel"), "http {} ms vs tunnel {} ms", p50("http"), p50("tunnel"));
    // HTTP/3 saves the TCP handshake's round trip to the edge: 2r+R against 3r+R.
    assert!(p50("h3") < p50("http"), "h3 {} ms vs http {} ms", p50("h3"), p50("http"));
    let dir = std::path::PathBuf::from(report["run_dir"].as_str().unwrap());
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("| prewarm |"));
}

/// Ctrl-C (SIGINT) mid-run: the lab removes its namespaces and stops its processes itself.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn an_interrupted_lab_cleans_up_after_itself() {
    let out = tempfile::tempdir().unwrap();
    let (mut lab, pid) = long_lab(out.path());
    std::thread::sleep(Duration::from_secs(2));
    assert!(Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let status = lab.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(lab_namespaces(pid), 0, "{}", namespaces());
}
