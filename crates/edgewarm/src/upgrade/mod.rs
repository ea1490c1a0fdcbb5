//! Binary upgrades with nothing dropped: the running process hands its listening sockets to a
//! new one over a Unix socket (`upgrade.socket`), and the new one warms its origin connections
//! before it accepts anything.
//!
//! ```text
//!  new (edgewarm run --upgrade)             old (serving)
//!  config loaded, pools start warming
//!  connect upgrade.socket ──── Hello ───────▶ peer is our user or root? (its pid: the kernel's)
//!                         ◀── Sockets + fds ─ admin, each listener's TCP and UDP sockets (dups),
//!                                             the session-ticket keys, how long it will wait
//!  pools warm (< that wait), accepting
//!                         ──── Serving ─────▶
//!                         ◀── Stopping{pid} ─ (may still abandon until acknowledged)
//!  MAINPID=self           ──── TakingOver ──▶ MAINPID=new, stop accepting, drain
//!  adopt the sessions     ◀── Sessions ────── the 0-RTT session stores, then exit
//!  bind upgrade.socket for the next upgrade
//! ```
//!
//! Both processes hold the same listening sockets, so a connection in the accept queue is taken
//! by one or the other, never reset: the old one stops accepting only once the new one accepts.
//! Anything that goes wrong before `TakingOver` (a bad config exits 64 before it connects; a
//! crash, a kill or a timeout shows as the stream closing) leaves the old process serving as
//! before; it counts `edgewarm_upgrades_total{result="abandoned"}` and waits for the next try.
//! A new process that never hears `Stopping` stops accepting and exits non-zero; one that hears
//! it but does not acknowledge in time is killed by the old one: never two processes serving
//! side by side for good.
//!
//! QUIC connections do not move: both processes read the same UDP sockets, so a datagram of a
//! connection the old process still has can reach the new one, which answers with a stateless
//! reset; the client reconnects at once (with 0-RTT when its route allows).
//!
//! - [`wire`]: the messages, and file descriptors over the stream (`SCM_RIGHTS`).
//! - [`handover`]: the old side; [`takeover`]: the new side.

pub mod handover;
pub mod takeover;
pub mod wire;

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

/// The sockets one process hands to the next: its own descriptors stay open (these are dups).
#[derive(Debug)]
pub struct Sockets {
    pub admin: (SocketAddr, OwnedFd),
    pub listeners: Vec<HandedListener>,
}

/// One configured listener's sockets, by the address in the configuration.
#[derive(Debug)]
pub struct HandedListener {
    pub listen: SocketAddr,
    pub tcp: OwnedFd,
    /// HTTP/3: one per worker, in one `SO_REUSEPORT` group.
    pub udp: Vec<OwnedFd>,
}

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no edgewarm answers on {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("the other process closed the upgrade connection")]
    Closed,
    /// Connected and closed before saying hello: a liveness check, not an upgrade.
    #[error("connected and closed without a hello")]
    Probe,
    #[error("unexpected message: {0}")]
    Protocol(String),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("refused: peer uid {0} is neither ours nor root")]
    Peer(u32),
    /// A stop signal reached the new process before it served.
    #[error("stopped before it served")]
    Stopped,
}
