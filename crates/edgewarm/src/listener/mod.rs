//! The accept loop: deliberately trivial. It waits for a connection slot, accepts, and hands
//! the socket to its own task ([`conn::handle`]); nothing per-connection happens here, so one
//! slow client can never hold up the next accept.
//!
//! At `max_connections` it asks idle HTTP connections to finish ([`crate::limits::reclaim`],
//! the address holding the most first) and stops accepting until a place is free, letting the
//! kernel backlog queue the rest (the backlog, not our memory, absorbs a burst). When accept fails for lack of descriptors or
//! memory it backs off (10 ms doubling to 1 s) instead of spinning on a listener that stays
//! readable; other accept errors concern only the one connection and are skipped.

pub(crate) mod conn;
pub(crate) mod quic;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use crate::accesslog::AccessLog;
use crate::action::ConnCtx;
use crate::config::ListenerConfig;
use crate::error::CloseReason;
use crate::limits::admission::Admission;
use crate::limits::clients::Tracked;
use crate::limits::reclaim::{self, Idle};
use crate::metrics::{AcceptError, AcceptErrorLabel, ListenerLabel, Metrics, ReasonLabel, RouteMetrics};
use crate::route::Route;
use crate::snapshot::Snapshot;
use crate::workers::Placement;

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The shortest wait between two looks for idle connections while the listener is full.
const MIN_LOOK: Duration = Duration::from_millis(10);

/// What the listeners share with the server: the current snapshot, metrics, and the shutdown
/// signals. Connections see nothing else of the server.
pub(crate) struct Context {
    pub metrics: Arc<Metrics>,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Stop accepting.
    pub stop: CancellationToken,
    /// Cut open connections (grace period over).
    pub cut: CancellationToken,
    /// Every connection task, so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// The worker runtimes accepted connections are handed to, in turn.
    pub workers: Placement,
    /// HTTP/3 endpoints' keys, and whether the process has handed its sockets over.
    pub quic: quic::relay::QuicProcess,
    /// Connections open per client address, each listener's.
    pub clients: Arc<Tracked>,
}

/// What one TCP listener's connections share: its settings, its clients' counts and its
/// reclaimable connections.
pub(crate) struct Listening {
    pub config: ListenerConfig,
    pub admission: Admission,
    pub idle: Arc<Idle>,
}

pub(crate) async fn accept_loop(listener: TcpListener, config: ListenerConfig, cx: Arc<Context>) {
    let Ok(local) = listener.local_addr() else { return };
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let label = ListenerLabel { listener: local.to_string() };
    let accepted = cx.metrics.accepted.get_or_create(&label).clone();
    let reclaimed = cx.metrics.reclaimed.get_or_create(&label).clone();
    let clients = cx.clients.listener(local.to_string(), config.ipv6_prefix);
    let admission = Admission::new(&config, clients, cx.metrics.limited.clone());
    let shared = Arc::new(Listening { config, admission, idle: Arc::default() });
    let config = &shared.config;
    let mut backoff = BACKOFF_MIN;
    tracing::info!(listen = %local, tcp_fastopen = config.tcp_fastopen, proxy_protocol = config.proxy_protocol, "listening");
    loop {
        let permit = match limit.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                let batch = reclaim::batch(config.max_connections);
                let full =
                    Full { limit: &limit, idle: &shared.idle, batch, reclaimed: &reclaimed, local, stop: &cx.stop };
                match full.wait().await {
                    Some(p) => p,
                    None => return,
                }
            }
        };
        let result = tokio::select! {
            r = listener.accept() => r,
            () = cx.stop.cancelled() => return,
        };
        match result {
            Ok((stream, peer)) => {
                backoff = BACKOFF_MIN;
                accepted.inc();
                let log = crate::accesslog::AccessLog::new(peer, local);
                spawn(stream, log, shared.clone(), cx.clone(), permit);
            }
            Err(e) if is_resource_exhaustion(&e) => {
                cx.metrics.accept_errors.get_or_create(&AcceptErrorLabel { reason: AcceptError::Resources }).inc();
                tracing::warn!(listen = %local, error = %e, backoff = ?backoff, "accept failed: out of resources, backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => {
                cx.metrics.accept_errors.get_or_create(&AcceptErrorLabel { reason: AcceptError::Connection }).inc();
                tracing::debug!(listen = %local, error = %e, "accept failed for one connection");
            }
        }
    }
}

