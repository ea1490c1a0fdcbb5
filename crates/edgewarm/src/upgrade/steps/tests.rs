//! One process's upgrade steps and what its end waits for, on real Unix sockets and tokio's
//! paused clock: the process before it is the production old side over a recording
//! ([`OldSide`]), this process a recording of both sides.

use std::path::Path;

use tokio::time::Instant;

use super::*;
use crate::upgrade::takeover;
use crate::upgrade::testing::{self, Call, OldSide, Recording};

/// The drain of the older process, as this one's configuration has it.
const GRACE: Duration = Duration::from_secs(1);

/// This process's steps, taking over from `old` if given; the next upgrade's socket in `dir`.
async fn start(process: &Arc<Recording>, old: Option<&OldSide>, dir: &Path) -> Upgrades {
    let takeover = match old {
        Some(old) => Some(old.takeover().await.0),
        None => None,
    };
    let config = UpgradeConfig { socket: dir.join("next.sock"), warm_timeout: testing::WARM_TIMEOUT };
    Upgrades::start(process.clone(), takeover, config, testing::sockets().0)
}

/// Stopped before its listeners accepted: the old process serves on, and the end returns the
/// takeover's verdict (the process exits non-zero).
#[tokio::test(start_paused = true)]
async fn a_failed_takeover_is_the_end_s_verdict() {
    let (dir, old) = (tempfile::tempdir().unwrap(), OldSide::start());
    let process = Recording::new(true);
    let upgrades = start(&process, Some(&old), dir.path()).await;
    // The takeover's stream closes as the step fails: the old side has seen it, so the step has
    // begun (one thread runs both sides).
    old.process.until_counted(1).await;
    assert_eq!(old.process.counted(), ["abandoned"]);
    let verdict = upgrades.end(false, GRACE).await;
    assert!(matches!(verdict, Err(UpgradeError::Stopped)), "{verdict:?}");
    assert!(process.calls().is_empty(), "nothing taken over, nothing handed over");
}

/// A process that never hands over ends at once; one that has waits for its sessions to go.
#[tokio::test(start_paused = true)]
async fn the_end_waits_for_a_hand_over_only() {
    let dir = tempfile::tempdir().unwrap();
    let idle = start(&Recording::new(false), None, dir.path()).await;
    let ended = Instant::now();
    idle.end(false, GRACE).await.expect("no upgrade, no verdict");
    assert_eq!(ended.elapsed(), Duration::ZERO);

    let dir = tempfile::tempdir().unwrap();
    let process = Recording::new(false);
    let upgrades = start(&process, None, dir.path()).await;
    let path = dir.path().join("next.sock");
    let (takeover, _) = testing::until_listening(&path, || takeover::connect(&path)).await;
    takeover.serving().await.expect("agreed");
    takeover.sessions().await.expect("the sessions");
    upgrades.end(false, GRACE).await.expect("handed over");
    let handed = [Call::TicketKeys, Call::QuicKeys, Call::Stop, Call::Sessions, Call::Count("handed_over")];
    assert_eq!(process.calls(), handed, "the hand-over ran to its end");
}

/// Having taken over, a process whose HTTP/3 endpoints relay for the older one stays while it
/// runs, for at most its drain and the slack; one that relays nothing ends at once. (The older
/// process is this test's own, so it never goes.)
#[tokio::test(start_paused = true)]
async fn the_end_outlives_the_older_process_only_while_relaying_for_it() {
    for (relaying, waits) in [(true, GRACE + OLDER_SLACK), (false, Duration::ZERO)] {
        let (dir, old) = (tempfile::tempdir().unwrap(), OldSide::start());
        let process = Recording::new(false);
        let upgrades = start(&process, Some(&old), dir.path()).await;
        process.until(|calls| calls.contains(&Call::Adopted(1))).await;
        assert_eq!(process.calls(), [Call::Count("took_over"), Call::Adopted(1)]);
        let ended = Instant::now();
        upgrades.end(relaying, GRACE).await.expect("took over");
        assert!(ended.elapsed() >= waits, "relaying {relaying}: ended after {:?}", ended.elapsed());
        assert!(ended.elapsed() < waits + Duration::from_secs(1), "relaying {relaying}: {:?}", ended.elapsed());
    }
}
