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
//!
//! Within a batch, small writes are gathered and reach the stream below at the flush, as one
//! write. h2 writes a DATA frame's payload without copying it into its own buffer, so it
//! writes once per such frame: over TLS that was one record and one `writev` per response
//! (2 per cache hit of 1 KiB, counted with `perf stat`), where gathered it is one per batch.
//! Large writes (bulk bodies) still go straight through, after what was gathered, uncopied.
//!
//! h2 also flushes after every such frame, so gathering alone still wrote once per response.
//! A stream made [`Batched::with_turns`] knows the polls of the one task that drives it
//! ([`TurnCount`], ticked by the task's future): a flush with bytes gathered waits for the
//! task's next poll (waking it at once), so everything the task queues in one poll (every
//! ready stream of the client's connection) leaves in one write.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct Batched<S> {
    inner: S,
    /// Between a batch's first write (after its turn of the scheduler) and the flush that
    /// ends the batch: writes go straight through.
    open: bool,
    /// Off: every write goes straight through (a protocol with one writer, such as an
    /// HTTP/1.1 connection, has nothing to gather and would only pay the extra poll).
    batching: bool,
    /// The batch's small writes, not yet written to `inner`; empty between batches.
    gathered: Vec<u8>,
    /// The driving task's polls, when flushes wait for the next one.
    turns: Option<TurnCount>,
    /// The poll in which a flush was put off.
    deferred_at: Option<u64>,
}

/// The polls of the task that drives a [`Batched`] stream: ticked once per poll of the task's
/// future (`tick` in a `poll_fn` around it), read by the stream's flushes.
#[derive(Clone, Default)]
pub struct TurnCount(Arc<AtomicU64>);

impl TurnCount {
    pub fn tick(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A write at least this large goes straight through (after what was gathered): copying bulk
/// data would cost more than the write it saves.
const GATHER_BELOW: usize = 8 * 1024;
/// What is gathered is written once it would pass this, so a batch holds a bounded buffer.
const GATHER_MAX: usize = 64 * 1024;

impl<S> Batched<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, open: false, batching: true, gathered: Vec::new(), turns: None, deferred_at: None }
    }

    /// Batching whose flushes wait for the next poll of the task that ticks `turns` (the task
    /// that drives this stream and every writer of it). Its writes need not wait a turn first:
    /// the flush already does.
    pub fn with_turns(inner: S, turns: TurnCount) -> Self {
        Self { inner, open: true, batching: true, gathered: Vec::new(), turns: Some(turns), deferred_at: None }
    }

    /// The same type, never waiting: for streams that may or may not carry HTTP/2.
    pub fn pass_through(inner: S) -> Self {
        Self { inner, open: true, batching: false, gathered: Vec::new(), turns: None, deferred_at: None }
    }

    /// Start a batch: the first write waits for one turn of the scheduler.
    fn wait_turn(&mut self, cx: &mut Context<'_>) -> bool {
        if self.open || self.turns.is_some() {
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

impl<S: AsyncWrite + Unpin> Batched<S> {
    /// Write out what was gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.gathered.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.gathered))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.gathered.drain(..n);
        }
        // Freed between batches: an idle connection keeps no buffer.
        self.gathered = Vec::new();
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Batched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.batching {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        if self.wait_turn(cx) {
            return Poll::Pending;
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= GATHER_BELOW || self.gathered.len() + total > GATHER_MAX {
            // Nothing of `bufs` is taken until what came before it is out.
            ready!(self.poll_drain(cx))?;
            if total >= GATHER_BELOW {
                return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
            }
        }
        if self.gathered.capacity() == 0 {
            self.gathered.reserve(total.max(4096));
        }
        for b in bufs {
            self.gathered.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        // Gathered writes take every slice at once, whatever the stream below does.
        self.batching || self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let (Some(turns), false) = (&self.turns, self.gathered.is_empty()) {
            let now = turns.now();
            match self.deferred_at {
                // Put off to the task's next poll, which the wake makes the next thing it does.
                None => {
                    self.deferred_at = Some(now);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(at) if at == now => return Poll::Pending,
                Some(_) => {}
            }
        }
        self.deferred_at = None;
        ready!(self.poll_drain(cx))?;
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if flushed.is_ready() && self.batching && self.turns.is_none() {
            self.open = false;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
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

    /// Counts the writes that reach it.
    struct Writes(Vec<usize>);
    impl AsyncWrite for Writes {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.0.push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn small_writes_leave_as_one_at_the_flush_and_large_ones_uncopied() {
        let mut w = Batched::new(Writes(Vec::new()));
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        let mut w = Pin::new(&mut w);
        assert!(w.as_mut().poll_write(&mut cx, b"head").is_pending());
        for part in [&b"head"[..], b"frame", b"payload"] {
            assert!(matches!(w.as_mut().poll_write(&mut cx, part), Poll::Ready(Ok(n)) if n == part.len()));
        }
        assert!(w.inner.0.is_empty(), "nothing written before the flush");
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(w.inner.0, [16]);
        // A bulk write: what was gathered goes first, then the bulk as it is.
        assert!(w.as_mut().poll_write(&mut cx, b"x").is_pending());
        assert!(w.as_mut().poll_write(&mut cx, b"x").is_ready());
        let bulk = vec![7u8; GATHER_BELOW];
        assert!(matches!(w.as_mut().poll_write(&mut cx, &bulk), Poll::Ready(Ok(n)) if n == GATHER_BELOW));
        assert_eq!(w.inner.0, [16, 1, GATHER_BELOW]);
        // Shutting down writes what is gathered.
        assert!(w.as_mut().poll_write(&mut cx, b"tail").is_ready());
        assert!(w.as_mut().poll_shutdown(&mut cx).is_ready());
        assert_eq!(w.inner.0, [16, 1, GATHER_BELOW, 4]);
    }

    #[test]
    fn with_turns_a_flush_waits_for_the_next_poll_of_its_task() {
        let turns = TurnCount::default();
        let mut w = Batched::with_turns(Writes(Vec::new()), turns.clone());
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut w = Pin::new(&mut w);
        turns.tick();
        // No turn to wait for the first write; the flush is put off, once, with a wake.
        assert!(w.as_mut().poll_write(&mut cx, b"one").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        // The same poll of the task: still gathering, no second wake.
        assert!(w.as_mut().poll_write(&mut cx, b"two").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(w.inner.0.is_empty());
        // The task's next poll: one write of both.
        turns.tick();
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(w.inner.0, [6]);
        // Nothing gathered: a flush is not put off.
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
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
