//! Handing a rustls session to the kernel.
//!
//! rustls gives up its keys only at a quiet point, and the kernel must take over exactly there:
//! 1. Nothing left to send: rustls's outgoing records are flushed (it refuses otherwise).
//! 2. A record boundary on the receive side: with [`Aligned`] reads, at most one record is
//!    partly read; the rest of it is read into rustls (never more), without taking any
//!    plaintext out, so that a session that cannot move loses nothing and stays in user space.
//! 3. The plaintext rustls had already decrypted is carried over ([`KtlsStream`] reads it
//!    first), the keys and both record sequence numbers go to the kernel.
//!
//! Everything that can refuse (the cipher, the alignment, a peer that already closed) is
//! checked before step 3; extraction consumes the rustls session, so a failure after it (the
//! kernel refusing keys it accepted in the probe) loses the connection, and is counted.

use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::{cipher_of_suite, set_keys, support, Aligned, KtlsStream};
use crate::metrics::KtlsResult as Outcome;
use crate::transport::{sockopt, Rewind};

/// A session terminated here, in user space or handed to the kernel.
pub enum Offloaded<S> {
    User(S),
    Kernel(KtlsStream),
}

/// The socket under a session's [`Aligned`] reader.
pub trait Socket: AsyncRead + AsyncWrite + Unpin {
    /// Every byte read from the socket has been passed up.
    fn drained(&self) -> bool;
    fn tcp(&self) -> &TcpStream;
    fn into_socket(self) -> Option<TcpStream>;
}

impl Socket for TcpStream {
    fn drained(&self) -> bool {
        true
    }
    fn tcp(&self) -> &TcpStream {
        self
    }
    fn into_socket(self) -> Option<TcpStream> {
        Some(self)
    }
}

impl Socket for Rewind<TcpStream> {
    fn drained(&self) -> bool {
        self.is_drained()
    }
    fn tcp(&self) -> &TcpStream {
        self.get_ref()
    }
    fn into_socket(self) -> Option<TcpStream> {
        self.into_inner()
    }
}

/// A tokio-rustls stream, server or client side, over an aligned socket.
pub trait Session: AsyncWrite + Unpin + Send + Sized {
    type Io: Socket;
    fn io(&self) -> &Aligned<Self::Io>;
    fn common(&self) -> &rustls::CommonState;
    /// Read TLS bytes (up to the record boundary) into rustls and process them; no plaintext
    /// is taken out.
    fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>>;
    fn process(&mut self) -> Result<rustls::IoState, rustls::Error>;
    fn reader(&mut self) -> rustls::Reader<'_>;
    fn into_parts(self) -> (Aligned<Self::Io>, rustls::Connection);
}

macro_rules! session {
    ($stream:ty) => {
        impl<I: Socket + Send> Session for $stream {
            type Io = I;
            fn io(&self) -> &Aligned<I> {
                self.get_ref().0
            }
            fn common(&self) -> &rustls::CommonState {
                self.get_ref().1
            }
            fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
                let (io, conn) = self.get_mut();
                match conn.read_tls(&mut SyncRead { io, cx }) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
                    other => Poll::Ready(other),
                }
            }
            fn process(&mut self) -> Result<rustls::IoState, rustls::Error> {
                self.get_mut().1.process_new_packets()
            }
            fn reader(&mut self) -> rustls::Reader<'_> {
                self.get_mut().1.reader()
            }
            fn into_parts(self) -> (Aligned<I>, rustls::Connection) {
                let (io, conn) = self.into_inner();
                (io, conn.into())
            }
        }
    };
}

session!(tokio_rustls::server::TlsStream<Aligned<I>>);
session!(tokio_rustls::client::TlsStream<Aligned<I>>);

/// `std::io::Read` over an async reader for one poll: Pending becomes WouldBlock.
struct SyncRead<'a, 'b, T> {
    io: &'a mut T,
    cx: &'a mut Context<'b>,
}

impl<T: AsyncRead + Unpin> Read for SyncRead<'_, '_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut rb = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// Result of a hand-off attempt.
pub enum Handoff<S> {
    Kernel(KtlsStream),
    /// Still in user space, unharmed.
    User(S, Outcome),
    /// Lost: rustls gave up the session and the kernel did not take it.
    Lost(io::Error),
}

/// Move `session` to the kernel if it can be done without losing a byte, waiting at most
/// `within` for the quiet point.
pub async fn offload<S: Session>(mut session: S, within: Duration) -> Handoff<S> {
    let version = session.common().protocol_version();
    let suite = session.common().negotiated_cipher_suite();
    let takes = suite.and_then(cipher_of_suite).is_some_and(|c| support().takes(c));
    if !takes || !matches!(version, Some(rustls::ProtocolVersion::TLSv1_2 | rustls::ProtocolVersion::TLSv1_3)) {
        return Handoff::User(session, Outcome::Unsupported);
    }
    let quiet = tokio::time::timeout(within, async {
        settle(&mut session).await?;
        // Processing the last record may have queued a reply (a KeyUpdate's): out it goes too.
        session.flush().await
    })
    .await;
    let state = match quiet {
        Ok(Ok(())) => session.process(),
        _ => return Handoff::User(session, Outcome::Busy),
    };
    let pending = match state {
        Ok(s) if !s.peer_has_closed() && !session.common().wants_write() && session.io().get_ref().drained() => {
            s.plaintext_bytes_to_read()
        }
        _ => return Handoff::User(session, Outcome::Busy),
    };
    // The upper-layer protocol first: the kernel takes it only on an established socket (not
    // after the peer's FIN), and until keys are set the socket behaves as before, so a refusal
    // here leaves the session whole in user space.
    if sockopt::set_ulp_tls(session.io().get_ref().tcp()).is_err() {
        return Handoff::User(session, Outcome::Busy);
    }
    let mut plaintext = vec![0u8; pending];
    if session.reader().read_exact(&mut plaintext).is_err() {
        // Cannot happen (rustls said this much is buffered); if it did, the bytes read so far
        // would be lost, so the connection is.
        return Handoff::Lost(io::Error::other("rustls plaintext buffer shorter than reported"));
    }
    let (io, conn) = session.into_parts();
    let Some(tcp) = io.into_inner().into_socket() else {
        return Handoff::Lost(io::Error::other("replayed bytes left unread at the hand-off"));
    };
    let version = version.unwrap_or(rustls::ProtocolVersion::TLSv1_3);
    match conn.dangerous_extract_secrets() {
        Ok(secrets) => match set_keys(&tcp, version, secrets) {
            Ok(()) => Handoff::Kernel(KtlsStream::new(tcp, plaintext)),
            Err(e) => Handoff::Lost(e),
        },
        Err(e) => Handoff::Lost(io::Error::other(e)),
    }
}

/// Read the partly read record, if any, into rustls: afterwards the socket's next byte is a
/// record header.
async fn settle<S: Session>(session: &mut S) -> io::Result<()> {
    std::future::poll_fn(|cx| loop {
        if session.io().at_boundary() {
            return Poll::Ready(Ok(()));
        }
        match std::task::ready!(session.poll_read_tls(cx)) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {
                if let Err(e) = session.process() {
                    return Poll::Ready(Err(io::Error::other(e)));
                }
            }
            Err(e) => return Poll::Ready(Err(e)),
        }
    })
    .await
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Offloaded::User($s) => {
                let $s = Pin::new($s);
                $e
            }
            Offloaded::Kernel($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl<S: AsyncRead + Unpin> AsyncRead for Offloaded<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_read(cx, buf))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Offloaded<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self, s => s.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_shutdown(cx))
    }
}
