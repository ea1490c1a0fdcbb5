//! SNI → route. Built once per config (re)load and shared read-only by every connection.
//!
//! Lookup order, first hit wins: exact name; wildcard suffixes from the most specific
//! (`*.b.example.com` before `*.example.com`); the `""` route when the hello carries no SNI;
//! the `"*"` default. No match means reject: edgewarm is never an open proxy, so there is no
//! way to reach an origin that the config does not name.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{sni_pattern, Action, Config, ConfigError, OriginAddr};

/// What to do with a connection whose hello matched a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    Tunnel { origin: OriginAddr, fastopen: bool },
    Reject,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The SNI pattern as configured (normalised): also the `route` metric label.
    pub name: String,
    pub action: RouteAction,
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
    /// Build from a config; fails only on what [`Config::validate`] also refuses.
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut table = Self::default();
        for (i, r) in config.routes.iter().enumerate() {
            let name = sni_pattern(&r.sni).map_err(|m| ConfigError::invalid(format!("routes[{i}].sni"), m))?;
            let action = match (r.action, &r.origin) {
                (Action::Tunnel, Some(origin)) => RouteAction::Tunnel {
                    origin: OriginAddr::parse(origin)
                        .map_err(|m| ConfigError::invalid(format!("routes[{i}].origin"), m))?,
                    fastopen: r.origin_tcp_fastopen,
                },
                _ => RouteAction::Reject,
            };
            let route = Arc::new(Route { name: name.clone(), action });
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
        RouteTable::new(&Config::parse(&yaml).unwrap()).unwrap()
    }

    fn name(t: &RouteTable, sni: Option<&str>) -> Option<String> {
        t.lookup(sni).map(|r| r.name.clone())
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
        assert_eq!(t.lookup(Some("evil.test")).unwrap().action, RouteAction::Reject);
        assert_eq!(name(&t, None).unwrap(), "*");
        let t = table("- {sni: \"\", action: tunnel, origin: nosni.internal:443}\n- {sni: \"*\", action: reject}\n");
        assert_eq!(name(&t, None).unwrap(), "");
    }
}
