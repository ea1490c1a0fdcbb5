//! A route's servers as one origin (`origins:`): the [`Group`] implements the seam by choosing a
//! server for each attempt of a request and sending it through that server's own standing set
//! (every server has one of the route's kind, opened before any client). The map:
//!
//! - here: the group and its registry across reloads ([`Groups`]), an attempt, and what its
//!   outcome says of the server;
//! - [`server`]: one server's health (failures in a row, ejections that double), slow start,
//!   requests in flight and response-time average, kept across reloads ([`Groups`]);
//! - [`select`]: which server takes an attempt (tiers, tried servers, stickiness), and
//!   [`choose`]: `upstream.balance` (`latency`, `round_robin`, `hash`) over the candidates;
//! - [`probe`]: the application-level health probe; [`status`]: a group in `/origins`.
//!
//! Health comes from two sides, neither sending a probe request: active, a server whose
//! standing connections are all gone and whose reconnect failed is out at once
//! ([`Standing::up`]: its PINGs and connects are the probe); passive, failures in a row
//! (connects, timeouts, resets, 500/502/503/504) eject it for a while. A request whose server
//! failed before any response byte goes again to another server, under the retry policy
//! (never-processed, or idempotent and replayable): the group remembers which servers the
//! request tried ([`Outgoing::tried`]), so a retry never lands on the same one.

pub(crate) mod choose;
mod probe;
mod select;
pub(crate) mod server;
mod status;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::uri::Authority;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::per_route::PerRoute;
use super::registry::Standing;
use super::seam::{BoxFuture, Failure, Origin, OriginError, Outgoing, SendFailure, Sent, ServedBy, Upgrade, Upgraded};
use crate::config::{Balance, HealthConfig, OriginServer, UpstreamConfig};
use crate::metrics::{Metrics, RouteName, ServerEjection, ServerFault, ServerLabels};
use server::{ServerState, Verdict};

/// One server of a group: its seam, its standing set, what the group knows of it, and its
/// entry.
pub(crate) struct Member {
    pub(crate) seam: Arc<dyn Origin>,
    pub(crate) set: Arc<dyn Standing>,
    pub(crate) state: Arc<ServerState>,
    weight: u32,
    backup: bool,
    /// The `:authority` this server is sent instead of the client's.
    host: Option<Authority>,
    seed: u64,
}

/// What a group is made of, a server each.
pub(crate) struct Serving<'a> {
    pub(crate) config: &'a OriginServer,
    /// Its TLS name: the probe's `:authority` where the server has no `host`.
    pub(crate) name: String,
    pub(crate) seam: Arc<dyn Origin>,
    pub(crate) set: Arc<dyn Standing>,
}

/// A route's servers, as its origin.
pub(crate) struct Group {
    route: RouteName,
    members: Vec<Member>,
    balance: Balance,
    health: HealthConfig,
    slow_start: Duration,
    /// Smooth weighted round robin's running counts, by member.
    turns: Mutex<Vec<f64>>,
    /// Held while deciding an ejection, so two servers failing at once cannot both pass the
    /// "at most half out" check.
    ejecting: Mutex<()>,
    /// This group's number among every group the process made: a client connection's sticky
    /// server ([`Affinity::server`](crate::origin::seam::Affinity::server)) names its group too, so a connection that also carries
    /// another route's requests (coalescing) never applies one group's index to another.
    id: u64,
    /// Cancelled when the group is replaced (a reload) or goes: its probes stop.
    probes: CancellationToken,
    /// Cancelled when any server's set is retired (a reload took a server away): the route's
    /// clients come back afresh, to the new group.
    retired: CancellationToken,
    /// Ends the watch on the sets' retirement when the group goes.
    _gone: tokio_util::sync::DropGuard,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("route", &self.route).field("servers", &self.members.len()).finish()
    }
}

/// The servers' states of every backend (a named upstream, shared by the routes naming it, or
/// a route's own, known by the route's name), kept across reloads while it lists the server.
#[derive(Default)]
pub struct Groups {
    /// By backend and server address; no settings to compare (`()`): a server's health and
    /// averages are its own, whatever its weight or role in the group.
    states: PerRoute<(), ServerState, (RouteName, String)>,
    /// Each backend's group of the running configuration (for `/origins`).
    current: Mutex<HashMap<RouteName, Arc<Group>>>,
}

