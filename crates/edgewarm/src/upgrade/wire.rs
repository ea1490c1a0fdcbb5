//! The upgrade conversation: length-prefixed JSON messages on a Unix stream, the sockets riding
//! on the first byte of the message that lists them (`SCM_RIGHTS`, through rustix: received
//! descriptors arrive as `OwnedFd` and close-on-exec).

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::UpgradeError;

/// The longest message the old process takes from the new one (a hello, an acknowledgement).
pub const MAX_FROM_NEW: usize = 64 * 1024;
/// The longest the new process takes from the old one: the largest is a busy process's 0-RTT
/// sessions (up to 256 Ki per store); a peer announcing more is not edgewarm.
pub const MAX_FROM_OLD: usize = 1 << 30;
/// The kernel's limit on descriptors in one message (`SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Msg {
    /// New → old: who is asking.
    /// `relays`: it takes the old process's HTTP/3 relays ([`Msg::Relays`]); absent from a
    /// binary that predates them, which must not be sent them.
    Hello {
        pid: u32,
        version: String,
        #[serde(default)]
        relays: bool,
    },
    /// Old → new: the sockets, in this order: admin, then each listener's TCP socket followed
    /// by its `udp` UDP sockets.
    /// With them, the process's session-ticket keys (base64 lines), so returning clients
    /// resume on the new process.
    /// `wait_ms`: how long the old process waits for `Serving`; the new one warms for less.
    Sockets {
        admin: SocketAddr,
        listeners: Vec<(SocketAddr, usize)>,
        ticket_keys: String,
        #[serde(default)]
        wait_ms: u64,
        /// The HTTP/3 endpoints' keys; absent from a process that predates relaying.
        #[serde(default)]
        quic: Option<super::QuicKeys>,
        /// A [`Msg::Relays`] follows.
        #[serde(default)]
        relays: bool,
    },
    /// Old → new, right after the sockets: the sending end of each UDP socket's relay, in the
    /// sockets' order (a message of their own: one message carries at most [`MAX_FDS`]).
    Relays,
    /// New → old: warm and accepting.
    Serving,
    /// Old → new: the old process will stop accepting once this is acknowledged.
    Stopping { pid: u32 },
    /// New → old: acknowledged; this process is the one that serves from now on.
    TakingOver,
    /// Old → new: stopped accepting, draining; its 0-RTT session stores by name, which resume
    /// nothing in the old process from now on.
    Sessions { sessions: Vec<(String, crate::tls::sessions::Exported)> },
}

/// Send one message, with `fds` attached.
pub async fn send(stream: &UnixStream, msg: &Msg, fds: &[BorrowedFd<'_>]) -> Result<(), UpgradeError> {
    let json = serde_json::to_vec(msg).map_err(|e| UpgradeError::Protocol(e.to_string()))?;
    let mut frame =
        u32::try_from(json.len()).map_err(|_| UpgradeError::Protocol("too long".into()))?.to_be_bytes().to_vec();
    frame.extend_from_slice(&json);
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut sent = 0;
    while sent < frame.len() {
        sent += stream
            .async_io(Interest::WRITABLE, || {
                let mut control = SendAncillaryBuffer::new(&mut space);
                // The descriptors go with the first byte only.
                if sent == 0 && !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
                    return Err(std::io::Error::other("too many descriptors for one message"));
                }
                Ok(sendmsg(stream, &[IoSlice::new(&frame[sent..])], &mut control, SendFlags::NOSIGNAL)?)
            })
            .await?;
    }
    Ok(())
}