/// A listener at `max_connections`, waiting for a place.
struct Full<'a> {
    limit: &'a Arc<Semaphore>,
    idle: &'a Idle,
    batch: usize,
    reclaimed: &'a prometheus_client::metrics::counter::Counter,
    local: std::net::SocketAddr,
    stop: &'a tokio_util::sync::CancellationToken,
}

impl Full<'_> {
    /// Reclaims idle connections in batches until a place is free: looked at again when the
    /// next connection will have been idle long enough, or after [`reclaim::GRACE`] (one busy
    /// now may be idle by then); those already asked and still finishing count in the batch.
    async fn wait(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            let asked = self.idle.reclaim(self.batch);
            if asked.connections > 0 {
                self.reclaimed.inc_by(asked.connections as u64);
                tracing::info!(
                    listen = %self.local,
                    connections = asked.connections,
                    clients = asked.clients,
                    "listener full (max_connections): idle connections asked to finish"
                );
            }
            tokio::select! {
                p = self.limit.clone().acquire_owned() => return p.ok(),
                () = self.stop.cancelled() => return None,
                () = tokio::time::sleep(asked.next.unwrap_or(reclaim::GRACE).max(MIN_LOOK)) => {}
            }
        }
    }
}

/// Serve the connection on the next worker (or here, without workers). The socket moves to the
/// worker's own event loop (deregistered here, registered there: two `epoll_ctl`s per
/// connection), so its reads and writes never wake this runtime.
fn spawn(
    stream: tokio::net::TcpStream,
    log: crate::accesslog::AccessLog,
    listening: Arc<Listening>,
    cx: Arc<Context>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let Some(worker) = cx.workers.next().map(|(_, w)| w.clone()) else {
        cx.tracker.spawn(conn::handle(stream, log, listening, cx.clone(), permit));
        return;
    };
    let std = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot hand an accepted connection to a worker");
            return;
        }
    };
    let tracker = cx.tracker.clone();
    worker.spawn(tracker.track_future(async move {
        match tokio::net::TcpStream::from_std(std) {
            Ok(stream) => conn::handle(stream, log, listening, cx, permit).await,
            Err(e) => tracing::warn!(error = %e, "a worker cannot take an accepted connection"),
        }
    }));
}

impl Context {
    /// What the action needs of a connection accepted at `accepted` on a listener (`config`,
    /// bound to `port`) and routed to `route`.
    pub(crate) fn conn_ctx<'a>(
        &'a self,
        snapshot: &'a Arc<Snapshot>,
        route: &'a Route,
        config: &ListenerConfig,
        port: u16,
        accepted: Instant,
    ) -> ConnCtx<'a> {
        ConnCtx {
            snapshot,
            route,
            route_metrics: route.metrics(&self.metrics),
            metrics: &self.metrics,
            trust_forwarded: config.trust_forwarded,
            port,
            stop: &self.stop,
            cut: &self.cut,
            accepted,
            idle: None,
            alt_svc: alt_svc(config, port),
            headers: snapshot.listener_headers(config.place),
        }
    }

    /// Every connection's single exit, TCP or QUIC: its close reason counted (per route once
    /// routed), its access-log line written, its place in `max_connections` given back.
    pub(crate) fn finish(
        &self,
        mut log: AccessLog,
        reason: CloseReason,
        route: Option<&RouteMetrics>,
        accepted: Instant,
        permit: OwnedSemaphorePermit,
    ) {
        let metrics = &self.metrics;
        log.reason = reason;
        log.duration = accepted.elapsed();
        if reason.is_hello_rejection() {
            metrics.hello_rejected.get_or_create(&ReasonLabel { reason }).inc();
        }
        match route {
            Some(m) => m.closed(reason),
            None => metrics.closed_unrouted(reason),
        }
        metrics.active.dec();
        log.emit();
        drop(permit);
    }
}

/// `Alt-Svc` for a listener that serves HTTP/3 on `port` too (RFC 7838: `h3` at the same host,
/// for `alt_svc_max_age`); `None` for one that does not.
pub(crate) fn alt_svc(config: &ListenerConfig, port: u16) -> Option<http::HeaderValue> {
    if !config.http3 {
        return None;
    }
    http::HeaderValue::from_str(&format!("h3=\":{port}\"; ma={}", config.alt_svc_max_age.as_secs())).ok()
}

fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}