impl Groups {
    /// The group of backend `route` (its name labels the group's series): `servers` with their seams and sets, in the order configured.
    /// Must run inside the runtime.
    pub(crate) fn group(
        &self,
        route: &RouteName,
        upstream: &UpstreamConfig,
        servers: Vec<Serving<'_>>,
        metrics: &Arc<Metrics>,
    ) -> Arc<Group> {
        let mut probes = Vec::new();
        let members: Vec<Member> = servers
            .into_iter()
            .map(|Serving { config, name, seam, set }| {
                let state = self.states.get_or_make(&(route.clone(), config.address.clone()), &(), || {
                    let labels = ServerLabels { route: route.clone(), server: config.address.clone() };
                    let gauge = metrics.servers.up.get_or_create(&labels).clone();
                    ServerState::new(&config.address, gauge)
                });
                // Checked at load.
                let host: Option<Authority> = config.host.as_deref().and_then(|h| h.parse().ok());
                // The probe asks for the server's own name: its `host`, else its TLS name, else
                // its address.
                let probe_as = host.clone().or_else(|| name.parse().ok().filter(|_| !name.starts_with('*')));
                probes.push(probe_as.or_else(|| config.address.parse().ok()));
                Member {
                    seam,
                    set,
                    state,
                    weight: config.weight,
                    backup: config.backup,
                    host,
                    seed: choose::seed(&config.address),
                }
            })
            .collect();
        if upstream.health.path.is_none() {
            // A probe's verdict from a configuration that had one does not outlive it.
            for m in &members {
                m.state.probed(true);
            }
        }
        let retired = CancellationToken::new();
        let gone = CancellationToken::new();
        for m in &members {
            let (set_retired, retired, gone) = (m.seam.retired().clone(), retired.clone(), gone.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = set_retired.cancelled() => retired.cancel(),
                    () = gone.cancelled() => {}
                }
            });
        }
        static GROUPS: AtomicU64 = AtomicU64::new(1);
        let group = Arc::new(Group {
            route: route.clone(),
            turns: Mutex::new(vec![0.0; members.len()]),
            ejecting: Mutex::new(()),
            id: GROUPS.fetch_add(1, Ordering::Relaxed),
            probes: gone.child_token(),
            members,
            balance: upstream.balance,
            health: upstream.health.clone(),
            slow_start: upstream.slow_start,
            retired,
            _gone: gone.clone().drop_guard(),
            metrics: metrics.clone(),
        });
        if upstream.health.path.is_some() {
            for (i, authority) in probes.into_iter().enumerate() {
                let Some(authority) = authority else { continue };
                let (weak, health) = (Arc::downgrade(&group), upstream.health.clone());
                tokio::spawn(probe::run(weak, i, authority, health, group.probes.clone()));
            }
        }
        // Every second, whether or not requests come: `server_up`, a server found down, and
        // the moment one comes back (slow start counts from it) do not wait for traffic.
        let weak = Arc::downgrade(&group);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = gone.cancelled() => return,
                }
                let Some(group) = weak.upgrade() else { return };
                group.observe(Instant::now());
            }
        });
        let replaced = self.current.lock().unwrap_or_else(|p| p.into_inner()).insert(route.clone(), group.clone());
        if let Some(old) = replaced {
            // The old group lives on while connections hold it; its probes stop here.
            old.probes.cancel();
        }
        group
    }

    /// Forget the routes not in `kept`, and the servers no kept route lists (a reload), with
    /// their `server_up` series.
    pub(crate) fn retain(&self, kept: &HashMap<RouteName, Vec<String>>, metrics: &Metrics) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.retain(|route, group| {
            let keep = kept.contains_key(route);
            if !keep {
                group.probes.cancel();
            }
            keep
        });
        self.states.retain_where(|(route, server)| {
            let keep = kept.get(route).is_some_and(|s| s.contains(server));
            if !keep {
                let labels = ServerLabels { route: route.clone(), server: server.clone() };
                metrics.servers.up.remove(&labels);
                metrics.servers.retried_elsewhere.remove(&labels);
                for reason in ServerFault::ALL {
                    let ejection = ServerEjection { route: route.clone(), server: server.clone(), reason };
                    metrics.servers.ejections.remove(&ejection);
                }
            }
            keep
        });
    }

    /// Every group's servers for `/origins`, by route.
    pub fn statuses(&self) -> Vec<serde_json::Value> {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = current.values().map(|g| g.status()).collect();
        all.sort_by_key(|v| v["route"].as_str().unwrap_or_default().to_string());
        all
    }
}

impl Group {
    /// Look at every server's standing set: one found down is counted (once) and out.
    fn observe(&self, now: Instant) -> Vec<bool> {
        self.members
            .iter()
            .map(|m| {
                let up = m.set.up();
                if m.state.observe(up, now) {
                    self.count_ejection(m, ServerFault::Down);
                    tracing::warn!(route = %self.route, server = %m.state.name, "origin server down: its standing connections are gone and a reconnect failed");
                }
                up && !m.state.ejected(now) && !m.state.probe_failed()
            })
            .collect()
    }

