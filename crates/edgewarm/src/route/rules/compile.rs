//! From a route's `rules` as written to [`Rules`]: each path checked to be in normal form (a
//! rule for a path no normalized request has would never match), each rule put in its path's
//! list in the order it is tried, and the lists no order can settle refused.

use std::cmp::Reverse;
use std::collections::HashMap;

use regex::bytes::Regex;

use super::conditions::{self, Conditions, Invalid};
use super::{prefix, Rule, Rules};
use crate::config::{EncodedSlash, RuleConfig};
use crate::route::path::normalize;

/// A rule the config cannot hold, naming its key under the route (`rules[3].prefix`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct RuleError {
    pub key: String,
    pub message: String,
}

/// Which path a rule is for.
enum PathMatch {
    /// The normalized path.
    Exact(String),
    /// Its segments, as `/a/b` (`/` for the root): `/api` and `/api/` are one prefix.
    Prefix(String),
    Regex(Regex),
}

impl<T> Rules<T> {
    /// Compiles rules in the order written, each with its payload.
    pub fn compile<'c>(written: impl IntoIterator<Item = (&'c RuleConfig, T)>) -> Result<Self, RuleError> {
        let mut rules = Vec::new();
        // Exact and prefix paths, each with its rules in the order written; `lists` in the
        // order each path first appears, so that an error names the first ambiguity.
        let mut lists: Vec<(String, Vec<u32>)> = Vec::new();
        let mut list_of: HashMap<(bool, String), usize> = HashMap::new();
        let mut regexes = Vec::new();
        for (i, (config, payload)) in written.into_iter().enumerate() {
            let at = |key: &str| if key.is_empty() { format!("rules[{i}]") } else { format!("rules[{i}].{key}") };
            let index = u32::try_from(i).map_err(|_| RuleError { key: at(""), message: "too many rules".into() })?;
            let conditions =
                Conditions::compile(config).map_err(|Invalid { key, message }| RuleError { key: at(&key), message })?;
            let (exact, path) = match path_of(config).map_err(|(key, message)| RuleError { key: at(key), message })? {
                PathMatch::Regex(re) => {
                    regexes.push((re, index));
                    rules.push(Rule { conditions, payload });
                    continue;
                }
                PathMatch::Exact(path) => (true, path),
                PathMatch::Prefix(path) => (false, path),
            };
            let list = *list_of.entry((exact, path.clone())).or_insert_with(|| {
                let kind = if exact { "exact" } else { "prefix" };
                lists.push((format!("{kind} {path}"), Vec::new()));
                lists.len() - 1
            });
            lists[list].1.push(index);
            rules.push(Rule { conditions, payload });
        }
        for (name, ids) in &mut lists {
            // Stable: among as many conditions, the order written, which `ordered` checks
            // cannot matter.
            ids.sort_by_key(|&i| Reverse(rules[i as usize].conditions.count()));
            ordered(name, ids, &rules)?;
        }
        let mut exact = HashMap::new();
        let mut prefixes = prefix::Tree::default();
        for ((is_exact, path), list) in list_of {
            let ids = std::mem::take(&mut lists[list].1);
            if is_exact {
                exact.insert(path.into_boxed_str(), ids);
            } else {
                *prefixes.insert(&path) = ids;
            }
        }
        Ok(Self { rules, exact, prefixes, regexes })
    }
}

/// Refuses two rules of one path (`name`), next to each other in `ids` with as many conditions,
/// that one request could meet: nothing would say which of them it meant.
fn ordered<T>(name: &str, ids: &[u32], rules: &[Rule<T>]) -> Result<(), RuleError> {
    let conditions = |i: u32| &rules[i as usize].conditions;
    for (n, &a) in ids.iter().enumerate() {
        let count = conditions(a).count();
        let same = ids[n + 1..].iter().take_while(|&&b| conditions(b).count() == count);
        if let Some(b) = same.copied().find(|&b| !conditions(a).exclusive(conditions(b))) {
            return Err(RuleError {
                key: format!("rules[{b}]"),
                message: format!(
                    "cannot be ordered against rules[{a}]: both are for {name} with {count} condition(s), \
                     and one request could meet both; make one exclude the other (another method, or a \
                     header or parameter with another value), or merge them"
                ),
            });
        }
    }
    Ok(())
}

/// The rule's one path, checked; or the key under the rule and what is wrong with it.
fn path_of(rule: &RuleConfig) -> Result<PathMatch, (&'static str, String)> {
    match (&rule.exact, &rule.prefix, &rule.regex) {
        (Some(path), None, None) => Ok(PathMatch::Exact(normal_form(path).map_err(|m| ("exact", m))?)),
        (None, Some(path), None) => {
            let path = normal_form(path).map_err(|m| ("prefix", m))?;
            Ok(PathMatch::Prefix(prefix_form(&path)))
        }
        (None, None, Some(pattern)) => Ok(PathMatch::Regex(conditions::regex(pattern).map_err(|m| ("regex", m))?)),
        (None, None, None) => Err(("", "needs one of exact, prefix or regex".into())),
        _ => Err(("", "has more than one of exact, prefix and regex: a rule is for one path".into())),
    }
}

/// A prefix by its segments, as `/a/b` (`/` for the root): `/api` and `/api/` are one prefix.
pub fn prefix_form(path: &str) -> String {
    let segments: Vec<&str> = prefix::segments(path).collect();
    format!("/{}", segments.join("/"))
}

/// `path` if it is in the form a request's path is normalized to. `%2F` is allowed: it can
/// reach a route that keeps it ([`EncodedSlash::Keep`]).
fn normal_form(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err("must start with /".into());
    }
    let normal = normalize(path.as_bytes(), EncodedSlash::Keep)
        .map_err(|e| format!("would be refused as a request's path: {e}"))?;
    if normal.query.is_some() {
        return Err("is a path: a query is not part of it (match parameters with query:)".into());
    }
    if normal.path != path {
        return Err(format!("is not in normal form, as requests are matched: write {}", normal.path));
    }
    Ok(normal.path)
}
