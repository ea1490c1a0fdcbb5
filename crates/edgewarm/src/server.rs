//! The running proxy: current configuration, metrics, listeners, reload and drain.
//!
//! Reload swaps an `Arc<Snapshot>` behind a watch channel. A connection takes the snapshot that
//! is current when it is accepted and keeps it to the end, so a reload changes where *new*
//! connections go and never touches open tunnels. Listeners and the admin address are bound
//! once at start; a reload that changes them is refused as a whole (logged; the old config
//! stays), because rebinding under a running proxy would drop or double-accept connections.
//!
//! Shutdown: stop accepting, report not-ready, let open tunnels finish for
//! `timeouts.shutdown_grace`, then cut what is left (close reason `shutdown`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ConfigError, ListenerConfig, RelayMode, Timeouts};
use crate::listener;
use crate::metrics::{Metrics, ResultLabel};
use crate::pool::registry::Pools;
use crate::relay;
use crate::route::RouteTable;
use crate::sockopt;

/// What one connection needs from the configuration, fixed at accept time.
#[derive(Debug)]
pub struct Snapshot {
    pub routes: RouteTable,
    pub timeouts: Timeouts,
    pub relay: relay::Mode,
}

impl Snapshot {
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        Ok(Self {
            routes: RouteTable::new(config)?,
            timeouts: config.timeouts.clone(),
            relay: match config.relay {
                RelayMode::Splice => relay::Mode::Splice,
                RelayMode::Copy => relay::Mode::Copy,
            },
        })
    }
}

/// Listening sockets, bound before the proxy starts so that tests can bind port 0 and so that a
/// bad config never binds anything.
pub struct Bound {
    pub admin: TcpListener,
    pub listeners: Vec<(TcpListener, ListenerConfig)>,
}

impl Bound {
    pub fn bind(config: &Config) -> std::io::Result<Self> {
        let admin = bind_plain(config.admin.listen)?;
        let listeners = config
            .listeners
            .iter()
            .map(|l| {
                let std = sockopt::bind_listener(l.listen, l.tcp_fastopen)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", l.listen)))?;
                Ok((TcpListener::from_std(std)?, l.clone()))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Self { admin, listeners })
    }

    /// Addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|(l, _)| l.local_addr().ok()).collect()
    }
}

fn bind_plain(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let std = sockopt::bind_listener(addr, 0)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    TcpListener::from_std(std)
}

pub struct Server {
    metrics: Arc<Metrics>,
    pools: Pools,
    snapshot: watch::Sender<Arc<Snapshot>>,
    /// The config as loaded, to refuse reloads that change what is bound.
    bound_config: std::sync::Mutex<Config>,
    ready: AtomicBool,
    /// Stop accepting.
    stop: CancellationToken,
    /// Cut open tunnels (grace period over).
    cut: CancellationToken,
    tracker: TaskTracker,
}

impl Server {
    /// Build the server for `config` and start its pools (so: inside the tokio runtime).
    pub fn new(config: &Config) -> Result<Arc<Self>, ConfigError> {
        let snapshot = Arc::new(Snapshot::new(config)?);
        let metrics = Arc::new(Metrics::new());
        let pools = Pools::new(metrics.clone());
        pools.sync(&snapshot.routes, snapshot.timeouts.connect);
        Ok(Arc::new(Self {
            metrics,
            pools,
            snapshot: watch::Sender::new(snapshot),
            bound_config: std::sync::Mutex::new(config.clone()),
            ready: AtomicBool::new(false),
            stop: CancellationToken::new(),
            cut: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }))
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// Accepting and not draining.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Tunnels open now.
    pub fn open_connections(&self) -> usize {
        self.tracker.len()
    }

    /// Apply a new configuration to new connections. On error nothing changes.
    pub fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let result = self.try_reload(config);
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics.config_reloads.get_or_create(&ResultLabel { result: label }).inc();
        result
    }

    fn try_reload(&self, config: &Config) -> Result<(), ConfigError> {
        let snapshot = Snapshot::new(config)?;
        let mut bound = self.bound_config.lock().unwrap_or_else(|p| p.into_inner());
        if bound.admin.listen != config.admin.listen {
            return Err(ConfigError::invalid("admin.listen", "cannot change on reload; restart edgewarm"));
        }
        let same_listeners = bound.listeners.len() == config.listeners.len()
            && bound.listeners.iter().zip(&config.listeners).all(|(a, b)| {
                a.listen == b.listen
                    && a.tcp_fastopen == b.tcp_fastopen
                    && a.proxy_protocol == b.proxy_protocol
                    && a.max_connections == b.max_connections
            });
        if !same_listeners {
            return Err(ConfigError::invalid("listeners", "cannot change on reload; restart edgewarm"));
        }
        *bound = config.clone();
        // Pools first: a connection that sees the new snapshot must find its pools.
        self.pools.sync(&snapshot.routes, snapshot.timeouts.connect);
        self.snapshot.send_replace(Arc::new(snapshot));
        Ok(())
    }

    /// Begin shutdown: stop accepting; [`Server::run`] then drains.
    pub fn shutdown(&self) {
        self.ready.store(false, Ordering::Relaxed);
        self.stop.cancel();
    }

    /// Serve the listeners until [`Server::shutdown`], then drain. The admin listener is served
    /// separately by [`crate::admin::serve`], so it keeps answering `/ready` (503) while draining.
    pub async fn run(self: &Arc<Self>, listeners: Vec<(TcpListener, ListenerConfig)>) {
        let mut accept_loops = tokio::task::JoinSet::new();
        for (listener, cfg) in listeners {
            accept_loops.spawn(listener::accept_loop(listener, cfg, self.clone()));
        }
        self.ready.store(true, Ordering::Relaxed);
        while accept_loops.join_next().await.is_some() {}
        self.ready.store(false, Ordering::Relaxed);
        // No new clients: warm connections would only be wasted.
        self.pools.retire_all();
        self.drain().await;
    }

    async fn drain(&self) {
        self.tracker.close();
        let grace = self.snapshot().timeouts.shutdown_grace;
        let open = self.tracker.len();
        if open > 0 {
            tracing::info!(open, grace = ?grace, "draining open connections");
        }
        if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
            tracing::info!(open = self.tracker.len(), "grace period over, closing remaining connections");
            self.cut.cancel();
            // Cut connections finish at their next poll; bound the wait anyway.
            let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
        }
    }

    /// Cut open tunnels now instead of waiting for the grace period.
    pub fn cut_now(&self) {
        self.shutdown();
        self.cut.cancel();
    }

    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.stop
    }

    pub(crate) fn cut_token(&self) -> &CancellationToken {
        &self.cut
    }

    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }
}
