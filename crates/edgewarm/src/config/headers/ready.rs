//! A header policy ready to apply: names and values parsed at load, levels merged into one
//! list of edits per side, so that a request or a response costs one pass over the names the
//! policy writes (none, for a policy that writes none).
//!
//! Levels merge as if applied in turn from the outside in (listener, then route, then rule):
//! a later `set` or `remove` of a name replaces what the earlier levels did with it, a later
//! `add` appends to it, and a later `default` fills it only where nothing before it (the
//! response, or an earlier level) gave it. Nothing an outer level wrote is lost unless an
//! inner one says so for that name: the trap of nginx's `add_header`, where a `location` with
//! one of its own drops all of its parent's (nginx#487), cannot happen.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

/// Both sides of a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderPolicy {
    /// On the request sent to the origin, after the edge's own forwarding headers.
    pub request: Edits,
    /// On every response the edge sends, whoever answered.
    pub response: Edits,
}

impl HeaderPolicy {
    /// This policy with `inner` (a more specific level's) applied after it.
    pub fn then(&self, inner: &Self) -> Self {
        Self { request: self.request.then(&inner.request), response: self.response.then(&inner.response) }
    }

    pub fn is_empty(&self) -> bool {
        self.request.is_empty() && self.response.is_empty()
    }

    /// [`Self::then`] for shared policies: either one itself where the other writes nothing
    /// (the common case: a policy on one level only), so a connection's merge copies nothing.
    pub fn merged(outer: &Arc<Self>, inner: &Arc<Self>) -> Arc<Self> {
        match (outer.is_empty(), inner.is_empty()) {
            (true, _) => inner.clone(),
            (_, true) => outer.clone(),
            _ => Arc::new(outer.then(inner)),
        }
    }
}

/// What one side does, name by name, in the order the policy was written (set, default,
/// remove, add within a level; outer levels' names first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits(Vec<(HeaderName, Edit)>);

/// What becomes of one name: its base, then lines appended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edit {
    base: Base,
    add: Vec<HeaderValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Base {
    /// Whatever the message carries stays.
    Keep,
    /// Exactly these lines, whatever the message carried.
    Set(Vec<HeaderValue>),
    /// None of the message's lines.
    Remove,
    /// These lines where the message has none.
    Default(Vec<HeaderValue>),
}

impl Edits {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn entry(&mut self, name: HeaderName) -> &mut Edit {
        let at = match self.0.iter().position(|(n, _)| *n == name) {
            Some(at) => at,
            None => {
                self.0.push((name, Edit { base: Base::Keep, add: Vec::new() }));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    pub(super) fn set(&mut self, name: HeaderName, values: Vec<HeaderValue>) {
        self.entry(name).base = Base::Set(values);
    }

    pub(super) fn default_to(&mut self, name: HeaderName, values: Vec<HeaderValue>) {
        self.entry(name).base = Base::Default(values);
    }

    pub(super) fn remove(&mut self, name: HeaderName) {
        self.entry(name).base = Base::Remove;
    }

    pub(super) fn add(&mut self, name: HeaderName, values: Vec<HeaderValue>) {
        self.entry(name).add.extend(values);
    }

    /// These edits with `inner`'s applied after them, as one list: the same result on any
    /// message as applying the two in turn.
    pub fn then(&self, inner: &Self) -> Self {
        if inner.is_empty() {
            return self.clone();
        }
        let mut merged = self.clone();
        for (name, later) in &inner.0 {
            let edit = merged.entry(name.clone());
            match &later.base {
                Base::Keep => edit.add.extend(later.add.iter().cloned()),
                // Set and remove decide the name afresh: what came before is gone.
                Base::Set(_) | Base::Remove => *edit = later.clone(),
                Base::Default(values) => {
                    // Whether the name is there when the later default looks depends on the
                    // message only where the earlier level left it to the message.
                    // (A set or default has at least one value: compiling refuses none.)
                    let there = !edit.add.is_empty() || matches!(edit.base, Base::Set(_) | Base::Default(_));
                    match (&edit.base, there) {
                        (_, true) => edit.add.extend(later.add.iter().cloned()),
                        (Base::Remove, false) => {
                            *edit = Edit { base: Base::Set(values.clone()), add: later.add.clone() };
                        }
                        (_, false) => *edit = later.clone(),
                    }
                }
            }
        }
        merged
    }

    /// Apply to a message's fields.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, edit) in &self.0 {
            match &edit.base {
                Base::Keep => {}
                Base::Remove => {
                    headers.remove(name);
                }
                Base::Set(values) => {
                    headers.remove(name);
                    append(headers, name, values);
                }
                Base::Default(values) => {
                    if !headers.contains_key(name) {
                        append(headers, name, values);
                    }
                }
            }
            append(headers, name, &edit.add);
        }
    }
}

fn append(headers: &mut HeaderMap, name: &HeaderName, values: &[HeaderValue]) {
    for v in values {
        headers.append(name.clone(), v.clone());
    }
}