/// Receive one message of at most `max` bytes and the descriptors that came with it. The two
/// sides take turns, so bytes past the message are a peer that is not edgewarm.
pub async fn recv(stream: &UnixStream, max: usize) -> Result<(Msg, Vec<OwnedFd>), UpgradeError> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut buf = vec![0u8; 64 * 1024];
    let (n, fds) = stream
        .async_io(Interest::READABLE, || {
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let got = recvmsg(stream, &mut [IoSliceMut::new(&mut buf)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
            if got.flags.contains(ReturnFlags::CTRUNC) {
                return Err(std::io::Error::other("descriptors truncated"));
            }
            let fds: Vec<OwnedFd> = control
                .drain()
                .flat_map(|m| match m {
                    RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
                    _ => Vec::new(),
                })
                .collect();
            Ok((got.bytes, fds))
        })
        .await?;
    if n == 0 {
        return Err(UpgradeError::Closed);
    }
    let mut have = buf[..n].to_vec();
    while have.len() < 4 {
        read_more(stream, &mut have).await?;
    }
    let len = u32::from_be_bytes([have[0], have[1], have[2], have[3]]) as usize;
    if len > max {
        return Err(UpgradeError::Protocol(format!("a {len}-byte message")));
    }
    while have.len() < 4 + len {
        read_more(stream, &mut have).await?;
    }
    if have.len() > 4 + len {
        return Err(UpgradeError::Protocol(format!("{} bytes past the message", have.len() - 4 - len)));
    }
    let msg = serde_json::from_slice(&have[4..4 + len]).map_err(|e| UpgradeError::Protocol(e.to_string()))?;
    Ok((msg, fds))
}

async fn read_more(stream: &UnixStream, have: &mut Vec<u8>) -> Result<(), UpgradeError> {
    let mut chunk = [0u8; 16 * 1024];
    let n = loop {
        stream.readable().await?;
        match stream.try_read(&mut chunk) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if n == 0 {
        return Err(UpgradeError::Closed);
    }
    have.extend_from_slice(&chunk[..n]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A listening socket sent over the stream accepts on the other side: the same socket.
    #[tokio::test]
    async fn a_listener_crosses_with_its_message() {
        let (a, b) = UnixStream::pair().unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let msg = Msg::Sockets {
            admin: addr,
            listeners: vec![(addr, 0)],
            ticket_keys: String::new(),
            wait_ms: 1,
            quic: None,
            relays: true,
        };
        send(&a, &msg, &[tcp.as_fd()]).await.unwrap();
        let (got, fds) = recv(&b, MAX_FROM_OLD).await.unwrap();
        assert!(matches!(got, Msg::Sockets { admin, .. } if admin == addr));
        assert_eq!(fds.len(), 1);
        let received = std::net::TcpListener::from(fds.into_iter().next().unwrap());
        assert_eq!(received.local_addr().unwrap(), addr);
        drop(tcp);
        let _client = std::net::TcpStream::connect(addr).unwrap();
        assert!(received.accept().is_ok());
    }

    #[tokio::test]
    async fn a_closed_stream_and_an_oversized_message_are_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(matches!(recv(&b, MAX_FROM_OLD).await, Err(UpgradeError::Closed)));
        let (a, b) = UnixStream::pair().unwrap();
        a.try_write(&u32::MAX.to_be_bytes()).unwrap();
        assert!(matches!(recv(&b, MAX_FROM_OLD).await, Err(UpgradeError::Protocol(_))));
        // A hello-sized limit refuses what the new process's side would take.
        let (a, b) = UnixStream::pair().unwrap();
        a.try_write(&(MAX_FROM_NEW as u32 + 1).to_be_bytes()).unwrap();
        assert!(matches!(recv(&b, MAX_FROM_NEW).await, Err(UpgradeError::Protocol(_))));
    }

    /// Two messages where one is due: the second is not silently dropped.
    #[tokio::test]
    async fn bytes_past_a_message_are_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &Msg::Serving, &[]).await.unwrap();
        send(&a, &Msg::TakingOver, &[]).await.unwrap();
        assert!(matches!(recv(&b, MAX_FROM_NEW).await, Err(UpgradeError::Protocol(m)) if m.contains("past")));
    }
}
