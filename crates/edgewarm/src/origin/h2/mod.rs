//! The origin side of `http` routes: a standing set of multiplexed HTTP/2 connections.
//!
//! Each [`Upstream`] (one per origin key: address, server name, verification, client
//! certificate) opens `connections` HTTP/2 TLS connections when the configuration is loaded,
//! before any client arrives, and keeps them: a client's request becomes a stream on one of
//! them, so no request waits for a TCP or TLS handshake to the origin unless every connection
//! is down.
//!
//! - [`place`]: where a request goes (placement on the set, spill, waiting for room) and where
//!   a new connection runs.
//! - [`conn`]: one connection: its driver task, PINGs (liveness and the link's RTT), and its
//!   retirement (GOAWAY, error, missed PING, `max_age`).
//! - [`registry`]: the upstreams of the running config, kept across reloads by key.
//! - [`h1`]: origins without HTTP/2 (`upstream.protocol: http/1.1`): a keep-alive pool.
//!
//! Why the `h2` crate and not hyper's client: hyper's `SendRequest::poll_ready` is ready
//! whenever the connection is open, queueing requests past the origin's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` where the caller cannot see them, and hyper-util's pool
//! never spills to a second connection. `h2` exposes the stream limit and the number of open
//! streams, so [`Upstream::send`] can place each request on a connection with room, and open
//! another connection (up to `max_connections`) when all are full.

pub(crate) mod conn;
pub(crate) mod h1;
mod place;
pub(crate) mod registry;
pub(crate) mod room;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::UpstreamConfig;
use crate::metrics::{Metrics, PoolLabels, UpstreamEnd};
use crate::pool::dial::{Dial, TlsDial, WarmError};
use crate::pool::sizing::Backoff;
use crate::tls::origin::PoolKey;
use crate::workers::Placement;
use conn::Conn;
use room::Room;

/// Why a request could not be placed on an origin connection.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("no origin connection: {0}")]
    Connect(#[from] WarmError),
    #[error("origin connection failed: {0}")]
    H2(#[from] h2::Error),
    #[error("upstream retired")]
    Retired,
}

/// A request on its way: the response to wait for, the stream to send the body on, and
/// which connection carries it (for the access log).
pub struct Sent {
    pub response: ResponseFuture,
    pub body: SendStream<Bytes>,
    /// Hold until the response body has ended: it is the stream's place on the connection.
    pub slot: conn::Slot,
    pub conn_id: u64,
    /// The connection had carried requests before this one.
    pub reused: bool,
}

/// One standing connection as `/origins` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ConnStatus {
    pub id: u64,
    pub age_ms: u64,
    pub streams: usize,
    pub max_streams: usize,
    pub requests: u64,
    pub ping_rtt_ms: Option<f64>,
    pub retiring: bool,
    /// The worker thread the connection runs on (`null` without workers).
    pub worker: Option<usize>,
}

/// One upstream as `/origins` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamStatus {
    pub route: String,
    pub origin: String,
    pub sni: String,
    pub verify: bool,
    pub connections: Vec<ConnStatus>,
    pub opening: usize,
    pub consecutive_failures: u32,
    /// The PING interval in use (doubled after each ENHANCE_YOUR_CALM).
    pub keepalive_ms: u64,
}

struct State {
    conns: Vec<Arc<Conn>>,
    /// Connects under way (counted against `max_connections`).
    opening: usize,
    backoff: Backoff,
    retry_at: Option<Instant>,
    settings: UpstreamConfig,
    connect_timeout: Duration,
    /// How many times the origin asked for fewer PINGs (each doubles the interval).
    calm: u32,
    /// The worker of each connect under way that was placed on one.
    opening_on: Vec<usize>,
}

pub struct Upstream {
    dial: TlsDial,
    labels: PoolLabels,
    state: Mutex<State>,
    /// Wakes the maintenance task: a connection ended, settings changed, a request found
    /// every connection full.
    wake: Notify,
    /// A connection became usable (opened, or streams finished).
    room: Arc<Room>,
    retired: CancellationToken,
    next_id: AtomicU64,
    metrics: Arc<Metrics>,
    /// The worker runtimes the standing connections are spread over (see [`Upstream::fill`]).
    workers: Placement,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("labels", &self.labels).finish_non_exhaustive()
    }
}

