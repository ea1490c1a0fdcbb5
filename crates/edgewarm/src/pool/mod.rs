//! Pools of origin TLS connections handshaked before any client asks for them.
//!
//! One pool per [`PoolKey`], shared by every worker thread (a per-thread pool multiplies origin
//! connections and lowers the hit rate: a client can only hit the pool of the thread it landed
//! on). A pool holds connections whose TLS handshake has completed. Each is handed to exactly
//! one client and never comes back: after the handoff the bytes on it are the client's.
//!
//! - [`sizing`]: how many to hold (arrival rate × warm time, plus a square-root surplus) and
//!   backoff for a failing origin.
//! - [`watch`]: the task that owns each idle connection, notices its death, buffers what the
//!   origin sends early, and retires it after `max_idle`.
//! - [`registry`]: the pools of the running config; reload adds, resizes and retires pools.
//! - [`serve`]: one client on a `prewarm` route: terminate its TLS, take a connection, relay.
//!
//! Refill is event-driven and periodic: every take wakes the refill task, which tops the pool
//! up to its current target; every `period` the demand estimate is updated and the pool topped
//! up again. Nothing closes surplus actively: takes are newest-first, so the connections a
//! smaller demand no longer needs are the oldest and expire on their own.

pub mod registry;
pub mod serve;
pub mod sizing;
mod watch;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::metrics::{Metrics, PoolLabels, PoolReason};
use crate::tls::origin::PoolKey;
use crate::tunnel::connect::{self, ConnectError};
use sizing::{Backoff, Demand};

/// A warm connection handed to a client.
pub struct Warm {
    pub stream: TlsStream<TcpStream>,
    /// Bytes the origin sent while the connection waited (an HTTP/2 SETTINGS frame, say): the
    /// client gets them first.
    pub early: Vec<u8>,
    /// How long it waited in the pool.
    pub age: Duration,
}

/// Why an origin connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("origin certificate rejected: {0}")]
    Certificate(std::io::Error),
    #[error("origin TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("origin TLS handshake timed out")]
    HandshakeTimeout,
    #[error("origin negotiated ALPN {got:?}, pool needs {want:?}")]
    AlpnMismatch { want: Option<String>, got: Option<String> },
    #[error("origin is failing; not connecting until the backoff ends")]
    Backoff,
}

impl WarmError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Connect(e) => e.close_reason().label(),
            Self::Certificate(_) => "origin_certificate",
            Self::Handshake(_) => "origin_tls",
            Self::HandshakeTimeout => "origin_timeout",
            Self::AlpnMismatch { .. } => "alpn_mismatch",
            Self::Backoff => "origin_backoff",
        }
    }
}

/// How a pool reaches its origin; fixed for the pool's life (part of its key).
pub struct Target {
    pub key: PoolKey,
    pub connector: TlsConnector,
    pub server_name: ServerName<'static>,
}

/// What a reload may change on a live pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub size: PoolConfig,
    pub connect_timeout: Duration,
}

/// An idle connection's entry: the way to ask its watcher for it.
struct Idle {
    id: u64,
    handoff: oneshot::Sender<oneshot::Sender<Warm>>,
}

struct State {
    /// Oldest first; takes pop from the back.
    idle: VecDeque<Idle>,
    connecting: usize,
    next_id: u64,
    demand: Demand,
    period_start: Instant,
    backoff: Backoff,
    /// No refill attempt before this (origin failing).
    retry_at: Option<Instant>,
    /// The origin answered this pool's ALPN offer with something else: clients are not offered
    /// this protocol.
    alpn_refused: bool,
    settings: Settings,
}

pub struct Pool {
    target: Target,
    labels: PoolLabels,
    state: Mutex<State>,
    wake: Notify,
    retired: CancellationToken,
    metrics: Arc<Metrics>,
}

impl Pool {
    /// Create a pool and start its refill task.
    pub fn start(target: Target, labels: PoolLabels, settings: Settings, metrics: Arc<Metrics>) -> Arc<Self> {
        let pool = Arc::new(Self {
            target,
            labels,
            state: Mutex::new(State {
                idle: VecDeque::new(),
                connecting: 0,
                next_id: 0,
                demand: Demand::default(),
                period_start: Instant::now(),
                backoff: Backoff::default(),
                retry_at: None,
                alpn_refused: false,
                settings,
            }),
            wake: Notify::new(),
            retired: CancellationToken::new(),
            metrics,
        });
        tokio::spawn(pool.clone().refill_loop());
        pool
    }

    pub fn key(&self) -> &PoolKey {
        &self.target.key
    }

