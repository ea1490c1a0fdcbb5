//! Semantic checks that serde cannot express. Each error names the key path.

use std::collections::HashSet;
use std::time::Duration;

use super::{
    ActionConfig, Config, ConfigError, EarlyData, Ktls, OriginAddr, OriginTls, PoolConfig, TerminateConfig,
    UpstreamConfig, UpstreamProtocol,
};

/// Checks an SNI pattern and returns it normalised (lower case, no trailing dot).
pub(crate) fn sni_pattern(raw: &str) -> Result<String, String> {
    if raw.is_empty() || raw == "*" {
        return Ok(raw.to_string());
    }
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    let host = name.strip_prefix("*.").unwrap_or(&name);
    let valid_label = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if host.len() > 253 || !host.split('.').all(valid_label) {
        return Err(format!(
            "invalid SNI pattern {raw:?}: use a host name, \"*.domain\", \"\" (no SNI) or \"*\" (default)"
        ));
    }
    Ok(name)
}

impl Config {
    /// Everything that can be known wrong without touching the network.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let admin = &self.admin;
        if !admin.listen.ip().is_loopback() && !admin.allow_non_loopback {
            return Err(ConfigError::invalid(
                "admin.listen",
                format!(
                    "{} is not a loopback address; set admin.allow_non_loopback: true to expose metrics",
                    admin.listen
                ),
            ));
        }
        if self.listeners.is_empty() {
            return Err(ConfigError::invalid("listeners", "at least one listener is required"));
        }
        let mut addrs = HashSet::new();
        for (i, l) in self.listeners.iter().enumerate() {
            // Port 0 (tests: "any free port") can never clash.
            if l.listen.port() != 0 && (!addrs.insert(l.listen) || l.listen == admin.listen) {
                return Err(ConfigError::invalid(
                    format!("listeners[{i}].listen"),
                    format!("{} is used twice", l.listen),
                ));
            }
            if l.max_connections == 0 {
                return Err(ConfigError::invalid(format!("listeners[{i}].max_connections"), "must be at least 1"));
            }
            if l.http3 && l.proxy_protocol {
                return Err(ConfigError::invalid(
                    format!("listeners[{i}].http3"),
                    "not with proxy_protocol: QUIC datagrams carry no PROXY header, so HTTP/3 clients would \
                     be logged and forwarded as the balancer's address",
                ));
            }
            if let Some(name) = l.quic_congestion.as_deref() {
                quic_congestion(name, &format!("listeners[{i}].quic_congestion"))?;
            }
            if l.max_connections_per_client == Some(Some(0)) {
                return Err(ConfigError::invalid(
                    format!("listeners[{i}].max_connections_per_client"),
                    "must be at least 1 (leave it out for no cap)",
                ));
            }
            if !(1..=128).contains(&l.ipv6_prefix) {
                return Err(ConfigError::invalid(format!("listeners[{i}].ipv6_prefix"), "must be 1 to 128 bits"));
            }
            l.headers.compile(&format!("listeners[{i}].headers"))?;
        }
        if self.workers == Some(0) {
            return Err(ConfigError::invalid("workers", "must be at least 1 (leave it out for one per core)"));
        }
        // sun_path holds 108 bytes with its NUL; a relative path would depend on the folder the
        // process was started in, which an upgrading process need not share.
        let socket = &self.upgrade.socket;
        if !socket.is_absolute() || socket.as_os_str().len() > 107 {
            return Err(ConfigError::invalid(
                "upgrade.socket",
                format!("{}: must be an absolute path of at most 107 bytes", socket.display()),
            ));
        }
        let t = &self.timeouts;
        for (key, value) in [
            ("timeouts.client_hello", t.client_hello),
            ("timeouts.connect", t.connect),
            ("timeouts.idle", t.idle),
            ("timeouts.origin_response", t.origin_response),
        ] {
            if value == Duration::ZERO {
                return Err(ConfigError::invalid(key, "must be greater than zero"));
            }
        }
        if self.routes.is_empty() {
            return Err(ConfigError::invalid("routes", "at least one route is required"));
        }
        upstreams::blocks(self)?;
        if let Some(acme) = &self.acme {
            acme.validate()?;
        }
        if let Some(fleet) = &self.fleet {
            fleet.validate()?;
        }
        let mut seen = HashSet::new();
        // Each disk tier owns its directory: its index is loaded from the files there, and two
        // routes' evictions and purges would remove each other's entries.
        let mut disk_paths = HashSet::new();
        for (i, r) in self.routes.iter().enumerate() {
            let key = |field: &str| format!("routes[{i}].{field}");
            let pattern = sni_pattern(&r.sni).map_err(|m| ConfigError::invalid(key("sni"), m))?;
            if !seen.insert(pattern.clone()) {
                return Err(ConfigError::invalid(key("sni"), format!("{:?} is routed twice", r.sni)));
            }
            if let Some((field, message)) = r.misplaced {
                return Err(ConfigError::invalid(key(field), message));
            }
            // The one origin the route names, where it names one (not a list of servers).
            let origin = match &r.action {
                ActionConfig::Reject => continue,
                ActionConfig::Tunnel(t) => Some(&t.origin),
                ActionConfig::Prewarm(p) => Some(&p.origin),
                // Its servers are the named upstream's, checked under upstreams.NAME.
                ActionConfig::Http(h) if h.upstream_name.is_some() => {
                    upstreams::route_names(self, h, &key)?;
                    None
                }
                ActionConfig::Http(h) => {
                    upstreams::own_servers_only(&h.upstream, &key)?;
                    let settings = |f: &str| key(&format!("upstream.{f}"));
                    servers(&h.origin, &h.origins, &h.upstream.health, &key, &settings)?
                }
            };
            if let Some(origin) = origin {
                let Some(origin) = origin else {
                    return Err(ConfigError::invalid(
                        key("origin"),
                        "required for actions tunnel, prewarm and http (or, on http, origins: a list)",
                    ));
                };
                OriginAddr::parse(origin).map_err(|m| ConfigError::invalid(key("origin"), m))?;
            }
            match &r.action {
                ActionConfig::Prewarm(p) => {
                    validate_terminating(&pattern, self.acme.is_some(), "prewarm", &p.tls, &p.origin_tls, false, &key)?;
                    if p.tls.early_data == EarlyData::Safe {
                        return Err(ConfigError::invalid(
                            key("early_data"),
                            "prewarm routes cannot see requests, so cannot tell safe ones: `opaque` (replayable, \
                             see docs/config.md) or `off`",
                        ));
                    }
                    validate_ktls(&p.tls, &key)?;
                    validate_pool(&p.pool, &key)?;
                }
                ActionConfig::Http(h) => {
                    // Every server naming itself stands for the route's one name.
                    let named = h.servers().iter().all(|s| s.sni.is_some());
                    validate_terminating(
                        &pattern,
                        self.acme.is_some(),
                        "http",
                        &h.tls,
                        &h.origin_tls,
                        !h.upstream.tls || named,
                        &key,
                    )?;
                    if let Some(rate) = &h.limits {
                        validate_rate(rate, &key)?;
                    }
                    if h.tls.early_data == EarlyData::Opaque {
                        return Err(ConfigError::invalid(
                            key("early_data"),
                            "http routes forward early requests only when safe: `safe` or `off`",
                        ));
                    }
                    if h.tls.ktls != Ktls::Off || h.tls.ktls_after_set {
                        return Err(ConfigError::invalid(
                            key(if h.tls.ktls_after_set { "ktls_after" } else { "ktls" }),
                            "only for action prewarm: an http route reads every byte in user space (HTTP is \
                             parsed there), so the kernel would take over the cipher but save no copy",
                        ));
                    }
                    if h.upstream_name.is_none() {
                        let settings = |f: &str| key(&format!("upstream.{f}"));
                        validate_upstream(&h.upstream, h.origin_tls_set, &settings)?;
                    }
                    if let Some(c) = &h.cache {
                        cache(c, &mut disk_paths, &key)?;
                    }
                    if let Some(e) = &h.early_hints {
                        e.validate(&key)?;
                    }
                    h.headers.compile(&key("headers"))?;
                    rules::each(self, h, &mut disk_paths, &key)?;
                }
                _ => {}
            }
        }
        upstreams::all_used(self)
    }
}

