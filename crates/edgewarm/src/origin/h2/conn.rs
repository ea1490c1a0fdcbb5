//! One standing HTTP/2 origin connection: the handshake, the driver task, PINGs, retirement.
//!
//! The driver task owns h2's `Connection` future (which does all the connection's I/O) and
//! sends a PING every `keepalive`. The PING's round trip is exported: it is the live R of the
//! edge↔origin link. A PING unanswered within `keepalive` means the connection is dead even
//! if TCP has not noticed; the connection is retired at once, before a request is put on it.
//!
//! Retiring a connection never cuts a stream: the upstream stops choosing it and drops its
//! handle, and h2 closes the connection once the streams already on it have finished.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{Ping, SendStream};
use http::Request;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{ConnStatus, H2Send, H2Upstream, Room};
use crate::metrics::{PoolEvent, UpstreamEnd};
use crate::origin::connect::OriginIo;
use crate::origin::multiplexed::{Held, Slot};

/// Flow-control windows toward the origin, sized for a long link: a window caps one stream's
/// throughput at window / RTT, and 4 MiB over 100 ms is ~335 Mbit/s per stream (h2's 64 KiB
/// default would be 5 Mbit/s). The connection window covers many streams at full speed.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;

pub(crate) struct Conn {
    pub id: u64,
    /// `None` once retired: the handle is dropped so h2 can close after the last stream.
    send: Mutex<Option<H2Send>>,
    opened: Instant,
    retiring: AtomicBool,
    /// Cancelled when the driver task has ended (the connection is gone).
    closed: CancellationToken,
    requests: AtomicU64,
    /// Streams open now: counted by [`Slot`]s, since h2 does not expose its own count.
    active: Arc<AtomicUsize>,
    /// The upstream's "a connection has room" signal.
    room: Arc<Room>,
    /// `edgewarm_upstream_streams` for this origin.
    streams_gauge: prometheus_client::metrics::gauge::Gauge,
    /// Last PING round trip, in microseconds (0: none yet).
    rtt_us: AtomicU64,
    /// The worker runtime the connection runs on ([`crate::workers`]), if any.
    pub worker: Option<usize>,
    /// Opened for a request, beyond the standing `connections` (see [`Conn::idle_for`]).
    pub demand: bool,
    /// For [`Conn::idle_for`]: the request count at the last look, and since when none came.
    idle: Mutex<(u64, Option<Instant>)>,
    /// Retired by the upstream's upkeep, which counted the reason ([`Conn::retire_counted`]).
    counted: AtomicBool,
}

