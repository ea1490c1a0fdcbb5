//! A stream whose first write of each batch waits one turn of the scheduler.
//!
//! An HTTP/2 connection is driven by one task, but its frames are queued by many: every
//! request's task on the origin side, every response's task on the client side. Each of them
//! wakes the connection's task, and tokio runs the task woken last next (its LIFO slot), so
//! the connection would wake, write and flush once per frame queued: one `writev` (and one TLS
//! record) per request, where an event-loop proxy writes once per loop.
//!
//! [`Batched`] answers the first write of a batch with `Pending` after waking its own task. A
//! task woken while it runs is put at the *back* of the run queue, so the tasks already
//! runnable (the other requests) queue their frames first; when the connection's task runs
//! again, h2 gathers everything queued into its buffer and the write goes through, with every
//! later write, until the next flush completes and closes the batch.
//!
//! The cost is one extra poll of the connection per batch; nothing waits on a timer or on
//! another task, so a lone request is delayed by one pass of the run queue, not by a clock.
//! A caller that drops its write after the `Pending` loses nothing: no byte was taken, and
//! the next write goes through at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct Batched<S> {
    inner: S,
    /// Between a batch's first write (after its turn of the scheduler) and the flush that
    /// ends the batch: writes go straight through.
    open: bool,
    /// Off: every write goes straight through (a protocol with one writer, such as an
    /// HTTP/1.1 connection, has nothing to gather and would only pay the extra poll).
    batching: bool,
}

impl<S> Batched<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, open: false, batching: true }
    }

    /// The same type, never waiting: for streams that may or may not carry HTTP/2.
    pub fn pass_through(inner: S) -> Self {
        Self { inner, open: true, batching: false }
    }

    /// Start a batch: the first write waits for one turn of the scheduler.
    fn wait_turn(&mut self, cx: &mut Context<'_>) -> bool {
        if self.open {
            return false;
        }
        self.open = true;
        cx.waker().wake_by_ref();
        true
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Batched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Batched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.wait_turn(cx) {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.wait_turn(cx) {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if flushed.is_ready() && self.batching {
            self.open = false;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn a_batch_waits_one_turn_then_writes_until_its_flush() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = Batched::new(a);
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut w = Pin::new(&mut w);

        // The first write of a batch takes nothing and asks to be polled again.
        assert!(w.as_mut().poll_write(&mut cx, b"one").is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        // Polled again, it goes through, and so does every write until the flush.
        assert!(matches!(w.as_mut().poll_write(&mut cx, b"one"), Poll::Ready(Ok(3))));
        assert!(matches!(w.as_mut().poll_write(&mut cx, b"two"), Poll::Ready(Ok(3))));
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        // The flush closed the batch: the next write waits its turn again.
        assert!(w.as_mut().poll_write(&mut cx, b"three").is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 2);

        let mut got = [0u8; 6];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"onetwo");
    }

    #[tokio::test]
    async fn pass_through_never_waits() {
        let (a, _b) = tokio::io::duplex(1024);
        let mut w = Batched::pass_through(a);
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        let mut w = Pin::new(&mut w);
        for _ in 0..2 {
            assert!(matches!(w.as_mut().poll_write(&mut cx, b"x"), Poll::Ready(Ok(1))));
            assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        }
    }

    #[tokio::test]
    async fn bytes_pass_intact_both_ways() {
        let (a, b) = tokio::io::duplex(4096);
        let (mut w, mut peer) = (Batched::new(a), b);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            for chunk in sent.chunks(7000) {
                w.write_all(chunk).await.unwrap();
                w.flush().await.unwrap();
            }
            w.shutdown().await.unwrap();
            let mut back = Vec::new();
            w.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, data);
        peer.write_all(b"reply").await.unwrap();
        drop(peer);
        assert_eq!(writer.await.unwrap(), b"reply");
    }
}
