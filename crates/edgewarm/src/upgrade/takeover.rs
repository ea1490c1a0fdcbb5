//! The new side of an upgrade (`edgewarm run --upgrade`): ask the running process for its
//! sockets, and tell it to stop once this one serves.

use std::path::Path;
use std::time::Duration;

use tokio::net::UnixStream;

use super::wire::{self, Msg};
use super::{HandedListener, Sockets, UpgradeError};
use crate::tls::sessions::Exported;

/// How long connecting and receiving the sockets may take.
const SOCKETS_TIMEOUT: Duration = Duration::from_secs(10);
/// The old process answers `Serving` at once; no answer means it abandoned the upgrade.
const STOPPING_TIMEOUT: Duration = Duration::from_secs(10);
/// The sessions follow once the old process has stopped accepting (a large store takes a while).
const SESSIONS_TIMEOUT: Duration = Duration::from_secs(60);

/// The conversation with the old process, between receiving the sockets and taking over.
#[derive(Debug)]
pub struct Takeover {
    stream: UnixStream,
}

/// What the old process hands over first.
#[derive(Debug)]
pub struct Handed {
    pub sockets: Sockets,
    /// Its session-ticket keys (base64 lines).
    pub ticket_keys: String,
    /// How long it waits for this process to serve: warming must end well before.
    pub wait: Duration,
    /// Its HTTP/3 endpoints' keys, if it has any to give.
    pub quic: Option<super::QuicKeys>,
}

/// Connect to the running process at `path` and receive its sockets and ticket keys.
pub async fn connect(path: &Path) -> Result<(Takeover, Handed), UpgradeError> {
    let stream = tokio::time::timeout(SOCKETS_TIMEOUT, UnixStream::connect(path))
        .await
        .map_err(|_| UpgradeError::Timeout("the running process to answer"))?
        .map_err(|source| UpgradeError::Connect { path: path.display().to_string(), source })?;
    let hello = Msg::Hello { pid: std::process::id(), version: env!("CARGO_PKG_VERSION").into(), relays: true };
    wire::send(&stream, &hello, &[]).await?;
    let (msg, fds) = tokio::time::timeout(SOCKETS_TIMEOUT, wire::recv(&stream, wire::MAX_FROM_OLD))
        .await
        .map_err(|_| UpgradeError::Timeout("the sockets"))??;
    let Msg::Sockets { admin, listeners, ticket_keys, wait_ms, quic, relays } = msg else {
        return Err(UpgradeError::Protocol(format!("{msg:?} instead of the sockets")));
    };
    let want = 1 + listeners.iter().map(|(_, udp)| 1 + udp).sum::<usize>();
    if fds.len() != want {
        return Err(UpgradeError::Protocol(format!("{} descriptors for {want} sockets", fds.len())));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| UpgradeError::Protocol("descriptors ran out".into()));
    let admin = (admin, next()?);
    let mut relay_fds = if relays {
        let udp = listeners.iter().map(|(_, udp)| udp).sum::<usize>();
        let (msg, fds) = tokio::time::timeout(SOCKETS_TIMEOUT, wire::recv(&stream, wire::MAX_FROM_OLD))
            .await
            .map_err(|_| UpgradeError::Timeout("the HTTP/3 relays"))??;
        if !matches!(msg, Msg::Relays) || fds.len() != udp {
            return Err(UpgradeError::Protocol(format!("{msg:?} with {} descriptors for {udp} relays", fds.len())));
        }
        fds.into_iter()
    } else {
        Vec::new().into_iter()
    };
    let mut handed = Vec::with_capacity(listeners.len());
    for (listen, udp) in listeners {
        let tcp = next()?;
        let udp: Vec<_> = (0..udp).map(|_| next()).collect::<Result<_, _>>()?;
        let relays = relay_fds.by_ref().take(udp.len()).collect();
        handed.push(HandedListener { listen, tcp, udp, relays });
    }
    let sockets = Sockets { admin, listeners: handed };
    Ok((Takeover { stream }, Handed { sockets, ticket_keys, wait: Duration::from_millis(wait_ms), quic }))
}

impl Takeover {
    /// This process accepts: ask the old one to stop. Its pid once it has agreed; from then on
    /// this process is the one that serves. An error: the old process serves on (it abandoned
    /// the upgrade, or died), and this one must not stay beside it.
    pub async fn serving(&self) -> Result<u32, UpgradeError> {
        wire::send(&self.stream, &Msg::Serving, &[]).await?;
        let (msg, _) = tokio::time::timeout(STOPPING_TIMEOUT, wire::recv(&self.stream, wire::MAX_FROM_NEW))
            .await
            .map_err(|_| UpgradeError::Timeout("the old process to stop"))??;
        let Msg::Stopping { pid } = msg else {
            return Err(UpgradeError::Protocol(format!("{msg:?} instead of stopping")));
        };
        wire::send(&self.stream, &Msg::TakingOver, &[]).await?;
        Ok(pid)
    }

    /// The old process's 0-RTT sessions, sent once it has stopped accepting.
    pub async fn sessions(self) -> Result<Vec<(String, Exported)>, UpgradeError> {
        let (msg, _) = tokio::time::timeout(SESSIONS_TIMEOUT, wire::recv(&self.stream, wire::MAX_FROM_OLD))
            .await
            .map_err(|_| UpgradeError::Timeout("the 0-RTT sessions"))??;
        match msg {
            Msg::Sessions { sessions } => Ok(sessions),
            other => Err(UpgradeError::Protocol(format!("{other:?} instead of the sessions"))),
        }
    }
}
