//! The old side of an upgrade: listen on `upgrade.socket`, hand the sockets to a new process,
//! and stop accepting once it says it serves; the process behind [`OldProcess`].
//!
//! ```text
//!  accept ─▶ hello ─▶ sockets ─▶ serving ─▶ Stopping ─▶ acknowledged ─▶ stop, sessions: handed_over
//!    ▲         │                   │                      │
//!    │         │ closed at once: a probe (not counted)    │ anything else, or too late:
//!    │         │ anything else, or too late: abandoned    │ killed if still there; abandoned
//!    └─────────┴───────────────────┴──────────────────────┘ (serving on, as before)
//! ```

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::lineage::Lineage;
use super::wire::{self, Msg};
use super::{QuicKeys, Sockets, UpgradeError};
use crate::config::UpgradeConfig;
use crate::tls::sessions::Exported;

/// How long a new process may take to say hello, and to acknowledge `Stopping`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Beyond its warm-up: a new process that has its sockets should be serving by then.
const SERVING_SLACK: Duration = Duration::from_secs(30);
/// How long sending the 0-RTT sessions may take before the draining process gives up on it.
const SESSIONS_TIMEOUT: Duration = Duration::from_secs(30);

/// What the old side needs of the process it runs in ([`crate::server::Server`]).
pub trait OldProcess: Send + Sync {
    /// The session-ticket keys, at the moment of a hand-over.
    fn ticket_keys(&self) -> String;
    /// The HTTP/3 endpoints' keys.
    fn quic_keys(&self) -> QuicKeys;
    /// The new process serves: stop accepting (the process then drains), leave the UDP sockets
    /// to it, and close the admin listener (`/ready` and `/metrics` are the new one's now).
    fn stop(&self);
    /// The 0-RTT session stores, taken once accepting has stopped: from then on they resume
    /// nothing here.
    fn hand_over_sessions(&self) -> Vec<(String, Exported)>;
    /// End a new process that has `Stopping` but did not acknowledge it ([`kill`]).
    fn kill_new(&self, pid: u32);
    /// `edgewarm_upgrades_total{result}` (the old side's results).
    fn count(&self, result: &'static str);
}

/// Serve upgrade requests until one succeeds; then the process has stopped accepting (it
/// drains: [`OldProcess::stop`] ran, with the upgrade's last step begun in `lineage`) and its
/// 0-RTT sessions have gone to the new process. Without the socket (another edgewarm owns the
/// path, no permission) it logs once and returns: the proxy serves on, only upgrades are off.
/// `took_over`: this process has just taken over, so the path's listener is the old process's,
/// on its way out: replaced.
pub async fn serve<P: OldProcess>(
    config: UpgradeConfig,
    sockets: Sockets,
    process: &P,
    took_over: bool,
    lineage: &Lineage,
) {
    let listener = match bind(&config.socket, took_over).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(socket = %config.socket.display(), error = %e, "upgrades off: cannot listen on the upgrade socket");
            return;
        }
    };
    tracing::info!(socket = %config.socket.display(), "listening for upgrades");
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: try again later rather than spin.
                tracing::warn!(error = %e, "upgrade socket: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match hand_over(&stream, &sockets, process, config.warm_timeout + SERVING_SLACK, lineage).await {
            Ok(()) => {
                process.count("handed_over");
                return;
            }
            // Connected and closed without a word: another process checking whether this
            // socket is alive (see `bind`), not an upgrade.
            Err(UpgradeError::Probe) => {}
            Err(e) => {
                process.count("abandoned");
                tracing::warn!(error = %e, "upgrade abandoned, still serving");
            }
        }
    }
}

