//! A stream whose first write may be a TCP Fast Open connect.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A stream whose first write may be a Fast Open connect: EINPROGRESS on a write means "the SYN
/// is out, wait for the connection", which plain tokio streams would report as an error. Lets a
/// TLS client (rustls writes the ClientHello itself) run over a TCP_FASTOPEN_CONNECT socket.
pub struct FastOpenStream(TcpStream);

impl FastOpenStream {
    pub fn new(stream: TcpStream) -> Self {
        Self(stream)
    }
}

impl AsyncRead for FastOpenStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for FastOpenStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_io(Interest::WRITABLE, || send_fastopen(&self.0, buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    /// Vectored, so a TLS client's first flight (ClientHello and, with 0-RTT, the early data:
    /// separate buffers in rustls) goes out in one `sendmsg`, hence in the one SYN, instead of
    /// the hello alone with the request a round trip later.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_io(Interest::WRITABLE, || send_fastopen_vectored(&self.0, bufs)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// `send(2)` with EINPROGRESS (Fast Open connect under way) reported as WouldBlock.
pub(crate) fn send_fastopen(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    match socket2::SockRef::from(stream).send(buf) {
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Err(io::ErrorKind::WouldBlock.into()),
        other => other,
    }
}

fn send_fastopen_vectored(stream: &TcpStream, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    match socket2::SockRef::from(stream).send_vectored(bufs) {
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Err(io::ErrorKind::WouldBlock.into()),
        other => other,
    }
}
