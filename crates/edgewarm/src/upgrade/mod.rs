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
//! QUIC connections stay with the old process until they drain: once it has stopped accepting
//! it reads the UDP sockets no more, and the new process relays it their datagrams
//! ([`crate::listener::quic::relay`], over a Unix datagram pair per socket handed over with it);
//! after upgrades in quick succession, along the chain of processes still draining.
//!
//! - [`wire`]: the messages, and file descriptors over the stream (`SCM_RIGHTS`).
//! - [`handover`]: the old side's steps, behind [`handover::OldProcess`]; [`takeover`]: the new
//!   side's messages; [`successor`]: the new side's steps (warm, ask, acknowledge, serve,
//!   abandon), behind [`successor::NewProcess`].
//! - [`steps`]: both sides in one process's life, and what its end waits for; [`lineage`]: what
//!   the steps leave for that end to read.

pub mod handover;
pub mod lineage;
pub mod steps;
pub mod successor;
pub mod takeover;
#[cfg(test)]
mod testing;
pub mod wire;

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;

use serde::{Deserialize, Serialize};

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
    /// One per UDP socket: the sending end of its relay ([`RelayPair`]); none from a process
    /// that predates relaying.
    pub relays: Vec<OwnedFd>,
}

/// The keys one process's HTTP/3 endpoints share, and hand to the next process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuicKeys {
    /// Stateless-reset tokens are derived from it (RFC 9000 §10.3).
    pub reset: [u8; 32],
    /// Connection IDs are signed with it, after their socket's index.
    pub cid: u64,
    /// The ID keys of the processes it took over from, the latest first (they may still be
    /// draining): at most [`QuicKeys::EARLIER`].
    #[serde(default)]
    pub earlier: Vec<u64>,
    /// With `tls.ticket_keys`, the ID keys of every generation of processes that share the
    /// file ([`QuicKeys::GENERATIONS`], derived from it; empty without it). IDs signed by any
    /// of them are valid here, so a connection of a process that crashed is answered by its
    /// successor with a stateless reset its peer believes (the reset key is derived from the
    /// file too): the peer learns at once, not at its idle timeout (issue 46).
    #[serde(default)]
    pub family: Vec<u64>,
    /// This process's place in `family`: one more than the process it took over from.
    #[serde(default)]
    pub generation: usize,
}

/// This machine's identity for [`QuicKeys::from_secret`]: systemd's machine ID, else the host
/// name. Stable across restarts, distinct between the nodes of a fleet.
pub fn host_identity() -> Vec<u8> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/hostname"]
        .iter()
        .find_map(|p| std::fs::read(p).ok().filter(|b| !b.trim_ascii().is_empty()))
        .map(|b| b.trim_ascii().to_vec())
        .unwrap_or_default()
}

impl QuicKeys {
    /// Fresh keys for a process that did not take over from another.
    pub fn random() -> io::Result<Self> {
        let mut bytes = [0; 40];
        aws_lc_rs::rand::fill(&mut bytes).map_err(|_| io::Error::other("no random bytes for the QUIC keys"))?;
        let mut reset = [0; 32];
        reset.copy_from_slice(&bytes[..32]);
        let mut cid = [0; 8];
        cid.copy_from_slice(&bytes[32..]);
        Ok(Self { reset, cid: u64::from_ne_bytes(cid), earlier: Vec::new(), family: Vec::new(), generation: 0 })
    }

    /// Generations of ID keys derived from one secret: more than [`QuicKeys::EARLIER`] + 1, so
    /// a process's own key is never one of those it relays for.
    pub const GENERATIONS: usize = 8;

    /// The keys of a process that did not take over from another, derived from `secret` (from
    /// `tls.ticket_keys`), so that a process started after another crashed on this host resets
    /// the dead one's connections in a way their peers believe.
    ///
    /// `host` (this machine's identity, [`host_identity`]) goes into every derivation: only the
    /// processes of one host share keys. Across hosts a shared reset key would be an oracle
    /// (RFC 9000 §21.11): a packet bearing one node's connection ID, sent to another node,
    /// would draw a reset that ends the first node's connection.
    pub fn from_secret(secret: &[u8; 32], host: &[u8]) -> Self {
        use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
        let prk = Salt::new(HKDF_SHA256, b"edgewarm quic keys").extract(secret);
        let derive = |info: &[u8]| {
            let mut out = [0; 32];
            prk.expand(&[host, info], HKDF_SHA256)
                .and_then(|okm| okm.fill(&mut out))
                .expect("32 bytes is HKDF-SHA256's output length");
            out
        };
        let reset = derive(b"stateless reset");
        let family: Vec<u64> = (0..Self::GENERATIONS)
            .map(|g| {
                let key = derive(format!("connection ids {g}").as_bytes());
                u64::from_le_bytes(key[..8].try_into().expect("8 of 32 bytes"))
            })
            .collect();
        Self { reset, cid: family[0], earlier: Vec::new(), family, generation: 0 }
    }

    /// The family's ID keys this process accepts: all but its successor's. While an upgrade
    /// hands over, both processes read the sockets for a moment; were the successor's IDs valid
    /// here, this process would answer a packet of the successor's new connection with a reset
    /// (so a crashed process exactly one upgrade on from a cold start is the one whose
    /// connections a successor started cold cannot reset: they end by silence instead).
    pub fn family_accepted(&self) -> Vec<u64> {
        let successor = (self.generation + 1) % Self::GENERATIONS;
        self.family.iter().enumerate().filter(|(g, _)| *g != successor).map(|(_, &k)| k).collect()
    }

    /// How many earlier processes' ID keys are kept: upgrades closer together than their drains.
    pub const EARLIER: usize = 4;

    /// The keys of a process taking over from one that used `old`: the same reset key (so
    /// resets for the old process's connections are believed), a new ID key (so its IDs and
    /// the old ones are told apart: the next generation's where they are derived), and the old
    /// ID keys.
    pub fn after(old: &Self) -> io::Result<Self> {
        let earlier = std::iter::once(old.cid).chain(old.earlier.iter().copied()).take(Self::EARLIER).collect();
        let generation = (old.generation + 1) % Self::GENERATIONS;
        let cid = match old.family.get(generation) {
            Some(&key) => key,
            None => Self::random()?.cid,
        };
        Ok(Self { reset: old.reset, cid, earlier, family: old.family.clone(), generation })
    }
}

/// One socket's relay, made by the process that binds or adopts the socket: it receives on
/// `receive` once a newer process relays to it, and hands `send` to that process.
#[derive(Debug)]
pub struct RelayPair {
    pub receive: UnixDatagram,
    pub send: OwnedFd,
}

impl RelayPair {
    pub fn new() -> io::Result<Self> {
        let (receive, send) = UnixDatagram::pair()?;
        receive.set_nonblocking(true)?;
        Ok(Self { receive, send: send.into() })
    }
}

/// Wait until the process `pid` has exited (or is a zombie: exited, not yet reaped), for at
/// most `limit`. Whether it has. It is not our child, so /proc is where to look.
pub async fn outlive(pid: u32, limit: std::time::Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // The state is the field after the command name, which is in parentheses.
        let gone = state
            .as_deref()
            .and_then(|s| s.rsplit_once(')'))
            .is_none_or(|(_, rest)| rest.trim_start().starts_with('Z'));
        if gone {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