    /// What an attempt's outcome says of member `i`'s server.
    fn judge(&self, i: usize, outcome: Result<u16, &OriginError>, took: Duration) {
        let m = &self.members[i];
        let now = Instant::now();
        let fault = match outcome {
            Ok(500 | 502 | 503 | 504) => ServerFault::Status,
            Ok(_) => return m.state.succeeded(took, now, &self.health),
            Err(OriginError::NoConnection(_)) => ServerFault::Connect,
            Err(OriginError::Timeout) => ServerFault::Timeout,
            Err(OriginError::Protocol(_) | OriginError::Upgrade(_)) => ServerFault::Reset,
            // The request's own fault, not the server's.
            Err(OriginError::Target) => return,
        };
        // Never more than half of the servers of its kind out at once (so a lone primary or a
        // lone backup is never ejected: it is all there is).
        let _deciding = self.ejecting.lock().unwrap_or_else(|p| p.into_inner());
        let peers: Vec<&Member> = self.members.iter().filter(|o| o.backup == m.backup).collect();
        let out = peers.iter().filter(|o| o.state.ejected(now)).count();
        let may_eject = (out + 1) * 2 <= peers.len();
        if let Verdict::Ejected(until) = m.state.failed(now, &self.health, may_eject) {
            self.count_ejection(m, fault);
            tracing::warn!(route = %self.route, server = %m.state.name, reason = fault.label(), ejected_for = ?until.duration_since(now), "origin server ejected after failures in a row");
        }
    }

    fn count_ejection(&self, m: &Member, reason: ServerFault) {
        let labels = ServerEjection { route: self.route.clone(), server: m.state.name.to_string(), reason };
        self.metrics.servers.ejections.get_or_create(&labels).inc();
    }

    async fn send_one(&self, mut out: Outgoing<'_>) -> Result<Sent, SendFailure> {
        let now = Instant::now();
        let Some(i) = self.choose(&mut out, now) else {
            return Err(SendFailure::fatal(OriginError::NoConnection("the route has no server".into())));
        };
        if out.tried.fetch_or(1 << i, Ordering::Relaxed) != 0 {
            let labels = ServerLabels { route: self.route.clone(), server: self.members[i].state.name.to_string() };
            self.metrics.servers.retried_elsewhere.get_or_create(&labels).inc();
        }
        self.stick(out.affinity, i);
        let m = &self.members[i];
        let Outgoing { build, body, up, timeout, affinity, tried, interim, began, client } = out;
        let mut build_here = || {
            let mut head = build();
            if let Some(host) = &m.host {
                rehost(&mut head, host);
            }
            head
        };
        let attempt = Outgoing { build: &mut build_here, body, up, timeout, affinity, tried, interim, began, client };
        let result = {
            // Counted down however the attempt ends, its client gone included.
            let _in_flight = InFlight::new(&m.state.in_flight);
            m.seam.send(attempt).await
        };
        let took = now.elapsed();
        match result {
            Ok(mut sent) => {
                self.judge(i, Ok(sent.response.status().as_u16()), took);
                sent.notes.insert(ServedBy(m.state.name.clone()));
                Ok(sent)
            }
            Err(mut failure) => {
                // A graceful refusal (REFUSED_STREAM, above a GOAWAY's last id) is an origin
                // at its limit or restarting in order, not a failing one.
                if !(failure.kind == Failure::NotProcessed && matches!(failure.error, OriginError::Protocol(_))) {
                    self.judge(i, Err(&failure.error), took);
                }
                // Refused before it left (no connection could be had): another server may
                // take it, whatever its method.
                if matches!(failure.error, OriginError::NoConnection(_)) {
                    failure.kind = Failure::NotProcessed;
                }
                Err(failure)
            }
        }
    }
}

/// A request in flight at a server, for as long as this lives.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Point a request at `host` instead of the client's authority (`:authority`, and `Host` where
/// the client sent one; `Forwarded` and `X-Forwarded-Host` keep the client's).
fn rehost(head: &mut http::Request<()>, host: &Authority) {
    let mut parts = head.uri().clone().into_parts();
    parts.authority = Some(host.clone());
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *head.uri_mut() = uri;
    }
    if head.headers().contains_key(http::header::HOST) {
        if let Ok(v) = http::HeaderValue::from_str(host.as_str()) {
            head.headers_mut().insert(http::header::HOST, v);
        }
    }
}

impl Origin for Group {
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        Box::pin(self.send_one(out))
    }

    fn upgrade<'a>(&'a self, mut up: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, OriginError>> {
        Box::pin(async move {
            let now = Instant::now();
            let serving = self.observe(now);
            // A protocol upgrade is not retried: the first server in service, by order.
            let i = (0..self.members.len())
                .find(|&i| serving[i] && !self.members[i].backup)
                .or_else(|| (0..self.members.len()).find(|&i| serving[i]))
                .unwrap_or(0);
            let m = &self.members[i];
            if let Some(host) = &m.host {
                rehost(&mut up.head, host);
            }
            m.seam.upgrade(up).await
        })
    }

    fn retired(&self) -> &CancellationToken {
        &self.retired
    }
}
