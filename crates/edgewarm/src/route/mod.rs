//! SNI → route. Built once per config (re)load and shared read-only by every connection.
//!
//! Lookup order, first hit wins: exact name; wildcard suffixes from the most specific
//! (`*.b.example.com` before `*.example.com`); the `""` route when the hello carries no SNI;
//! the `"*"` default. No match means reject: edgewarm is never an open proxy, so there is no
//! way to reach an origin that the config does not name.
//!
//! Inside an `http` route, a request's path is read by [`path`] (normalized once, or refused)
//! and matched by [`rules`] (exact, longest prefix, then regexes; compiled at load), each rule
//! doing what [`site`] says. Its
//! requests go to its [`Backend`] ([`backend`]): the upstream it names, shared with the other
//! routes naming it, or its own.

mod backend;
pub mod path;
pub mod rules;
pub mod site;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::acme::Acme;
use crate::config::{
    self, sni_pattern, ActionConfig, Config, ConfigError, HeaderPolicy, HttpConfig, OriginAddr, PrewarmConfig,
    TerminateConfig, TunnelConfig,
};
use crate::metrics::{Metrics, RouteMetrics, RouteName};
use crate::origin::prewarm::TlsPool;
use crate::origin::seam::Origin;
use crate::tls::client::{ClientTls, Resumption};
use crate::tls::origin::OriginTls;
use crate::tls::ticket_keys::TicketKeys;
pub use backend::{Backend, ServerRoute};
pub use site::Site;

/// What to do with a connection whose hello matched a route.
#[derive(Debug)]
pub enum RouteAction {
    Tunnel(TunnelRoute),
    Reject,
    Prewarm(Box<PrewarmRoute>),
    /// Shared with the request services of its connections, which read its settings.
    Http(Arc<HttpRoute>),
}

/// An `http` route: client TLS, and where its requests go.
pub struct HttpRoute {
    pub client: ClientTls,
    /// Where its requests go: the upstream it names (shared with the other routes naming it)
    /// or its own.
    pub backend: Arc<Backend>,
    /// The route's section as configured: a new route key is read where it is used, not copied
    /// here.
    pub config: HttpConfig,
    /// Its `headers`, compiled (each connection merges it into its listener's).
    pub headers: Arc<HeaderPolicy>,
    /// Its `rules`, compiled (none: every request goes to `backend`, its path as sent).
    pub site: Option<Site>,
    /// The route's origin seam, whatever kind answers: attached by the server before the
    /// snapshot is published, like a prewarm route's pools.
    seam: OnceLock<Arc<dyn Origin>>,
}

impl std::fmt::Debug for HttpRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRoute").field("config", &self.config).finish_non_exhaustive()
    }
}

impl HttpRoute {
    /// Where the route's requests go (none before the server attached it).
    pub(crate) fn seam(&self) -> Option<&Arc<dyn Origin>> {
        self.seam.get()
    }

    pub(crate) fn attach(&self, origin: Arc<dyn Origin>) {
        let _ = self.seam.set(origin);
    }
}

/// A `tunnel` route: where to, and whether the replayed hello rides in the SYN.
#[derive(Debug)]
pub struct TunnelRoute {
    pub origin: OriginAddr,
    /// The route's section as configured (`origin_tcp_fastopen`, `origin_proxy_protocol`, …).
    pub config: TunnelConfig,
}

/// A `prewarm` route's TLS on both sides, its pool sizing, and its pools.
#[derive(Debug)]
pub struct PrewarmRoute {
    pub client: ClientTls,
    pub origin: OriginTls,
    /// The route's section as configured (`pool`, `ktls`, …).
    pub config: PrewarmConfig,
    /// One pool per ALPN choice, attached by the server before the snapshot holding this route
    /// is published (so a connection never looks pools up in a shared map).
    pools: OnceLock<RoutePools>,
}

/// A route's pools by ALPN choice (`None`: no ALPN); a handful of entries, searched in order.
pub type RoutePools = Vec<(Option<Vec<u8>>, Arc<TlsPool>)>;

impl PrewarmRoute {
    /// The ALPN choices that get a pool: each protocol of the route's list, and none.
    pub fn pool_alpns(&self) -> impl Iterator<Item = Option<&[u8]>> {
        std::iter::once(None).chain(self.client.alpn.iter().map(|p| Some(p.as_slice())))
    }

    /// The pool for an ALPN choice.
    pub fn pool(&self, alpn: Option<&[u8]>) -> Option<&Arc<TlsPool>> {
        self.pools.get()?.iter().find(|(a, _)| a.as_deref() == alpn).map(|(_, p)| p)
    }

    /// Give the route its pools; only the first call counts (a route belongs to one snapshot).
    pub fn attach_pools(&self, pools: RoutePools) {
        let _ = self.pools.set(pools);
    }
}

/// Name (metric label) of the `sni: ""` route.
pub const NO_SNI: &str = "<no-sni>";

#[derive(Debug)]
pub struct Route {
    /// The SNI pattern as configured (normalised): also the `route` metric label.
    pub name: RouteName,
    pub action: RouteAction,
    /// The route's `allow` and `deny` (an `http` route answers them with 403 per request).
    pub access: crate::config::limits::AccessList,
    metrics: std::sync::OnceLock<RouteMetrics>,
}

