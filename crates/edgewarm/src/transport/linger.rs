//! A stream that, when dropped, closes gently: it says goodbye (for TLS, `close_notify` and a
//! FIN), then reads and discards what the peer still sends, for a short while, before the socket
//! is closed. nginx calls this a lingering close.
//!
//! Why: an HTTP/1.1 server that answers before reading the whole request (a 413 for a body over
//! the limit, an error while the client still uploads) and then closes with the client's bytes
//! unread makes the kernel send a reset. The client's next write fails, and the reset can
//! destroy the answer it has not read yet: it sees "broken pipe" instead of the 413. Reading on
//! for a moment lets the answer arrive first. A client that closes on its own ends this at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// How long a dropped connection may still be read (nginx: `lingering_timeout` 5 s between
/// reads, `lingering_time` 30 s in all; an edge wants its sockets back sooner).
const LINGER_FOR: Duration = Duration::from_secs(2);
/// At most this much is read and thrown away.
const LINGER_BYTES: usize = 1 << 20;

pub struct Linger<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    inner: Option<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Linger<S> {
    pub fn new(inner: S) -> Self {
        Self { inner: Some(inner) }
    }

    fn io(&mut self) -> &mut S {
        // Only `drop` takes it out.
        self.inner.as_mut().expect("taken only on drop")
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for Linger<S> {
    fn drop(&mut self) {
        let Some(mut io) = self.inner.take() else { return };
        // Outside a runtime (or as it shuts down) the stream is just closed.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LINGER_FOR, async {
                let _ = io.shutdown().await;
                let mut buf = vec![0; 16 * 1024];
                let mut left = LINGER_BYTES;
                while left > 0 {
                    match io.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            })
            .await;
        });
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for Linger<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Linger<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    /// The peer keeps writing after the stream is dropped: it sees an orderly end (EOF after
    /// what was sent to it), not a reset, and its writes succeed meanwhile.
    #[tokio::test]
    async fn a_dropped_stream_reads_on_so_the_peer_gets_its_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut server = Linger::new(server);
        client.write_all(&[1; 1000]).await.unwrap();
        server.write_all(b"413").await.unwrap();
        // The server read none of the 1000 bytes: a plain close would reset.
        drop(server);
        for _ in 0..32 {
            client.write_all(&[2; 16 * 1024]).await.unwrap();
        }
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"413");
    }
}