/// Kernel TLS on a prewarm route.
fn validate_ktls(r: &TerminateConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if r.ktls != Ktls::Off && r.early_data != EarlyData::Off {
        return Err(ConfigError::invalid(
            key("ktls"),
            "not with early_data: 0-RTT sessions are driven by edgewarm's own handshake driver, which \
             does not hand sessions to the kernel",
        ));
    }
    if r.ktls_after_set && r.ktls != Ktls::Auto {
        return Err(ConfigError::invalid(key("ktls_after"), "only with ktls: auto"));
    }
    if r.ktls_after == 0 {
        return Err(ConfigError::invalid(
            key("ktls_after"),
            "must be at least 1 byte (for a hand-off at once: ktls: on)",
        ));
    }
    Ok(())
}

/// A route that terminates TLS: its certificate, ALPN list and origin TLS settings.
/// `cleartext`: the origin is reached without TLS (it has no server name to need).
fn validate_terminating(
    sni: &str,
    acme: bool,
    action: &str,
    r: &TerminateConfig,
    t: &OriginTls,
    cleartext: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if r.cert.is_none() {
        return Err(ConfigError::invalid(key("cert"), format!("required for action {action}")));
    }
    if r.cert_from_acme() {
        if !acme {
            return Err(ConfigError::invalid(key("cert"), "acme: needs the top-level acme: section (its directory)"));
        }
        if r.key.is_some() {
            return Err(ConfigError::invalid(key("key"), "not with cert: acme (the key is made with the certificate)"));
        }
        super::acme::validate_name(sni).map_err(|m| ConfigError::invalid(key("cert"), m))?;
    }
    if r.max_early_data_size == 0 {
        return Err(ConfigError::invalid(key("max_early_data_size"), "must be from 1 byte to 4 GiB"));
    }
    if r.key.is_none() && !r.cert_from_acme() {
        return Err(ConfigError::invalid(key("key"), format!("required for action {action}")));
    }
    let mut seen = HashSet::new();
    for (j, p) in r.alpn.iter().enumerate() {
        if p.is_empty() || p.len() > 255 || !seen.insert(p) {
            return Err(ConfigError::invalid(
                key(&format!("alpn[{j}]")),
                format!("invalid or repeated protocol {p:?}"),
            ));
        }
    }
    validate_origin_tls(t, key)?;
    // One pool per route, never one per client-chosen name: otherwise anyone could make
    // edgewarm open pools (and origin connections) by sending made-up names under a wildcard.
    if (sni.starts_with('*') || sni.is_empty()) && t.sni.is_none() && !cleartext {
        return Err(ConfigError::invalid(
            key("origin_tls.sni"),
            format!(
                "required on wildcard, default and no-SNI {action} routes (their origin connections need one name)"
            ),
        ));
    }
    Ok(())
}

