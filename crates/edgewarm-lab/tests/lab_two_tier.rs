//! The two-tier lab, bounded: two caching edges share one caching shield in front of the lab
//! origin, three objects. Counts only, never times: what reached each tier.

mod common;

use std::time::Duration;

/// Edge 0's clients ask for each object (cold), then edge 1's (the shield has them), then
/// both edges' again (each edge has them): the origin answers each object exactly once, the
/// shield once per edge, and each edge answers its own clients every time. The shield reaches
/// the origin in cleartext (h2c) here and the edges reach the shield over TLS, so one run goes
/// through both kinds of origin connection. Nothing is left behind (`run_lab` checks).
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn the_origin_answers_once_per_object_however_many_edges_ask() {
    let args = ["lab", "--scenario", "two-tier", "--edges", "2", "--requests", "3", "--origin-protocol", "h2c"];
    let run =
        common::run_lab(&[&args[..], &["--r", "4ms", "--big-r", "10ms", "--json"]].concat(), Duration::from_secs(120));
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let objects = 3.0;
    assert_eq!(report["objects"], 3, "{report}");
    assert_eq!(report["origin_requests"], 3, "{report}");
    assert_eq!((report["origin_objects"].as_u64(), report["origin_max_per_object"].as_u64()), (Some(3), Some(1)));
    let rows = report["rows"].as_array().unwrap();
    // (visit, edge, origin requests, shield hit / miss, edge hit / miss) during each visit.
    let want = [
        ("cold", 0, 3, (0.0, objects), (0.0, objects)),
        ("warm_shield", 1, 0, (objects, 0.0), (0.0, objects)),
        ("warm_edge", 0, 0, (0.0, 0.0), (objects, 0.0)),
        ("warm_edge", 1, 0, (0.0, 0.0), (objects, 0.0)),
    ];
    assert_eq!(rows.len(), want.len(), "{report}");
    let hit_miss = |c: &serde_json::Value| (c["hit"].as_f64().unwrap(), c["miss"].as_f64().unwrap());
    for (row, (visit, edge, origin, shield, edge_cache)) in rows.iter().zip(want) {
        assert_eq!((row["visit"].as_str(), row["edge"].as_u64()), (Some(visit), Some(edge)), "{row}");
        assert_eq!(row["load"]["ok"], 3, "{row}");
        assert_eq!(row["origin_requests"], origin, "{row}");
        assert_eq!(hit_miss(&row["shield"]), shield, "{row}");
        assert_eq!(hit_miss(&row["edge_cache"]), edge_cache, "{row}");
        assert_eq!((row["shield"]["other"].as_f64(), row["edge_cache"]["other"].as_f64()), (Some(0.0), Some(0.0)));
    }
    let dir = std::path::PathBuf::from(report["run_dir"].as_str().unwrap());
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("| warm shield | 1 |"));
}
