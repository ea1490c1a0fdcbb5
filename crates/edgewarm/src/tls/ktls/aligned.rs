//! A reader that stops at TLS record boundaries, for sessions that may move to the kernel.
//!
//! rustls reads as much as the socket has, so at any moment its buffer may hold the first part
//! of a record whose rest is still in the kernel's socket buffer. Handing such a session to
//! kernel TLS would lose those bytes: the kernel must start reading at a record header. Under
//! [`Aligned`], every read is cut at the end of the current record (first the 5-byte header,
//! then exactly the length it announces), so rustls only ever holds whole records plus, at
//! worst, the part of one record that [`Aligned::at_boundary`] says is in flight.
//!
//! It costs a second read per record, which is why only sessions that may be handed to the
//! kernel (`ktls: on | auto`) read this way; everything else passes straight through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// TLS record header: type (1), version (2), length (2).
const HEADER: usize = 5;

pub struct Aligned<S> {
    inner: S,
    on: bool,
    header: [u8; HEADER],
    /// Header bytes of the next record read so far.
    have: usize,
    /// Body bytes of the current record not yet read.
    body_left: usize,
}

impl<S> Aligned<S> {
    /// Record-aligned reads when `on`; a plain pass-through otherwise.
    pub fn new(inner: S, on: bool) -> Self {
        Self { inner, on, header: [0; HEADER], have: 0, body_left: 0 }
    }

    /// Nothing of a record has been read without the whole of it: the socket's next byte is a
    /// record header. Always false when not reading aligned (nothing is known).
    pub fn at_boundary(&self) -> bool {
        self.on && self.have == 0 && self.body_left == 0
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn into_inner(self) -> S {
        self.inner
    }

    /// How many bytes the next read may take without crossing a record boundary.
    fn limit(&self) -> usize {
        if self.body_left > 0 {
            self.body_left
        } else {
            HEADER - self.have
        }
    }

    /// Account for `bytes` just read (at most [`Self::limit`]).
    fn consumed(&mut self, bytes: &[u8]) {
        if self.body_left > 0 {
            self.body_left -= bytes.len();
            return;
        }
        self.header[self.have..self.have + bytes.len()].copy_from_slice(bytes);
        self.have += bytes.len();
        if self.have == HEADER {
            self.have = 0;
            self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Aligned<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.on {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let limit = self.limit().min(buf.remaining());
        let start = buf.filled().len();
        let n = {
            // rustls reads into initialised memory, so this normally initialises nothing.
            let mut sub = ReadBuf::new(buf.initialize_unfilled_to(limit));
            std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, &mut sub))?;
            sub.filled().len()
        };
        self.consumed(&buf.initialized()[start..start + n]);
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Aligned<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn record(len: usize, fill: u8) -> Vec<u8> {
        let mut r = vec![23, 3, 3];
        r.extend_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
        r.extend(std::iter::repeat_n(fill, len));
        r
    }

    #[tokio::test]
    async fn reads_stop_at_every_record_end_and_lose_nothing() {
        let mut wire = record(300, 1);
        wire.extend(record(0, 0));
        wire.extend(record(70, 2));
        let mut r = Aligned::new(&wire[..], true);
        assert!(r.at_boundary());
        let mut out = Vec::new();
        let mut boundaries = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if r.at_boundary() {
                boundaries.push(out.len());
            }
        }
        assert_eq!(out, wire);
        assert_eq!(boundaries, vec![305, 310, 385]);
    }

    #[tokio::test]
    async fn a_header_split_across_reads_is_still_counted() {
        let wire = record(10, 7);
        let mut r = Aligned::new(tokio_test_reader(&wire, 2), true);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, wire);
        assert!(r.at_boundary());
    }

    /// A reader that hands out at most `step` bytes per read, like a slow socket.
    fn tokio_test_reader(data: &[u8], step: usize) -> impl AsyncRead + Unpin + '_ {
        struct Trickle<'a>(&'a [u8], usize);
        impl AsyncRead for Trickle<'_> {
            fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                let n = self.1.min(self.0.len()).min(buf.remaining());
                buf.put_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Poll::Ready(Ok(()))
            }
        }
        Trickle(data, step)
    }

    #[tokio::test]
    async fn off_passes_reads_through_whole() {
        let mut wire = record(10, 1);
        wire.extend(record(10, 2));
        let mut r = Aligned::new(&wire[..], false);
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf).await.unwrap(), wire.len());
        assert!(!r.at_boundary());
    }
}
