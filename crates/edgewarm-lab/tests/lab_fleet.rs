//! The fleet lab, bounded: three caching edges and their caching shield purge as one through
//! a nats-server in the shield's namespace, three objects, ten purges, one edge cut off for
//! six seconds. Counts only, never times.

mod common;

use std::time::Duration;

/// Every node (the three edges and the shield) applies every purge, the cut edge too once its
/// link is back, and says so on `/fleet`; no client of any edge gets a copy older than a purge
/// acknowledged before it asked: not on a connected edge, not on the cut edge while its link
/// is dark (it notices it hears nothing back and serves no hit) nor once back and catching up.
/// Nothing is left behind (`run_lab` checks: namespaces, and with them nats-server and
/// edgewarm).
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn every_node_applies_every_purge_and_the_cut_one_catches_up() {
    let args = ["lab", "--scenario", "fleet", "--edges", "3", "--requests", "3", "--purges", "10"];
    let more = ["--purge-every", "200ms", "--cut", "6s", "--r", "4ms", "--big-r", "10ms", "--json"];
    let run = common::run_lab(&[&args[..], &more[..]].concat(), Duration::from_secs(180));
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let purges = report["purges"].as_array().unwrap();
    assert_eq!(purges.len(), 10, "{report}");
    let nodes = report["nodes"].as_array().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["edge0", "edge1", "edge2", "shield"]);
    for node in nodes {
        assert_eq!((node["applied"].as_u64(), node["never"].as_array().map(Vec::len)), (Some(10), Some(0)), "{node}");
    }
    let reads = &report["reads"];
    assert!(reads["ok"].as_u64().unwrap() > 0, "{reads}");
    assert_eq!(reads["stale_connected"], 0, "{reads}");
    assert_eq!(reads["stale_cut_during_cut"], 0, "{reads}");
    assert_eq!(reads["stale_cut_catching_up"], 0, "{reads}");
    let (cut, catch_up) = (&report["cut"], &report["catch_up"]);
    assert_eq!(cut["edge"], 2, "{cut}");
    assert!(catch_up["missed"].as_u64().unwrap() > 0, "the cut edge missed purges: {catch_up}");
    assert!(catch_up["applied_ms"].is_number() && catch_up["fleet_ms"].is_number(), "caught up: {catch_up}");
    let dir = std::path::PathBuf::from(report["run_dir"].as_str().unwrap());
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("| shield | 10/10 |"));
}
