//! What one connection needs from the configuration, fixed at accept time.
//!
//! The server publishes a new [`Snapshot`] on every reload; a connection takes the one current
//! when it is accepted and keeps it to its end, so a reload changes where *new* connections go
//! and never touches open ones.

use std::collections::HashSet;
use std::sync::Arc;

use crate::cache::layer::Cached;
use crate::cache::Caches;
use crate::config::{Config, ConfigError, RelayMode, Timeouts, UpstreamProtocol};
use crate::hints::layer::Hinted;
use crate::hints::Hints;
use crate::metrics::RouteName;
use crate::origin::cleartext::{self, Cleartext};
use crate::origin::connect::{Connect, TlsConnect};
use crate::origin::dial::TlsDial;
use crate::origin::h1::H1Upstream;
use crate::origin::h2::H2Upstream;
use crate::origin::h3::H3Spec;
use crate::origin::prewarm::{PrewarmSpec, Settings, TlsPool};
use crate::origin::registry::{self, Origins, Spec, UpstreamSpec, Wanted};
use crate::origin::seam::Origin;
use crate::relay;
use crate::route::{HttpRoute, RouteTable};
use crate::tls::client::Resumption;
use crate::transport::Resolver;

#[derive(Debug)]
pub(crate) struct Snapshot {
    pub routes: RouteTable,
    pub timeouts: Timeouts,
    pub relay: relay::Mode,
    /// Shared with every snapshot of the same server (the cache outlives reloads).
    pub resolver: Arc<Resolver>,
}

impl Snapshot {
    /// Build a snapshot; `resumption` and `resolver` belong to the server and survive reloads.
    pub(crate) fn new(config: &Config, resumption: &Resumption, resolver: Arc<Resolver>) -> Result<Self, ConfigError> {
        Ok(Self {
            routes: RouteTable::new(config, resumption)?,
            timeouts: config.timeouts.clone(),
            relay: match config.relay {
                RelayMode::Splice => relay::Mode::Splice,
                RelayMode::Copy => relay::Mode::Copy,
            },
            resolver,
        })
    }
}

impl Snapshot {
    /// Start, update or retire the server's standing origin connections to match this
    /// snapshot's routes, and give each route its own. Runs before the snapshot is published,
    /// so a connection that sees this snapshot finds its route's connections in place.
    pub(crate) fn attach_origins(&self, origins: &Origins, caches: &Caches, hints: &Hints) {
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
        let mut http = Vec::new();
        for (name, route) in self.routes.http_routes() {
            let spec = self.request_kind(name, route);
            http.push((name, route, registry::id(&*spec)));
            wanted.push(Wanted { route: name.clone(), spec });
        }
        let started = origins.sync(wanted);
        for (route, ids) in prewarm {
            let pool = |id: &registry::Id| started.get(id)?.clone().into_any().downcast::<TlsPool>().ok();
            route.attach_pools(ids.into_iter().filter_map(|(alpn, id)| Some((alpn, pool(&id)?))).collect());
        }
        let (mut cached, mut hinted) = (HashSet::new(), HashSet::new());
        for (name, route, id) in http {
            if let Some(origin) = started.get(&id).and_then(|set| set.clone().origin()) {
                // A route's cache wraps its origin, and its early hints wrap both (decorators on
                // the seam; the service does not know): hints go out before the cache is asked.
                let origin: Arc<dyn Origin> = match &route.config.cache {
                    Some(config) => {
                        cached.insert(name.clone());
                        Arc::new(Cached { inner: origin, cache: caches.route(name, config) })
                    }
                    None => origin,
                };
                let origin: Arc<dyn Origin> = match &route.config.early_hints {
                    Some(config) => {
                        hinted.insert(name.clone());
                        Arc::new(Hinted { inner: origin, hints: hints.route(name, config) })
                    }
                    None => origin,
                };
                route.attach(origin);
            }
        }
        caches.retain(&cached);
        hints.retain(&hinted);
    }

    /// The registration of the request kinds: which set an `http` route's `upstream` section
    /// asks for. The one place that maps the configured protocol and transport to a kind.
    fn request_kind(&self, name: &RouteName, route: &HttpRoute) -> Box<dyn Spec> {
        let u = &route.config.upstream;
        let connect = |alpn: Option<&[u8]>| -> Arc<dyn Connect> {
            if u.tls {
                Arc::new(TlsConnect::new(route.origin.clone(), alpn, self.resolver.clone()))
            } else {
                let origin = route.origin.key(None).origin;
                cleartext::warn_if_public(name, &origin);
                Arc::new(Cleartext::new(origin, self.resolver.clone()))
            }
        };
        let (settings, timeout) = (u.clone(), self.timeouts.connect);
        match u.protocol {
            UpstreamProtocol::H2 => Box::new(UpstreamSpec::<H2Upstream>::new(connect(Some(b"h2")), settings, timeout)),
            // No ALPN offered: the origin speaks HTTP/1.1.
            UpstreamProtocol::Http11 => Box::new(UpstreamSpec::<H1Upstream>::new(connect(None), settings, timeout)),
            // Always TLS (checked at load); upgrades go over TCP without ALPN.
            UpstreamProtocol::H3 => {
                Box::new(H3Spec::new(&route.origin, connect(None), self.resolver.clone(), settings, timeout))
            }
        }
    }
}