impl Conn {
    /// HTTP/2 handshake over a fresh origin connection (TLS, or cleartext with prior
    /// knowledge), then start its driver.
    pub(super) async fn handshake(
        id: u64,
        io: OriginIo,
        upstream: Arc<H2Upstream>,
        demand: bool,
    ) -> Result<Arc<Self>, h2::Error> {
        let (send, mut connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // The origin does not push to a proxy.
            .enable_push(false)
            .handshake::<_, Bytes>(crate::transport::Batched::new(io))
            .await?;
        let conn = Arc::new(Self {
            id,
            send: Mutex::new(Some(send)),
            opened: Instant::now(),
            retiring: AtomicBool::new(false),
            closed: CancellationToken::new(),
            requests: AtomicU64::new(0),
            active: Arc::default(),
            room: upstream.room.clone(),
            streams_gauge: upstream.metrics().upstream.streams.get_or_create(&upstream.conn_label()).clone(),
            rtt_us: AtomicU64::new(0),
            // Opened on a worker, the driver task spawned below stays there.
            worker: crate::workers::current(),
            demand,
            idle: Mutex::new((0, None)),
            counted: AtomicBool::new(false),
        });
        let ping = connection.ping_pong();
        let me = conn.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let keepalive = upstream.keepalive();
            let pings = async {
                let Some(mut ping) = ping else { return UpstreamEnd::PingUnavailable };
                let mut ready = Some(ready_tx);
                loop {
                    // The first PING goes at once: the origin sends its SETTINGS before the
                    // PONG, so when the PONG is back the stream limit is known. A connection
                    // used before that would assume no limit and get streams refused.
                    if ready.is_none() {
                        tokio::time::sleep(keepalive).await;
                    }
                    let sent = Instant::now();
                    match tokio::time::timeout(keepalive, ping.ping(Ping::opaque())).await {
                        Ok(Ok(_)) => {
                            let rtt = sent.elapsed();
                            me.rtt_us.store(u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
                            let l = upstream.labels();
                            let label =
                                crate::metrics::UpstreamConn { route: l.route.clone(), server: l.server.clone() };
                            upstream.metrics().upstream.ping_rtt.get_or_create(&label).set(rtt.as_secs_f64());
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Err(_)) => return UpstreamEnd::PingFailed,
                        Err(_) => return UpstreamEnd::PingTimeout,
                    }
                }
            };
            let why = tokio::select! {
                r = &mut connection => match r {
                    Ok(()) => UpstreamEnd::Closed,
                    Err(e) if e.is_go_away() && e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) => {
                        // "too_many_pings" and its kin: the origin finds us too chatty. PING
                        // it less often from now on.
                        upstream.calm_down();
                        UpstreamEnd::GoAway
                    }
                    Err(e) if e.is_go_away() => UpstreamEnd::GoAway,
                    Err(_) => UpstreamEnd::Error,
                },
                why = pings => why,
            };
            me.retire();
            if why == UpstreamEnd::GoAway {
                let l = upstream.labels();
                let label = PoolEvent { route: l.route.clone(), reason: UpstreamEnd::GoAway, server: l.server.clone() };
                upstream.metrics().upstream.goaways.get_or_create(&label).inc();
            }
            // A dead PING means a dead link: do not wait for TCP to find out.
            if why != UpstreamEnd::Closed {
                drop(connection);
            } else {
                let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
            }
            me.closed.cancel();
            tracing::debug!(route = %upstream.labels().route, conn = me.id, why = why.label(), "origin connection ended");
            upstream.closed(me.id, why, me.counted.load(Ordering::Relaxed));
        });
        // No answer to the first PING: the connection ended during set-up.
        match ready_rx.await {
            Ok(()) => Ok(conn),
            Err(_) => Err(h2::Error::from(h2::Reason::CONNECT_ERROR)),
        }
    }

    /// How long the connection has carried no stream, as seen by the upstream's upkeep, which
    /// looks every second: a request since the last look, or a stream open now, restarts it.
    /// (Counted there, not per request: a request pays nothing for it.)
    pub(crate) fn idle_for(&self, now: Instant) -> Duration {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let requests = self.requests.load(Ordering::Relaxed);
        if self.active_streams() > 0 || requests != idle.0 {
            *idle = (requests, None);
            return Duration::ZERO;
        }
        now.saturating_duration_since(*idle.1.get_or_insert(now))
    }

    fn with_send<T>(&self, f: impl FnOnce(&H2Send) -> T) -> Option<T> {
        self.send.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(f)
    }

    /// The origin announced `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 8441) on this connection.
    pub(crate) fn extended_connect(&self) -> bool {
        !self.retiring() && self.with_send(H2Send::is_extended_connect_protocol_enabled).unwrap_or(false)
    }

    pub(crate) fn active_streams(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Not retiring, and below the origin's stream limit.
    pub(crate) fn has_room(&self) -> bool {
        !self.retiring() && self.with_send(|s| self.active_streams() < s.current_max_send_streams()).unwrap_or(false)
    }

    /// Take a stream place if the connection is below the origin's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`. The upstream calls this under its lock, so two
    /// requests can never both take the last place.
    pub(crate) fn try_reserve(&self) -> Option<Slot> {
        if !self.has_room() {
            return None;
        }
        Some(Slot::take(&self.active, self.room.clone(), &self.streams_gauge))
    }

    /// Open a stream. Fails if the connection is retiring, going away or broken; the request
    /// was then not sent.
    pub(crate) fn send(
        &self,
        request: Request<()>,
        end_of_stream: bool,
    ) -> Result<(ResponseFuture, SendStream<Bytes>, bool), h2::Error> {
        // A clone per request: h2 lets one handle have only one stream waiting for a slot, and
        // a fresh clone never has one, so a request over the limit queues instead of failing.
        let Some(mut send) = self.with_send(H2Send::clone) else {
            return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
        };
        let (response, body) = send.send_request(request, end_of_stream)?;
        let reused = self.requests.fetch_add(1, Ordering::Relaxed) > 0;
        Ok((response, body, reused))
    }

    pub(crate) fn status(&self) -> ConnStatus {
        let rtt = self.rtt_us.load(Ordering::Relaxed);
        ConnStatus {
            id: self.id,
            age_ms: u64::try_from(self.age().as_millis()).unwrap_or(u64::MAX),
            streams: self.active_streams(),
            max_streams: self.with_send(|s| s.current_max_send_streams()).unwrap_or(0),
            requests: self.requests.load(Ordering::Relaxed),
            ping_rtt_ms: (rtt > 0).then(|| rtt as f64 / 1e3),
            retiring: self.retiring(),
            worker: self.worker,
        }
    }
}

impl Held for Conn {
    fn id(&self) -> u64 {
        self.id
    }

    fn age(&self) -> Duration {
        self.opened.elapsed()
    }

    fn retiring(&self) -> bool {
        self.retiring.load(Ordering::Relaxed)
    }

    fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Stop using this connection (its handle dropped, so h2 closes it once the streams on it
    /// have finished).
    fn retire(&self) {
        self.retiring.store(true, Ordering::Relaxed);
        self.send.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// [`Held::retire`], for a reason the caller counts (`max_age`, `idle`): the connection's
    /// end is then not counted again as `closed`.
    fn retire_counted(&self) {
        self.counted.store(true, Ordering::Relaxed);
        self.retire();
    }
}