    pub fn labels(&self) -> &PoolLabels {
        &self.labels
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the pool; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn update(&self, settings: Settings) {
        self.state().settings = settings;
        self.wake.notify_one();
    }

    /// Stop refilling and close every idle connection (reload removed this pool).
    pub fn retire(&self) {
        self.retired.cancel();
        let idle = std::mem::take(&mut self.state().idle);
        // Dropping the entries closes the watchers' handoff channels; they close their streams.
        drop(idle);
        self.metrics.pool.ready.get_or_create(&self.labels).set(0);
    }

    /// Whether clients should be offered this pool's ALPN.
    pub fn origin_speaks_alpn(&self) -> bool {
        !self.state().alpn_refused
    }

    /// Whether the origin is down enough that clients should be refused at once.
    pub fn failing(&self) -> bool {
        self.state().backoff.failing()
    }

    /// Take a warm connection, or `None` if none is ready (the caller then calls
    /// [`Pool::connect_now`]). Wakes the refill task either way.
    ///
    /// Race with a dying connection: a watcher that sees its connection die removes its own
    /// entry under the lock. Either it does so first and the entry is never popped, or the
    /// entry was popped first and the watcher, gone, drops the handoff channel — then the
    /// reply below fails and we try the next entry. A dead connection is never returned.
    pub async fn take(&self) -> Option<Warm> {
        self.state().demand.arrival();
        let result = loop {
            let Some(idle) = self.state().idle.pop_back() else { break None };
            self.metrics.pool.ready.get_or_create(&self.labels).dec();
            let (reply, answer) = oneshot::channel();
            if idle.handoff.send(reply).is_err() {
                continue;
            }
            if let Ok(warm) = answer.await {
                break Some(warm);
            }
        };
        // After the pop, so the refill task sees the deficit.
        self.wake.notify_one();
        match &result {
            Some(_) => self.metrics.pool.hits.get_or_create(&self.labels).inc(),
            None => self.metrics.pool.misses.get_or_create(&self.labels).inc(),
        };
        result
    }

    /// A miss: connect on demand for this client (it waits only for this one).
    pub async fn connect_now(self: &Arc<Self>) -> Result<Warm, WarmError> {
        if self.failing() {
            return Err(WarmError::Backoff);
        }
        let stream = self.warm_one().await?;
        Ok(Warm { stream, early: Vec::new(), age: Duration::ZERO })
    }

    /// Connect and handshake one origin connection, recording the outcome.
    async fn warm_one(&self) -> Result<TlsStream<TcpStream>, WarmError> {
        let (timeout, retrying) = {
            let st = self.state();
            (st.settings.connect_timeout, st.backoff.failures > 0)
        };
        if retrying {
            self.metrics.pool.retries.get_or_create(&self.labels).inc();
        }
        let started = Instant::now();
        let result = self.handshake(timeout).await;
        let mut st = self.state();
        match &result {
            Ok(_) => {
                let took = started.elapsed();
                st.backoff.succeeded();
                st.retry_at = None;
                st.demand.warmed(took);
                self.metrics.pool.opened.get_or_create(&self.labels).inc();
                self.metrics.pool.handshake_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
            }
            Err(e) => {
                if matches!(e, WarmError::AlpnMismatch { .. }) {
                    st.alpn_refused = true;
                }
                let wait = st.backoff.failed(jitter());
                st.retry_at = Some(Instant::now() + wait);
                self.metrics.pool.connect_errors.get_or_create(&self.reason_labels(e.reason())).inc();
            }
        }
        result
    }

    async fn handshake(&self, timeout: Duration) -> Result<TlsStream<TcpStream>, WarmError> {
        let key = &self.target.key;
        // Fast Open would only shorten the warm-up, which no client waits for.
        let (tcp, _) = connect::connect(&key.origin, false, timeout, &[]).await?;
        let tls = tokio::time::timeout(timeout, self.target.connector.connect(self.target.server_name.clone(), tcp))
            .await
            .map_err(|_| WarmError::HandshakeTimeout)?
            .map_err(classify_tls_error)?;
        let got = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        if got != key.alpn {
            let show = |p: &Option<Vec<u8>>| p.as_deref().map(|p| String::from_utf8_lossy(p).into_owned());
            return Err(WarmError::AlpnMismatch { want: show(&key.alpn), got: show(&got) });
        }
        Ok(tls)
    }

    fn reason_labels(&self, reason: &'static str) -> PoolReason {
        let l = &self.labels;
        PoolReason { route: l.route.clone(), origin: l.origin.clone(), alpn: l.alpn.clone(), reason }
    }

    /// The refill task: wakes on takes, on its period, and when a backoff ends.
    async fn refill_loop(self: Arc<Self>) {
        loop {
            let (period, wait_until) = {
                let st = self.state();
                let period_end = st.period_start + st.settings.size.period;
                (st.settings.size.period, st.retry_at.map_or(period_end, |r| r.min(period_end)))
            };
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(wait_until) => {}
                () = self.retired.cancelled() => return,
            }
            {
                let mut st = self.state();
                if Instant::now() >= st.period_start + period {
                    st.demand.tick(period);
                    st.period_start = Instant::now();
                }
            }
            self.fill();
        }
    }

