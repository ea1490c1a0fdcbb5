//! Each step of the new side and each fault, against a real old side on a real Unix socket:
//! the production [`crate::upgrade::handover::serve`] where it can play the part, the wire
//! protocol spoken by hand where the old process must misbehave. The new process is a
//! recording of what the new side asked of it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::UnixListener;

use super::*;
use crate::upgrade::takeover;
use crate::upgrade::testing::{admin, until_listening, OldSide};
use crate::upgrade::wire::{self, Msg};

/// The new process as the new side sees it: what it answers, and what it was asked.
#[derive(Default)]
struct Recorded {
    cold: bool,
    stopped_first: bool,
    counted: Mutex<Vec<&'static str>>,
    shut: AtomicBool,
    adopted: AtomicUsize,
}

impl NewProcess for Recorded {
    async fn warm(&self, _limit: Duration) -> bool {
        !self.cold
    }
    async fn accepting(&self) -> bool {
        !self.stopped_first
    }
    fn adopt_sessions(&self, sessions: &[(String, Exported)]) -> usize {
        self.adopted.fetch_add(1, Ordering::Relaxed);
        sessions.len()
    }
    fn shutdown(&self) {
        self.shut.store(true, Ordering::Relaxed);
    }
    fn count(&self, result: &'static str) {
        self.counted.lock().unwrap().push(result);
    }
}

/// Connect once the old side listens (it binds in its own task).
async fn connect(path: &Path) -> takeover::Takeover {
    until_listening(path, || takeover::connect(path)).await.0
}

#[tokio::test]
async fn the_old_process_agrees_stops_and_hands_its_sessions_over() {
    let old_side = OldSide::start();
    let new = Recorded::default();
    let old = take_over(connect(&old_side.path).await, &new).await.expect("took over");
    assert_eq!(old, std::process::id(), "the old side's pid, the kernel's word (one process here)");
    assert_eq!(*new.counted.lock().unwrap(), ["took_over"]);
    assert_eq!(new.adopted.load(Ordering::Relaxed), 1, "its sessions adopted");
    assert!(!new.shut.load(Ordering::Relaxed));
    old_side.serving.await.unwrap();
    assert_eq!(old_side.process.stops(), 1, "the old process stopped accepting");
    assert_eq!(old_side.process.counted(), ["handed_over"]);
}

#[tokio::test]
async fn a_new_process_stopped_before_it_serves_leaves_the_old_one_serving() {
    let old_side = OldSide::start();
    let new = Recorded { stopped_first: true, ..Default::default() };
    let e = take_over(connect(&old_side.path).await, &new).await.expect_err("stopped first");
    assert!(matches!(e, UpgradeError::Stopped), "{e}");
    // The stream closed with the takeover: the old side abandons and serves on.
    old_side.process.until_counted(1).await;
    assert_eq!(old_side.process.counted(), ["abandoned"]);
    assert_eq!(old_side.process.stops(), 0, "the old process was never told to stop");
    assert!(new.counted.lock().unwrap().is_empty(), "nothing taken over");
}

/// What a hand-spoken old side does once asked to stop.
enum Then {
    /// Goes away (it crashed, or abandoned).
    Close,
    /// Holds the stream open and never answers.
    Hold,
}

/// An old side spoken by hand, listening in a directory of its own: the sockets, then `then`
/// once asked to stop. Its socket's path.
fn scripted_old(then: Then) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upgrade.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let _hello = wire::recv(&stream, wire::MAX_FROM_NEW).await.unwrap();
        let (addr, fd) = admin();
        let sockets = Msg::Sockets {
            admin: addr,
            listeners: Vec::new(),
            ticket_keys: String::new(),
            wait_ms: 0,
            quic: None,
            relays: false,
        };
        wire::send(&stream, &sockets, &[std::os::fd::AsFd::as_fd(&fd)]).await.unwrap();
        let (serving, _) = wire::recv(&stream, wire::MAX_FROM_NEW).await.unwrap();
        assert!(matches!(serving, Msg::Serving), "{serving:?}");
        if let Then::Hold = then {
            std::future::pending::<()>().await;
        }
        drop(stream);
    });
    (dir, path)
}

/// The old process goes away when asked (it crashed, or abandoned): this one stops accepting.
#[tokio::test]
async fn an_old_process_gone_when_asked_makes_this_one_stop() {
    let (_dir, path) = scripted_old(Then::Close);
    let new = Recorded::default();
    let e = take_over(connect(&path).await, &new).await.expect_err("no agreement");
    assert!(matches!(e, UpgradeError::Closed), "{e}");
    assert!(new.shut.load(Ordering::Relaxed), "never two processes serving side by side");
    assert!(new.counted.lock().unwrap().is_empty());
}

/// The old process never answers: after the wait (on tokio's paused clock), this one stops.
#[tokio::test(start_paused = true)]
async fn an_old_process_that_never_agrees_makes_this_one_stop() {
    let (_dir, path) = scripted_old(Then::Hold);
    let new = Recorded::default();
    let e = take_over(connect(&path).await, &new).await.expect_err("no agreement");
    assert!(matches!(e, UpgradeError::Timeout(_)), "{e}");
    assert!(new.shut.load(Ordering::Relaxed));
}

#[test]
fn the_warm_up_ends_before_the_old_process_stops_waiting() {
    let timeout = Duration::from_secs(60);
    assert_eq!(
        warm_limit(Duration::from_secs(35), timeout),
        Duration::from_secs(25),
        "the old one's wait, less the margin"
    );
    assert_eq!(warm_limit(Duration::from_secs(600), timeout), timeout, "the configured limit when it is sooner");
    assert_eq!(warm_limit(Duration::ZERO, timeout), timeout, "no limit from the old one");
    assert_eq!(warm_limit(Duration::from_secs(5), timeout), timeout, "a wait shorter than the margin");
}

#[tokio::test]
async fn a_warm_up_that_runs_out_is_counted_cold_and_accepting_goes_on() {
    let cold = Recorded { cold: true, ..Default::default() };
    assert!(!warm(&cold, Duration::ZERO, Duration::from_secs(1)).await);
    assert_eq!(*cold.counted.lock().unwrap(), ["cold"]);
    let warmed = Recorded::default();
    assert!(warm(&warmed, Duration::ZERO, Duration::from_secs(1)).await);
    assert!(warmed.counted.lock().unwrap().is_empty());
}