/// `origin_tls` on its own (`key` names the keys beside it).
fn validate_origin_tls(t: &OriginTls, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if t.client_cert.is_some() != t.client_key.is_some() {
        return Err(ConfigError::invalid(key("origin_tls.client_key"), "client_cert and client_key go together"));
    }
    if !t.verify && t.ca.is_some() {
        return Err(ConfigError::invalid(key("origin_tls.ca"), "a CA with verify: false would be ignored"));
    }
    if let Some(sni) = &t.sni {
        rustls::pki_types::ServerName::try_from(sni.as_str())
            .map_err(|_| ConfigError::invalid(key("origin_tls.sni"), format!("invalid server name {sni:?}")))?;
    }
    Ok(())
}

fn validate_pool(p: &PoolConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if p.max == 0 || p.min > p.max {
        return Err(ConfigError::invalid(
            key("pool.max"),
            format!("need 1 <= max and min <= max (min {}, max {})", p.min, p.max),
        ));
    }
    if p.period == Duration::ZERO || p.max_idle == Duration::ZERO {
        return Err(ConfigError::invalid(key("pool.period"), "pool durations must be greater than zero"));
    }
    Ok(())
}

/// A route's or a rule's `cache`: its settings, and a disk tier of its own.
fn cache(
    c: &super::CacheConfig,
    disk_paths: &mut HashSet<std::path::PathBuf>,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    c.validate(key)?;
    match &c.disk {
        Some(d) if !disk_paths.insert(d.path.clone()) => Err(ConfigError::invalid(
            key("cache.disk.path"),
            format!("{} is another route's disk tier", d.path.display()),
        )),
        _ => Ok(()),
    }
}

