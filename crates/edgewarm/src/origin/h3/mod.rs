//! The HTTP/3 origin kind (`upstream.protocol: h3`): standing QUIC connections to the origin,
//! every request a stream of its own.
//!
//! Why: over TCP, one lost packet on the long link stalls every request multiplexed on that
//! connection until it is retransmitted (head-of-line blocking), so at 1–2 % loss one loss holds
//! up many users at once. QUIC streams are delivered independently: a loss stalls only the
//! streams whose data it carried. Its natural peer is another edgewarm's `http3` listener near
//! the origin (both ends of the long link ours).
//!
//! The same rules as the HTTP/2 kind: `connections` opened at load, before any client, kept and
//! replaced when they end or reach `max_age` (retired gracefully: streams on them finish);
//! failures classified for the retry policy; a reconnect resumes with 0-RTT where the origin
//! gave a ticket, and only requests safe to replay ride it before the handshake is confirmed.
//! Requests go to the connection with the fewest streams: no placement affinity, since streams
//! do not block each other. quinn's flow control holds a request whose connection is at the
//! origin's stream limit until a stream ends.
//!
//! - [`quic`]: the QUIC dialer (endpoint, TLS, transport settings);
//! - [`conn`]: one connection (h3 driver, 0-RTT, drain on retirement);
//! - [`send`]: a request on a stream of its own (the seam, [`crate::origin::seam::Origin`], is
//!   [`crate::origin::request_kind::Requests`], as for every request kind).
//!
//! Every connection of a set shares one UDP socket (quinn endpoint), driven on the runtime that
//! started the set.
//!
//! On h3's client (over h3-quinn), unlike the listener, which frames HTTP/3 itself
//! ([`edgewarm_h3`]): the edge is the client here, a few standing connections each carrying
//! many requests, so what h3 costs a request is small beside the origin's work and the long
//! link, and its client side (the request a client sends, SETTINGS, GOAWAY) is the side of it
//! the edge's own codec does not have.

mod conn;
mod quic;
mod send;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::UpstreamConfig;
use crate::metrics::{ConnectFailure, Metrics, UpstreamConn, UpstreamEnd, UpstreamZeroRttLabel, ZeroRtt};
use crate::origin::backoff::Connects;
use crate::origin::multiplexed::{self, Landed, Refused, SetState, Slot};
use crate::origin::registry::{Shared, Standing};
use crate::origin::request_kind::{RequestKind, SetName, Tuning};
use crate::origin::seam::{BoxFuture, Outgoing, SendFailure, Sent};
use crate::origin::supervisor::Core;
use conn::{Conn, H3Send};
pub(crate) use quic::QuicDial;

#[derive(Default)]
struct State {
    conns: Vec<Arc<Conn>>,
    connects: Connects,
    /// The origin went silent or refused a connection since the last completed handshake: the
    /// next connection completes its handshake before it takes requests. In 0-RTT it would
    /// take them at once, and to an origin that is gone each would wait for the connection's
    /// death before being tried again (a second or more each).
    suspect: bool,
    settings: UpstreamConfig,
    connect_timeout: Duration,
}

impl SetState for State {
    type Conn = Conn;

    fn parts(&mut self) -> (&mut Vec<Arc<Conn>>, &mut Connects, &UpstreamConfig) {
        (&mut self.conns, &mut self.connects, &self.settings)
    }
}

/// One origin's standing HTTP/3 connections.
pub(crate) struct H3Upstream {
    core: Core<QuicDial>,
    state: Mutex<State>,
    /// A connection opened, settled its 0-RTT, or closed: requests waiting for one look again.
    room: Notify,
    next_id: AtomicU64,
}

/// A failed connect: what it said, whether nothing came back, and how it failed.
struct Failed(String, bool, ConnectFailure);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Refused for Failed {
    fn noted(&self) -> (String, bool) {
        (self.0.clone(), self.1)
    }

    fn failure(&self) -> ConnectFailure {
        self.2
    }
}

/// One HTTP/3 set as `/origins` shows it.
#[derive(Debug, Clone, Serialize)]
struct H3Status {
    #[serde(flatten)]
    set: SetName,
    connections: Vec<ConnStatus>,
    opening: usize,
    consecutive_failures: u32,
}

/// One connection as `/origins` shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConnStatus {
    id: u64,
    age_ms: u64,
    streams: usize,
    requests: u64,
    /// quinn's smoothed round-trip estimate: the live R of the link.
    rtt_ms: f64,
    /// Started with 0-RTT, not yet confirmed by the handshake.
    early: bool,
    retiring: bool,
}

