//! What the upgrade tests share: a process that records what the steps of either side asked of
//! it (with the production [`handover::serve`] running over it on a real Unix socket, it is the
//! old process of a test), and the sockets it hands over.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::handover::{self, OldProcess};
use super::lineage::Lineage;
use super::successor::NewProcess;
use super::takeover::{self, Handed, Takeover};
use super::{HandedListener, QuicKeys, RelayPair, Sockets};
use crate::config::UpgradeConfig;
use crate::tls::sessions::Exported;

/// What the steps asked of the process, in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Call {
    TicketKeys,
    QuicKeys,
    Stop,
    Sessions,
    Kill(u32),
    Count(&'static str),
    /// The new side's: adopted this many sessions.
    Adopted(usize),
    Shutdown,
}

/// The process as the steps see it: every call logged, in a watch so that a test waits for a
/// call instead of polling.
pub(super) struct Recording {
    calls: watch::Sender<Vec<Call>>,
    /// As a new process: stopped before its listeners accepted.
    stopped_first: bool,
}

/// The ticket keys the recording hands over.
pub(super) const TICKET_KEYS: &str = "keys of the old process";
/// The name of the one session store the recording hands over.
pub(super) const STORE: &str = "h3 127.0.0.1:443";

impl Recording {
    pub(super) fn new(stopped_first: bool) -> Arc<Self> {
        Arc::new(Self { calls: watch::Sender::new(Vec::new()), stopped_first })
    }

    fn record(&self, call: Call) {
        self.calls.send_modify(|calls| calls.push(call));
    }

    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// How often the process was told to stop.
    pub(super) fn stops(&self) -> usize {
        self.calls.borrow().iter().filter(|c| **c == Call::Stop).count()
    }

    /// The results counted, in order.
    pub(super) fn counted(&self) -> Vec<&'static str> {
        self.calls.borrow().iter().filter_map(|c| if let Call::Count(r) = c { Some(*r) } else { None }).collect()
    }

    /// Wait until `n` results have been counted.
    pub(super) async fn until_counted(&self, n: usize) {
        self.until(|calls| calls.iter().filter(|c| matches!(c, Call::Count(_))).count() >= n).await;
    }

    /// Wait until the calls so far satisfy `done`.
    pub(super) async fn until(&self, done: impl Fn(&[Call]) -> bool) {
        let _ = self.calls.subscribe().wait_for(|calls| done(calls)).await;
    }
}

impl OldProcess for Recording {
    fn ticket_keys(&self) -> String {
        self.record(Call::TicketKeys);
        TICKET_KEYS.into()
    }
    fn quic_keys(&self) -> QuicKeys {
        self.record(Call::QuicKeys);
        QuicKeys::random().unwrap()
    }
    fn stop(&self) {
        self.record(Call::Stop);
    }
    fn hand_over_sessions(&self) -> Vec<(String, Exported)> {
        self.record(Call::Sessions);
        vec![(STORE.into(), Exported::default())]
    }
    fn kill_new(&self, pid: u32) {
        // Recorded, never sent: the "new process" of these tests is the test process itself.
        self.record(Call::Kill(pid));
    }
    fn count(&self, result: &'static str) {
        self.record(Call::Count(result));
    }
}

impl NewProcess for Recording {
    async fn warm(&self, _limit: Duration) -> bool {
        true
    }
    async fn accepting(&self) -> bool {
        !self.stopped_first
    }
    fn adopt_sessions(&self, sessions: &[(String, Exported)]) -> usize {
        self.record(Call::Adopted(sessions.len()));
        sessions.len()
    }
    fn shutdown(&self) {
        self.record(Call::Shutdown);
    }
    fn count(&self, result: &'static str) {
        self.record(Call::Count(result));
    }
}

/// A real old side: [`handover::serve`] over a [`Recording`], on a socket in its own
/// temporary directory.
pub(super) struct OldSide {
    pub(super) process: Arc<Recording>,
    pub(super) lineage: Arc<Lineage>,
    /// Ends once the old side has handed over.
    pub(super) serving: JoinHandle<()>,
    pub(super) path: PathBuf,
    /// The listener's address, as handed over.
    pub(super) listen: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

/// How long the old side's configuration lets a new process warm.
pub(super) const WARM_TIMEOUT: Duration = Duration::from_secs(5);

impl OldSide {
    /// Start serving upgrades; the listener is bound once [`OldSide::connect`] gets through.
    pub(super) fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("upgrade.sock");
        let process = Recording::new(false);
        let lineage = Arc::new(Lineage::default());
        let (sockets, listen) = sockets();
        let config = UpgradeConfig { socket: path.clone(), warm_timeout: WARM_TIMEOUT };
        let serving = tokio::spawn({
            let (process, lineage) = (process.clone(), lineage.clone());
            async move { handover::serve(config, sockets, &*process, false, &lineage).await }
        });
        Self { process, lineage, serving, path, listen, _dir: dir }
    }

    /// A connection to the old side, once it listens (it binds in its own task).
    pub(super) async fn connect(&self) -> tokio::net::UnixStream {
        connect(&self.path).await
    }

    /// The new side's first step, by the production code: its hello, the sockets back.
    pub(super) async fn takeover(&self) -> (Takeover, Handed) {
        until_listening(&self.path, || takeover::connect(&self.path)).await
    }
}

/// Connect once something listens on `path`.
pub(super) async fn connect(path: &Path) -> tokio::net::UnixStream {
    until_listening(path, || tokio::net::UnixStream::connect(path)).await
}

/// What `connect` gives once something listens on `path` (a listener binds in its own task).
pub(super) async fn until_listening<T, E, F>(path: &Path, connect: impl Fn() -> F) -> T
where
    F: std::future::Future<Output = Result<T, E>>,
{
    for _ in 0..200 {
        if let Ok(connected) = connect().await {
            return connected;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing ever listened on {}", path.display());
}

/// An admin socket to hand over.
pub(super) fn admin() -> (std::net::SocketAddr, OwnedFd) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (listener.local_addr().unwrap(), listener.into())
}

/// What an old side hands over: the admin socket and one listener with HTTP/3 (a TCP socket, a
/// UDP socket and its relay), all on 127.0.0.1. The listener's address.
pub(super) fn sockets() -> (Sockets, std::net::SocketAddr) {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = tcp.local_addr().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay = RelayPair::new().unwrap();
    let listener = HandedListener { listen, tcp: tcp.into(), udp: vec![udp.into()], relays: vec![relay.send] };
    (Sockets { admin: admin(), listeners: vec![listener] }, listen)
}
