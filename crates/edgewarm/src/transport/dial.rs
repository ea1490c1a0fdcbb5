//! Connecting to an origin: resolve ([`super::resolve`]), try every address, one deadline.
//!
//! The connect timeout covers resolution and all attempts together; each address gets an equal
//! share of what is left, so one black-holed address cannot eat the whole budget while a good
//! one waits behind it. With TCP Fast Open the connect is only armed here and the SYN leaves
//! with the first write, so the first write is part of connecting: [`connect`] takes the bytes
//! to send first and returns once they are handed to the kernel.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use super::fastopen::send_fastopen;
use super::resolve::Resolver;
use super::sockopt;
use crate::config::OriginAddr;
use crate::error::CloseReason;
use crate::metrics::ConnectFailure;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused by {0}")]
    Refused(SocketAddr),
    #[error("cannot resolve origin: {0}")]
    Resolve(io::Error),
    #[error("origin unreachable: {0}")]
    Unreachable(io::Error),
    #[error("origin connect timed out")]
    Timeout,
}

impl ConnectError {
    pub fn close_reason(&self) -> CloseReason {
        match self {
            Self::Refused(_) => CloseReason::OriginRefused,
            Self::Resolve(_) | Self::Unreachable(_) => CloseReason::OriginUnreachable,
            Self::Timeout => CloseReason::OriginTimeout,
        }
    }
    /// The `reason` of `origin_connect_failures`: finer than the close reason, which takes a
    /// name that does not resolve for an unreachable address.
    pub fn failure(&self) -> ConnectFailure {
        match self {
            Self::Refused(_) => ConnectFailure::Refused,
            Self::Resolve(_) => ConnectFailure::Resolve,
            Self::Unreachable(_) => ConnectFailure::Unreachable,
            Self::Timeout => ConnectFailure::Timeout,
        }
    }
}

/// Connect to `origin` and send `first` (the replayed ClientHello). Returns the stream and
/// the address that answered.
pub async fn connect(
    resolver: &Resolver,
    origin: &OriginAddr,
    fastopen: bool,
    timeout: Duration,
    first: &[u8],
) -> Result<(TcpStream, SocketAddr), ConnectError> {
    connect_with(resolver, origin, fastopen, timeout, first, None).await
}

/// [`connect`], the socket using the congestion control `congestion` (the system's if `None`,
/// or if the kernel refuses it: a warning, and the connection goes on).
pub async fn connect_with(
    resolver: &Resolver,
    origin: &OriginAddr,
    fastopen: bool,
    timeout: Duration,
    first: &[u8],
    congestion: Option<&str>,
) -> Result<(TcpStream, SocketAddr), ConnectError> {
    let deadline = Instant::now() + timeout;
    let addrs = tokio::time::timeout_at(deadline, resolver.resolve(origin))
        .await
        .map_err(|_| ConnectError::Timeout)?
        .map_err(ConnectError::Resolve)?;
    let mut last = ConnectError::Resolve(io::Error::new(io::ErrorKind::NotFound, "no addresses"));
    for (i, addr) in addrs.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let share = left / u32::try_from(addrs.len() - i).unwrap_or(u32::MAX);
        match tokio::time::timeout(share, attempt(*addr, fastopen, first, congestion)).await {
            Ok(Ok(stream)) => return Ok((stream, *addr)),
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => last = ConnectError::Refused(*addr),
            Ok(Err(e)) => last = ConnectError::Unreachable(e),
            Err(_) => last = ConnectError::Timeout,
        }
    }
    Err(last)
}

async fn attempt(addr: SocketAddr, fastopen: bool, first: &[u8], congestion: Option<&str>) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    sockopt::set_nodelay(&socket)?;
    if let Some(name) = congestion {
        if let Err(e) = sockopt::set_congestion(&socket, name) {
            tracing::warn!(congestion = name, error = %e, "cannot set the origin socket's congestion control; using the system's");
        }
    }
    if fastopen {
        sockopt::set_fastopen_connect(&socket)?;
    }
    let mut stream = socket.connect(addr).await?;
    if fastopen {
        write_fastopen(&stream, first).await?;
    } else {
        stream.write_all(first).await?;
    }
    Ok(stream)
}

/// First write on a TCP_FASTOPEN_CONNECT socket. Without a cookie for this origin the kernel
/// sends a plain SYN and reports EINPROGRESS: that is "connecting", so it becomes WouldBlock
/// (clearing readiness) and we wait for the socket to become writable, i.e. connected.
async fn write_fastopen(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || send_fastopen(stream, buf));
        match sent {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