impl Upstream {
    /// Create the upstream and start opening its connections. Must run inside the runtime.
    pub fn start(
        dial: TlsDial,
        labels: PoolLabels,
        settings: UpstreamConfig,
        connect_timeout: Duration,
        metrics: Arc<Metrics>,
        workers: Placement,
    ) -> Arc<Self> {
        let upstream = Arc::new(Self {
            dial,
            labels,
            state: Mutex::new(State {
                conns: Vec::new(),
                opening: 0,
                backoff: Backoff::default(),
                retry_at: None,
                settings,
                connect_timeout,
                calm: 0,
                opening_on: Vec::new(),
            }),
            wake: Notify::new(),
            room: Arc::default(),
            retired: CancellationToken::new(),
            next_id: AtomicU64::new(0),
            metrics,
            workers,
        });
        tokio::spawn(upstream.clone().maintain());
        upstream
    }

    pub fn key(&self) -> &PoolKey {
        self.dial.key()
    }

    pub fn labels(&self) -> &PoolLabels {
        &self.labels
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// New settings from a reload; connections stay.
    pub fn update(&self, settings: UpstreamConfig, connect_timeout: Duration) {
        let mut st = self.state();
        st.settings = settings;
        st.connect_timeout = connect_timeout;
        drop(st);
        self.wake.notify_one();
    }

    /// A reload removed every route using this upstream: stop opening connections and let the
    /// existing ones finish their streams, then close.
    pub fn retire(&self) {
        self.retired.cancel();
        let conns = std::mem::take(&mut self.state().conns);
        for c in conns {
            c.retire();
        }
        self.room.changed();
    }

    /// Whether WebSockets can ride the standing connections as RFC 8441 extended CONNECT
    /// streams: the origin announced it on a live connection (origins announce it on all or
    /// none).
    pub(crate) fn extended_connect(&self) -> bool {
        self.state().conns.iter().any(|c| c.extended_connect())
    }

    /// Live connections (not retiring).
    pub fn live(&self) -> usize {
        self.state().conns.iter().filter(|c| !c.retiring()).count()
    }

    /// Keep `connections` connections open; replace the ones that end or age out.
    async fn maintain(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                _ = tick.tick() => {}
                () = self.retired.cancelled() => return,
            }
            self.fill();
        }
    }

    /// Retire aged connections and start connects until `connections` are live or opening.
    fn fill(self: &Arc<Self>) {
        let mut st = self.state();
        let max_age = st.settings.max_age;
        for c in &st.conns {
            if !c.retiring() && c.age() >= max_age {
                c.retire_counted();
                self.metrics.upstream.replaced.get_or_create(&self.reason(UpstreamEnd::MaxAge)).inc();
            }
        }
        st.conns.retain(|c| !c.is_closed());
        // Connections opened for demand go once they have carried no stream for
        // `idle_timeout`, down to `connections`. Newest first: first fit uses them least.
        let (idle_timeout, now) = (st.settings.idle_timeout, Instant::now());
        let mut live = st.conns.iter().filter(|c| !c.retiring()).count();
        for c in st.conns.iter().rev() {
            if live <= st.settings.connections {
                break;
            }
            if c.demand && !c.retiring() && c.idle_for(now) >= idle_timeout {
                c.retire_counted();
                live -= 1;
                self.metrics.upstream.replaced.get_or_create(&self.reason(UpstreamEnd::Idle)).inc();
            }
        }
        if st.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let live = st.conns.iter().filter(|c| !c.retiring()).count();
        let mut start = st.settings.connections.saturating_sub(live + st.opening);
        if st.backoff.failures > 0 {
            // Probing a failing origin: one attempt at a time.
            start = start.min(1).saturating_sub(st.opening);
        }
        st.opening += start;
        let places: Vec<_> = (0..start).map(|_| self.place(&mut st)).collect();
        drop(st);
        for worker in places {
            let me = self.clone();
            let open = async move {
                let _ = me.open(worker, false).await;
            };
            match worker.and_then(|w| self.workers.get(w)) {
                Some(runtime) => drop(runtime.spawn(open)),
                None => drop(tokio::spawn(open)),
            }
        }
    }

    /// Open one connection and add it to the set. `worker`: the worker it was placed on (it
    /// runs there), noted in `opening_on` by whoever counted it in `opening`.
    /// `demand`: opened for a request (a spill, or a full worker's own), not to keep
    /// `connections` standing: closed again after `idle_timeout` without a stream.
    async fn open(self: &Arc<Self>, worker: Option<usize>, demand: bool) -> Result<Arc<Conn>, UpstreamError> {
        let timeout = self.state().connect_timeout;
        let started = Instant::now();
        let result = async {
            let tls = self.dial.dial(timeout).await?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            Ok::<_, UpstreamError>(Conn::handshake(id, tls, self.clone(), demand).await?)
        }
        .await;
        let mut st = self.state();
        st.opening -= 1;
        if let Some(i) = worker.and_then(|w| st.opening_on.iter().position(|&o| o == w)) {
            st.opening_on.swap_remove(i);
        }
        match result {
            Ok(conn) => {
                st.backoff.succeeded();
                st.retry_at = None;
                if self.retired.is_cancelled() {
                    // Retired while this connect was under way: it must not outlive us.
                    conn.retire();
                    return Err(UpstreamError::Retired);
                }
                st.conns.push(conn.clone());
                drop(st);
                self.metrics.upstream.open.get_or_create(&self.conn_label()).inc();
                let m = &self.metrics.pool;
                m.opened.get_or_create(&self.labels).inc();
                m.handshake_seconds.get_or_create(&self.labels).observe(started.elapsed().as_secs_f64());
                self.room.changed();
                Ok(conn)
            }
            Err(e) => {
                let wait = st.backoff.failed(crate::pool::sizing::jitter());
                st.retry_at = Some(Instant::now() + wait);
                drop(st);
                tracing::warn!(route = %self.labels.route, origin = %self.labels.origin, error = %e, "opening an HTTP/2 origin connection failed");
                self.metrics.upstream.connect_errors.get_or_create(&self.labels).inc();
                self.room.changed();
                Err(e)
            }
        }
    }

    /// A connection ended (its driver returned): forget it and replace it.
    /// `counted`: the upkeep retired it and counted why (`max_age`, `idle`); its end is not
    /// counted a second time.
    pub(crate) fn closed(&self, id: u64, why: UpstreamEnd, counted: bool) {
        let mut st = self.state();
        let before = st.conns.len();
        st.conns.retain(|c| c.id != id);
        let was_open = st.conns.len() < before;
        drop(st);
        if was_open {
            self.metrics.upstream.open.get_or_create(&self.conn_label()).dec();
        }
        if !counted {
            self.metrics.upstream.replaced.get_or_create(&self.reason(why)).inc();
        }
        self.wake.notify_one();
        self.room.changed();
    }

    pub(crate) fn conn_label(&self) -> crate::metrics::UpstreamConn {
        crate::metrics::UpstreamConn { route: self.labels.route.clone(), origin: self.labels.origin.clone() }
    }

    fn reason(&self, reason: UpstreamEnd) -> crate::metrics::PoolEvent {
        let l = &self.labels;
        crate::metrics::PoolEvent { route: l.route.clone(), origin: l.origin.clone(), reason }
    }

    /// Numbers for `/origins`.
    pub fn status(&self) -> UpstreamStatus {
        let st = self.state();
        let k = self.dial.key();
        UpstreamStatus {
            route: self.labels.route.to_string(),
            origin: k.origin.to_string(),
            sni: k.server_name.clone(),
            verify: k.verify,
            connections: st.conns.iter().map(|c| c.status()).collect(),
            opening: st.opening,
            consecutive_failures: st.backoff.failures,
            keepalive_ms: u64::try_from((st.settings.keepalive * (1u32 << st.calm)).as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Cancelled when a reload retires this upstream: client connections using it should
    /// close gracefully so their next requests come in under the new configuration.
    pub(crate) fn retired(&self) -> &CancellationToken {
        &self.retired
    }

    /// The PING interval: `keepalive`, doubled for every ENHANCE_YOUR_CALM the origin sent
    /// (up to 64×), for connections opened from then on.
    pub(crate) fn keepalive(&self) -> Duration {
        let st = self.state();
        st.settings.keepalive * (1u32 << st.calm)
    }

    /// The origin sent GOAWAY with ENHANCE_YOUR_CALM (gRPC's `too_many_pings`): back off.
    pub(crate) fn calm_down(&self) {
        let mut st = self.state();
        st.calm = (st.calm + 1).min(6);
        let now = st.settings.keepalive * (1u32 << st.calm);
        drop(st);
        tracing::warn!(route = %self.labels.route, origin = %self.labels.origin, keepalive = ?now, "origin asked for fewer PINGs (ENHANCE_YOUR_CALM); PING interval doubled");
    }
}

/// A response body as the client side serves it.
pub(crate) type BoxedBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Used by [`conn`] so it need not know the send side's types.
pub(crate) type H2Send = SendRequest<Bytes>;
