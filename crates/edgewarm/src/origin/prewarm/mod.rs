//! Pools of origin TLS connections handshaked before any client asks for them.
//!
//! One pool per [`PoolKey`], shared by every worker thread (a per-thread pool multiplies origin
//! connections and lowers the hit rate: a client can only hit the pool of the thread it landed
//! on). A pool holds connections whose TLS handshake has completed. Each is handed to exactly
//! one client and never comes back: after the handoff the bytes on it are the client's.
//!
//! - [`sizing`](crate::origin::sizing): how many to hold (arrival rate × warm time, plus a
//!   square-root surplus); [`backoff`](crate::origin::backoff) for a failing origin.
//! - [`watch`]: the task that owns each idle connection, notices its death, buffers what the
//!   origin sends early, and retires it after `max_idle`.
//! - [`dial`](crate::origin::dial): how a pool makes a connection.
//! - [`refill`]: the task that keeps a pool at its target, and every connect's bookkeeping.
//! - [`status`]: a pool's numbers for the admin listener's `/pools`.
//!
//! This module is the idle hand-off: the idle list, take, and the watchers' removal. The pool
//! is generic over what it holds ([`Pool<D>`] for a [`Dial`] `D`), so other kinds of
//! standing origin connection reuse sizing, backoff, watchers and metrics.
//!
//! Refill is event-driven and periodic: every take wakes the refill task, which tops the pool
//! up to its current target; every `period` the demand estimate is updated and the pool topped
//! up again. Nothing closes surplus actively: takes are newest-first, so the connections a
//! smaller demand no longer needs are the oldest and expire on their own.

mod kind;
mod refill;
pub(crate) mod status;

pub(crate) use kind::{PrewarmSpec, KIND};
mod watch;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::metrics::{Metrics, PoolLabels};
use crate::origin::backoff::Connects;
use crate::origin::dial::{Dial, TlsDial, WarmError};
use crate::origin::sizing::Demand;
use crate::origin::supervisor::Core;
use crate::tls::origin::PoolKey;

/// The pool of a `prewarm` route: origin TLS connections.
pub(crate) type TlsPool = Pool<TlsDial>;

/// A warm connection handed to a client.
pub struct Warm<S> {
    pub stream: S,
    /// Bytes the origin sent while the connection waited (an HTTP/2 SETTINGS frame, say): the
    /// client gets them first.
    pub early: Vec<u8>,
    /// How long it waited in the pool.
    pub age: Duration,
}

/// What a reload may change on a live pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub size: PoolConfig,
    pub connect_timeout: Duration,
    /// One of several ALPN pools of its route: with no client for `max_idle` it may shrink
    /// below `min` to one connection, since clients of a route usually all speak the same
    /// protocol and the other pools' `min` would be kept warm for nobody.
    pub shared: bool,
}

/// An idle connection's entry: the way to ask its watcher for it.
struct Idle<S> {
    id: u64,
    handoff: oneshot::Sender<oneshot::Sender<Warm<S>>>,
}

struct State<S> {
    /// Oldest first; takes pop from the back.
    idle: VecDeque<Idle<S>>,
    /// Warm-ups under way (`opening`) and the backoff of a failing origin.
    connects: Connects,
    next_id: u64,
    demand: Demand,
    period_start: Instant,
    /// The last client (or the pool's start, before any).
    last_arrival: Instant,
    /// The origin answered this pool's ALPN offer with something else: clients are not offered
    /// this protocol.
    alpn_refused: bool,
    settings: Settings,
}

pub struct Pool<D: Dial> {
    core: Core<D>,
    state: Mutex<State<D::Conn>>,
}

impl<D: Dial> std::fmt::Debug for Pool<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("labels", &self.core.labels).finish_non_exhaustive()
    }
}

impl<D: Dial> Pool<D> {
    /// Create a pool and start its refill task.
    pub fn start(dial: D, labels: PoolLabels, settings: Settings, metrics: Arc<Metrics>) -> Arc<Self> {
        let pool = Arc::new(Self {
            core: Core::new(dial, labels, kind::KIND, metrics),
            state: Mutex::new(State {
                idle: VecDeque::new(),
                connects: Connects::default(),
                next_id: 0,
                demand: Demand::default(),
                period_start: Instant::now(),
                last_arrival: Instant::now(),
                alpn_refused: false,
                settings,
            }),
        });
        tokio::spawn(pool.clone().refill_loop());
        pool
    }

