//! `edgewarm-lab` as a user runs it: usage errors exit 64 before anything is created.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_edgewarm-lab");

/// Lab usage errors exit 64 before anything is created; the example scenario file parses.
#[test]
fn lab_scenario_errors_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\nr: 20ms\nbig_r: 10ms\nmodes: [bogus]\n").unwrap();
    let out = Command::new(BIN).args(["lab", "--scenario-file"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode \"bogus\""));
    let out = Command::new(BIN).args(["lab", "--scenario", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = Command::new(BIN).args(["lab", "--proxy", "noequals"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lab-scenario.yaml");
    let s = edgewarm_lab::run::Scenario::from_file(&example).unwrap();
    assert_eq!(
        (s.name.as_str(), s.r_ms, s.big_r_ms, s.more_big_r_ms.as_slice()),
        ("mobile-far", 40.0, 150.0, &[300.0][..])
    );
    assert_eq!(s.modes.len(), 5);
}
