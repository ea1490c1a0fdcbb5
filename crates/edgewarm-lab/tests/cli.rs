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
    let s = edgewarm_lab::scenarios::spec::Scenario::from_file(&example).unwrap();
    assert_eq!(
        (s.name.as_str(), s.r_ms, s.big_r_ms, s.more_big_r_ms.as_slice()),
        ("mobile-far", 40.0, 150.0, &[300.0][..])
    );
    assert_eq!(s.modes.len(), 5);
}

/// Bad loss, burst and jitter values are refused with the flag or key named, before anything
/// is created; the `lossy` scenario sweeps link B's loss.
#[test]
fn lab_impairment_errors_name_the_flag() {
    for (args, flag) in [
        (&["--loss", "150%"][..], "--loss"),
        (&["--loss-r", "2"][..], "--loss-r"),
        (&["--burst", "0.5"][..], "--burst"),
        (&["--jitter", "1h"][..], "--jitter"),
    ] {
        let out = Command::new(BIN).arg("lab").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\nr: 20ms\nbig_r: 10ms\nmodes: [direct]\nloss: [1%, 0.5]\n").unwrap();
    let out = Command::new(BIN).args(["lab", "--scenario-file"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loss: \"0.5\": write the loss as a percentage"));
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "name: x\nr: 20ms\nbig_r: 10ms\nmodes: [direct]\nloss: [0%, 1%]\nburst: 3\njitter: 2ms\n")
        .unwrap();
    let s = edgewarm_lab::scenarios::spec::Scenario::from_file(&good).unwrap();
    assert_eq!(s.parts(), [(10.0, 0.0), (10.0, 0.01)]);
    assert_eq!((s.impair.b.burst, s.impair.b.jitter_ms), (Some(3.0), 2.0));
    let lossy = edgewarm_lab::scenarios::spec::Scenario::named("lossy").unwrap();
    assert_eq!(lossy.parts(), [(150.0, 0.0), (150.0, 0.005), (150.0, 0.01), (150.0, 0.02)]);
    assert_eq!((lossy.r_ms, lossy.page, lossy.modes.len()), (20.0, 10, 4));
}