    /// Start as many warm-ups as the target needs.
    fn fill(self: &Arc<Self>) {
        let mut st = self.state();
        let now = Instant::now();
        if st.retry_at.is_some_and(|t| now < t) {
            return;
        }
        let s = &st.settings.size;
        let target = st.demand.target(s.min, s.max, now - st.period_start);
        self.metrics.pool.target.get_or_create(&self.labels).set(target as i64);
        let have = st.idle.len() + st.connecting;
        let mut start = target.saturating_sub(have);
        if st.backoff.failures > 0 {
            // Probing a failing origin: one attempt at a time.
            start = start.min(1).saturating_sub(st.connecting);
        }
        st.connecting += start;
        drop(st);
        self.metrics.pool.connecting.get_or_create(&self.labels).inc_by(start as i64);
        for _ in 0..start {
            let pool = self.clone();
            tokio::spawn(async move {
                let result = pool.warm_one().await;
                pool.state().connecting -= 1;
                pool.metrics.pool.connecting.get_or_create(&pool.labels).dec();
                match result {
                    Ok(stream) => pool.add_idle(stream),
                    // The backoff is recorded; the refill loop retries when it ends.
                    Err(e) => tracing::warn!(
                        route = %pool.labels.route, origin = %pool.labels.origin, alpn = %pool.labels.alpn,
                        reason = e.reason(), error = %e, "warming an origin connection failed"
                    ),
                }
                pool.wake.notify_one();
            });
        }
    }

    fn add_idle(self: &Arc<Self>, stream: TlsStream<TcpStream>) {
        if self.retired.is_cancelled() {
            return;
        }
        let (handoff, requests) = oneshot::channel();
        let mut st = self.state();
        let id = st.next_id;
        st.next_id += 1;
        let max_idle = st.settings.size.max_idle;
        st.idle.push_back(Idle { id, handoff });
        drop(st);
        self.metrics.pool.ready.get_or_create(&self.labels).inc();
        tokio::spawn(watch::watch(self.clone(), id, stream, requests, max_idle));
    }

    /// A watcher's connection ended while idle. Returns false if a taker already popped the
    /// entry (the watcher then answers or drops the pending handoff).
    fn remove_idle(&self, id: u64) -> bool {
        let mut st = self.state();
        let Some(i) = st.idle.iter().position(|e| e.id == id) else { return false };
        st.idle.remove(i);
        drop(st);
        self.metrics.pool.ready.get_or_create(&self.labels).dec();
        true
    }

    /// Numbers for `/pools`.
    pub fn status(&self) -> serde_json::Value {
        let st = self.state();
        let k = &self.target.key;
        let s = &st.settings.size;
        serde_json::json!({
            "route": self.labels.route,
            "origin": k.origin.to_string(),
            "sni": k.server_name,
            "alpn": self.labels.alpn,
            "verify": k.verify,
            "ready": st.idle.len(),
            "connecting": st.connecting,
            "target": st.demand.target(s.min, s.max, Instant::now() - st.period_start),
            "min": s.min,
            "max": s.max,
            "max_idle_ms": s.max_idle.as_millis() as u64,
            "arrival_rate": st.demand.rate,
            "warm_time_ms": st.demand.warm * 1e3,
            "consecutive_failures": st.backoff.failures,
            "alpn_refused": st.alpn_refused,
        })
    }
}

/// Certificate problems are the operator's to fix and worth their own label; an origin that
/// refuses the offered ALPN (no_application_protocol) means "does not speak it".
fn classify_tls_error(e: std::io::Error) -> WarmError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => WarmError::Certificate(e),
        Some(rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => {
            WarmError::AlpnMismatch { want: None, got: None }
        }
        _ => WarmError::Handshake(e),
    }
}

/// A number in [0, 1) for backoff jitter. Not for cryptography: std's randomly keyed hasher
/// over the time is plenty to keep edges from retrying in lockstep.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
