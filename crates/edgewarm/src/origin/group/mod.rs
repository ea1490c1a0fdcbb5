//! A route's servers as one origin (`origins:`): the [`Group`] implements the seam by choosing a
//! server for each attempt of a request and sending it through that server's own standing set
//! (every server has one of the route's kind, opened before any client). The map:
//!
//! - here: which servers may take an attempt (in service, then backups, then all: panic), the
//!   attempt itself, and what its outcome says of the server;
//! - [`server`]: one server's health (failures in a row, ejections that double), slow start,
//!   requests in flight and response-time average, kept across reloads ([`Groups`]);
//! - [`choose`]: `upstream.balance` (`latency`, `round_robin`, `hash`).
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
pub(crate) mod server;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::uri::Authority;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::Standing;
use super::seam::{BoxFuture, Failure, Origin, OriginError, Outgoing, SendFailure, Sent, Upgrade, Upgraded};
use crate::config::{Balance, HealthConfig, OriginServer, UpstreamConfig};
use crate::metrics::{Metrics, RouteName, ServerEjection, ServerFault, ServerLabels};
use choose::Candidate;
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

/// The servers' states of every route, kept across reloads while a route lists the server.
#[derive(Default)]
pub struct Groups {
    states: Mutex<HashMap<(RouteName, String), Arc<ServerState>>>,
    /// Each route's group of the running configuration (for `/origins`).
    current: Mutex<HashMap<RouteName, Arc<Group>>>,
}

