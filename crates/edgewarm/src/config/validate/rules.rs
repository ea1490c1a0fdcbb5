//! The checks of a route's `rules` that need no compiling: what each rule does, and the keys
//! that go with it. Their paths, regexes and precedence are checked where they are compiled
//! (`crate::route::rules`, at every load and by `check`), naming the same keys.

use std::collections::HashSet;
use std::path::PathBuf;

use super::{cache, validate_rate};
use crate::config::{Config, ConfigError, HttpConfig, RuleConfig};

/// Each of `h.rules`, under `key("rules[i]…")`.
pub(super) fn each(
    config: &Config,
    h: &HttpConfig,
    disk_paths: &mut HashSet<PathBuf>,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    for (i, rule) in h.rules.iter().enumerate() {
        let key = |f: &str| key(&format!("rules[{i}].{f}"));
        one(config, rule, disk_paths, &key)?;
    }
    Ok(())
}

fn one(
    config: &Config,
    rule: &RuleConfig,
    disk_paths: &mut HashSet<PathBuf>,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let does: Vec<&str> = [
        ("upstream", rule.upstream.is_some()),
        ("redirect", rule.redirect.is_some()),
        ("respond", rule.respond.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if let [_, second, ..] = does[..] {
        return Err(ConfigError::invalid(
            key(second),
            format!("a rule does one thing: {} (write two rules, or drop one)", does.join(" or ")),
        ));
    }
    if let Some(name) = &rule.upstream {
        if !config.upstreams.contains_key(name) {
            let known: Vec<&str> = config.upstreams.keys().map(String::as_str).collect();
            let known = if known.is_empty() { "upstreams: names none".into() } else { known.join(", ") };
            return Err(ConfigError::invalid(key("upstream"), format!("no upstream named {name:?} ({known})")));
        }
    }
    if rule.answers() {
        // What only a request sent on can use: refused rather than ignored.
        let unused = [
            ("strip_prefix", rule.strip_prefix),
            ("replace_prefix", rule.replace_prefix.is_some()),
            ("cache", rule.cache.is_some()),
            ("limits", rule.limits.is_some()),
            ("early_hints", rule.early_hints.is_some()),
            ("max_request_body", rule.max_request_body.is_some()),
            ("timeouts", rule.timeouts.is_some()),
            ("header_policy.request", rule.header_policy.as_ref().is_some_and(|h| h.request != Default::default())),
        ];
        if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
            let what = if rule.redirect.is_some() { "redirect" } else { "respond" };
            return Err(ConfigError::invalid(
                key(field),
                format!("not beside {what}: the edge answers the rule's requests itself, and sends none on"),
            ));
        }
    }
    rewrite(rule, key)?;
    if let Some(r) = &rule.redirect {
        if ![301, 302, 303, 307, 308].contains(&r.status) {
            return Err(ConfigError::invalid(key("redirect.status"), "must be 301, 302, 303, 307 or 308"));
        }
        let absolute = ["https://", "http://"].iter().any(|s| r.to.starts_with(s) && r.to.len() > s.len());
        let local = r.to.starts_with('/') && !r.to.starts_with("//");
        if !(absolute || local) || http::HeaderValue::from_str(&r.to).is_err() || r.to.contains([' ', '#']) {
            return Err(ConfigError::invalid(
                key("redirect.to"),
                "must be a path (/new/) or an absolute http:// or https:// URL, printable, without spaces or #",
            ));
        }
    }
    if let Some(r) = &rule.respond {
        if !(200..=599).contains(&r.status) {
            return Err(ConfigError::invalid(key("respond.status"), "must be 200 to 599"));
        }
        if r.content_type.as_deref().is_some_and(|c| http::HeaderValue::from_str(c).is_err()) {
            return Err(ConfigError::invalid(key("respond.content_type"), "is not a header value"));
        }
    }
    if let Some(c) = &rule.cache {
        cache(c, disk_paths, key)?;
    }
    if let Some(rate) = &rule.limits {
        validate_rate(rate, key)?;
    }
    if let Some(e) = &rule.early_hints {
        e.validate(key)?;
    }
    if rule.timeouts.as_ref().is_some_and(|t| t.origin_response.is_zero()) {
        return Err(ConfigError::invalid(key("timeouts.origin_response"), "must be greater than zero"));
    }
    if let Some(headers) = &rule.header_policy {
        headers.compile(&key("header_policy"))?;
    }
    Ok(())
}

/// `strip_prefix` and `replace_prefix`: one of them, on a `prefix` rule, with a path in
/// normal form to put in the prefix's place.
fn rewrite(rule: &RuleConfig, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let field = match (rule.strip_prefix, &rule.replace_prefix) {
        (false, None) => return Ok(()),
        (true, Some(_)) => {
            return Err(ConfigError::invalid(
                key("replace_prefix"),
                "not beside strip_prefix: one rewrite (strip_prefix is replace_prefix: /)",
            ))
        }
        (true, None) => "strip_prefix",
        (false, Some(_)) => "replace_prefix",
    };
    if rule.prefix.is_none() {
        return Err(ConfigError::invalid(key(field), "only on a prefix rule: it rewrites the prefix matched"));
    }
    if let Some(to) = &rule.replace_prefix {
        let plain = to.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\' | b'%'));
        let dots = to.split('/').any(|s| s == "." || s == "..");
        if !to.starts_with('/') || to.contains("//") || dots || !plain {
            return Err(ConfigError::invalid(
                key(field),
                "must be a path in normal form: starting with /, no //, no . or .. segment, no ?, #, % or \\",
            ));
        }
    }
    Ok(())
}
