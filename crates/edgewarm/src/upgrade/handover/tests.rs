//! Each step of the old side and each fault, on a real Unix socket: the production new side's
//! messages ([`crate::upgrade::takeover`]) where it can play the part, the wire protocol spoken
//! by hand where the new process must misbehave. The old process is a recording of what the old
//! side asked of it; timeouts run on tokio's paused clock.

use tokio::net::UnixStream;
use tokio::time::Instant;

use super::*;
use crate::upgrade::testing::{Call, OldSide, STORE, TICKET_KEYS, WARM_TIMEOUT};

/// A well-behaved new process takes over from `old`, which then has stopped once, handed its
/// sessions over, counted the upgrade and returned. What it handed over first.
async fn hands_over(old: OldSide) -> crate::upgrade::takeover::Handed {
    let before = old.process.calls().len();
    let (takeover, handed) = old.takeover().await;
    assert_eq!(handed.ticket_keys, TICKET_KEYS);
    assert!(handed.quic.is_some(), "the HTTP/3 keys go along");
    assert_eq!(old.process.calls()[before..], [Call::TicketKeys, Call::QuicKeys], "no stop before it serves");
    let pid = takeover.serving().await.expect("the old side agreed");
    assert_eq!(pid, std::process::id(), "the old side's pid (one process here)");
    let sessions = takeover.sessions().await.expect("the sessions");
    assert_eq!(sessions.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), [STORE]);
    old.serving.await.expect("serve returns once handed over");
    assert_eq!(
        old.process.calls()[before..],
        [Call::TicketKeys, Call::QuicKeys, Call::Stop, Call::Sessions, Call::Count("handed_over")],
        "stopped once, before the sessions were taken"
    );
    assert!(old.lineage.in_last_step(), "the process's end waits for the sessions");
    handed
}

impl OldSide {
    /// A hand-spoken new side's hello (from a binary without relays), and the sockets back.
    async fn hello(&self) -> UnixStream {
        let stream = self.connect().await;
        let hello = Msg::Hello { pid: std::process::id(), version: "test".into(), relays: false };
        wire::send(&stream, &hello, &[]).await.unwrap();
        let (sockets, fds) = wire::recv(&stream, wire::MAX_FROM_OLD).await.unwrap();
        assert!(matches!(sockets, Msg::Sockets { relays: false, .. }), "{sockets:?}");
        assert_eq!(fds.len(), 3, "admin, the listener's TCP and UDP sockets");
        stream
    }

    /// The old side gives up on `stream`: it has counted the upgrade abandoned and closed it.
    async fn abandons(&self, stream: &UnixStream) {
        let closed = wire::recv(stream, wire::MAX_FROM_OLD).await;
        assert!(matches!(closed, Err(UpgradeError::Closed | UpgradeError::Io(_))), "{closed:?}");
        assert_eq!(self.process.counted().last(), Some(&"abandoned"));
        assert_eq!(self.process.stops(), 0, "the old process serves on");
        assert!(!self.lineage.in_last_step());
    }
}

#[tokio::test]
async fn a_new_process_that_serves_gets_the_sockets_then_the_sessions() {
    let old = OldSide::start();
    let listen = old.listen;
    let handed = hands_over(old).await;
    let [listener] = &handed.sockets.listeners[..] else { panic!("{:?}", handed.sockets) };
    assert_eq!(listener.listen, listen);
    assert_eq!((listener.udp.len(), listener.relays.len()), (1, 1), "its UDP socket, and the relay to it");
    assert_eq!(handed.wait, WARM_TIMEOUT + SERVING_SLACK, "the warm-up and the slack");
}

/// One that goes away before serving (stopped, or its warm-up failed): the old one serves on.
#[tokio::test]
async fn a_new_process_gone_before_serving_is_abandoned() {
    let old = OldSide::start();
    drop(old.takeover().await);
    old.process.until_counted(1).await;
    assert_eq!(old.process.calls(), [Call::TicketKeys, Call::QuicKeys, Call::Count("abandoned")]);
    hands_over(old).await;
}

/// Another process checking whether the socket is alive connects and closes: not an upgrade.
#[tokio::test]
async fn a_probe_is_not_counted() {
    let old = OldSide::start();
    drop(old.connect().await);
    hands_over(old).await;
}