impl H3Upstream {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.core.metrics
    }

    pub(crate) fn conn_label(&self) -> UpstreamConn {
        self.core.conn_label()
    }

    fn room_changed(&self) {
        self.room.notify_waiters();
    }

    fn zero_rtt(&self, result: ZeroRtt) {
        let l = &self.core.labels;
        let label = UpstreamZeroRttLabel { route: l.route.clone(), result, server: l.server.clone() };
        self.core.metrics.upstream.zero_rtt.get_or_create(&label).inc();
    }

    /// The connection with the fewest streams that takes this request, waiting (up to the
    /// connect timeout after the request `began`, across its attempts) while none does: at
    /// start, or while every one is being replaced.
    /// Returns it, a request handle, the request's place, and whether it carried requests
    /// before.
    async fn pick(&self, early_ok: bool, began: Instant) -> Result<(Arc<Conn>, H3Send, Slot, bool), String> {
        // The request's whole wait for a connection is bounded by the connect timeout, so one
        // whose connection died under it (found by a second's silence) does not wait a whole
        // timeout again; yet a retry waits at least as long as a death takes to find, however
        // long the request had been in flight.
        let connect = self.state().connect_timeout;
        let now = Instant::now();
        let deadline = (began + connect).max(now + quic::DEAD_AFTER.min(connect));
        loop {
            let mut wait = std::pin::pin!(self.room.notified());
            wait.as_mut().enable();
            if self.core.retired.is_cancelled() {
                return Err("upstream retired".into());
            }
            let best = {
                let st = self.state();
                let best = st.conns.iter().filter(|c| c.usable(early_ok)).min_by_key(|c| c.active()).cloned();
                // As the HTTP/2 kind: an origin answering its connects with a refusal is not
                // waited for (issue 57). QUIC hears no ICMP here, so a dead port reads as
                // silence and is waited for; an answer (a CONNECTION_CLOSE, a TLS alert) counts.
                if best.is_none() && st.conns.is_empty() {
                    if let Some(why) = st.connects.refusing() {
                        return Err(format!("{why} (the origin's connects are failing)"));
                    }
                }
                best
            };
            if let Some(conn) = best {
                if let Some((send, slot, reused)) = conn.take(early_ok) {
                    return Ok((conn, send, slot, reused));
                }
                continue;
            }
            self.core.wake.notify_one();
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return Err(match self.state().connects.last_failure() {
                    Some(last) => format!("no HTTP/3 origin connection is up; the last connect: {last}"),
                    None => "no HTTP/3 origin connection is up".into(),
                });
            }
        }
    }

    /// The upkeep's turn, once the aged connections are retired: start connects until
    /// `connections` are live or opening.
    fn fill(self: &Arc<Self>, mut st: MutexGuard<'_, State>) {
        let start = multiplexed::to_open(&mut *st);
        drop(st);
        for _ in 0..start {
            let me = self.clone();
            tokio::spawn(async move { me.open().await });
        }
    }

    /// Open one connection and add it to the set (counted in `opening` by the caller).
    async fn open(self: &Arc<Self>) {
        let (timeout, congestion, keepalive, zero_rtt) = {
            let st = self.state();
            (st.connect_timeout, st.settings.congestion.clone(), st.settings.keepalive, !st.suspect)
        };
        let started = Instant::now();
        let result = async {
            let dialed = self.core.dial.connect(timeout, congestion.as_deref(), keepalive, zero_rtt).await;
            let dialed = dialed.map_err(|e| Failed(e.to_string(), e.silent(), e.failure()))?;
            if dialed.early.is_none() {
                self.state().suspect = false;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let conn = tokio::time::timeout(timeout, Conn::start(id, dialed.conn, dialed.early, self)).await;
            match conn {
                Err(_) => Err(Failed("HTTP/3 SETTINGS timed out".to_string(), true, ConnectFailure::Timeout)),
                Ok(conn) => conn.map_err(|e| Failed(format!("HTTP/3 handshake: {e}"), false, ConnectFailure::Protocol)),
            }
        }
        .await;
        let mut st = self.state();
        if result.is_err() {
            st.suspect = true;
        }
        if let Landed::Late(conn) = self.core.landed(st, "HTTP/3", started, result) {
            conn.retire();
            return;
        }
        self.room_changed();
    }

    /// A connection found to have said GOAWAY was retired: count it, and have the upkeep open
    /// its replacement now rather than at its next round.
    pub(super) fn replace_retired(&self) {
        self.core.metrics.upstream.goaways.get_or_create(&self.core.reason(UpstreamEnd::GoAway)).inc();
        self.core.wake.notify_one();
    }

    /// A connection's driver ended: forget it and replace it (`counted`: the upkeep retired it
    /// and counted why).
    fn closed(&self, id: u64, why: UpstreamEnd, counted: bool) {
        let mut st = self.state();
        if matches!(why, UpstreamEnd::PingTimeout | UpstreamEnd::Error) {
            st.suspect = true;
        }
        self.core.forget(&mut st.conns, id, why, counted);
        drop(st);
        self.room_changed();
    }
}

impl Standing for H3Upstream {
    fn retire(&self) {
        self.core.retire_all(&self.state);
        self.room_changed();
    }

    fn warm(&self) -> bool {
        let st = self.state();
        st.conns.iter().filter(|c| c.usable(false)).count() >= st.settings.connections
    }

    fn status(&self) -> serde_json::Value {
        let st = self.state();
        let status = H3Status {
            set: SetName::of(&self.core),
            connections: st.conns.iter().map(|c| c.status()).collect(),
            opening: st.connects.opening,
            consecutive_failures: st.connects.backoff.failures,
        };
        serde_json::to_value(status).unwrap_or_default()
    }

    fn up(&self) -> bool {
        let st = self.state();
        st.connects.backoff.failures == 0 || st.conns.iter().any(|c| c.usable(false))
    }
}

impl RequestKind for H3Upstream {
    const NAMES: (&'static str, &'static str) = ("h3", "h3");
    type Dial = QuicDial;

    fn start(core: Core<Self::Dial>, Tuning { settings, connect_timeout }: Tuning, _: &Shared) -> Arc<Self> {
        let state = Mutex::new(State { settings, connect_timeout, ..State::default() });
        Arc::new(Self { core, state, room: Notify::new(), next_id: AtomicU64::default() })
    }

    /// Keep `connections` connections open; replace the ones that end or age out.
    async fn upkeep(self: Arc<Self>) {
        self.core.keep(&self.state, |st| self.fill(st)).await;
    }

    fn update(&self, Tuning { settings, connect_timeout }: Tuning) {
        self.core.update(&self.state, |st| (st.settings, st.connect_timeout) = (settings, connect_timeout));
    }

    fn send<'a>(self: &'a Arc<Self>, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        Box::pin(send::send(self, out))
    }
}
