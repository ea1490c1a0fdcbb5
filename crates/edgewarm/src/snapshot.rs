//! What one connection needs from the configuration, fixed at accept time.
//!
//! The server publishes a new [`Snapshot`] on every reload; a connection takes the one current
//! when it is accepted and keeps it to its end, so a reload changes where *new* connections go
//! and never touches open ones.

use std::sync::Arc;

use tokio_rustls::TlsConnector;

use crate::config::{Config, ConfigError, RelayMode, Timeouts, UpstreamProtocol};
use crate::origin::dial::TlsDial;
use crate::origin::prewarm::Settings;
use crate::origin::registry::{Kind, Origins, Standing, Want, Wanted};
use crate::relay;
use crate::route::RouteTable;
use crate::tls::client::Resumption;
use crate::tls::origin::OriginTls;
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
    pub(crate) fn attach_origins(&self, origins: &Origins) {
        let mut wanted = Vec::new();
        for (name, route) in self.routes.prewarm_routes() {
            let shared = route.pool_alpns().count() > 1;
            for alpn in route.pool_alpns() {
                let settings =
                    Settings { size: route.config.pool.clone(), connect_timeout: self.timeouts.connect, shared };
                wanted.push(Wanted {
                    route: name.clone(),
                    dial: self.dial(&route.origin, alpn),
                    want: Want::Prewarm(settings),
                });
            }
        }
        for (name, route) in self.routes.http_routes() {
            let (settings, connect_timeout) = (route.config.upstream.clone(), self.timeouts.connect);
            // HTTP/1.1 origins: no ALPN offered, so the origin speaks HTTP/1.1.
            let (alpn, want) = match route.config.upstream.protocol {
                UpstreamProtocol::Http11 => (None, Want::H1 { settings, connect_timeout }),
                UpstreamProtocol::H2 => (Some(&b"h2"[..]), Want::H2 { settings, connect_timeout }),
            };
            wanted.push(Wanted { route: name.clone(), dial: self.dial(&route.origin, alpn), want });
        }
        let started = origins.sync(wanted);
        for (_, route) in self.routes.prewarm_routes() {
            let mine = route
                .pool_alpns()
                .filter_map(|alpn| {
                    let Some(Standing::Prewarm(pool)) = started.get(&(route.origin.key(alpn), Kind::Prewarm)) else {
                        return None;
                    };
                    Some((alpn.map(<[u8]>::to_vec), pool.clone()))
                })
                .collect();
            route.attach_pools(mine);
        }
        for (_, route) in self.routes.http_routes() {
            if let Some(Standing::H2(u)) = started.get(&(route.origin.key(Some(b"h2")), Kind::H2)) {
                route.attach_upstream(u.clone());
            }
            if let Some(Standing::H1(u)) = started.get(&(route.origin.key(None), Kind::H1)) {
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
