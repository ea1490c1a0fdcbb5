//! The origin side of `http` routes: a standing set of multiplexed HTTP/2 connections.
//!
//! Each [`H2Upstream`] (one per origin key: address, server name, verification, client
//! certificate) opens `connections` HTTP/2 TLS connections when the configuration is loaded,
//! before any client arrives, and keeps them: a client's request becomes a stream on one of
//! them, so no request waits for a TCP or TLS handshake to the origin unless every connection
//! is down.
//!
//! - [`place`]: where a request goes (placement on the set, spill, waiting for room) and where
//!   a new connection runs.
//! - [`conn`]: one connection: its driver task, PINGs (liveness and the link's RTT), and its
//!   retirement (GOAWAY, error, missed PING, `max_age`).
//! - [`informational`]: the origin's `103 Early Hints` passed to the client as they come.
//!
//! Why the `h2` crate and not hyper's client: hyper's `SendRequest::poll_ready` is ready
//! whenever the connection is open, queueing requests past the origin's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` where the caller cannot see them, and hyper-util's pool
//! never spills to a second connection. `h2` exposes the stream limit and the number of open
//! streams, so [`H2Upstream::send`] can place each request on a connection with room, and open
//! another connection (up to `max_connections`) when all are full.

pub(crate) mod conn;
mod informational;
mod place;
pub(crate) mod room;
mod send;
mod websocket;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use serde::Serialize;
use tokio::time::Instant;

use crate::config::UpstreamConfig;
use crate::metrics::{ConnectFailure, Metrics, PoolLabels, UpstreamEnd};
use crate::origin::backoff::Connects;
use crate::origin::connect::Connect;
use crate::origin::dial::WarmError;
use crate::origin::multiplexed::{self, Held, Landed, Refused, SetState, Slot};
use crate::origin::registry::{Shared, Standing};
use crate::origin::request_kind::{RequestKind, SetName, Tuning, Upgrading};
use crate::origin::seam::{BoxFuture, Outgoing, SendFailure, Upgrade};
use crate::origin::supervisor::Core;
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
    /// No connection, and none to wait for: the origin refuses its connects, or none came
    /// within `timeouts.connect`. Says how the last connect failed.
    #[error("no origin connection: {0}")]
    Down(String),
}

impl Refused for UpstreamError {
    /// Noted without a connect error's own "no origin connection: " (a refused request's
    /// error adds it).
    fn noted(&self) -> (String, bool) {
        match self {
            Self::Connect(w) => (w.to_string(), w.silent()),
            e => (e.to_string(), false),
        }
    }

    /// The connection's own failure, or the HTTP/2 handshake's on a connection that was up (a
    /// reset there is the origin's "no").
    fn failure(&self) -> ConnectFailure {
        match self {
            Self::Connect(e) => e.failure(),
            Self::H2(e) if e.get_io().is_some_and(crate::origin::dial::cut_short) => ConnectFailure::Reset,
            Self::H2(_) | Self::Retired | Self::Down(_) => ConnectFailure::Protocol,
        }
    }
}

/// A request on its way: the response to wait for, the stream to send the body on, and
/// which connection carries it (for the access log).
pub struct Sent {
    pub response: ResponseFuture,
    pub body: SendStream<Bytes>,
    /// Hold until the response body has ended: it is the stream's place on the connection.
    pub slot: Slot,
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
    #[serde(flatten)]
    pub(crate) set: SetName,
    pub connections: Vec<ConnStatus>,
    pub opening: usize,
    pub consecutive_failures: u32,
    /// The PING interval in use (doubled after each ENHANCE_YOUR_CALM).
    pub keepalive_ms: u64,
}

#[derive(Default)]
struct State {
    conns: Vec<Arc<Conn>>,
    /// Connects under way (counted against `max_connections`).
    connects: Connects,
    settings: UpstreamConfig,
    connect_timeout: Duration,
    /// How many times the origin asked for fewer PINGs (each doubles the interval).
    calm: u32,
    /// The worker of each connect under way that was placed on one.
    opening_on: Vec<usize>,
}

impl SetState for State {
    type Conn = Conn;

    fn parts(&mut self) -> (&mut Vec<Arc<Conn>>, &mut Connects, &UpstreamConfig) {
        (&mut self.conns, &mut self.connects, &self.settings)
    }
}

pub struct H2Upstream {
    /// Its upkeep is woken when a connection ended, settings changed, or a request found every
    /// connection full.
    core: Core<Arc<dyn Connect>>,
    state: Mutex<State>,
    /// A connection became usable (opened, or streams finished).
    room: Arc<Room>,
    next_id: AtomicU64,
    /// The worker runtimes the standing connections are spread over (see [`H2Upstream::fill`]).
    workers: Placement,
}

impl std::fmt::Debug for H2Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Upstream").field("labels", &self.core.labels).finish_non_exhaustive()
    }
}

impl H2Upstream {
    pub fn key(&self) -> &PoolKey {
        self.core.key()
    }

