//! One standing HTTP/3 origin connection: its `h3` driver task, its 0-RTT outcome, its
//! streams' places, and its retirement.
//!
//! The driver task polls h3's connection (control stream, QPACK streams, the origin's GOAWAY)
//! until the connection ends. quinn's own keep-alive PINGs the origin every `keepalive`; a
//! connection silent for three of them is closed by quinn's idle timer, and replaced.
//!
//! Retiring never cuts a stream: the set stops choosing the connection, and the driver drops
//! the last request handle (h3 then closes the connection with H3_NO_ERROR) only once every
//! stream on it has ended. (h3 closes at once when its last handle goes, streams or not: so
//! the handle is kept until then.)

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quinn::{VarInt, ZeroRttAccepted};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::H3Upstream;
use crate::metrics::{UpstreamEnd, ZeroRtt};
use crate::origin::multiplexed::{Held, Slot};

/// A request handle on the connection.
pub(crate) type H3Send = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// Largest response head taken from the origin (as a client's request head): a bigger one
/// fails the request (502), never reaches a client or the cache.
const MAX_RESPONSE_HEAD: u64 = 64 * 1024;

/// Where a connection that started with 0-RTT stands.
const SETTLED: u8 = 0;
const EARLY: u8 = 1;
const REJECTED: u8 = 2;

pub(crate) struct Conn {
    pub(crate) id: u64,
    quic: quinn::Connection,
    /// `None` once drained after retirement.
    send: Mutex<Option<H3Send>>,
    opened: Instant,
    retiring: AtomicBool,
    retire: CancellationToken,
    /// Cancelled when the driver task has ended (the connection is gone).
    closed: CancellationToken,
    requests: AtomicU64,
    active: Arc<AtomicUsize>,
    /// A stream ended: the driver looks whether a retiring connection has drained.
    ended: Arc<Notify>,
    /// [`SETTLED`], [`EARLY`] (0-RTT, not yet confirmed) or [`REJECTED`].
    early: AtomicU8,
    streams_gauge: prometheus_client::metrics::gauge::Gauge,
    /// Retired by the set's upkeep, which counted the reason.
    counted: AtomicBool,
}

impl Conn {
    /// h3's handshake (SETTINGS) over a new QUIC connection, then its driver task.
    pub(super) async fn start(
        id: u64,
        quic: quinn::Connection,
        early: Option<ZeroRttAccepted>,
        set: &Arc<H3Upstream>,
    ) -> Result<Arc<Self>, h3::error::ConnectionError> {
        let (driver, send) = h3::client::builder()
            .max_field_section_size(MAX_RESPONSE_HEAD)
            .build::<_, _, Bytes>(h3_quinn::Connection::new(quic.clone()))
            .await?;
        let conn = Arc::new(Self {
            id,
            quic,
            send: Mutex::new(Some(send)),
            opened: Instant::now(),
            retiring: AtomicBool::new(false),
            retire: CancellationToken::new(),
            closed: CancellationToken::new(),
            requests: AtomicU64::new(0),
            active: Arc::default(),
            ended: Arc::default(),
            early: AtomicU8::new(if early.is_some() { EARLY } else { SETTLED }),
            streams_gauge: set.metrics().upstream.streams.get_or_create(&set.conn_label()).clone(),
            counted: AtomicBool::new(false),
        });
        tokio::spawn(conn.clone().drive(driver, early, set.clone()));
        Ok(conn)
    }

    /// A request handle and its place, if the connection takes new requests (`early_ok`: the
    /// request may be replayed, so it may ride 0-RTT).
    /// Also whether it carried requests before.
    pub(crate) fn take(&self, early_ok: bool) -> Option<(H3Send, Slot, bool)> {
        if !self.usable(early_ok) {
            return None;
        }
        let send = self.send.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let slot = Slot::take(&self.active, self.ended.clone(), &self.streams_gauge);
        let before = self.requests.fetch_add(1, Ordering::Relaxed);
        Some((send, slot, before > 0))
    }

    pub(crate) fn usable(&self, early_ok: bool) -> bool {
        let early = self.early.load(Ordering::Acquire);
        !self.retiring() && !self.is_closed() && (early == SETTLED || (early == EARLY && early_ok))
    }

    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// A request on this connection failed: was it sent in 0-RTT the origin threw away? Then
    /// the origin never saw it.
    pub(crate) fn early_rejected(&self) -> bool {
        self.early.load(Ordering::Acquire) == REJECTED
    }

