//! The checks of `upstreams:` and of the routes that name one: each block on its own (named
//! `upstreams.NAME.key`), every name a route gives known, every block used by a route.

use super::{servers, validate_origin_tls, validate_upstream};
use crate::config::upstreams::valid_name;
use crate::config::{ActionConfig, Config, ConfigError, HttpConfig, OriginAddr, UpstreamConfig};

/// Each block of `upstreams:`, as written.
pub(super) fn blocks(config: &Config) -> Result<(), ConfigError> {
    for (name, u) in &config.upstreams {
        let key = |field: &str| format!("upstreams.{name}.{field}");
        if !valid_name(name) {
            return Err(ConfigError::invalid(
                format!("upstreams.{name}"),
                "a name is 1 to 64 letters, digits, '-', '_' and '.' (it labels the upstream's metrics)",
            ));
        }
        // A named upstream's series carry its name where an inline route's carry the route's:
        // the two must never be one series.
        let clash =
            config.routes.iter().position(|r| super::sni_pattern(&r.sni).is_ok_and(|p| p.eq_ignore_ascii_case(name)));
        if let Some(i) = clash {
            return Err(ConfigError::invalid(
                format!("upstreams.{name}"),
                format!("is the name of routes[{i}] (its metrics would mix with the route's): name it otherwise"),
            ));
        }
        if let Some(Some(origin)) = servers(&u.origin, &u.origins, &u.health, &key, &key)? {
            OriginAddr::parse(origin).map_err(|m| ConfigError::invalid(key("origin"), m))?;
        } else if u.origins.is_none() {
            return Err(ConfigError::invalid(key("origin"), "required (one server), or origins: a list"));
        }
        validate_upstream(u, u.origin_tls.is_some(), &key)?;
        let tls = u.origin_tls.clone().unwrap_or_default();
        validate_origin_tls(&tls, &key)?;
        // Routes of several names share the upstream's connections, so they cannot take
        // their server name from a route's, as a route's own upstream does.
        let every_server_named = u.origins.as_ref().is_some_and(|list| list.iter().all(|s| s.sni.is_some()));
        if u.tls && tls.sni.is_none() && !every_server_named {
            return Err(ConfigError::invalid(
                key("origin_tls.sni"),
                "required on an upstream over TLS (or a sni on every server): the routes naming it share its \
                 connections, which present and verify one name",
            ));
        }
    }
    Ok(())
}

/// A route's `upstream: NAME`: the name is a block's.
pub(super) fn route_names(config: &Config, h: &HttpConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let Some(name) = &h.upstream_name else { return Ok(()) };
    if config.upstreams.contains_key(name) {
        return Ok(());
    }
    let known: Vec<&str> = config.upstreams.keys().map(String::as_str).collect();
    let known =
        if known.is_empty() { "upstreams: names none".to_string() } else { format!("there are {}", known.join(", ")) };
    Err(ConfigError::invalid(key("upstream"), format!("no upstream named {name:?} ({known})")))
}

/// A route's own `upstream:` map holds settings only: its servers are the route's own keys.
pub(super) fn own_servers_only(u: &UpstreamConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let set =
        [("origin", u.origin.is_some()), ("origins", u.origins.is_some()), ("origin_tls", u.origin_tls.is_some())];
    match set.into_iter().find(|&(_, set)| set) {
        Some((field, _)) => Err(ConfigError::invalid(
            key(&format!("upstream.{field}")),
            format!("only in a block of upstreams: (a route's own is written beside its upstream map, as {field}:)"),
        )),
        None => Ok(()),
    }
}

/// Every block is named by a route or a rule: one that is not would open standing connections for no
/// request (a typo in a route's name for it, most likely).
pub(super) fn all_used(config: &Config) -> Result<(), ConfigError> {
    let used = |name: &str| {
        config
            .routes
            .iter()
            .filter_map(|r| match &r.action {
                ActionConfig::Http(h) => Some(h),
                _ => None,
            })
            .any(|h| {
                h.upstream_name.as_deref() == Some(name) || h.rules.iter().any(|r| r.upstream.as_deref() == Some(name))
            })
    };
    match config.upstreams.keys().find(|name| !used(name)) {
        Some(name) => Err(ConfigError::invalid(format!("upstreams.{name}"), "no route names it")),
        None => Ok(()),
    }
}