/// `routes[].limits`: a rate that can be kept, a burst of at least one, a budget that holds a
/// few thousand keys at least.
fn validate_rate(rate: &super::limits::RateConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if !(rate.requests_per_second > 0.0 && rate.requests_per_second <= 1e6) {
        return Err(ConfigError::invalid(key("limits.requests_per_second"), "must be more than 0 and at most 1000000"));
    }
    if !(1..=1_000_000).contains(&rate.burst) {
        return Err(ConfigError::invalid(key("limits.burst"), "must be 1 to 1000000"));
    }
    if rate.memory.is_some_and(|m| !(64 * 1024..=1 << 30).contains(&m)) {
        return Err(ConfigError::invalid(key("limits.memory"), "must be 64KiB to 1GiB"));
    }
    Ok(())
}

/// A QUIC congestion controller's name (quinn's, in user space: the kernel's list does not
/// apply).
fn quic_congestion(name: &str, key: &str) -> Result<(), ConfigError> {
    if super::upstream::QUIC_CONGESTION.contains(&name) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        key,
        format!(
            "{name:?} is not a QUIC congestion controller (QUIC runs its own, in user space: {})",
            super::upstream::QUIC_CONGESTION.join(", ")
        ),
    ))
}

/// The servers of an `http` route or a named upstream: the one `origin` (returned, to be
/// checked with the other actions' one origin) or the list of `origins`.
fn servers<'a>(
    origin: &'a Option<String>,
    origins: &Option<Vec<super::OriginServer>>,
    health: &super::HealthConfig,
    key: &dyn Fn(&str) -> String,
    settings: &dyn Fn(&str) -> String,
) -> Result<Option<&'a Option<String>>, ConfigError> {
    match origins {
        Some(_) if origin.is_some() => Err(ConfigError::invalid(
            key("origins"),
            "not beside origin: origin is one server, origins a list (write the one server as its only entry)",
        )),
        Some(list) => super::origins::validate(list, health, key, settings).map(|()| None),
        None => Ok(Some(origin)),
    }
}

/// An upstream's settings (`settings` names a key of them: `routes[N].upstream.x`, or
/// `upstreams.NAME.x`); `origin_tls_set`: its `origin_tls` was written.
fn validate_upstream(
    u: &UpstreamConfig,
    origin_tls_set: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if !u.tls && origin_tls_set {
        return Err(ConfigError::invalid(
            key("tls"),
            "false means a cleartext origin, which has no TLS for origin_tls to configure: remove one of them",
        ));
    }
    if u.connections == 0 || u.max_connections < u.connections {
        return Err(ConfigError::invalid(
            key("max_connections"),
            format!(
                "need 1 <= connections <= max_connections (connections {}, max_connections {})",
                u.connections, u.max_connections
            ),
        ));
    }
    for (name, d) in [("keepalive", u.keepalive), ("max_age", u.max_age), ("idle_timeout", u.idle_timeout)] {
        if d == Duration::ZERO {
            return Err(ConfigError::invalid(key(name), "must be greater than zero"));
        }
    }
    if u.protocol == UpstreamProtocol::H3 {
        if !u.tls {
            return Err(ConfigError::invalid(
                key("tls"),
                "false cannot go with protocol h3: QUIC is always encrypted (use h2 for a cleartext origin)",
            ));
        }
        if let Some(name) = u.congestion.as_deref() {
            quic_congestion(name, &key("congestion"))?;
        }
    } else if let Some(name) = &u.congestion {
        super::upstream::congestion_available(name).map_err(|e| ConfigError::invalid(key("congestion"), e))?;
    }
    Ok(())
}

mod rules;
#[cfg(test)]
mod tests;
mod upstreams;
