//! A socket whose TLS record layer the kernel owns: reads are plaintext, writes are encrypted by
//! the kernel. What is left to do here is what is not application data.
//!
//! Records that are not application data reach a kTLS socket's reader only through `recvmsg`
//! with a control buffer (plain `read` fails with EIO, `splice` with EINVAL), one record per
//! call, tagged with its type. [`recv`] reads that way and decides:
//! - alert close_notify: end of the peer's data (a half-close, as with rustls);
//! - any other alert: the connection is broken;
//! - NewSessionTicket (an origin's tickets after the hand-off): skipped, nothing to do;
//! - KeyUpdate: the peer switches keys. Kernels before 6.14 cannot take new receive keys, so
//!   every later record would fail to decrypt; the connection ends with a [`KeyUpdate`] error
//!   (counted as its own close reason) before a byte is corrupted.
//!
//! Records are read into the caller's buffer; at 16 KiB or more a whole record fits (the relay
//! reads that much), so a control record is always seen from its first byte.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::transport::sockopt;

const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const CLOSE_NOTIFY: [u8; 2] = [1, 0];
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;

/// The peer sent a TLS 1.3 KeyUpdate, which the kernel cannot follow.
#[derive(Debug, thiserror::Error)]
#[error("peer sent a TLS KeyUpdate, which kernel TLS cannot follow: connection closed")]
pub struct KeyUpdate;

/// Whether an error is the end of a connection by [`KeyUpdate`].
pub fn is_key_update(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<KeyUpdate>())
}

/// What one read from a kTLS socket gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// This many plaintext bytes at the start of the buffer.
    Data(usize),
    /// The peer's data has ended (close_notify, or TCP FIN).
    Eof,
    /// A record with nothing for the application (a session ticket); read again.
    Skipped,
}

/// One non-blocking read from a kTLS socket (WouldBlock passes through).
pub fn recv(sock: &impl std::os::fd::AsFd, buf: &mut [u8]) -> io::Result<Record> {
    let (n, record_type) = sockopt::recv_record(sock, buf)?;
    match record_type {
        sockopt::RECORD_APPLICATION_DATA if n == 0 => Ok(Record::Eof),
        sockopt::RECORD_APPLICATION_DATA => Ok(Record::Data(n)),
        ALERT if buf[..n] == CLOSE_NOTIFY => Ok(Record::Eof),
        ALERT => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("TLS alert {} from peer", buf.get(1).copied().unwrap_or(0)),
        )),
        HANDSHAKE if n > 0 && buf[0] == NEW_SESSION_TICKET => Ok(Record::Skipped),
        HANDSHAKE if n > 0 && buf[0] == KEY_UPDATE => Err(io::Error::new(io::ErrorKind::Unsupported, KeyUpdate)),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected TLS record type {other} after the hand-off to the kernel"),
        )),
    }
}

/// Send close_notify on a kTLS socket and shut its write side (non-blocking: WouldBlock means
/// nothing was sent yet).
pub fn close_notify(sock: &impl std::os::fd::AsFd) -> io::Result<()> {
    sockopt::send_record(sock, ALERT, &CLOSE_NOTIFY)?;
    socket2::SockRef::from(sock).shutdown(std::net::Shutdown::Write)
}

/// A TCP socket with kernel TLS both ways.
pub struct KtlsStream {
    tcp: TcpStream,
    /// Plaintext rustls had decrypted before the hand-off: read before the socket.
    pending: Vec<u8>,
    read_done: bool,
    write_done: bool,
}

impl KtlsStream {
    pub(super) fn new(tcp: TcpStream, pending: Vec<u8>) -> Self {
        Self { tcp, pending, read_done: false, write_done: false }
    }

    pub fn get_ref(&self) -> &TcpStream {
        &self.tcp
    }

    /// Plaintext received before the hand-off is still to be read through the stream; a
    /// reader of the socket itself (the splice relay) would miss it.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The plaintext received before the hand-off, for a caller that passes it on itself.
    pub fn take_pending(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

impl AsyncRead for KtlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            let n = self.pending.len().min(buf.remaining());
            buf.put_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if self.read_done || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let this = &mut *self;
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            let dst = buf.initialize_unfilled();
            match this.tcp.try_io(Interest::READABLE, || recv(&this.tcp, dst)) {
                Ok(Record::Data(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Record::Eof) => {
                    this.read_done = true;
                    return Poll::Ready(Ok(()));
                }
                Ok(Record::Skipped) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for KtlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// close_notify, then FIN: what a TLS peer expects, as rustls does it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while !this.write_done {
            ready!(this.tcp.poll_write_ready(cx))?;
            match this.tcp.try_io(Interest::WRITABLE, || close_notify(&this.tcp)) {
                Ok(()) => this.write_done = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}