async fn hand_over<P: OldProcess>(
    stream: &UnixStream,
    sockets: &Sockets,
    process: &P,
    serving_timeout: Duration,
    lineage: &Lineage,
) -> Result<(), UpgradeError> {
    let cred = stream.peer_cred()?;
    let own = rustix::process::geteuid().as_raw();
    if cred.uid() != own && cred.uid() != 0 {
        return Err(UpgradeError::Peer(cred.uid()));
    }
    let (hello, _) = match tokio::time::timeout(HELLO_TIMEOUT, wire::recv(stream, wire::MAX_FROM_NEW)).await {
        Ok(Err(UpgradeError::Closed)) => return Err(UpgradeError::Probe),
        Ok(got) => got?,
        Err(_) => return Err(UpgradeError::Timeout("the new process's hello")),
    };
    let Msg::Hello { pid: said, version, relays: takes_relays } = hello else {
        return Err(UpgradeError::Protocol(format!("{hello:?} instead of a hello")));
    };
    // The kernel's word for who is connected, not the message's.
    let pid = cred.pid().and_then(|p| u32::try_from(p).ok()).unwrap_or(said);
    tracing::info!(new_pid = pid, new_version = %version, "upgrade: handing the listening sockets over");
    let mut fds = vec![sockets.admin.1.as_fd()];
    let mut listeners = Vec::new();
    for l in &sockets.listeners {
        fds.push(l.tcp.as_fd());
        fds.extend(l.udp.iter().map(AsFd::as_fd));
        listeners.push((l.listen, l.udp.len()));
    }
    if fds.len() > wire::MAX_FDS {
        return Err(UpgradeError::Protocol(format!("{} sockets: more than one message carries", fds.len())));
    }
    // A relay for every UDP socket, or none at all (then the new process's HTTP/3 clients of
    // this one wait for their idle timeout when it exits, as before relays).
    let relays: Vec<_> = sockets.listeners.iter().flat_map(|l| l.relays.iter().map(AsFd::as_fd)).collect();
    let udp = sockets.listeners.iter().map(|l| l.udp.len()).sum::<usize>();
    let relays = takes_relays && relays.len() == udp && relays.len() <= wire::MAX_FDS && udp > 0;
    let ticket_keys = process.ticket_keys();
    let wait_ms = u64::try_from(serving_timeout.as_millis()).unwrap_or(u64::MAX);
    let quic = Some(process.quic_keys());
    let msg = Msg::Sockets { admin: sockets.admin.0, listeners, ticket_keys, wait_ms, quic, relays };
    wire::send(stream, &msg, &fds).await?;
    if relays {
        let ends: Vec<_> = sockets.listeners.iter().flat_map(|l| l.relays.iter().map(AsFd::as_fd)).collect();
        wire::send(stream, &Msg::Relays, &ends).await?;
    }
    expect(stream, serving_timeout, "the new process to serve", |m| matches!(m, Msg::Serving)).await?;
    // Two steps, so that exactly one process stops serving: until the new process has
    // acknowledged, this one may still abandon and serve on (the new one then exits).
    wire::send(stream, &Msg::Stopping { pid: std::process::id() }, &[]).await?;
    if let Err(e) =
        expect(stream, HELLO_TIMEOUT, "the new process to acknowledge", |m| matches!(m, Msg::TakingOver)).await
    {
        // The new process has `Stopping` and may have taken it as the hand-over: one that is
        // still there (silent, or saying something else) is killed, so that only this one
        // serves, and systemd hears that this one is still the main process. (A closed or
        // reset stream means it is gone already: its pid is not ours to signal.)
        if matches!(e, UpgradeError::Timeout(_) | UpgradeError::Protocol(_)) {
            process.kill_new(pid);
            let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(std::process::id())]);
        }
        return Err(e);
    }
    tracing::info!(new_pid = pid, "upgrade: the new process serves; this one stops accepting and drains");
    // systemd follows the new process as the service's main one; before this one can exit.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)]);
    // Before the stop: the process's end waits for the sessions once its drain is over.
    lineage.begin_last_step();
    process.stop();
    // Taken after accepting stopped: no session is used here once it has crossed.
    let sessions = process.hand_over_sessions();
    let sent = tokio::time::timeout(SESSIONS_TIMEOUT, wire::send(stream, &Msg::Sessions { sessions }, &[])).await;
    if !matches!(sent, Ok(Ok(()))) {
        tracing::warn!("upgrade: the 0-RTT sessions did not reach the new process; its returning clients do 1-RTT");
    }
    Ok(())
}

/// SIGKILL to a new process that did not finish its side of the hand-over.
pub fn kill(pid: u32) {
    let Some(target) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return };
    match rustix::process::kill_process(target, rustix::process::Signal::KILL) {
        Ok(()) => tracing::warn!(new_pid = pid, "upgrade: the new process did not acknowledge stopping; killed it"),
        Err(e) => tracing::warn!(new_pid = pid, error = %e, "upgrade: could not kill the new process"),
    }
}

/// Wait (at most `limit`) for the message `want` accepts.
async fn expect(
    stream: &UnixStream,
    limit: Duration,
    what: &'static str,
    want: impl Fn(&Msg) -> bool,
) -> Result<(), UpgradeError> {
    let (msg, _) = tokio::time::timeout(limit, wire::recv(stream, wire::MAX_FROM_NEW))
        .await
        .map_err(|_| UpgradeError::Timeout(what))??;
    if want(&msg) {
        Ok(())
    } else {
        Err(UpgradeError::Protocol(format!("{msg:?} while waiting for {what}")))
    }
}

/// Listen on `path`, mode 0600. A socket file nobody answers on is a leftover and replaced;
/// one that answers belongs to a running edgewarm and is left alone, unless `replace`.
pub async fn bind(path: &Path, replace: bool) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        if !replace && UnixStream::connect(path).await.is_ok() {
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "another process listens on it"));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(listener)
}

#[cfg(test)]
mod tests;
