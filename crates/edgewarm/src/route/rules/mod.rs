//! A route's rules, compiled at load: which rule a request meets, by its normalized path
//! ([`super::path`]), method, headers and query.
//!
//! Precedence is by specificity, never by a file-order trap (nginx's `location` and Caddy's
//! sorted `handle`, not Envoy's first match down a list):
//!
//! 1. an `exact` path (one hash lookup);
//! 2. the longest `prefix`, by whole segments (a tree walked one segment at a time);
//! 3. `regex` rules, in the order written.
//!
//! Among rules of one path, the one with more conditions is tried first. A rule whose
//! conditions fail falls through to the next candidate: the next rule of its path, then a
//! shorter prefix, then the regexes; past them, no rule (the route's default). Two rules of
//! one path with as many conditions each, that one request could meet, cannot be ordered by
//! this, and are refused at load, naming both. So the cost of a lookup grows with the path's
//! depth and the number of regexes, never with the number of exact and prefix rules.
//!
//! What a rule does is its payload `T`, opaque here: the step that wires rules into a route
//! gives each its compiled action.

mod compile;
mod conditions;
mod prefix;

use std::collections::HashMap;

use http::{HeaderMap, Method};
use regex::bytes::Regex;

pub use compile::{prefix_form, RuleError};
use conditions::Conditions;

/// What a rule sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Normalized ([`super::path::normalize`]): rules are written for normal paths only.
    pub path: &'a str,
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    /// As received, after the `?` (`None`: no `?`).
    pub query: Option<&'a [u8]>,
}

/// A route's compiled rules, each holding a payload `T`.
#[derive(Debug)]
pub struct Rules<T> {
    /// In the order written: a rule's index is its place in the config (`rules[3]`).
    rules: Vec<Rule<T>>,
    /// Normalized path → its rules in the order they are tried.
    exact: HashMap<Box<str>, Vec<u32>>,
    prefixes: prefix::Tree,
    /// In the order written.
    regexes: Vec<(Regex, u32)>,
}

#[derive(Debug)]
struct Rule<T> {
    conditions: Conditions,
    payload: T,
}

/// The rule a request met: its index in the config and its payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Hit<'r, T> {
    pub index: usize,
    pub payload: &'r T,
}

// By hand: a derive would ask `T: Copy`, and a hit only borrows its payload.
impl<T> Clone for Hit<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Hit<'_, T> {}

impl<T> Rules<T> {
    /// The rule `request` meets, if any (then the route's default applies).
    pub fn find(&self, request: &Request<'_>) -> Option<Hit<'_, T>> {
        let mut first = |ids: &[u32]| ids.iter().copied().find(|&i| self.rule(i).conditions.hold(request));
        let path = request.path;
        let index =
            self.exact.get(path).and_then(|ids| first(ids)).or_else(|| self.prefixes.find(path, &mut first)).or_else(
                || {
                    self.regexes
                        .iter()
                        .find(|(re, i)| re.is_match(path.as_bytes()) && self.rule(*i).conditions.hold(request))
                        .map(|(_, i)| *i)
                },
            )?;
        Some(Hit { index: index as usize, payload: &self.rule(index).payload })
    }

    /// The rules in the order written.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.rules.iter().map(|r| &r.payload)
    }

    /// Every rule's index in the order a request would be offered them, with its match as
    /// text: exact paths, then prefixes from the longest, then regexes as written (`/routes`).
    pub fn precedence(&self) -> Vec<(usize, String)> {
        let mut exact: Vec<_> = self.exact.iter().collect();
        exact.sort();
        let mut out: Vec<(usize, String)> = Vec::with_capacity(self.rules.len());
        for (path, ids) in exact {
            out.extend(ids.iter().map(|&i| (i as usize, format!("exact {path}"))));
        }
        let mut prefixes = Vec::new();
        self.prefixes.each(&mut String::new(), &mut prefixes);
        prefixes.sort_by(|a, b| b.0.matches('/').count().cmp(&a.0.matches('/').count()).then(a.0.cmp(&b.0)));
        for (path, ids) in prefixes {
            out.extend(ids.iter().map(|&i| (i as usize, format!("prefix {path}"))));
        }
        out.extend(self.regexes.iter().map(|(re, i)| (*i as usize, format!("regex {}", re.as_str()))));
        out
    }

    /// How many rules (in every kind).
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn rule(&self, index: u32) -> &Rule<T> {
        &self.rules[index as usize]
    }
}

#[cfg(test)]
mod tests;
