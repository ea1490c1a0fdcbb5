//! Prefix rules as a tree of whole segments: a lookup walks the path's segments down from the
//! root, one hash lookup each, so its cost is the path's depth in the tree, whatever the
//! number of rules. A prefix matches whole segments only: `/api` (or `/api/`) is the node
//! `api`, which `/api`, `/api/` and `/api/x` reach and `/apix` does not.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub(super) struct Tree {
    root: Node,
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<Box<str>, Node>,
    /// The rules of the prefix ending here, in the order they are tried.
    rules: Vec<u32>,
}

/// A normalized path's segments; the empty ones (the root's, a trailing slash) are no segment.
pub(super) fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

impl Tree {
    /// The rule list of the node for `prefix` (created empty when new).
    pub(super) fn insert(&mut self, prefix: &str) -> &mut Vec<u32> {
        let mut node = &mut self.root;
        for segment in segments(prefix) {
            node = node.children.entry(segment.into()).or_default();
        }
        &mut node.rules
    }

    /// Every prefix that has rules, as `/a/b` (`/` for the root), with them.
    pub(super) fn each(&self, at: &mut String, out: &mut Vec<(String, Vec<u32>)>) {
        each_in(&self.root, at, out);
    }

    /// The first rule `accept` takes, trying the longest prefix of `path` that has rules first,
    /// then each shorter one.
    pub(super) fn find<R>(&self, path: &str, accept: &mut impl FnMut(&[u32]) -> Option<R>) -> Option<R> {
        find_in(&self.root, segments(path), accept)
    }
}

// The recursion is as deep as the tree (the config's longest prefix), not as the path: it
// stops at the first segment no rule names.
fn find_in<'p, R>(
    node: &Node,
    mut rest: impl Iterator<Item = &'p str>,
    accept: &mut impl FnMut(&[u32]) -> Option<R>,
) -> Option<R> {
    let deeper = rest.next().and_then(|s| node.children.get(s)).and_then(|child| find_in(child, rest, accept));
    deeper.or_else(|| if node.rules.is_empty() { None } else { accept(&node.rules) })
}

fn each_in(node: &Node, at: &mut String, out: &mut Vec<(String, Vec<u32>)>) {
    if !node.rules.is_empty() {
        out.push((if at.is_empty() { "/".into() } else { at.clone() }, node.rules.clone()));
    }
    for (segment, child) in &node.children {
        let len = at.len();
        at.push('/');
        at.push_str(segment);
        each_in(child, at, out);
        at.truncate(len);
    }
}
