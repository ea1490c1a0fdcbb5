//! A route's rules with what each does: the site behind one name. A request's path is
//! normalized once ([`super::path`]), the rule it meets found ([`super::rules`]), and the rule
//! says what becomes of it: sent on to an upstream ([`forward`]), redirected ([`redirect`]),
//! or answered by the edge ([`respond`]). A request no rule meets goes to the route's default,
//! as on a route without rules (but with its path normalized all the same).

pub mod forward;
pub mod redirect;
pub mod respond;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderMap, Method};

use super::path::{normalize, Normalized, PathError};
use super::rules::{self, Rules};
use super::Backend;
use crate::config::{Config, ConfigError, EncodedSlash, HeaderPolicy, HttpConfig};
use crate::metrics::RouteName;
pub use forward::Forward;
pub use redirect::Redirect;
pub use respond::Respond;

/// A route's compiled rules.
pub struct Site {
    rules: Rules<Rule>,
    encoded_slash: EncodedSlash,
}

/// One rule, compiled: its name, what it does, and what it adds to the route's header policy.
pub struct Rule {
    /// `rules[3]`: its place in the file, as logs, metrics and `/routes` name it.
    pub name: Arc<str>,
    /// A `prefix` rule's prefix in normal form (`/api`; `/` for the root): what a rewrite or a
    /// redirect replaces.
    prefix: Option<String>,
    pub action: Action,
    /// Its `headers`, applied after the route's (so merged from the outside in).
    pub headers: HeaderPolicy,
    /// Requests it took since the load.
    hits: AtomicU64,
}

/// What a rule does with the requests it meets.
pub enum Action {
    /// Boxed: a forward carries its own limits, cache and policies, far larger than the rest.
    Forward(Box<Forward>),
    Redirect(Redirect),
    Respond(Respond),
}

/// The rule a request met, and its path in normal form.
pub struct Chosen<'s, 'q> {
    pub normal: Normalized<'q>,
    pub rule: Option<&'s Rule>,
}

impl Site {
    /// The route's `rules` (route `route`, its section `h`); a rule naming an upstream gets
    /// that upstream's backend from `backend`, which builds each once for every route.
    pub(crate) fn compile(
        config: &Config,
        route: &RouteName,
        h: &HttpConfig,
        key: &dyn Fn(&str) -> String,
        backend: &mut dyn FnMut(&HttpConfig) -> Result<Arc<Backend>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let mut compiled = Vec::with_capacity(h.rules.len());
        for (i, rule) in h.rules.iter().enumerate() {
            let name: Arc<str> = Arc::from(format!("rules[{i}]"));
            let at = |f: &str| key(&format!("rules[{i}].{f}"));
            let action = if let Some(r) = &rule.redirect {
                Action::Redirect(Redirect::new(r))
            } else if let Some(r) = &rule.respond {
                Action::Respond(Respond::new(r))
            } else {
                Action::Forward(Box::new(Forward::new(config, route, &name, h, rule, backend)?))
            };
            let headers = match &rule.header_policy {
                Some(headers) => headers.compile(&at("header_policy"))?,
                None => HeaderPolicy::default(),
            };
            let prefix = rule.prefix.as_deref().map(rules::prefix_form);
            compiled.push((rule, Rule { name, prefix, action, headers, hits: AtomicU64::new(0) }));
        }
        let rules = Rules::compile(compiled).map_err(|e| ConfigError::invalid(key(&e.key), e.message))?;
        Ok(Self { rules, encoded_slash: h.encoded_slash })
    }

    /// `target`'s path normalized (or why it is refused), and the rule it meets, if any.
    pub fn choose<'s, 'q>(
        &'s self,
        target: &'q [u8],
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Chosen<'s, 'q>, PathError> {
        let normal = normalize(target, self.encoded_slash)?;
        let request = rules::Request { path: &normal.path, method, headers, query: normal.query };
        let rule = self.rules.find(&request).map(|hit| hit.payload);
        if let Some(rule) = rule {
            rule.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Chosen { normal, rule })
    }

    /// Every rule's own seam, to attach.
    pub(crate) fn forwards(&self) -> impl Iterator<Item = &Forward> {
        self.rules.iter().filter_map(|r| match &r.action {
            Action::Forward(f) => Some(&**f),
            _ => None,
        })
    }

    /// The rules in the order they are tried, each with what it does and its hits (`/routes`).
    pub fn listing(&self) -> Vec<serde_json::Value> {
        let config: HashMap<usize, &Rule> = self.rules.iter().enumerate().collect();
        self.rules
            .precedence()
            .into_iter()
            .map(|(i, matcher)| {
                let rule = config[&i];
                let does = match &rule.action {
                    Action::Forward(f) => format!("upstream {}", f.upstream()),
                    Action::Redirect(r) => r.describe(),
                    Action::Respond(r) => format!("respond {}", r.status()),
                };
                serde_json::json!({
                    "rule": &*rule.name,
                    "match": matcher,
                    "does": does,
                    "hits": rule.hits.load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

impl Rule {
    /// What follows the rule's prefix in `path` (a normalized path it matched): `/x` of
    /// `/api/x` for `prefix: /api/`, empty for `/api`; the whole path for other rules.
    fn rest<'p>(&self, path: &'p str) -> &'p str {
        match self.prefix.as_deref() {
            Some("/") | None => path,
            Some(prefix) => path.get(prefix.len()..).unwrap_or_default(),
        }
    }

    /// Whether this is a prefix rule.
    fn is_prefix(&self) -> bool {
        self.prefix.is_some()
    }
}

/// `base` with `rest` (a normalized path's tail: empty or starting with `/`) in place of a
/// matched prefix: one slash between them, and `/` rather than nothing.
pub(crate) fn join(base: &str, rest: &str) -> String {
    let mut out = String::with_capacity(base.len() + rest.len());
    out.push_str(base.trim_end_matches('/'));
    if rest.is_empty() && base.ends_with('/') {
        out.push('/');
    }
    out.push_str(rest);
    if out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests;
