//! The new side of an upgrade (`edgewarm run --upgrade`): ask the running process for its
//! sockets, and tell it to stop once this one serves.

use std::path::Path;

use tokio::net::UnixStream;

use super::wire::{self, Msg};
use super::{HandedListener, Sockets, UpgradeError};

/// The conversation with the old process, between receiving the sockets and taking over.
#[derive(Debug)]
pub struct Takeover {
    stream: UnixStream,
}

/// Connect to the running process at `path` and receive its sockets and ticket keys.
pub async fn connect(path: &Path) -> Result<(Takeover, Sockets, String), UpgradeError> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(|source| UpgradeError::Connect { path: path.display().to_string(), source })?;
    let hello = Msg::Hello { pid: std::process::id(), version: env!("CARGO_PKG_VERSION").into() };
    wire::send(&stream, &hello, &[]).await?;
    let (msg, fds) = wire::recv(&stream).await?;
    let Msg::Sockets { admin, listeners, ticket_keys } = msg else {
        return Err(UpgradeError::Protocol(format!("{msg:?} instead of the sockets")));
    };
    let want = 1 + listeners.iter().map(|(_, udp)| 1 + udp).sum::<usize>();
    if fds.len() != want {
        return Err(UpgradeError::Protocol(format!("{} descriptors for {want} sockets", fds.len())));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| UpgradeError::Protocol("descriptors ran out".into()));
    let admin = (admin, next()?);
    let mut handed = Vec::with_capacity(listeners.len());
    for (listen, udp) in listeners {
        let tcp = next()?;
        let udp = (0..udp).map(|_| next()).collect::<Result<_, _>>()?;
        handed.push(HandedListener { listen, tcp, udp });
    }
    Ok((Takeover { stream }, Sockets { admin, listeners: handed }, ticket_keys))
}

impl Takeover {
    /// This process accepts: the old one stops. Returns its pid.
    pub async fn serving(self) -> Result<u32, UpgradeError> {
        wire::send(&self.stream, &Msg::Serving, &[]).await?;
        match wire::recv(&self.stream).await? {
            (Msg::Stopping { pid }, _) => Ok(pid),
            (other, _) => Err(UpgradeError::Protocol(format!("{other:?} instead of stopping"))),
        }
    }
}
