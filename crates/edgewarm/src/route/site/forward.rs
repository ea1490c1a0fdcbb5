//! A rule that sends its requests on: to its own upstream or the route's, with the path
//! rewritten where it says, and with its overrides of the route's settings.
//!
//! A rule that names another upstream, or has a `cache`, `limits` or `early_hints` of its own,
//! gets a seam of its own: the server's layers wrapped around that upstream's, with the rule's
//! settings, known as `ROUTE#rules[i]` (its cache, its rates, its metrics' label; a cache it
//! takes from the route is kept in memory only, the route's disk tier being the route's store's
//! directory). So a stored
//! response is never shared between rules that send one path to different upstreams: each
//! such rule has its own store. Every other rule rides the route's seam (same upstream, same
//! layers): what it changes (the path, the header policy, a limit of the service's) is applied
//! by the request service.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{join, Rule};
use crate::config::{Config, ConfigError, HttpConfig, RuleConfig};
use crate::metrics::RouteName;
use crate::origin::seam::Origin;
use crate::route::Backend;

pub struct Forward {
    /// Where the rule's requests go when not on the route's seam.
    own: Option<Box<Own>>,
    /// `strip_prefix` (`/`) or `replace_prefix`: what takes the matched prefix's place.
    replace: Option<String>,
    pub max_request_body: Option<u64>,
    pub origin_response: Option<Duration>,
    /// The upstream's name (the route's default's where the rule names none), for the log.
    upstream: RouteName,
}

/// A rule's own seam: its backend, and its settings for the layers around it.
pub(crate) struct Own {
    /// What its layers keep its state by: `ROUTE#rules[i]`.
    pub(crate) name: RouteName,
    pub(crate) backend: Arc<Backend>,
    /// The route's section with the rule's overrides in place (and no rules of its own).
    pub(crate) config: HttpConfig,
    seam: OnceLock<Arc<dyn Origin>>,
}

impl Forward {
    pub(super) fn new(
        config: &Config,
        route: &RouteName,
        name: &str,
        h: &HttpConfig,
        rule: &RuleConfig,
        backend: &mut dyn FnMut(&HttpConfig) -> Result<Arc<Backend>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let replace = match (&rule.replace_prefix, rule.strip_prefix) {
            (Some(to), _) => Some(to.clone()),
            (None, true) => Some("/".to_string()),
            (None, false) => None,
        };
        let mut upstream = h.upstream_name.as_deref().map_or_else(|| route.clone(), RouteName::new);
        let own = if rule.own_seam() {
            let mut settings = HttpConfig { rules: Vec::new(), ..h.clone() };
            if let Some(named) = rule.upstream.as_deref() {
                upstream = RouteName::new(named);
                settings = config.naming(&settings, named).unwrap_or(settings);
            }
            let backend = backend(&settings)?;
            // A store of the rule's own under the route's settings, in memory: a disk tier is
            // one store's directory, and the route's store has it.
            let inherited = settings.cache.take().map(|c| crate::config::CacheConfig { disk: None, ..c });
            settings.cache = rule.cache.clone().or(inherited);
            settings.limits = rule.limits.clone().or(settings.limits);
            settings.early_hints = rule.early_hints.clone().or(settings.early_hints);
            let name = RouteName::new(&format!("{route}#{name}"));
            Some(Box::new(Own { name, backend, config: settings, seam: OnceLock::new() }))
        } else {
            None
        };
        Ok(Self {
            own,
            replace,
            max_request_body: rule.max_request_body,
            origin_response: rule.timeouts.as_ref().map(|t| t.origin_response),
            upstream,
        })
    }

    /// The rule's own seam, if it has one (`None`: the route's).
    pub(crate) fn own(&self) -> Option<&Own> {
        self.own.as_deref()
    }

    /// Where its requests go: its own seam, once attached; `None` for the route's.
    pub(crate) fn seam(&self) -> Option<&Arc<dyn Origin>> {
        self.own.as_ref()?.seam.get()
    }

    /// The path the origin is sent for `path` (normalized, met by `rule`).
    pub fn path(&self, rule: &Rule, path: String) -> String {
        match &self.replace {
            Some(to) if rule.is_prefix() => join(to, rule.rest(&path)),
            _ => path,
        }
    }

    pub fn upstream(&self) -> &RouteName {
        &self.upstream
    }
}

impl Own {
    pub(crate) fn attach(&self, origin: Arc<dyn Origin>) {
        let _ = self.seam.set(origin);
    }
}
