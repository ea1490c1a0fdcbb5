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
//!
//! The sockets themselves are bound (or taken over from an older process) in [`bind`].

mod bind;
mod upgrade;

pub use bind::{Bound, Listener};

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acme::Acme;
use crate::admin::AdminState;
use crate::config::{Config, ConfigError, ListenerConfig};
use crate::listener::quic::relay::QuicProcess;
use crate::listener::{self, Context};
use crate::metrics::{Metrics, ResultLabel};
use crate::origin::registry::Origins;
use crate::snapshot::{Layers, Snapshot};
use crate::tls::client::Resumption;
use crate::tls::ticket_keys::TicketKeys;
use crate::transport::Resolver;
use crate::upgrade::QuicKeys;
use crate::workers::Workers;

pub struct Server {
    metrics: Arc<Metrics>,
    origins: Arc<Origins>,
    /// The routes' caches, learned early hints, limits and groups' server health: kept across
    /// reloads, like the origin connections.
    layers: Layers,
    /// The routes' certificates as `/certificates` shows them (each load's survey).
    certificates: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    /// ACME certificates: ordered, renewed and stored for the life of the server.
    acme: Arc<Acme>,
    /// The fleet this node purges with (`fleet:`).
    fleet: Option<Arc<crate::fleet::Fleet>>,
    snapshot: watch::Sender<Arc<Snapshot>>,
    /// What the listeners and their connections see.
    listeners: Arc<Context>,
    /// Ticket keys and session caches: the server's, so reloads keep clients' sessions.
    resumption: Resumption,
    resolver: Arc<Resolver>,
    /// The config as loaded, to refuse reloads that change what is bound.
    bound_config: std::sync::Mutex<Config>,
    /// Accepting and not draining: read by `/ready`, and awaited by an upgrade's new side.
    ready: tokio::sync::watch::Sender<bool>,
    /// Ends [`Server::admin`]: once drained, or at once on handing over to a new process.
    admin_stop: CancellationToken,
    /// Last: dropping the server ends the worker threads and what still runs on them.
    _workers: Workers,
}

