//! What one connection needs from the configuration, fixed at accept time.
//!
//! The server publishes a new [`Snapshot`] on every reload; a connection takes the one current
//! when it is accepted and keeps it to its end, so a reload changes where *new* connections go
//! and never touches open ones.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::acme::Acme;
use crate::cache::Caches;
use crate::config::{Config, ConfigError, HeaderPolicy, HttpConfig, RelayMode, Timeouts, UpstreamProtocol};
use crate::hints::Hints;
use crate::limits::layer::Limits;
use crate::metrics::{Metrics, RouteName};
use crate::origin::cleartext::{self, Cleartext};
use crate::origin::connect::{Connect, TlsConnect};
use crate::origin::dial::TlsDial;
use crate::origin::group::{Groups, Serving};
use crate::origin::h1::H1Upstream;
use crate::origin::h2::H2Upstream;
use crate::origin::h3::{H3Upstream, QuicDial};
use crate::origin::layer::Layer;
use crate::origin::prewarm::{PrewarmSpec, Settings, TlsPool};
use crate::origin::registry::{self, Origins, Spec, Wanted};
use crate::origin::request_kind::UpstreamSpec;
use crate::origin::seam::Origin;
use crate::relay;
use crate::route::{Backend, RouteTable, ServerRoute};
use crate::tls::client::Resumption;
use crate::transport::Resolver;

/// What wraps or stands for routes' origins, kept by the server across reloads.
pub(crate) struct Layers {
    /// The decorators on every route's seam, innermost first: a route's cache wraps its origin,
    /// its early hints wrap both (hints go out before the cache is asked).
    pub(crate) wrap: Vec<Arc<dyn Layer>>,
    /// The routes' caches again, as their own type: the admin listener purges and reads them.
    pub(crate) caches: Arc<Caches>,
    /// The health of groups' servers.
    pub(crate) groups: Arc<Groups>,
    /// The routes' request rates (for `/limits`).
    pub(crate) limits: Arc<Limits>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Layers {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        let caches = Arc::new(Caches::new(metrics.cache.clone()));
        // Limits outermost: a refused request costs no hint, no cache lookup, no origin.
        let limits = Arc::new(Limits::new(metrics.limited.clone()));
        let wrap: Vec<Arc<dyn Layer>> = vec![caches.clone(), Arc::new(Hints::default()), limits.clone()];
        Self { wrap, caches, groups: Arc::default(), limits, metrics }
    }
}

#[derive(Debug)]
pub(crate) struct Snapshot {
    pub routes: RouteTable,
    pub timeouts: Timeouts,
    pub relay: relay::Mode,
    /// Shared with every snapshot of the same server (the cache outlives reloads).
    pub resolver: Arc<Resolver>,
    /// The server's ACME certificates and challenges (shared like the resolver).
    pub acme: Arc<Acme>,
    /// Each listener's header policy, by its place in `listeners` ([`Self::listener_headers`]).
    listener_headers: Vec<Arc<HeaderPolicy>>,
}

