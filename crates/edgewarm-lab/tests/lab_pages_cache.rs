//! The browser lab's cached site, bounded: headless Chromium loads the login page's releases
//! through the edge with its cache and learned Early Hints (mode `cache`). Counts only, no
//! times: what reached the origin, and whether the 103 reached the browser.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

/// One load pair and its warm-edge visit (after the discarded warm-up pair): the first visit
/// fills the edge, so the returning and warm-edge visits ask the origin for the HTML only (a
/// revalidation) and never for an immutable asset; both later visits get the learned 103, and
/// the first, on a URL the edge has never seen, none.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_warm_edge_visit_asks_the_origin_for_the_html_only_and_gets_a_103() {
    let args = ["lab", "--scenario", "pages", "--pages", "login", "--modes", "cache"];
    let run = common::run_lab(
        &[&args[..], &["--r", "20ms", "--big-r", "100ms", "--requests", "1", "--json"]].concat(),
        Duration::from_secs(600),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    let visits: Vec<&str> = results.iter().map(|r| r["visit"].as_str().unwrap()).collect();
    assert_eq!(visits, ["first", "returning", "warm-edge"]);
    for r in results {
        assert_eq!((r["mode"].as_str(), r["loads"].as_u64()), (Some("cache"), Some(1)), "{r}");
        assert_eq!(r["protocols"], serde_json::json!(["h2"]), "{r}");
        let hinted = if r["visit"] == "first" { 0 } else { 1 };
        assert_eq!(r["early_hints"].as_u64(), Some(hinted), "{r}");
    }

    // The measured pair is release 1 (release 0 was the warm-up's). Three visits: the HTML
    // asked for three times (a fill, then two revalidations), each asset once (the fill).
    let dir = std::path::PathBuf::from(report["run_dir"].as_str().unwrap());
    let log = std::fs::read_to_string(dir.join("origin-0.access")).unwrap();
    let mut asked: BTreeMap<&str, usize> = BTreeMap::new();
    for line in log.lines().filter_map(|l| l.strip_prefix("GET /r1/login/")) {
        *asked.entry(line).or_default() += 1;
    }
    assert_eq!(asked.remove(""), Some(3), "{log}");
    assert_eq!(asked.len(), 15, "{asked:?}");
    assert!(asked.values().all(|&n| n == 1), "an asset reached the origin more than once: {asked:?}");

    // The browser saw the 103 and fetched the page's preloads from it.
    let loads: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("loads.json")).unwrap()).unwrap();
    let warm = loads.as_array().unwrap().iter().find(|c| c["visit"] == "warm-edge").unwrap();
    let load = &warm["loads"][0];
    assert!(load["early_hints_ms"].as_f64().unwrap() > 0.0, "{load}");
}
