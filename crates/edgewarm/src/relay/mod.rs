//! Moving bytes both ways between two TCP sockets until both sides are done.
//!
//! Each direction is a pump: read from one socket, write everything to the other, and on end of
//! file shut down the write side of the other (half-close: a client that has finished sending
//! can still receive). The relay ends when both pumps reach end of file, when either side
//! fails (the other is then closed too), after `idle` with no bytes either way, or when
//! shutdown cuts it.
//!
//! How bytes move is chosen per pair of streams, by what they are ([`Relayable::socket`]): two
//! plain sockets are pumped with `splice(2)` through a pipe per direction, so payload never
//! enters user space ([`splice`]), or with [`copy`] when the config says `relay: copy` or the
//! kernel refuses splice; anything with user-space state (a TLS session) goes through
//! [`stream`]'s buffered pumps. A TLS session handed to the kernel is a socket again
//! ([`Sock::ktls`]): spliced between two kTLS sockets, plaintext never enters user space.
//!
//! Both directions run inside the connection's one task (`join`). Pipes (splice) and buffers
//! (copy) are held only while a chunk is in flight and kept per thread for the next one, so an
//! idle tunnel costs its task and its two sockets: no pipe, no buffer.
//!
//! [`plain`] is the same connect and relay with nothing in front: a measuring baseline.

mod copy;
pub mod plain;
mod splice;
mod stream;

pub use stream::Phase;

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::io::Interest;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// How the relay may move bytes between two plain sockets (`relay:` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Splice,
    Copy,
}

/// A socket whose bytes are the stream's own payload, so the kernel can move them.
#[derive(Clone, Copy)]
pub struct Sock<'a> {
    pub tcp: &'a TcpStream,
    /// Kernel TLS: the kernel decrypts what is read and encrypts what is written; records that
    /// are not data (alerts, tickets) must be read with `recvmsg`, and the end of data is a
    /// close_notify before the FIN.
    pub ktls: bool,
}

/// A stream the relay can move bytes to and from.
pub trait Relayable: AsyncRead + AsyncWrite + Unpin + Send {
    /// The socket itself, when every byte read from or written to it is the stream's own
    /// payload (no user-space framing or encryption in between): then the kernel can move
    /// the bytes with splice(2).
    fn socket(&self) -> Option<Sock<'_>> {
        None
    }
}

impl Relayable for TcpStream {
    fn socket(&self) -> Option<Sock<'_>> {
        Some(Sock { tcp: self, ktls: false })
    }
}

/// A TLS session handed to the kernel is a socket again and can be spliced, once the plaintext
/// carried over from user space has been passed on (until then it must be read as a stream).
impl<S: Relayable> Relayable for crate::tls::ktls::Offloaded<S> {
    fn socket(&self) -> Option<Sock<'_>> {
        match self {
            Self::User(s) => s.socket(),
            Self::Kernel(k) if k.has_pending() => None,
            Self::Kernel(k) => Some(Sock { tcp: k.get_ref(), ktls: true }),
        }
    }
}

/// A TLS session terminated here: user-space records, so never spliced.
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Relayable for tokio_rustls::server::TlsStream<S> {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Relayable for tokio_rustls::client::TlsStream<S> {}

/// Which socket an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Origin,
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both directions reached end of file.
    Done,
    Idle,
    /// A read or write on that side failed (reset, broken pipe).
    Reset(Side),
    /// That side sent a TLS KeyUpdate on a kernel TLS socket, which cannot follow it.
    KeyUpdate(Side),
    Shutdown,
}

/// Per-direction accounting, shared with the metrics counter so long tunnels show up in
/// `/metrics` as they go rather than when they close.
pub struct Direction {
    bytes: AtomicU64,
    counter: Counter,
}

impl Direction {
    pub fn new(counter: Counter) -> Self {
        Self { bytes: AtomicU64::new(0), counter }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.counter.inc_by(n as u64);
    }
}

/// Time of the latest byte moved either way, as nanoseconds since the relay started: an atomic
/// rather than a `Cell` so the connection future stays `Send`.
struct Activity {
    start: Instant,
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self { start: Instant::now(), last: AtomicU64::new(0) }
    }

    fn touch(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

pub struct Relay<'a> {
    /// Where a fallback from splice to copy is counted.
    pub metrics: &'a crate::metrics::RouteMetrics,
    pub mode: Mode,
    pub idle: Duration,
    pub up: &'a Direction,
    pub down: &'a Direction,
    pub cancel: &'a CancellationToken,
}

/// A pump's failure: which socket, and the error.
type PumpResult = Result<(), (Side, io::Error)>;

