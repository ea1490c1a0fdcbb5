//! The relay between two byte streams that are not plain sockets — for `prewarm`, the client's
//! TLS session and the origin's. Same contract as the socket relay: half-close passed on (for
//! TLS, a close_notify in one direction becomes a close_notify in the other, and the other
//! direction stays open), first failure ends both, idle and shutdown end both.
//!
//! [`Relay::run_until`] relays only until a byte budget is spent (`ktls: auto`), then pauses
//! both directions where they are quiet — between a completed write and the next read — and
//! hands the two streams back for their move to the kernel. A pump waiting on a slow reader
//! finishes its write first: no byte is ever left half-written in a session being handed over.

use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::{idle_watch, Activity, Direction, End, Relay, Side};

/// 16 KiB: one TLS record of plaintext.
const BUF: usize = 16 * 1024;

/// Where a budgeted relay stopped.
pub enum Phase<C, O> {
    /// The connection is over.
    Ended(End),
    /// The budget was spent; both directions are paused between a write and the next read.
    Spent(C, O),
}

/// How a pump stopped without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Eof,
    Paused,
}

/// The byte budget of [`Relay::run_until`], shared by both directions.
struct Budget {
    left: AtomicU64,
    spent: CancellationToken,
}

impl Budget {
    fn new(bytes: u64) -> Self {
        Self { left: AtomicU64::new(bytes), spent: CancellationToken::new() }
    }

    fn add(&self, n: usize) {
        let n = n as u64;
        let before = self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(l.saturating_sub(n)));
        if before.is_ok_and(|l| l <= n) {
            self.spent.cancel();
        }
    }
}

impl Relay<'_> {
    /// Relay between two streams until both directions end.
    pub(super) async fn run_streams<C, O>(&self, client: C, origin: O, on_first_down: impl FnOnce() + Send) -> End
    where
        C: AsyncRead + AsyncWrite + Send,
        O: AsyncRead + AsyncWrite + Send,
    {
        let activity = Activity::new();
        let (mut client_r, mut client_w) = tokio::io::split(client);
        let (mut origin_r, mut origin_w) = tokio::io::split(origin);
        let mut first = Some(on_first_down);
        let up = pump(&mut client_r, &mut origin_w, Side::Client, Side::Origin, self.up, &activity, None, || {});
        let down = pump(&mut origin_r, &mut client_w, Side::Origin, Side::Client, self.down, &activity, None, || {
            if let Some(f) = first.take() {
                f();
            }
        });
        let (up, down) = (pin!(async { up.await.map(drop) }), pin!(async { down.await.map(drop) }));
        let end = self.finish(up, down, &activity).await;
        end
    }

    /// Relay like [`Relay::run`] until `budget` bytes have moved (both directions together), then
    /// hand both streams back, quiet. A flow that ends first is relayed to its end here.
    pub async fn run_until<C, O>(
        &self,
        client: C,
        origin: O,
        budget: u64,
        on_first_down: impl FnOnce() + Send,
    ) -> Phase<C, O>
    where
        C: AsyncRead + AsyncWrite + Send + Unpin,
        O: AsyncRead + AsyncWrite + Send + Unpin,
    {
        let activity = Activity::new();
        let budget = Budget::new(budget);
        let (mut client_r, mut client_w) = tokio::io::split(client);
        let (mut origin_r, mut origin_w) = tokio::io::split(origin);
        let mut first = Some(on_first_down);
        let mut on_down = move || {
            if let Some(f) = first.take() {
                f();
            }
        };
        let stops = {
            let up = pump(
                &mut client_r,
                &mut origin_w,
                Side::Client,
                Side::Origin,
                self.up,
                &activity,
                Some(&budget),
                || {},
            );
            let down = pump(
                &mut origin_r,
                &mut client_w,
                Side::Origin,
                Side::Client,
                self.down,
                &activity,
                Some(&budget),
                &mut on_down,
            );
            tokio::select! {
                stops = async { tokio::try_join!(up, down) } => stops,
                () = idle_watch(&activity, self.idle) => return Phase::Ended(End::Idle),
                () = self.cancel.cancelled() => return Phase::Ended(End::Shutdown),
            }
        };
        let (up, down) = match stops {
            Ok(stops) => stops,
            Err((side, e)) => return Phase::Ended(Self::failed(side, &e)),
        };
        // One direction ended before the budget ran out: no hand-off for a half-closed
        // connection; the other direction finishes in user space.
        let rest = match (up, down) {
            (Stop::Paused, Stop::Paused) => {
                return Phase::Spent(client_r.unsplit(client_w), origin_r.unsplit(origin_w));
            }
            (Stop::Eof, Stop::Eof) => return Phase::Ended(End::Done),
            (Stop::Paused, Stop::Eof) => {
                let up =
                    pump(&mut client_r, &mut origin_w, Side::Client, Side::Origin, self.up, &activity, None, || {});
                let (up, down) = (pin!(async { up.await.map(drop) }), pin!(async { Ok(()) }));
                let end = self.finish(up, down, &activity).await;
                end
            }
            (Stop::Eof, Stop::Paused) => {
                let down = pump(
                    &mut origin_r,
                    &mut client_w,
                    Side::Origin,
                    Side::Client,
                    self.down,
                    &activity,
                    None,
                    &mut on_down,
                );
                let (up, down) = (pin!(async { Ok(()) }), pin!(async { down.await.map(drop) }));
                let end = self.finish(up, down, &activity).await;
                end
            }
        };
        Phase::Ended(rest)
    }
}

/// One direction: read, write all, flush, until end of file. With a budget, also stops (between
/// a write and the next read) once the budget is spent.
#[expect(clippy::too_many_arguments)]
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    src: &mut R,
    dst: &mut W,
    src_side: Side,
    dst_side: Side,
    dir: &Direction,
    activity: &Activity,
    budget: Option<&Budget>,
    mut on_data: impl FnMut(),
) -> Result<Stop, (Side, io::Error)> {
    let mut buf = vec![0u8; BUF];
    loop {
        let read = match budget {
            // Biased: once spent, pause before reading more (a read that lost the race is
            // dropped; TLS streams keep what they had read, so nothing is lost).
            Some(b) => tokio::select! {
                biased;
                () = b.spent.cancelled() => return Ok(Stop::Paused),
                read = src.read(&mut buf) => read,
            },
            None => src.read(&mut buf).await,
        };
        let n = match read {
            Ok(n) => n,
            // A TLS peer that closes TCP without close_notify (common: nginx, many HTTP
            // servers once their response is complete) ended its direction; not a failure.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err((src_side, e)),
        };
        if n == 0 {
            // Clean end (close_notify, or FIN where the peer allows it): pass it on.
            let _ = dst.shutdown().await;
            return Ok(Stop::Eof);
        }
        dst.write_all(&buf[..n]).await.map_err(|e| (dst_side, e))?;
        dst.flush().await.map_err(|e| (dst_side, e))?;
        on_data();
        dir.add(n);
        activity.touch();
        if let Some(b) = budget {
            b.add(n);
        }
    }
}