impl Groups {
    /// The group of `route`: `servers` with their seams and sets, in the order configured.
    /// Must run inside the runtime.
    pub(crate) fn group(
        &self,
        route: &RouteName,
        upstream: &UpstreamConfig,
        servers: Vec<Serving<'_>>,
        metrics: &Arc<Metrics>,
    ) -> Arc<Group> {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let mut probes = Vec::new();
        let members: Vec<Member> = servers
            .into_iter()
            .map(|Serving { config, name, seam, set }| {
                let state = states
                    .entry((route.clone(), config.address.clone()))
                    .or_insert_with(|| {
                        let labels = ServerLabels { route: route.clone(), server: config.address.clone() };
                        let gauge = metrics.servers.up.get_or_create(&labels).clone();
                        Arc::new(ServerState::new(&config.address, gauge))
                    })
                    .clone();
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
        drop(states);
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
        let group = Arc::new(Group {
            route: route.clone(),
            turns: Mutex::new(vec![0.0; members.len()]),
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
                tokio::spawn(probe::run(weak, i, authority, health, gone.clone()));
            }
        }
        self.current.lock().unwrap_or_else(|p| p.into_inner()).insert(route.clone(), group.clone());
        group
    }

    /// Forget the routes not in `kept`, and the servers no kept route lists (a reload), with
    /// their `server_up` series.
    pub(crate) fn retain(&self, kept: &HashMap<RouteName, Vec<String>>, metrics: &Metrics) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.retain(|route, _| kept.contains_key(route));
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.retain(|(route, server), _| {
            let keep = kept.get(route).is_some_and(|s| s.contains(server));
            if !keep {
                metrics.servers.up.remove(&ServerLabels { route: route.clone(), server: server.clone() });
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

    /// The server for an attempt: the request's client's last server while it is in service,
    /// else one by `balance`, from the primaries in service, else the backups in service, else
    /// (panic: better a try than a refusal) every server; never one the request already tried.
    /// `None`: every server was tried.
    fn choose(&self, out: &mut Outgoing<'_>, now: Instant) -> Option<usize> {
        let tried = out.tried.load(Ordering::Relaxed);
        let serving = self.observe(now);
        let untried = |i: usize| tried & (1 << i) == 0;
        let pick = |want: &dyn Fn(&Member, bool) -> bool| -> Vec<usize> {
            (0..self.members.len()).filter(|&i| untried(i) && want(&self.members[i], serving[i])).collect()
        };
        let mut tier = pick(&|m, serving| serving && !m.backup);
        if tier.is_empty() {
            tier = pick(&|m, serving| serving && m.backup);
        }
        if tier.is_empty() {
            tier = pick(&|_, _| true);
        }
        if tier.is_empty() {
            return None;
        }
        if tier.len() == 1 {
            return Some(tier[0]);
        }
        let sticky = out.affinity.server.load(Ordering::Relaxed);
        if self.balance != Balance::Hash && sticky > 0 && tier.contains(&((sticky - 1) as usize)) {
            return Some((sticky - 1) as usize);
        }
        let floor = self.members.iter().filter_map(|m| m.state.latency(now, f64::MAX)).fold(f64::MAX, f64::min);
        let candidates: Vec<Candidate> = tier
            .iter()
            .map(|&i| {
                let m = &self.members[i];
                Candidate {
                    index: i,
                    share: m.state.share(m.weight, self.slow_start, now),
                    latency: m.state.latency(now, floor),
                    in_flight: m.state.in_flight(),
                    seed: m.seed,
                }
            })
            .collect();
        Some(match self.balance {
            Balance::Latency => choose::latency(&candidates),
            Balance::RoundRobin => {
                choose::round_robin(&candidates, &mut self.turns.lock().unwrap_or_else(|p| p.into_inner()))
            }
            Balance::Hash => {
                // The cache key's parts that name the object: authority, path and query.
                let head = (out.build)();
                let authority = head.uri().authority().map_or("", |a| a.as_str());
                let path = head.uri().path_and_query().map_or("/", |p| p.as_str());
                choose::hash(&candidates, format!("{authority}{path}").as_bytes())
            }
        })
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
        // Never more than half of the servers of its kind out at once.
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
            return Err(SendFailure::fatal(OriginError::NoConnection("every server of the route failed".into())));
        };
        if out.tried.fetch_or(1 << i, Ordering::Relaxed) != 0 {
            let labels = ServerLabels { route: self.route.clone(), server: self.members[i].state.name.to_string() };
            self.metrics.servers.retried_elsewhere.get_or_create(&labels).inc();
        }
        out.affinity.server.store(i as u64 + 1, Ordering::Relaxed);
        let m = &self.members[i];
        let Outgoing { build, body, up, timeout, affinity, tried, interim, began } = out;
        let mut build_here = || {
            let mut head = build();
            if let Some(host) = &m.host {
                rehost(&mut head, host);
            }
            head
        };
        let attempt = Outgoing { build: &mut build_here, body, up, timeout, affinity, tried, interim, began };
        m.state.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = m.seam.send(attempt).await;
        m.state.in_flight.fetch_sub(1, Ordering::Relaxed);
        let took = now.elapsed();
        match result {
            Ok(mut sent) => {
                self.judge(i, Ok(sent.response.status().as_u16()), took);
                sent.server = Some(m.state.name.clone());
                Ok(sent)
            }
            Err(mut failure) => {
                self.judge(i, Err(&failure.error), took);
                // Refused before it left (no connection could be had): another server may
                // take it, whatever its method.
                if matches!(failure.error, OriginError::NoConnection(_)) {
                    failure.kind = Failure::NotProcessed;
                }
                Err(failure)
            }
        }
    }

    /// Numbers for `/origins`.
    fn status(&self) -> serde_json::Value {
        let now = Instant::now();
        let serving = self.observe(now);
        let servers: Vec<_> = self
            .members
            .iter()
            .zip(serving)
            .map(|(m, serving)| {
                let ejected = m.state.ejected_until(now);
                // What keeps it out, the plainest reason first: gone, then failing its probe,
                // then ejected for failures (`ejected_for_ms` is shown whatever the state).
                let state = if m.seam.retired().is_cancelled() {
                    "draining"
                } else if serving {
                    "healthy"
                } else if !m.set.up() {
                    "down"
                } else if m.state.probe_failed() {
                    "probe_failed"
                } else {
                    "ejected"
                };
                serde_json::json!({
                    "server": &*m.state.name,
                    "state": state,
                    "ejected_for_ms": ejected.map(|t| t.duration_since(now).as_millis() as u64),
                    "backup": m.backup,
                    "weight": m.weight,
                    "host": m.host.as_ref().map(|h| h.as_str()),
                    "rtt_ms": m.state.latency(now, f64::MAX).map(|s| (s * 1e4).round() / 10.0),
                    "in_flight": m.state.in_flight(),
                    "ejections": m.state.ejections(),
                })
            })
            .collect();
        serde_json::json!({
            "route": self.route.to_string(),
            "kind": "group",
            "balance": match self.balance {
                Balance::Latency => "latency",
                Balance::RoundRobin => "round_robin",
                Balance::Hash => "hash",
            },
            "servers": servers,
        })
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
