//! What every lab report is ([`Report`]: its Markdown, its run folder, its failed parts) and
//! its one save ([`save`]): `report.json` and `report.md` in the run folder.

use std::path::Path;

/// A report as pretty JSON: every report is `Serialize`, and this is what a `dyn Report` keeps
/// of it (serde's trait cannot be a trait object's).
pub trait Json {
    fn json(&self) -> String;
}

impl<T: serde::Serialize> Json for T {
    fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// A scenario's (or `cache-tests`') report, as `edgewarm-lab` prints and saves it.
pub trait Report: Json {
    fn markdown(&self) -> String;
    /// The run's folder: where the report and everything else the run wrote are.
    fn run_dir(&self) -> &Path;
    /// Parts of the run that failed (printed and saved all the same; the exit code says it).
    fn failed(&self) -> usize {
        0
    }
}

/// `report.json` and `report.md` in the report's run folder.
pub fn save(report: &dyn Report) -> std::io::Result<()> {
    let dir = report.run_dir();
    std::fs::write(dir.join("report.json"), report.json())?;
    std::fs::write(dir.join("report.md"), report.markdown())
}
