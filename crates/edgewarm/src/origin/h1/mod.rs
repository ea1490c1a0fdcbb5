//! HTTP/1.1 origins: a demand-sized pool of keep-alive connections, for origins without HTTP/2.
//!
//! HTTP/1.1 carries one request at a time per connection, so the origin side becomes a pool:
//! `connections` are opened when the configuration is loaded (before any client); a request
//! takes the most recently used idle connection (or opens one when none is idle) and gives it
//! back once the response body has ended, for the next request. Every period the pool
//! re-estimates how many connections the busiest moment needs ([`Concurrency`]) and opens the
//! difference in the background, so a growing load finds idle connections instead of waiting
//! for handshakes; idle connections beyond the estimate, or idle longer than `max_age`, are
//! closed. A connection the origin closed is dropped when next taken, never used. Like the
//! HTTP/2 upstreams, a pool is kept across reloads while its key is wanted.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

mod send;

use super::BoxedBody;
use crate::config::UpstreamConfig;
use crate::metrics::ConnectFailure;
use crate::origin::backoff::Connects;
use crate::origin::connect::Connect;
use crate::origin::dial::WarmError;
use crate::origin::registry::{Shared, Standing};
use crate::origin::request_kind::{RequestKind, SetName, Tuning};
use crate::origin::seam::{BoxFuture, Outgoing, SendFailure, Sent};
use crate::origin::sizing::Concurrency;
use crate::origin::supervisor::Core;

/// How often the pool re-estimates demand and trims idle connections.
const PERIOD: Duration = Duration::from_secs(1);

/// Why a request could not be sent to an HTTP/1.1 origin.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1Error {
    #[error("no origin connection: {0}")]
    Connect(#[from] WarmError),
    #[error("origin HTTP/1.1: {0}")]
    Http(#[from] hyper::Error),
}

impl H1Error {
    /// How a connect failed, for `origin_connect_failures`.
    fn failure(&self) -> ConnectFailure {
        match self {
            Self::Connect(e) => e.failure(),
            Self::Http(_) => ConnectFailure::Protocol,
        }
    }
}

struct Idle {
    send: SendRequest<BoxedBody>,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Oldest first; requests take from the end (most recently used).
    idle: Vec<Idle>,
    in_use: usize,
    demand: Concurrency,
    /// Connects under way and the backoff of a failing origin.
    connects: Connects,
    settings: UpstreamConfig,
    connect_timeout: Duration,
}

pub(crate) struct H1Upstream {
    /// Its upkeep is woken when a request found no idle connection, or settings changed.
    core: Core<Arc<dyn Connect>>,
    state: Mutex<State>,
    /// The metric handles every request touches, resolved once (a lookup hashes the labels
    /// under a lock).
    hot: Hot,
}

struct Hot {
    ready: Gauge,
    hits: Counter,
    misses: Counter,
}

impl std::fmt::Debug for H1Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Upstream").field("labels", &self.core.labels).finish_non_exhaustive()
    }
}

/// A connection lent to one request; back to the pool when dropped after its response.
pub(crate) struct Lease {
    send: Option<SendRequest<BoxedBody>>,
    upstream: Arc<H1Upstream>,
    /// The connection had carried requests before this one.
    pub(crate) reused: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.upstream.state().in_use -= 1;
        if let Some(send) = self.send.take() {
            self.upstream.give_back(send);
        }
    }
}

impl H1Upstream {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tick(&self) {
        let m = &self.core.metrics.pool;
        let mut st = self.state();
        let in_use = st.in_use;
        st.demand.tick(in_use);
        let target = st.demand.target(st.settings.connections, st.settings.max_connections);
        // Closed by the origin, or idle past `max_age`: gone. Then the oldest idle beyond
        // what the estimate wants.
        let max_age = st.settings.max_age;
        let before = st.idle.len();
        st.idle.retain(|i| !i.send.is_closed() && i.since.elapsed() < max_age);
        let surplus = (st.idle.len() + in_use).saturating_sub(target).min(st.idle.len());
        st.idle.drain(..surplus);
        let expired = before - st.idle.len();
        m.expired.get_or_create(&self.core.labels).inc_by(expired as u64);
        self.hot.ready.set(st.idle.len() as i64);
        m.target.get_or_create(&self.core.labels).set(target as i64);
    }

    /// Open connections until idle + in use + opening reaches the estimate (none while the
    /// origin is failing and its backoff has not passed).
    fn top_up(self: &Arc<Self>) {
        let mut st = self.state();
        if st.connects.in_backoff(Instant::now()) {
            return;
        }
        let target = st.demand.target(st.settings.connections, st.settings.max_connections);
        let have = st.idle.len() + st.in_use + st.connects.opening;
        let missing = target.saturating_sub(have);
        let missing = st.connects.start(missing);
        self.core.metrics.pool.connecting.get_or_create(&self.core.labels).set(st.connects.opening as i64);
        drop(st);
        for _ in 0..missing {
            let me = self.clone();
            tokio::spawn(async move {
                let opened = me.open().await;
                let mut st = me.state();
                st.connects.opening -= 1;
                me.core.metrics.pool.connecting.get_or_create(&me.core.labels).set(st.connects.opening as i64);
                match opened {
                    Ok(send) => {
                        st.connects.succeeded();
                        drop(st);
                        me.give_back(send);
                    }
                    Err(e) => {
                        let wait = st.connects.failed();
                        drop(st);
                        tracing::warn!(route = %me.core.labels.route, origin = %me.core.labels.server, error = %e, retry_in = ?wait, "opening an HTTP/1.1 origin connection failed");
                    }
                }
            });
        }
    }