impl Snapshot {
    /// Build a snapshot; `resumption` and `resolver` belong to the server and survive reloads.
    pub(crate) fn new(
        config: &Config,
        resumption: &Resumption,
        resolver: Arc<Resolver>,
        acme: Arc<Acme>,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            routes: RouteTable::new(config, resumption, &acme)?,
            timeouts: config.timeouts.clone(),
            relay: match config.relay {
                RelayMode::Splice => relay::Mode::Splice,
                RelayMode::Copy => relay::Mode::Copy,
            },
            resolver,
            acme,
            listener_headers: config
                .listeners
                .iter()
                .enumerate()
                .map(|(i, l)| l.headers.compile(&format!("listeners[{i}].headers")).map(Arc::new))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The header policy of the listener at `place` in `listeners` (none for a place this
    /// snapshot's file does not have, which a reload that keeps the listeners cannot make).
    pub(crate) fn listener_headers(&self, place: usize) -> Arc<HeaderPolicy> {
        self.listener_headers.get(place).cloned().unwrap_or_default()
    }
}

impl Snapshot {
    /// Every terminating route's certificate: its expiry into the metrics (series of routes
    /// gone removed), a warning for one with under 30 days left or expired, and the list
    /// `/certificates` shows.
    pub(crate) fn survey_certificates(
        &self,
        metrics: &Metrics,
        before: &[serde_json::Value],
    ) -> Vec<serde_json::Value> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let mut list = Vec::new();
        for (name, tls) in self.routes.terminating() {
            let Some(leaf) = tls.leaf() else { continue };
            metrics.cert_expiry.get_or_create(&crate::metrics::RouteLabel { route: name.clone() }).set(leaf.not_after);
            let days = leaf.days_left(now);
            if days < crate::tls::certinfo::WARN_DAYS {
                tracing::warn!(route = %name, days_left = days, names = ?leaf.names, "the route's certificate expires soon (or has): replace it and reload");
            }
            let mut entry = serde_json::to_value(leaf).unwrap_or_default();
            entry["route"] = name.to_string().into();
            entry["days_left"] = days.into();
            list.push(entry);
        }
        list.sort_by_key(|v| v["route"].as_str().unwrap_or_default().to_string());
        for gone in before.iter().filter(|b| !list.iter().any(|l| l["route"] == b["route"])) {
            if let Some(route) = gone["route"].as_str() {
                metrics.cert_expiry.remove(&crate::metrics::RouteLabel { route: RouteName::new(route) });
            }
        }
        list
    }

    /// The names whose certificates come from the ACME server.
    pub(crate) fn acme_names(&self) -> Vec<String> {
        self.routes.terminating().filter(|(_, tls)| tls.is_acme()).map(|(name, _)| name.to_string()).collect()
    }

    /// Start, update or retire the server's standing origin connections to match this
    /// snapshot's routes, and give each route its own. Runs before the snapshot is published,
    /// so a connection that sees this snapshot finds its route's connections in place.
    pub(crate) fn attach_origins(&self, origins: &Origins, layers: &Layers) {
        let Layers { groups, metrics, .. } = layers;
        let mut wanted = Vec::new();
        // Each route's sets, by the id the registry gives them, to attach once they run.
        let mut prewarm = Vec::new();
        for (name, route) in self.routes.prewarm_routes() {
            let shared = route.pool_alpns().count() > 1;
            let mut ids = Vec::new();
            for alpn in route.pool_alpns() {
                let settings =
                    Settings { size: route.config.pool.clone(), connect_timeout: self.timeouts.connect, shared };
                let dial = TlsDial::new(&route.origin, alpn, self.resolver.clone());
                let spec: Box<dyn Spec> = Box::new(PrewarmSpec { dial, settings });
                ids.push((alpn.map(<[u8]>::to_vec), registry::id(&*spec)));
                wanted.push(Wanted { route: name.clone(), spec });
            }
            prewarm.push((route, ids));
        }
        // Each backend's servers: the id of each one's set, to attach once they run. A named
        // upstream is one backend however many routes name it: one set per server, its series
        // under the upstream's name.
        let mut backends: Vec<(&Backend, Vec<registry::Id>)> = Vec::new();
        let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut seen = HashSet::new();
        for (name, route) in self.routes.http_routes() {
            let rules = route.site.iter().flat_map(|s| s.forwards()).filter_map(|f| f.own());
            for backend in std::iter::once(&*route.backend).chain(rules.map(|own| &*own.backend)) {
                if backend.named {
                    let names = users.entry(backend.name.to_string()).or_default();
                    if !names.iter().any(|n| n == name.as_str()) {
                        names.push(name.to_string());
                    }
                }
                if !seen.insert(&backend.name) {
                    continue;
                }
                let mut ids = Vec::new();
                for server in &backend.servers {
                    let spec = self.request_kind(backend, server);
                    ids.push(registry::id(&*spec));
                    wanted.push(Wanted { route: backend.name.clone(), spec });
                }
                backends.push((backend, ids));
            }
        }
        let started = origins.sync(wanted);
        origins.name_upstreams(users);
        for (route, ids) in prewarm {
            let pool = |id: &registry::Id| started.get(id)?.clone().into_any().downcast::<TlsPool>().ok();
            route.attach_pools(ids.into_iter().filter_map(|(alpn, id)| Some((alpn, pool(&id)?))).collect());
        }
        // Each backend's seam: its one server's, as it always was, or the group of its several.
        let (mut seams, mut grouped) = (HashMap::new(), HashMap::new());
        for (backend, ids) in backends {
            let sets: Option<Vec<_>> = ids.iter().map(|id| started.get(id).cloned()).collect();
            let Some(sets) = sets else { continue };
            let each: Option<Vec<_>> = sets.iter().map(|set| set.clone().origin()).collect();
            let Some(mut each) = each else { continue };
            let origin: Arc<dyn Origin> = if !backend.grouped {
                each.remove(0)
            } else {
                grouped
                    .insert(backend.name.clone(), backend.servers.iter().map(|s| s.config.address.clone()).collect());
                let members = backend.servers.iter().zip(each).zip(sets).map(|((s, seam), set)| Serving {
                    config: &s.config,
                    name: s.tls.key(None).sni().to_owned(),
                    seam,
                    set,
                });
                groups.group(&backend.name, &backend.settings, members.collect(), metrics)
            };
            seams.insert(backend.name.clone(), origin);
        }
        // Each route's layers around its backend's seam: what a route adds stays its own.
        let mut wrapped = vec![HashSet::new(); layers.wrap.len()];
        // A rule with a seam of its own gets the layers too, under its own name
        // (`ROUTE#rules[i]`) and with its own settings.
        let mut wrap = |name: &RouteName, config: &HttpConfig, backend: &Backend| {
            let mut origin = seams.get(&backend.name).cloned()?;
            for (layer, names) in layers.wrap.iter().zip(&mut wrapped) {
                if let Some(wrapped) = layer.wrap(name, config, &origin) {
                    names.insert(name.clone());
                    origin = wrapped;
                }
            }
            Some(origin)
        };
        for (name, route) in self.routes.http_routes() {
            let Some(origin) = wrap(name, &route.config, &route.backend) else { continue };
            route.attach(origin);
            for own in route.site.iter().flat_map(|s| s.forwards()).filter_map(|f| f.own()) {
                if let Some(origin) = wrap(&own.name, &own.config, &own.backend) {
                    own.attach(origin);
                }
            }
        }
        groups.retain(&grouped, metrics);
        for (layer, names) in layers.wrap.iter().zip(&wrapped) {
            layer.retain(names);
        }
    }

    /// The registration of the request kinds: which set a backend's `upstream` settings ask
    /// for. The one place that maps the configured protocol and transport to a kind.
    fn request_kind(&self, backend: &Backend, server: &ServerRoute) -> Box<dyn Spec> {
        let u = &backend.settings;
        let origin = &server.tls;
        let connect = |alpn: Option<&[u8]>| -> Arc<dyn Connect> {
            if u.tls {
                Arc::new(TlsConnect::new(origin.clone(), alpn, self.resolver.clone()))
            } else {
                let origin = origin.key(None).origin;
                cleartext::warn_if_public(&backend.name, &origin);
                Arc::new(Cleartext::new(origin, self.resolver.clone()))
            }
        };
        let (settings, timeout) = (u.clone(), self.timeouts.connect);
        match u.protocol {
            // Upgrades go over the same origin without ALPN.
            UpstreamProtocol::H2 => {
                let h2 = connect(Some(b"h2"));
                Box::new(UpstreamSpec::<H2Upstream>::new(h2.clone(), h2.for_http1(), settings, timeout))
            }
            // No ALPN offered: the origin speaks HTTP/1.1, its upgrades too.
            UpstreamProtocol::Http11 => {
                let http1 = connect(None);
                Box::new(UpstreamSpec::<H1Upstream>::new(http1.clone(), http1, settings, timeout))
            }
            // Always TLS (checked at load); upgrades go over TCP without ALPN.
            UpstreamProtocol::H3 => {
                let quic = QuicDial::new(origin, self.resolver.clone());
                Box::new(UpstreamSpec::<H3Upstream>::new(quic, connect(None), settings, timeout))
            }
        }
    }
}
