//! The failover lab, bounded: each fault one second, with the peers (HAProxy and nginx beside
//! edgewarm in front of the same two lab origins, on loopback).

mod common;

use std::time::Duration;

/// Through edgewarm no GET fails while a server is killed, no POST is executed twice in any
/// phase, and every proxy's clients are counted in every phase.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_killed_slow_or_failing_server_costs_edgewarm_s_clients_nothing_that_matters() {
    let run = common::run_lab(
        &["lab", "--scenario", "failover", "--requests", "1", "--peers", "--json"],
        Duration::from_secs(300),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 4, "{report}");
    for row in rows {
        assert!(row["requests"].as_u64().unwrap() > 0, "{row}");
        if row["proxy"] == "edgewarm" {
            assert_eq!(row["posts_twice"], 0, "{row}");
            if row["phase"].as_str().unwrap().starts_with("a:") {
                assert_eq!(row["failed_get"], 0, "{row}");
            }
        }
    }
}
