//! The upgrade lab, bounded: one round of upgrade and restart in the lab's namespaces.

mod common;

use std::time::Duration;

/// One round: the upgraded process's first client found its pool warm (no miss), the
/// restarted one's did not; no first client beat the links; nothing left behind.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn an_upgrade_keeps_the_first_client_warm_and_a_restart_does_not() {
    // A long origin link: a restarted process's pool takes 2R to warm, far longer than its
    // first client takes to arrive, even on a loaded machine.
    let run = common::run_lab(
        &["lab", "--scenario", "upgrade", "--big-r", "300ms", "--requests", "1", "--json"],
        Duration::from_secs(600),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["misses_after_upgrade"], 0.0, "{report}");
    assert_eq!(report["misses_after_restart"], 1.0, "{report}");
    assert_eq!(report["upgrade_ms"].as_array().unwrap().len(), 1);
    // 3r + R: a new TLS 1.3 connection through a terminating route, at best.
    let min = 3.0 * report["r_ms"].as_f64().unwrap() + report["big_r_ms"].as_f64().unwrap();
    for route in report["routes"].as_array().unwrap() {
        for when in ["before", "after_upgrade", "after_restart"] {
            assert!(route[when][0].as_f64().unwrap() >= 0.99 * min, "{route}");
        }
    }
}
