//! A whole `edgewarm-lab lab` run as a child process, bounded in time and cleaned up whatever
//! happens: the system tests that run the lab end to end share it.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use edgewarm_lab::wan::netns;

/// What a finished lab run left: its exit status and its output.
pub(crate) struct LabRun {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
    /// The run folder's parent, removed with this.
    _out: tempfile::TempDir,
}

/// Run the lab with `args` for at most `limit`. Past it the lab gets SIGINT (it removes its
/// namespaces and stops its processes itself), then SIGKILL ten seconds later; either way its
/// leftovers are removed before this returns, so a failed or hung run leaves nothing behind.
pub(crate) fn run_lab(args: &[&str], limit: Duration) -> LabRun {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_edgewarm-lab"))
        .args(args)
        .arg("--out")
        .arg(out.path())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + limit;
    let mut interrupted = None;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let now = Instant::now();
        match interrupted {
            None if now >= deadline => {
                let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
                interrupted = Some(now);
            }
            Some(at) if now >= at + Duration::from_secs(10) => {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let left = lab_namespaces(pid);
    // A killed lab could not clean up: what it left goes (its own namespaces only: a sibling
    // test may be holding a killed lab's on purpose).
    netns::cleanup_lab(pid);
    let stderr = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(interrupted.is_none(), "the lab ran past {limit:?}; interrupted. stderr:\n{stderr}");
    assert!(left.is_empty(), "the lab left {left:?} behind");
    LabRun { status, stdout: std::fs::read(&stdout).unwrap(), stderr, _out: out }
}

/// The namespaces of lab `pid` that still exist (`ew{pid}c`, `ew{pid}e`, `ew{pid}o`; the
/// two-tier lab's `ew{pid}c0`, `ew{pid}e0`, …, `ew{pid}s`).
pub(crate) fn lab_namespaces(pid: u32) -> Vec<String> {
    netns::namespaces_of(pid)
}