impl Route {
    /// This route's metric handles in `metrics`, created on first use. A route table belongs to
    /// one server, so the handles always refer to that server's registry.
    pub fn metrics(&self, metrics: &Metrics) -> &RouteMetrics {
        self.metrics.get_or_init(|| metrics.route(&self.name))
    }
}

#[derive(Debug, Default)]
pub struct RouteTable {
    exact: HashMap<String, Arc<Route>>,
    /// Keyed by the suffix without the `*.`: `example.com` for `*.example.com`.
    wildcard: HashMap<String, Arc<Route>>,
    no_sni: Option<Arc<Route>>,
    default: Option<Arc<Route>>,
}

impl RouteTable {
    /// Build from a config; fails only on what [`Config::validate`] also refuses (and on
    /// certificate files that cannot be read). `resumption` holds the server's ticket keys.
    pub fn new(config: &Config, resumption: &Resumption, acme: &Acme) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut table = Self::default();
        // A named upstream is built once, for every route naming it.
        let mut named: HashMap<String, Arc<Backend>> = HashMap::new();
        // Read at every load, so a SIGHUP picks up rotated keys.
        let ticket_keys = match &config.tls.ticket_keys {
            Some(path) => Some(TicketKeys::read(path).map_err(|m| ConfigError::invalid("tls.ticket_keys", m))?),
            None => None,
        };
        for (i, r) in config.routes.iter().enumerate() {
            let name = sni_pattern(&r.sni).map_err(|m| ConfigError::invalid(format!("routes[{i}].sni"), m))?;
            let key = |field: &str| format!("routes[{i}].{field}");
            let origin = |text: &Option<String>| -> Result<OriginAddr, ConfigError> {
                OriginAddr::parse(text.as_deref().unwrap_or_default())
                    .map_err(|m| ConfigError::invalid(key("origin"), m))
            };
            // The no-SNI route's label must be visible in metrics and logs.
            let label = RouteName::new(if name.is_empty() { NO_SNI } else { &name });
            // Both sides' TLS of a route that terminates it (prewarm, http).
            let terminating = |tls: &TerminateConfig, origin_tls: &config::OriginTls, addr: &Option<String>| {
                let client = ClientTls::new(tls, &label, resumption, ticket_keys.as_ref(), acme)
                    .map_err(|(field, m)| ConfigError::invalid(key(field), m))?;
                let origin = OriginTls::new(origin_tls, &name, origin(addr)?)
                    .map_err(|(field, m)| ConfigError::invalid(key(field), m))?;
                Ok::<_, ConfigError>((client, origin))
            };
            let action = match &r.action {
                ActionConfig::Reject => RouteAction::Reject,
                ActionConfig::Tunnel(t) => {
                    RouteAction::Tunnel(TunnelRoute { origin: origin(&t.origin)?, config: t.clone() })
                }
                ActionConfig::Prewarm(p) => {
                    let (client, mut origin) = terminating(&p.tls, &p.origin_tls, &p.origin)?;
                    if p.tls.ktls != config::Ktls::Off {
                        origin = origin.with_kernel_tls();
                        // Probed (and logged) once, when the first such route is loaded rather
                        // than when its first client arrives.
                        crate::tls::ktls::support();
                    }
                    RouteAction::Prewarm(Box::new(PrewarmRoute {
                        client,
                        origin,
                        config: (**p).clone(),
                        pools: OnceLock::new(),
                    }))
                }
                ActionConfig::Http(h) => {
                    let backend = match h.upstream_name.as_deref() {
                        Some(upstream) => Backend::named(&mut named, upstream, h, &name)?,
                        None => Arc::new(Backend::new(label.clone(), h, &name, &key)?),
                    };
                    let site = if h.rules.is_empty() {
                        None
                    } else {
                        let mut backend_of = |settings: &HttpConfig| match settings.upstream_name.as_deref() {
                            Some(upstream) => Backend::named(&mut named, upstream, settings, &name),
                            None => Ok(backend.clone()),
                        };
                        Some(Site::compile(config, &label, h, &key, &mut backend_of)?)
                    };
                    // After the rules, so that `check` reports a rule before a missing file.
                    let client = ClientTls::new(&h.tls, &label, resumption, ticket_keys.as_ref(), acme)
                        .map_err(|(field, m)| ConfigError::invalid(key(field), m))?;
                    RouteAction::Http(Arc::new(HttpRoute {
                        client,
                        site,
                        backend,
                        config: (**h).clone(),
                        headers: Arc::new(h.headers.compile(&key("headers"))?),
                        seam: OnceLock::new(),
                    }))
                }
            };
            let route = Arc::new(Route { name: label, action, access: r.access.clone(), metrics: Default::default() });
            match name.as_str() {
                "" => table.no_sni = Some(route),
                "*" => table.default = Some(route),
                _ => match name.strip_prefix("*.") {
                    Some(suffix) => {
                        table.wildcard.insert(suffix.to_string(), route);
                    }
                    None => {
                        table.exact.insert(name, route);
                    }
                },
            }
        }
        Ok(table)
    }

    /// Every `http` route, for attaching origin connections.
    pub fn http_routes(&self) -> impl Iterator<Item = (&RouteName, &HttpRoute)> {
        let all = self.exact.values().chain(self.wildcard.values()).chain(&self.no_sni).chain(&self.default);
        all.filter_map(|r| match &r.action {
            RouteAction::Http(h) => Some((&r.name, &**h)),
            _ => None,
        })
    }

    /// `/routes`: every `http` route by name, its default upstream, and its rules in the order
    /// they are tried, with the requests each took since the load.
    pub fn listing(&self) -> serde_json::Value {
        let mut routes: Vec<_> = self
            .http_routes()
            .map(|(name, h)| {
                serde_json::json!({
                    "route": name.as_str(),
                    "upstream": h.backend.name.as_str(),
                    "rules": h.site.as_ref().map(Site::listing).unwrap_or_default(),
                })
            })
            .collect();
        routes.sort_by(|a, b| a["route"].as_str().cmp(&b["route"].as_str()));
        serde_json::json!({ "routes": routes })
    }

    /// Every `prewarm` route, for syncing pools.
    pub fn prewarm_routes(&self) -> impl Iterator<Item = (&RouteName, &PrewarmRoute)> {
        let all = self.exact.values().chain(self.wildcard.values()).chain(&self.no_sni).chain(&self.default);
        all.filter_map(|r| match &r.action {
            RouteAction::Prewarm(p) => Some((&r.name, &**p)),
            _ => None,
        })
    }

    /// Every route that presents a certificate (`prewarm`, `http`), with its client TLS, by
    /// name.
    pub fn terminating(&self) -> impl Iterator<Item = (&RouteName, &ClientTls)> {
        let all = self.exact.values().chain(self.wildcard.values()).chain(&self.no_sni).chain(&self.default);
        all.filter_map(|r| match &r.action {
            RouteAction::Http(h) => Some((&r.name, &h.client)),
            RouteAction::Prewarm(p) => Some((&r.name, &p.client)),
            _ => None,
        })
    }

    /// The route for a ClientHello's SNI (`None`: no SNI extension).
    pub fn lookup(&self, sni: Option<&str>) -> Option<&Arc<Route>> {
        let Some(sni) = sni else {
            return self.no_sni.as_ref().or(self.default.as_ref());
        };
        // Names are case-insensitive and may carry the root's trailing dot. The common case is
        // already lower case and allocates nothing.
        let sni = sni.strip_suffix('.').unwrap_or(sni);
        let lowered;
        let name = if sni.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered = sni.to_ascii_lowercase();
            lowered.as_str()
        } else {
            sni
        };
        if let Some(r) = self.exact.get(name) {
            return Some(r);
        }
        let mut rest = name;
        while let Some((_, suffix)) = rest.split_once('.') {
            if let Some(r) = self.wildcard.get(suffix) {
                return Some(r);
            }
            rest = suffix;
        }
        self.default.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(extra: &str) -> RouteTable {
        let yaml = format!(
            "listeners: [{{listen: 127.0.0.1:1}}]\nroutes:\n\
             - {{sni: a.example.com, action: tunnel, origin: a.internal:443}}\n\
             - {{sni: \"*.example.com\", action: tunnel, origin: wild.internal:443}}\n\
             - {{sni: \"*.b.example.com\", action: tunnel, origin: b.internal:443}}\n{extra}"
        );
        RouteTable::new(&Config::parse(&yaml).unwrap(), &Resumption::default(), &Acme::default()).unwrap()
    }

    fn name(t: &RouteTable, sni: Option<&str>) -> Option<String> {
        t.lookup(sni).map(|r| r.name.to_string())
    }

    #[test]
    fn exact_then_most_specific_wildcard() {
        let t = table("");
        assert_eq!(name(&t, Some("a.example.com")).unwrap(), "a.example.com");
        assert_eq!(name(&t, Some("A.Example.COM.")).unwrap(), "a.example.com");
        assert_eq!(name(&t, Some("x.example.com")).unwrap(), "*.example.com");
        assert_eq!(name(&t, Some("x.y.example.com")).unwrap(), "*.example.com");
        assert_eq!(name(&t, Some("x.b.example.com")).unwrap(), "*.b.example.com");
        // The wildcard does not cover the bare domain.
        assert_eq!(name(&t, Some("example.com")), None);
    }

    #[test]
    fn unmatched_is_rejected_unless_a_default_exists() {
        let t = table("");
        assert_eq!(name(&t, Some("evil.test")), None);
        assert_eq!(name(&t, None), None);
        let t = table("- {sni: \"*\", action: reject}\n");
        assert!(matches!(t.lookup(Some("evil.test")).unwrap().action, RouteAction::Reject));
        assert_eq!(name(&t, None).unwrap(), "*");
        let t = table("- {sni: \"\", action: tunnel, origin: nosni.internal:443}\n- {sni: \"*\", action: reject}\n");
        assert_eq!(name(&t, None).unwrap(), NO_SNI);
    }
}