impl Server {
    /// Build the server for `config` and start its pools (so: inside the tokio runtime).
    pub fn new(config: &Config) -> Result<Arc<Self>, ConfigError> {
        let workers = Workers::start(config.worker_count())
            .map_err(|e| ConfigError::invalid("workers", format!("cannot start the worker threads: {e}")))?;
        let metrics = Arc::new(Metrics::new());
        let resumption = Resumption::new(metrics.early.clone());
        // Rotation of the process's ticket keys, for as long as the server lives.
        let keys = Arc::downgrade(resumption.process_keys());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(crate::tls::process_keys::ROTATION);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(keys) = keys.upgrade() else { return };
                keys.rotate();
            }
        });
        let resolver = Arc::new(Resolver::new(config.dns.cache_ttl));
        let acme = Arc::new(Acme::new(
            metrics.acme_orders.clone(),
            metrics.cert_expiry.clone(),
            metrics.acme_accounts.clone(),
        ));
        let snapshot = Arc::new(Snapshot::new(config, &resumption, resolver.clone(), acme.clone())?);
        // The routes' load read the file and refused a bad one already.
        let key_file = match &config.tls.ticket_keys {
            Some(path) => Some(TicketKeys::read(path).map_err(|m| ConfigError::invalid("tls.ticket_keys", m))?),
            None => None,
        };
        let origins = Arc::new(Origins::new(metrics.clone(), workers.placement()));
        let layers = Layers::new(metrics.clone());
        snapshot.attach_origins(&origins, &layers);
        // The fleet's ticket keys unless a file names them (the file rules).
        let tickets = key_file.is_none().then(|| resumption.process_keys().clone());
        let fleet = config
            .fleet
            .clone()
            .map(|f| crate::fleet::Fleet::start(f, layers.caches.clone(), tickets, metrics.fleet_cache_drops.clone()));
        if let Some(fleet) = &fleet {
            acme.store_through(fleet.acme_stores());
        }
        acme.sync(config.acme.as_ref(), &snapshot.acme_names());
        let certificates = Arc::new(std::sync::Mutex::new(snapshot.survey_certificates(&metrics, &[])));
        let (snapshot, receiver) = watch::channel(snapshot);
        let listeners = Arc::new(Context {
            metrics: metrics.clone(),
            snapshot: receiver,
            stop: CancellationToken::new(),
            cut: CancellationToken::new(),
            tracker: TaskTracker::new(),
            workers: workers.placement(),
            clients: Arc::default(),
            quic: QuicProcess::new(key_file.as_ref().map(TicketKeys::quic_secret))
                .map_err(|e| ConfigError::invalid("listeners", e.to_string()))?,
        });
        Ok(Arc::new(Self {
            metrics,
            origins,
            layers,
            certificates,
            acme,
            fleet,
            snapshot,
            listeners,
            resumption,
            resolver,
            bound_config: std::sync::Mutex::new(config.clone()),
            ready: tokio::sync::watch::Sender::new(false),
            admin_stop: CancellationToken::new(),
            _workers: workers,
        }))
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// What the admin listener needs: metrics, readiness, the pools.
    pub fn admin_state(&self) -> AdminState {
        AdminState {
            metrics: self.metrics.clone(),
            ready: self.ready.subscribe(),
            origins: self.origins.clone(),
            caches: self.layers.caches.clone(),
            groups: self.layers.groups.clone(),
            certificates: self.certificates.clone(),
            acme: self.acme.clone(),
            fleet: self.fleet.clone(),
            access: {
                let admin = &self.bound_config.lock().unwrap_or_else(|p| p.into_inner()).admin;
                crate::config::limits::AccessList { allow: admin.allow.clone(), deny: admin.deny.clone() }
            },
            routes: {
                let snapshot = self.snapshot.subscribe();
                Arc::new(move || snapshot.borrow().routes.listing())
            },
            limits: {
                let (clients, rates) = (self.listeners.clients.clone(), self.layers.limits.clone());
                Arc::new(move || {
                    let rates: Vec<_> =
                        rates.sizes().into_iter().map(|(r, b)| serde_json::json!({"route": r, "bytes": b})).collect();
                    serde_json::json!({ "listeners": clients.top(), "rates": rates })
                })
            },
        }
    }

    /// Serve the admin listener until [`Server::stop_admin`] (or a hand-over).
    pub fn admin(&self, listener: tokio::net::TcpListener) -> impl std::future::Future<Output = ()> + Send + 'static {
        crate::admin::serve(listener, self.admin_state(), self.admin_stop.clone().cancelled_owned())
    }

    /// Close the admin listener.
    pub fn stop_admin(&self) {
        self.admin_stop.cancel();
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// Accepting and not draining.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// [`Server::shutdown`] was called: not accepting, or about to stop.
    pub fn is_stopping(&self) -> bool {
        self.listeners.stop.is_cancelled()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.listeners.tracker.len()
    }

    /// Apply a new configuration to new connections. On error nothing changes.
    pub fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let result = self.try_reload(config);
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics.config_reloads.get_or_create(&ResultLabel { result: label }).inc();
        result
    }

    fn try_reload(&self, config: &Config) -> Result<(), ConfigError> {
        let snapshot = Snapshot::new(config, &self.resumption, self.resolver.clone(), self.acme.clone())?;
        let mut bound = self.bound_config.lock().unwrap_or_else(|p| p.into_inner());
        // Whole-struct comparisons: a field added to either later is non-reloadable until
        // someone decides otherwise, never silently ignored.
        if bound.admin != config.admin {
            return Err(ConfigError::invalid("admin", "cannot change on reload; restart edgewarm"));
        }
        // Their header policies aside: those are read from the snapshot.
        let same = |a: &[ListenerConfig], b: &[ListenerConfig]| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.same_but_headers(b))
        };
        if !same(&bound.listeners, &config.listeners) {
            return Err(ConfigError::invalid(
                "listeners",
                "cannot change on reload (but for their headers); restart edgewarm",
            ));
        }
        if bound.fleet != config.fleet {
            return Err(ConfigError::invalid("fleet", "cannot change on reload; restart edgewarm"));
        }
        if bound.workers != config.workers {
            return Err(ConfigError::invalid("workers", "cannot change on reload; restart edgewarm"));
        }
        // The running process listens on the old socket; an upgrade applies a new one.
        if bound.upgrade != config.upgrade {
            return Err(ConfigError::invalid("upgrade", "cannot change on reload; upgrade edgewarm to apply it"));
        }
        *bound = config.clone();
        self.resolver.set_ttl(config.dns.cache_ttl);
        // Pools first: a connection that sees the new snapshot must find its pools.
        snapshot.attach_origins(&self.origins, &self.layers);
        self.acme.sync(config.acme.as_ref(), &snapshot.acme_names());
        {
            let mut certificates = self.certificates.lock().unwrap_or_else(|p| p.into_inner());
            *certificates = snapshot.survey_certificates(&self.metrics, &certificates);
        }
        self.snapshot.send_replace(Arc::new(snapshot));
        Ok(())
    }

    /// Begin shutdown: stop accepting; [`Server::run`] then drains.
    pub fn shutdown(&self) {
        self.ready.send_replace(false);
        if let Some(fleet) = &self.fleet {
            fleet.stop();
        }
        self.listeners.stop.cancel();
    }

    /// Serve the listeners until [`Server::shutdown`], then drain. The admin listener is served
    /// separately by [`crate::admin::serve`], so it keeps answering `/ready` (503) while draining.
    pub async fn run(self: &Arc<Self>, listeners: Vec<Listener>) {
        let mut accept_loops = tokio::task::JoinSet::new();
        for l in listeners {
            if !l.udp.is_empty() {
                let label = crate::metrics::RouteName::new(listener::quic::SESSIONS_LABEL);
                let sessions = self.resumption.store(&format!("h3 {}", l.config.listen), &label);
                match listener::quic::serve(l.udp, l.relays, l.to_old, &l.config, &self.listeners, sessions) {
                    Ok(loops) => {
                        for done in loops {
                            accept_loops.spawn(done);
                        }
                    }
                    Err(e) => tracing::error!(listen = %l.config.listen, error = %e, "cannot serve HTTP/3"),
                }
            }
            accept_loops.spawn(listener::accept_loop(l.tcp, l.config, self.listeners.clone()));
        }
        // A stop that came while the listeners started (a signal during an upgrade's warm-up)
        // must not show as ready, even for a moment: an upgrade would take it as serving.
        if !self.is_stopping() {
            self.ready.send_replace(true);
        }
        while accept_loops.join_next().await.is_some() {}
        self.ready.send_replace(false);
        // No new clients: warm connections would only be wasted.
        self.origins.retire(|kind| kind == crate::origin::prewarm::KIND);
        self.drain().await;
        // After the drain: requests still in flight keep their origin streams until then.
        self.origins.retire(|_| true);
    }

    async fn drain(&self) {
        let tracker = &self.listeners.tracker;
        tracker.close();
        let grace = self.snapshot().timeouts.shutdown_grace;
        let open = tracker.len();
        if open > 0 {
            tracing::info!(open, grace = ?grace, "draining open connections");
        }
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::info!(open = tracker.len(), "grace period over, closing remaining connections");
            self.listeners.cut.cancel();
            // Cut connections finish at their next poll; bound the wait anyway.
            let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
        }
    }

    /// Take the previous process's HTTP/3 keys over (before [`Server::run`]): its connection
    /// IDs are then known here, and relayed to it while it drains.
    pub fn adopt_quic_keys(&self, old: &QuicKeys) -> std::io::Result<()> {
        self.listeners.quic.adopt(old)
    }

    /// This process has handed over ([`crate::upgrade::handover::OldProcess::stop`]) and there
    /// are HTTP/3 endpoints: they may be relaying for an older process.
    pub fn quic_relaying(&self) -> bool {
        self.listeners.quic.relaying()
    }

    /// Take the previous process's ticket keys over: its clients' tickets resume here.
    pub fn adopt_ticket_keys(&self, exported: &str) -> Result<(), String> {
        self.resumption.process_keys().adopt(exported)
    }

    /// The previous process's sessions: returning clients resume (and send 0-RTT) here. How many.
    pub fn adopt_sessions(&self, handed: &[(String, crate::tls::sessions::Exported)]) -> usize {
        self.resumption.adopt_sessions(handed)
    }

    /// Wait until every prewarm pool holds its minimum and every `http` route has all its
    /// standing origin connections, for at most `limit`. Whether they got there.
    pub async fn wait_warm(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.origins.warm() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Cut open connections now instead of waiting for the grace period.
    pub fn cut_now(&self) {
        self.shutdown();
        self.listeners.cut.cancel();
    }
}