    /// Open one connection, for the pool or for a request that found none idle: either way
    /// a failure is counted here, once.
    async fn open(&self) -> Result<SendRequest<BoxedBody>, H1Error> {
        let started = Instant::now();
        let (timeout, congestion) = {
            let st = self.state();
            (st.connect_timeout, st.settings.congestion.clone())
        };
        let opened = async {
            let tls = self.core.dial.connect(timeout, congestion.as_deref()).await?;
            Ok::<_, H1Error>(hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?)
        }
        .await;
        let (send, conn) = opened.inspect_err(|e| self.core.count_failure(e.failure()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.core.opened(started.elapsed());
        Ok(send)
    }

    fn give_back(&self, send: SendRequest<BoxedBody>) {
        if send.is_closed() || self.core.retired.is_cancelled() {
            return;
        }
        let mut st = self.state();
        if st.idle.len() < st.settings.max_connections {
            st.idle.push(Idle { send, since: Instant::now() });
        }
        self.hot.ready.set(st.idle.len() as i64);
    }

    /// A connection for one request: the most recently used idle one that is still open and
    /// has been idle less than `max_age`, else a new one (and the pool is told to grow).
    async fn take(self: &Arc<Self>) -> Result<Lease, H1Error> {
        let mut lease = {
            let mut st = self.state();
            st.in_use += 1;
            let in_use = st.in_use;
            st.demand.in_use(in_use);
            Lease { send: None, upstream: self.clone(), reused: true }
        };
        loop {
            let next = {
                let mut st = self.state();
                let next = st.idle.pop();
                self.hot.ready.set(st.idle.len() as i64);
                next
            };
            let Some(Idle { mut send, since }) = next else { break };
            if send.is_closed() || since.elapsed() >= self.state().settings.max_age {
                continue;
            }
            // Ready at once unless the origin is closing it.
            if send.ready().await.is_ok() {
                self.hot.hits.inc();
                lease.send = Some(send);
                return Ok(lease);
            }
        }
        self.hot.misses.inc();
        self.core.wake.notify_one();
        lease.send = Some(self.open().await?);
        lease.reused = false;
        Ok(lease)
    }

    /// Send one request; the lease must live until the response body has ended.
    pub(crate) async fn send(
        self: &Arc<Self>,
        request: http::Request<BoxedBody>,
    ) -> Result<(http::Response<Incoming>, Lease), H1Error> {
        let mut lease = self.take().await?;
        let send = lease.send.as_mut().expect("a lease holds its connection until dropped");
        match send.send_request(request).await {
            Ok(response) => Ok((response, lease)),
            Err(e) => {
                // Broken: do not give it back.
                lease.send = None;
                Err(e.into())
            }
        }
    }
}

/// One HTTP/1.1 pool as `/origins` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct H1Status {
    #[serde(flatten)]
    pub set: SetName,
    /// Open and waiting for a request.
    pub idle: usize,
    /// Carrying a request now.
    pub in_use: usize,
    pub opening: usize,
    /// How many the pool holds for the busiest moment it has seen lately.
    pub target: usize,
    pub consecutive_failures: u32,
}

impl Standing for H1Upstream {
    /// No route uses this pool any more: close the idle connections; leased ones close when
    /// their responses end.
    fn retire(&self) {
        self.core.retired.cancel();
        self.state().idle.clear();
        self.hot.ready.set(0);
    }

    /// Holds the standing connections its settings ask for (`connections`), idle or in use.
    fn warm(&self) -> bool {
        let st = self.state();
        st.idle.len() + st.in_use >= st.settings.connections
    }

    fn status(&self) -> serde_json::Value {
        let st = self.state();
        let status = H1Status {
            set: SetName::of(&self.core),
            idle: st.idle.len(),
            in_use: st.in_use,
            opening: st.connects.opening,
            target: st.demand.target(st.settings.connections, st.settings.max_connections),
            consecutive_failures: st.connects.backoff.failures,
        };
        serde_json::to_value(status).unwrap_or_default()
    }

    fn up(&self) -> bool {
        let st = self.state();
        st.connects.backoff.failures == 0 || st.idle.len() + st.in_use > 0
    }
}

impl RequestKind for H1Upstream {
    const NAMES: (&'static str, &'static str) = ("http/1.1", "http/1.1");
    type Dial = Arc<dyn Connect>;

    fn start(core: Core<Self::Dial>, Tuning { settings, connect_timeout }: Tuning, _: &Shared) -> Arc<Self> {
        let state = State { settings, connect_timeout, ..State::default() };
        let m = &core.metrics.pool;
        let hot = Hot {
            ready: m.ready.get_or_create(&core.labels).clone(),
            hits: m.hits.get_or_create(&core.labels).clone(),
            misses: m.misses.get_or_create(&core.labels).clone(),
        };
        Arc::new(Self { core, state: Mutex::new(state), hot })
    }

    /// Every period (or when woken): fold demand, trim, and open what the estimate lacks.
    async fn upkeep(self: Arc<Self>) {
        let schedule = || (PERIOD, self.state().connects.retry_at());
        let turn = |ticked| {
            if ticked {
                self.tick();
            }
            self.top_up();
        };
        self.core.upkeep(schedule, turn).await;
    }

    fn update(&self, Tuning { settings, connect_timeout }: Tuning) {
        self.core.update(&self.state, |st| (st.settings, st.connect_timeout) = (settings, connect_timeout));
    }

    fn send<'a>(self: &'a Arc<Self>, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        Box::pin(send::send(self, out))
    }
}
