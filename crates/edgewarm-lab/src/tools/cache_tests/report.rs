//! What `edgewarm-lab cache-tests` reports: edgewarm's results on the HTTP cache test suite
//! tallied by kind (required, optimal), the published results of other caches tallied on the
//! same test ids, and the required tests edgewarm failed; as Markdown and as JSON.

use std::path::PathBuf;

use serde::Serialize;

use crate::tools::cache_tests::suite::{PeerInfo, Results, TestInfo};

/// Passed out of total, for one kind of test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub passed: usize,
    pub total: usize,
}

/// One cache's tally.
#[derive(Debug, Clone, Serialize)]
pub struct Tally {
    /// `edgewarm`, or the peer's name.
    pub name: String,
    /// The peer's version as published (empty for edgewarm).
    pub version: String,
    pub required: Count,
    pub optimal: Count,
    /// Tests whose set-up failed (the first requests went wrong, so the test could not judge).
    pub setup_failed: usize,
}

/// A required test edgewarm failed, with what the suite said.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub id: String,
    /// The suite's kind of failure: `Assertion`, `Setup`, `TypeError`, `AbortError`…
    pub kind: String,
    pub message: String,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// Whether edgewarm's route had the cache on.
    pub cache: bool,
    /// Tests the suite runs against a proxy (all but the browser-only ones).
    pub tests_expected: usize,
    /// Tests the client reported a result for.
    pub tests_run: usize,
    /// How long the client ran, in seconds.
    pub client_seconds: f64,
    pub edgewarm: Tally,
    /// The published results, on the same test ids: a test missing from a peer's file counts in
    /// neither its passed nor its total.
    pub peers: Vec<Tally>,
    pub failing_required: Vec<Failure>,
    /// Where the run's files are (configuration, logs, raw results, this report).
    pub run_dir: PathBuf,
}

/// Everything a run measured, for [`CacheReport::new`].
pub struct RunResults<'a> {
    pub cache: bool,
    pub tests: &'a [TestInfo],
    pub own: &'a Results,
    pub peers: &'a [(PeerInfo, Results)],
    pub client_seconds: f64,
    pub run_dir: PathBuf,
}

/// `Some((kind, message))` for a failed result, `None` for a pass.
fn failure(result: &serde_json::Value) -> Option<(String, String)> {
    if result.as_bool() == Some(true) {
        return None;
    }
    let part = |i: usize| result.get(i).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let kind = part(0);
    Some((if kind.is_empty() { "unknown".into() } else { kind }, part(1)))
}

/// Tally `results` over `tests` (only those `results` has count, when `only_present`; else a
/// missing result is a failure).
fn tally(name: &str, version: &str, tests: &[&TestInfo], results: &Results, only_present: bool) -> Tally {
    let mut t = Tally {
        name: name.into(),
        version: version.into(),
        required: Count::default(),
        optimal: Count::default(),
        setup_failed: 0,
    };
    for test in tests {
        let result = results.get(&test.id);
        if result.is_none() && only_present {
            continue;
        }
        let failed = result.map_or(Some(("missing".into(), String::new())), failure);
        if failed.as_ref().is_some_and(|(kind, _)| kind == "Setup") {
            t.setup_failed += 1;
        }
        let count = match test.kind.as_str() {
            "optimal" => &mut t.optimal,
            "check" => continue,
            _ => &mut t.required,
        };
        count.total += 1;
        count.passed += usize::from(failed.is_none());
    }
    t
}

impl crate::harness::report::Report for CacheReport {
    fn markdown(&self) -> String {
        CacheReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }
}

impl CacheReport {
    pub fn new(run: RunResults<'_>) -> Self {
        let tests: Vec<&TestInfo> = run.tests.iter().filter(|t| !t.browser_only).collect();
        let edgewarm = tally("edgewarm", "", &tests, run.own, false);
        let peers = run.peers.iter().map(|(p, r)| tally(&p.name, &p.version, &tests, r, true)).collect();
        let failing_required = tests
            .iter()
            .filter(|t| !matches!(t.kind.as_str(), "optimal" | "check"))
            .filter_map(|t| {
                let (kind, message) = run.own.get(&t.id).map_or(Some(("missing".into(), String::new())), failure)?;
                Some(Failure { id: t.id.clone(), kind, message })
            })
            .collect();
        Self {
            cache: run.cache,
            tests_expected: tests.len(),
            tests_run: tests.iter().filter(|t| run.own.contains_key(&t.id)).count(),
            client_seconds: run.client_seconds,
            edgewarm,
            peers,
            failing_required,
            run_dir: run.run_dir,
        }
    }

