//! What one connection needs from the configuration, fixed at accept time.
//!
//! The server publishes a new [`Snapshot`] on every reload; a connection takes the one current
//! when it is accepted and keeps it to its end, so a reload changes where *new* connections go
//! and never touches open ones.

use std::sync::Arc;

use tokio_rustls::TlsConnector;

use crate::config::{Config, ConfigError, RelayMode, Timeouts, UpstreamProtocol};
use crate::pool::dial::TlsDial;
use crate::pool::registry::{Pools, Wanted};
use crate::pool::Settings;
use crate::relay;
use crate::route::RouteTable;
use crate::tls::client::Resumption;
use crate::tls::origin::OriginTls;
use crate::transport::Resolver;
use crate::upstream::registry::{self as upstream_registry, Upstreams};

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
    /// Start, resize or retire the server's pools to match this snapshot's `prewarm` routes and
    /// give each route its pools. Runs before the snapshot is published, so a connection that
    /// sees this snapshot finds its route's pools in place.
    pub(crate) fn attach_pools(&self, pools: &Pools, upstreams: &Upstreams) {
        let mut wanted = Vec::new();
        for (name, route) in self.routes.prewarm_routes() {
            let shared = route.pool_alpns().count() > 1;
            for alpn in route.pool_alpns() {
                wanted.push(Wanted {
                    route: name.clone(),
                    dial: self.dial(&route.origin, alpn),
                    settings: Settings { size: route.pool.clone(), connect_timeout: self.timeouts.connect, shared },
                });
            }
        }
        self.attach_upstreams(upstreams);
        let started = pools.sync(wanted);
        for (_, route) in self.routes.prewarm_routes() {
            let mine = route
                .pool_alpns()
                .filter_map(|alpn| Some((alpn.map(<[u8]>::to_vec), started.get(&route.origin.key(alpn))?.clone())))
                .collect();
            route.attach_pools(mine);
        }
    }

    /// The same for `http` routes' standing origin connections (ALPN `h2` toward the origin).
    fn attach_upstreams(&self, upstreams: &Upstreams) {
        let (mut wanted, mut wanted_h1) = (Vec::new(), Vec::new());
        for (name, route) in self.routes.http_routes() {
            // HTTP/1.1 origins: no ALPN offered, so the origin speaks HTTP/1.1.
            let (list, alpn) = match route.upstream.protocol {
                UpstreamProtocol::Http11 => (&mut wanted_h1, None),
                UpstreamProtocol::H2 => (&mut wanted, Some(&b"h2"[..])),
            };
            list.push(upstream_registry::Wanted {
                route: name.clone(),
                dial: self.dial(&route.origin, alpn),
                settings: route.upstream.clone(),
                connect_timeout: self.timeouts.connect,
            });
        }
        let started = upstreams.sync(wanted);
        let started_h1 = upstreams.sync_h1(wanted_h1);
        for (_, route) in self.routes.http_routes() {
            if let Some(u) = started.get(&route.origin.key(Some(b"h2"))) {
                route.attach_upstream(u.clone());
            }
            if let Some(u) = started_h1.get(&route.origin.key(None)) {
                route.attach_h1(u.clone());
            }
        }
    }

    /// How to make origin TLS connections offering exactly `alpn`.
    fn dial(&self, origin: &OriginTls, alpn: Option<&[u8]>) -> TlsDial {
        TlsDial {
            key: origin.key(alpn),
            connector: TlsConnector::from(origin.config(alpn)),
            server_name: origin.server_name.clone(),
            resolver: self.resolver.clone(),
        }
    }
}
