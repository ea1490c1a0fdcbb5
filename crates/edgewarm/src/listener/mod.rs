//! The accept loop: deliberately trivial. It waits for a connection slot, accepts, and hands
//! the socket to its own task ([`conn::handle`]); nothing per-connection happens here, so one
//! slow client can never hold up the next accept.
//!
//! At `max_connections` it stops accepting and lets the kernel backlog queue the rest (the
//! backlog, not our memory, absorbs a burst). When accept fails for lack of descriptors or
//! memory it backs off (10 ms doubling to 1 s) instead of spinning on a listener that stays
//! readable; other accept errors concern only the one connection and are skipped.

pub(crate) mod conn;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ListenerConfig;
use crate::metrics::{AcceptError, AcceptErrorLabel, ListenerLabel, Metrics};
use crate::snapshot::Snapshot;
use crate::workers::Placement;

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

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
}

pub(crate) async fn accept_loop(listener: TcpListener, config: ListenerConfig, cx: Arc<Context>) {
    let Ok(local) = listener.local_addr() else { return };
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let accepted = cx.metrics.accepted.get_or_create(&ListenerLabel { listener: local.to_string() }).clone();
    let config = Arc::new(config);
    let mut backoff = BACKOFF_MIN;
    tracing::info!(listen = %local, tcp_fastopen = config.tcp_fastopen, proxy_protocol = config.proxy_protocol, "listening");
    loop {
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            () = cx.stop.cancelled() => return,
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
                spawn(stream, log, config.clone(), cx.clone(), permit);
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

/// Serve the connection on the next worker (or here, without workers). The socket moves to the
/// worker's own event loop (deregistered here, registered there: two `epoll_ctl`s per
/// connection), so its reads and writes never wake this runtime.
fn spawn(
    stream: tokio::net::TcpStream,
    log: crate::accesslog::AccessLog,
    config: Arc<ListenerConfig>,
    cx: Arc<Context>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let Some(worker) = cx.workers.next().map(|(_, w)| w.clone()) else {
        cx.tracker.spawn(conn::handle(stream, log, config, cx.clone(), permit));
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
            Ok(stream) => conn::handle(stream, log, config, cx, permit).await,
            Err(e) => tracing::warn!(error = %e, "a worker cannot take an accepted connection"),
        }
    }));
}

fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}