impl Relay<'_> {
    /// Relay until the end; `on_first_down` runs once when the origin's first byte arrives.
    pub async fn run<C: Relayable, O: Relayable>(
        &self,
        client: C,
        origin: O,
        on_first_down: impl FnOnce() + Send,
    ) -> End {
        match (client.socket(), origin.socket()) {
            (Some(c), Some(o)) => self.run_sockets(c, o, on_first_down).await,
            // Boxed: the buffered pumps' future is the larger, and a tunnel between two
            // plain sockets (which never takes this arm) would otherwise carry its size for
            // its whole life. One allocation per TLS relay.
            _ => Box::pin(self.run_streams(client, origin, on_first_down)).await,
        }
    }

    /// Two plain sockets: splice or copy, as the mode says.
    async fn run_sockets(&self, client: Sock<'_>, origin: Sock<'_>, on_first_down: impl FnOnce() + Send) -> End {
        let activity = Activity::new();
        let mut first = Some(on_first_down);
        let mut notify_first = move || {
            if let Some(f) = first.take() {
                f();
            }
        };
        // Pinned here and lent to `finish`: a future moved into another async fn (or async
        // block) is stored in both, so passing the pumps by value doubled the relay's share of
        // every tunnel's task.
        let up = pin!(self.pump(client, origin, Side::Client, Side::Origin, self.up, &activity, || {}));
        let down = pin!(self.pump(origin, client, Side::Origin, Side::Client, self.down, &activity, &mut notify_first));
        self.finish(up, down, &activity).await
    }

    /// Run both directions to their end, or until idle or shutdown.
    async fn finish(
        &self,
        up: Pin<&mut impl Future<Output = PumpResult>>,
        down: Pin<&mut impl Future<Output = PumpResult>>,
        activity: &Activity,
    ) -> End {
        let both = async {
            // try_join: the first failure ends the relay; the other direction is dropped with it.
            match tokio::try_join!(up, down) {
                Ok(_) => End::Done,
                Err((side, e)) => Self::failed(side, &e),
            }
        };
        tokio::select! {
            end = both => end,
            () = idle_watch(activity, self.idle) => End::Idle,
            () = self.cancel.cancelled() => End::Shutdown,
        }
    }

    fn fell_back(&self, fallback: &splice::Fallback) {
        use crate::metrics::RelayFallback;
        let (reason, e) = match fallback {
            splice::Fallback::NoPipe(e) => (RelayFallback::NoPipe, e),
            splice::Fallback::Refused(e) => (RelayFallback::SpliceRefused, e),
        };
        // One line per route and reason (per configuration loaded), then only the counter:
        // when descriptors run out this happens to every relay direction that needs a pipe.
        if self.metrics.relay_fallback(reason) {
            tracing::warn!(route = %self.metrics.route, reason = reason.label(), error = %e,
                "relay fell back from splice to copy (counted in edgewarm_relay_copy_fallbacks_total; further ones on this route are not logged)");
        }
    }

    /// How a relay that failed on `side` ended.
    fn failed(side: Side, e: &io::Error) -> End {
        if crate::tls::ktls::stream::is_key_update(e) {
            End::KeyUpdate(side)
        } else {
            End::Reset(side)
        }
    }

    #[expect(clippy::too_many_arguments)]
    async fn pump(
        &self,
        src: Sock<'_>,
        dst: Sock<'_>,
        src_side: Side,
        dst_side: Side,
        dir: &Direction,
        activity: &Activity,
        mut on_data: impl FnMut(),
    ) -> PumpResult {
        let mut moved = |n: usize| {
            on_data();
            dir.add(n);
            activity.touch();
        };
        match self.mode {
            Mode::Splice => match splice::pump(src, dst, src_side, dst_side, &mut moved).await {
                Ok(result) => result?,
                // Refused before any byte moved, or no pipe for the next chunk: the same bytes
                // go the portable way. Counted and logged, since it costs a 16 KiB buffer per
                // chunk and two copies (it once happened unseen when descriptors ran out).
                Err(fallback) => {
                    self.fell_back(&fallback);
                    copy::pump(src, dst, src_side, dst_side, &mut moved).await?
                }
            },
            Mode::Copy => copy::pump(src, dst, src_side, dst_side, &mut moved).await?,
        }
        // End of file from src: pass the half-close on. A failure here means dst is gone,
        // which its own pump will report; nothing more to send either way.
        if dst.ktls {
            // Awaited through the socket's writer slot (see `readable`), not `async_io`.
            while writable(dst.tcp).await.is_ok() {
                match dst.tcp.try_io(Interest::WRITABLE, || crate::tls::ktls::stream::close_notify(dst.tcp)) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    _ => break,
                }
            }
        } else {
            let _ = socket2::SockRef::from(dst.tcp).shutdown(std::net::Shutdown::Write);
        }
        Ok(())
    }
}

/// Wait until `tcp` may be read. Through the socket's own reader slot (`poll_read_ready`)
/// rather than `readable()`, whose future carries a waiter node: 150 bytes less per pump, held
/// by every idle tunnel for as long as it lives. The slot keeps one waker, which is enough: in
/// a relay one pump reads each socket and one writes it.
pub(super) async fn readable(tcp: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| tcp.poll_read_ready(cx)).await
}

/// Wait until `tcp` may be written; see [`readable`].
pub(super) async fn writable(tcp: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| tcp.poll_write_ready(cx)).await
}

async fn idle_watch(activity: &Activity, idle: Duration) {
    loop {
        let deadline = activity.last() + idle;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}