    /// Stop taking requests; close once the streams on it have ended. Whether this call was
    /// the one that retired it.
    pub(crate) fn retire(&self) -> bool {
        let first = !self.retiring.swap(true, Ordering::AcqRel);
        self.retire.cancel();
        first
    }

    pub(crate) fn status(&self) -> super::ConnStatus {
        super::ConnStatus {
            id: self.id,
            age_ms: u64::try_from(self.age().as_millis()).unwrap_or(u64::MAX),
            streams: self.active(),
            requests: self.requests.load(Ordering::Relaxed),
            rtt_ms: self.quic.rtt().as_secs_f64() * 1e3,
            early: self.early.load(Ordering::Acquire) == EARLY,
            retiring: self.retiring(),
        }
    }

    /// The driver task: poll h3 until the connection ends; settle 0-RTT; after retirement,
    /// close once drained. Then tell the set.
    async fn drive(
        self: Arc<Self>,
        mut driver: h3::client::Connection<h3_quinn::Connection, Bytes>,
        early: Option<ZeroRttAccepted>,
        set: Arc<H3Upstream>,
    ) {
        let mut close = std::pin::pin!(std::future::poll_fn(|cx| driver.poll_close(cx)));
        let mut zero_rtt = std::pin::pin!(async { Some(early?.await) });
        let (mut settling, mut draining) = (true, false);
        let why = loop {
            tokio::select! {
                e = &mut close => break end_reason(&e),
                accepted = &mut zero_rtt, if settling => {
                    settling = false;
                    self.settle(accepted, &set);
                }
                () = self.retire.cancelled(), if !draining => {
                    draining = true;
                    self.close_if_drained();
                }
                () = self.ended.notified(), if draining => self.close_if_drained(),
            }
        };
        self.retiring.store(true, Ordering::Release);
        drop(self.send.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.closed.cancel();
        set.closed(self.id, why, self.counted.load(Ordering::Acquire));
    }

    /// The 0-RTT outcome: `None` if the connection did not start with 0-RTT.
    fn settle(&self, accepted: Option<bool>, set: &H3Upstream) {
        let Some(accepted) = accepted else { return };
        set.zero_rtt(if accepted { ZeroRtt::Accepted } else { ZeroRtt::Rejected });
        if accepted {
            self.early.store(SETTLED, Ordering::Release);
        } else {
            // Every stream opened early is void (quinn fails them with `ZeroRttRejected`), h3's
            // own control stream among them: the connection cannot be trusted. Its requests
            // are retried elsewhere as never processed; the set opens another.
            self.early.store(REJECTED, Ordering::Release);
            self.quic.close(VarInt::from_u32(H3_NO_ERROR), b"0-RTT rejected");
        }
        set.room_changed();
    }

    /// A retiring connection with no stream left: let h3 close it.
    fn close_if_drained(&self) {
        if self.active() == 0 {
            drop(self.send.lock().unwrap_or_else(|p| p.into_inner()).take());
            self.quic.close(VarInt::from_u32(H3_NO_ERROR), b"retired");
        }
    }
}

/// HTTP/3's "no error" (RFC 9114 §8.1).
const H3_NO_ERROR: u32 = 0x100;

/// Why the connection ended, for `edgewarm_upstream_replaced_total`.
fn end_reason(e: &h3::error::ConnectionError) -> UpstreamEnd {
    use h3::error::ConnectionError as E;
    match e {
        _ if e.is_h3_no_error() => UpstreamEnd::Closed,
        E::Timeout { .. } => UpstreamEnd::PingTimeout,
        E::Remote { 0: h3::quic::ConnectionErrorIncoming::Timeout, .. } => UpstreamEnd::PingTimeout,
        E::Local { .. } => UpstreamEnd::Closed,
        _ => UpstreamEnd::Error,
    }
}

impl Held for Conn {
    fn id(&self) -> u64 {
        self.id
    }

    fn retiring(&self) -> bool {
        self.retiring.load(Ordering::Acquire)
    }

    fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    fn age(&self) -> Duration {
        self.opened.elapsed()
    }

    fn retire(&self) {
        let _ = Conn::retire(self);
    }

    /// [`Conn::retire`], for a reason the caller counts (`max_age`, `idle`): the connection's
    /// end is then not counted again as `closed`.
    fn retire_counted(&self) {
        self.counted.store(true, Ordering::Release);
        let _ = self.retire();
    }
}