#[tokio::test(start_paused = true)]
async fn a_new_process_that_never_serves_is_abandoned_after_its_wait() {
    let old = OldSide::start();
    let stream = old.hello().await;
    let asked = Instant::now();
    old.abandons(&stream).await;
    assert!(asked.elapsed() >= WARM_TIMEOUT + SERVING_SLACK, "waited {:?}", asked.elapsed());
    assert_eq!(old.process.calls(), [Call::TicketKeys, Call::QuicKeys, Call::Count("abandoned")]);
    hands_over(old).await;
}

/// What a hand-spoken new side does once it has `Stopping`.
enum AfterStopping {
    /// Holds the stream open and never answers.
    Silent,
    /// Something other than the acknowledgement.
    Serving,
    /// Goes away.
    Gone,
}

/// A new side that serves, then does `then` instead of acknowledging: the old side abandons.
async fn serves_then(then: AfterStopping) -> OldSide {
    let old = OldSide::start();
    let stream = old.hello().await;
    wire::send(&stream, &Msg::Serving, &[]).await.unwrap();
    let (stopping, _) = wire::recv(&stream, wire::MAX_FROM_OLD).await.unwrap();
    assert!(matches!(stopping, Msg::Stopping { pid } if pid == std::process::id()), "{stopping:?}");
    let asked = Instant::now();
    match then {
        AfterStopping::Silent => {
            old.abandons(&stream).await;
            assert!(asked.elapsed() >= HELLO_TIMEOUT, "waited {:?}", asked.elapsed());
        }
        AfterStopping::Serving => {
            wire::send(&stream, &Msg::Serving, &[]).await.unwrap();
            old.abandons(&stream).await;
        }
        AfterStopping::Gone => {
            drop(stream);
            old.process.until_counted(1).await;
        }
    }
    old
}

/// It may have taken `Stopping` as the hand-over: it is killed (here: the kill recorded, the
/// pid the kernel's), so that only the old process serves.
#[tokio::test(start_paused = true)]
async fn a_new_process_that_never_acknowledges_is_killed_and_the_old_one_serves_on() {
    for then in [AfterStopping::Silent, AfterStopping::Serving] {
        let old = serves_then(then).await;
        let calls = [Call::TicketKeys, Call::QuicKeys, Call::Kill(std::process::id()), Call::Count("abandoned")];
        assert_eq!(old.process.calls(), calls);
        hands_over(old).await;
    }
}

/// A closed stream: the new process is gone already, and its pid is not ours to signal.
#[tokio::test(start_paused = true)]
async fn a_new_process_gone_before_acknowledging_is_not_killed() {
    let old = serves_then(AfterStopping::Gone).await;
    assert_eq!(old.process.calls(), [Call::TicketKeys, Call::QuicKeys, Call::Count("abandoned")]);
    assert_eq!(old.process.stops(), 0);
    hands_over(old).await;
}

/// Garbage, a message out of turn, an oversized announcement or silence instead of a hello:
/// each abandoned, nothing handed over, and the old side listens on.
#[tokio::test(start_paused = true)]
async fn anything_but_a_hello_is_abandoned() {
    let old = OldSide::start();
    // Not JSON; JSON without the length (its first bytes read as one); a length past the limit.
    let garbage: [&[u8]; 3] = [b"\0\0\0\x05hello", br#"{"serving":null}"#, &u32::MAX.to_be_bytes()];
    for bytes in garbage {
        let stream = old.connect().await;
        stream.writable().await.unwrap();
        assert_eq!(stream.try_write(bytes).unwrap(), bytes.len());
        old.abandons(&stream).await;
    }
    let out_of_turn = old.connect().await;
    wire::send(&out_of_turn, &Msg::Serving, &[]).await.unwrap();
    old.abandons(&out_of_turn).await;
    let silent = old.connect().await;
    let connected = Instant::now();
    old.abandons(&silent).await;
    assert!(connected.elapsed() >= HELLO_TIMEOUT, "waited {:?}", connected.elapsed());
    assert_eq!(old.process.counted(), ["abandoned"; 5]);
    assert!(!old.process.calls().contains(&Call::TicketKeys), "nothing handed over");
    hands_over(old).await;
}