    pub fn labels(&self) -> &PoolLabels {
        &self.core.labels
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

    /// The upkeep's turn, once the aged connections are retired: retire idle demand
    /// connections, and start connects until `connections` are live or opening.
    fn fill(self: &Arc<Self>, mut st: MutexGuard<'_, State>) {
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
                self.core.replaced(UpstreamEnd::Idle);
            }
        }
        let start = multiplexed::to_open(&mut *st);
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
        let (timeout, congestion) = {
            let st = self.state();
            (st.connect_timeout, st.settings.congestion.clone())
        };
        let started = Instant::now();
        let result = async {
            let tls = self.core.dial.connect(timeout, congestion.as_deref()).await?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            Ok::<_, UpstreamError>(Conn::handshake(id, tls, self.clone(), demand).await?)
        }
        .await;
        let mut st = self.state();
        if let Some(i) = worker.and_then(|w| st.opening_on.iter().position(|&o| o == w)) {
            st.opening_on.swap_remove(i);
        }
        let result = match self.core.landed(st, "HTTP/2", started, result) {
            Landed::Joined(conn) => Ok(conn),
            Landed::Late(conn) => {
                conn.retire();
                return Err(UpstreamError::Retired);
            }
            Landed::Failed(e) => Err(e),
        };
        self.room.changed();
        result
    }

    /// A connection ended (its driver returned): forget it and replace it.
    /// `counted`: the upkeep retired it and counted why (`max_age`, `idle`); its end is not
    /// counted a second time.
    pub(crate) fn closed(&self, id: u64, why: UpstreamEnd, counted: bool) {
        self.core.forget(&mut self.state().conns, id, why, counted);
        self.room.changed();
    }

    pub(crate) fn conn_label(&self) -> crate::metrics::UpstreamConn {
        self.core.conn_label()
    }

    /// Numbers for `/origins`.
    pub fn status(&self) -> UpstreamStatus {
        let st = self.state();
        UpstreamStatus {
            set: SetName::of(&self.core),
            connections: st.conns.iter().map(|c| c.status()).collect(),
            opening: st.connects.opening,
            consecutive_failures: st.connects.backoff.failures,
            keepalive_ms: u64::try_from((st.settings.keepalive * (1u32 << st.calm)).as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.core.metrics
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
        tracing::warn!(route = %self.core.labels.route, origin = %self.core.labels.server, keepalive = ?now, "origin asked for fewer PINGs (ENHANCE_YOUR_CALM); PING interval doubled");
    }
}

/// Used by [`conn`] so it need not know the send side's types.
pub(crate) type H2Send = SendRequest<Bytes>;

impl Standing for H2Upstream {
    /// A reload removed every route using this upstream: stop opening connections and let the
    /// existing ones finish their streams, then close.
    fn retire(&self) {
        self.core.retire_all(&self.state);
        self.room.changed();
    }

    /// Its standing connections (`connections`) all up: what an upgrading process waits for.
    fn warm(&self) -> bool {
        let st = self.state();
        st.conns.iter().filter(|c| !c.retiring() && !c.is_closed()).count() >= st.settings.connections
    }

    fn status(&self) -> serde_json::Value {
        serde_json::to_value(H2Upstream::status(self)).unwrap_or_default()
    }

    fn up(&self) -> bool {
        let st = self.state();
        st.connects.backoff.failures == 0 || st.conns.iter().any(|c| !c.retiring() && !c.is_closed())
    }
}

impl RequestKind for H2Upstream {
    const NAMES: (&'static str, &'static str) = ("h2", "h2c");
    type Dial = Arc<dyn Connect>;

    fn start(core: Core<Self::Dial>, Tuning { settings, connect_timeout }: Tuning, shared: &Shared) -> Arc<Self> {
        let state = Mutex::new(State { settings, connect_timeout, ..State::default() });
        let workers = shared.workers.clone();
        Arc::new(Self { core, state, room: Arc::default(), next_id: AtomicU64::default(), workers })
    }

    /// Keep `connections` connections open; replace the ones that end or age out.
    async fn upkeep(self: Arc<Self>) {
        self.core.keep(&self.state, |st| self.fill(st)).await;
    }

    fn update(&self, Tuning { settings, connect_timeout }: Tuning) {
        self.core.update(&self.state, |st| (st.settings, st.connect_timeout) = (settings, connect_timeout));
    }

    fn send<'a>(
        self: &'a Arc<Self>,
        out: Outgoing<'a>,
    ) -> BoxFuture<'a, Result<crate::origin::seam::Sent, SendFailure>> {
        Box::pin(send::send(self, out))
    }

    /// A WebSocket rides the standing connections as an extended CONNECT stream where the
    /// origin offers it.
    fn upgrade_own<'a>(self: &'a Arc<Self>, up: Upgrade<'a>) -> Result<Upgrading<'a>, Upgrade<'a>> {
        if websocket::is_websocket(&up.client) && self.extended_connect() {
            Ok(Box::pin(websocket::websocket(self, up)))
        } else {
            Err(up)
        }
    }
}