    pub fn key(&self) -> &PoolKey {
        self.core.key()
    }

    pub fn labels(&self) -> &PoolLabels {
        &self.core.labels
    }

    fn state(&self) -> MutexGuard<'_, State<D::Conn>> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the pool; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// New settings from a reload; the connections held stay.
    pub fn update(&self, settings: Settings) {
        self.core.update(&self.state, |st| st.settings = settings);
    }

    /// Stop refilling and close every idle connection (reload removed this pool).
    pub fn retire(&self) {
        self.core.retired.cancel();
        let idle = std::mem::take(&mut self.state().idle);
        // Dropping the entries closes the watchers' handoff channels; they close their streams.
        drop(idle);
        self.core.metrics.pool.ready.get_or_create(&self.core.labels).set(0);
    }

    /// Whether clients should be offered this pool's ALPN.
    pub fn origin_speaks_alpn(&self) -> bool {
        !self.state().alpn_refused
    }

    /// Whether the origin is down enough that clients should be refused at once.
    pub fn failing(&self) -> bool {
        self.state().connects.backoff.failing()
    }

    /// Take a warm connection, or `None` if none is ready (the caller then calls
    /// [`Pool::connect_now`]). Wakes the refill task either way.
    ///
    /// Race with a dying connection: a watcher that sees its connection die removes its own
    /// entry under the lock. Either it does so first and the entry is never popped, or the
    /// entry was popped first and the watcher, gone, drops the handoff channel — then the
    /// reply below fails and we try the next entry. A dead connection is never returned.
    pub async fn take(&self) -> Option<Warm<D::Conn>> {
        {
            let mut st = self.state();
            st.demand.arrival();
            st.last_arrival = Instant::now();
        }
        let result = loop {
            let Some(idle) = self.state().idle.pop_back() else { break None };
            self.core.metrics.pool.ready.get_or_create(&self.core.labels).dec();
            let (reply, answer) = oneshot::channel();
            if idle.handoff.send(reply).is_err() {
                continue;
            }
            if let Ok(warm) = answer.await {
                break Some(warm);
            }
        };
        // After the pop, so the refill task sees the deficit.
        self.core.wake.notify_one();
        match &result {
            Some(_) => self.core.metrics.pool.hits.get_or_create(&self.core.labels).inc(),
            None => self.core.metrics.pool.misses.get_or_create(&self.core.labels).inc(),
        };
        result
    }

    /// A miss: connect on demand for this client (it waits only for this one).
    pub async fn connect_now(self: &Arc<Self>) -> Result<Warm<D::Conn>, WarmError> {
        if self.failing() {
            return Err(WarmError::Backoff);
        }
        let stream = self.warm_one().await?;
        Ok(Warm { stream, early: Vec::new(), age: Duration::ZERO })
    }

    fn add_idle(self: &Arc<Self>, stream: D::Conn) {
        if self.core.retired.is_cancelled() {
            return;
        }
        let (handoff, requests) = oneshot::channel();
        let mut st = self.state();
        let id = st.next_id;
        st.next_id += 1;
        let max_idle = st.settings.size.max_idle;
        st.idle.push_back(Idle { id, handoff });
        drop(st);
        self.core.metrics.pool.ready.get_or_create(&self.core.labels).inc();
        tokio::spawn(watch::watch(self.clone(), id, stream, requests, max_idle));
    }

    /// A watcher's connection ended while idle. Returns false if a taker already popped the
    /// entry (the watcher then answers or drops the pending handoff).
    fn remove_idle(&self, id: u64) -> bool {
        let mut st = self.state();
        let Some(i) = st.idle.iter().position(|e| e.id == id) else { return false };
        st.idle.remove(i);
        drop(st);
        self.core.metrics.pool.ready.get_or_create(&self.core.labels).dec();
        true
    }
}
