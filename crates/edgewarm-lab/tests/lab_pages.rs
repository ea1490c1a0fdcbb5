//! The browser lab, bounded: headless Chromium loads one page through two modes in the lab's
//! namespaces, first and returning visits.

mod common;

use std::time::Duration;

/// One login page, directly and through an `http` route, one load pair each: every cell
/// measured over HTTP/2 with every resource answered, the document never faster than the
/// links allow, the report and its pictures written, and no namespace left behind.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn chromium_loads_a_page_through_two_modes() {
    let args = ["lab", "--scenario", "pages", "--pages", "login", "--modes", "direct,http"];
    let run = common::run_lab(
        &[&args[..], &["--r", "20ms", "--big-r", "100ms", "--requests", "1", "--json"]].concat(),
        Duration::from_secs(600),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    let cells: Vec<(&str, &str)> =
        results.iter().map(|r| (r["mode"].as_str().unwrap(), r["visit"].as_str().unwrap())).collect();
    assert_eq!(cells, [("direct", "first"), ("direct", "returning"), ("http", "first"), ("http", "returning")]);
    for r in results {
        assert_eq!(
            (r["client"].as_str(), r["page"].as_str(), r["loads"].as_u64()),
            (Some("chromium"), Some("login"), Some(1))
        );
        assert_eq!(r["protocols"], serde_json::json!(["h2"]), "{r}");
        let (ttfb, plt, min) = (
            r["ttfb_ms"]["p50"].as_f64().unwrap(),
            r["plt_ms"]["p50"].as_f64().unwrap(),
            r["ttfb_min_ms"].as_f64().unwrap(),
        );
        // The delay box holds every packet for its link's delay: no load beats the model's
        // minimum (Chromium rounds its clock to 0.1 ms, hence the 1 % of slack).
        assert!(ttfb >= 0.99 * min, "{r}");
        assert!(plt > ttfb, "{r}");
        assert!(r["connections"].as_f64().unwrap() >= 1.0, "{r}");
    }
    assert_eq!(results[2]["ttfb_formula"], "3r+R");
    let dir = std::path::PathBuf::from(report["run_dir"].as_str().unwrap());
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("| login | http | returning |"));
    assert!(dir.join("plt-r20-R100.svg").is_file());
    // Every load as the browser reported it, resource timings included.
    let loads: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("loads.json")).unwrap()).unwrap();
    for cell in loads.as_array().unwrap() {
        let load = &cell["loads"][0];
        assert!(load["resources"].as_array().is_some_and(|r| r.len() >= 14), "{cell}");
        assert!(load["load_event_ms"].as_f64().unwrap() > 0.0, "{cell}");
    }
    assert_eq!(loads.as_array().unwrap().len(), 4);
}
