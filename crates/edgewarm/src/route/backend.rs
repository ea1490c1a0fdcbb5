//! What an `http` route's requests go to, apart from the route: its upstream's servers and how
//! to reach them. A named upstream (`upstreams:`) is one backend for every route naming it, so
//! those routes share its standing connections and its servers' health; a route's own upstream
//! is a backend of its own, known by the route's name as it always was. What a route adds on
//! the way (its cache, hints, limits) stays the route's, wrapped around the backend's seam.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{ConfigError, HttpConfig, OriginAddr, OriginServer, UpstreamConfig};
use crate::metrics::RouteName;
use crate::tls::origin::OriginTls;

/// One upstream, as the running configuration has it.
pub struct Backend {
    /// What its standing sets, its group and their series are known by: the upstream's name,
    /// or the route's own (so an inline route's series keep the labels they had).
    pub name: RouteName,
    /// A block of `upstreams:` (perhaps shared), or a route's own.
    pub named: bool,
    /// Its servers: one (`origin:`), or the group of `origins:`.
    pub servers: Vec<ServerRoute>,
    /// Its settings (the `upstream` keys).
    pub settings: UpstreamConfig,
    /// Written as `origins:`: a group of servers (one `origin:` is its own seam).
    pub grouped: bool,
}

/// One origin server of a backend.
pub struct ServerRoute {
    /// How to reach and verify it (unused with `upstream.tls: false`).
    pub tls: Arc<OriginTls>,
    /// Its entry as configured (`weight`, `backup`, `host`…).
    pub config: OriginServer,
}

impl Backend {
    /// The named upstream `upstream` (`h`: a section naming it), built the first time a
    /// route or a rule names it and shared after.
    pub(crate) fn named(
        named: &mut HashMap<String, Arc<Backend>>,
        upstream: &str,
        h: &HttpConfig,
        default_sni: &str,
    ) -> Result<Arc<Self>, ConfigError> {
        if let Some(shared) = named.get(upstream) {
            return Ok(shared.clone());
        }
        let block = |f: &str| format!("upstreams.{upstream}.{f}");
        let made = Arc::new(Backend::new(RouteName::new(upstream), h, default_sni, &block)?);
        named.insert(upstream.to_string(), made.clone());
        Ok(made)
    }

    /// The backend of `h` (a route's resolved section), known as `name`. `default_sni`: the
    /// server name where none is configured (the route's; a named upstream over TLS always
    /// has its own). `key` names a key of the upstream in errors (the block's for a named one).
    pub(crate) fn new(
        name: RouteName,
        h: &HttpConfig,
        default_sni: &str,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Self, ConfigError> {
        let mut servers = Vec::new();
        for (j, server) in h.servers().into_iter().enumerate() {
            // A server's own name, where it has one, stands for the upstream's.
            let mut origin_tls = h.origin_tls.clone();
            origin_tls.sni = server.sni.clone().or(origin_tls.sni);
            let field = |f: &str| match &h.origins {
                Some(_) => key(&format!("origins[{j}].{f}")),
                None => key("origin"),
            };
            let addr = OriginAddr::parse(&server.address).map_err(|m| ConfigError::invalid(field("address"), m))?;
            let tls =
                OriginTls::new(&origin_tls, default_sni, addr).map_err(|(f, m)| ConfigError::invalid(key(f), m))?;
            servers.push(ServerRoute { tls: Arc::new(tls), config: server });
        }
        Ok(Self {
            name,
            named: h.upstream_name.is_some(),
            servers,
            settings: h.upstream.clone(),
            grouped: h.origins.is_some(),
        })
    }
}