    /// The tallies as a table (edgewarm first, then the peers), then edgewarm's failing required
    /// tests.
    pub fn markdown(&self) -> String {
        let pct = |c: Count| {
            if c.total == 0 {
                format!("{} / 0", c.passed)
            } else {
                format!("{} / {} ({:.0} %)", c.passed, c.total, 100.0 * c.passed as f64 / c.total as f64)
            }
        };
        let cache = if self.cache { "cache on" } else { "cache off" };
        let mut out = format!(
            "HTTP cache tests: {} of {} tests ran in {:.0} s; edgewarm with the {cache}\n\n\
             | cache | required passed | optimal passed | set-up failed |\n|---|---|---|---|\n",
            self.tests_run, self.tests_expected, self.client_seconds
        );
        for t in std::iter::once(&self.edgewarm).chain(&self.peers) {
            let name = if t.version.is_empty() {
                format!("**{}** ({cache})", t.name)
            } else {
                format!("{} {}", t.name, t.version)
            };
            out += &format!("| {name} | {} | {} | {} |\n", pct(t.required), pct(t.optimal), t.setup_failed);
        }
        out += &format!("\nedgewarm's failing required tests ({}):\n\n", self.failing_required.len());
        for f in &self.failing_required {
            out += &format!("- `{}`: {}: {}\n", f.id, f.kind, f.message.replace('\n', " "));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(id: &str, kind: &str) -> TestInfo {
        TestInfo { id: id.into(), kind: kind.into(), browser_only: false }
    }

    fn results(pairs: &[(&str, serde_json::Value)]) -> Results {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    /// Required and optimal are tallied apart, checks in neither; a peer is counted on the ids
    /// it has; browser-only tests are not expected; failures keep the suite's message.
    #[test]
    fn tallies_by_kind_and_on_the_same_ids() {
        use serde_json::json;
        let mut browser = test("b", "required");
        browser.browser_only = true;
        let tests =
            [test("r1", "required"), test("r2", "required"), test("o1", "optimal"), test("c1", "check"), browser];
        let own = results(&[
            ("r1", json!(true)),
            ("r2", json!(["Assertion", "Response 2 does not come from cache"])),
            ("o1", json!(["Setup", "retry"])),
            ("c1", json!(true)),
        ]);
        let peer =
            PeerInfo { file: "p.json".into(), name: "peer".into(), kind: "rev-proxy".into(), version: "1".into() };
        let peers = [(peer, results(&[("r1", json!(true)), ("o1", json!(true)), ("b", json!(true))]))];
        let report = CacheReport::new(RunResults {
            cache: false,
            tests: &tests,
            own: &own,
            peers: &peers,
            client_seconds: 1.0,
            run_dir: PathBuf::new(),
        });
        assert_eq!((report.tests_expected, report.tests_run), (4, 4));
        assert_eq!(report.edgewarm.required, Count { passed: 1, total: 2 });
        assert_eq!(report.edgewarm.optimal, Count { passed: 0, total: 1 });
        assert_eq!(report.edgewarm.setup_failed, 1);
        assert_eq!(report.peers[0].required, Count { passed: 1, total: 1 });
        assert_eq!(report.peers[0].optimal, Count { passed: 1, total: 1 });
        assert_eq!(report.failing_required.len(), 1);
        assert_eq!(report.failing_required[0].id, "r2");
        let md = report.markdown();
        assert!(md.contains("| **edgewarm** (cache off) | 1 / 2 (50 %) | 0 / 1 (0 %) | 1 |"), "{md}");
        assert!(md.contains("| peer 1 | 1 / 1 (100 %) |"), "{md}");
        assert!(md.contains("- `r2`: Assertion: Response 2 does not come from cache"), "{md}");
    }
}
