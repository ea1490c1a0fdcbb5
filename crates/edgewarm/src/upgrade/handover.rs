//! The old side of an upgrade: listen on `upgrade.socket`, hand the sockets to a new process,
//! and stop accepting once it says it serves.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use tokio::net::{UnixListener, UnixStream};

use super::wire::{self, Msg};
use super::{Sockets, UpgradeError};
use crate::config::UpgradeConfig;
use crate::metrics::ResultLabel;

/// How long a new process may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Beyond its warm-up: a new process that has its sockets should be serving by then.
const SERVING_SLACK: Duration = Duration::from_secs(30);

/// Serve upgrade requests until one succeeds; then stop the server (it drains) and return
/// true. Without the socket (another edgewarm owns the path, no permission) it logs once and
/// returns false: the proxy serves on, only upgrades are off. `took_over`: this process has
/// just taken over, so the path's listener is the old process's, on its way out: replaced.
///
/// `count` is `edgewarm_upgrades_total`; `ticket_keys` gives the process's ticket keys at the
/// moment of a hand-over; `stop` stops the server accepting (it then drains).
pub async fn serve(
    config: UpgradeConfig,
    sockets: Sockets,
    count: Family<ResultLabel, Counter>,
    ticket_keys: impl Fn() -> String,
    stop: impl FnOnce(),
    took_over: bool,
) -> bool {
    let listener = match bind(&config.socket, took_over).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(socket = %config.socket.display(), error = %e, "upgrades off: cannot listen on the upgrade socket");
            return false;
        }
    };
    tracing::info!(socket = %config.socket.display(), "listening for upgrades");
    let count = |result: &'static str| count.get_or_create(&ResultLabel { result }).inc();
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        match hand_over(&stream, &sockets, ticket_keys(), config.warm_timeout + SERVING_SLACK).await {
            Ok(pid) => {
                count("handed_over");
                tracing::info!(new_pid = pid, "upgrade: the new process serves; this one stops accepting and drains");
                // systemd follows the new process as the service's main one.
                let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)]);
                stop();
                return true;
            }
            Err(e) => {
                count("abandoned");
                tracing::warn!(error = %e, "upgrade abandoned, still serving");
            }
        }
    }
}

async fn hand_over(
    stream: &UnixStream,
    sockets: &Sockets,
    ticket_keys: String,
    serving_timeout: Duration,
) -> Result<u32, UpgradeError> {
    let peer = stream.peer_cred()?.uid();
    let own = rustix::process::geteuid().as_raw();
    if peer != own && peer != 0 {
        return Err(UpgradeError::Peer(peer));
    }
    let (hello, _) = tokio::time::timeout(HELLO_TIMEOUT, wire::recv(stream))
        .await
        .map_err(|_| UpgradeError::Timeout("the new process's hello"))??;
    let Msg::Hello { pid, version } = hello else {
        return Err(UpgradeError::Protocol(format!("{hello:?} instead of a hello")));
    };
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
    wire::send(stream, &Msg::Sockets { admin: sockets.admin.0, listeners, ticket_keys }, &fds).await?;
    let (serving, _) = tokio::time::timeout(serving_timeout, wire::recv(stream))
        .await
        .map_err(|_| UpgradeError::Timeout("the new process to serve"))??;
    if !matches!(serving, Msg::Serving) {
        return Err(UpgradeError::Protocol(format!("{serving:?} instead of serving")));
    }
    wire::send(stream, &Msg::Stopping { pid: std::process::id() }, &[]).await?;
    Ok(pid)
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
