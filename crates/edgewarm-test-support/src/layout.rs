//! The file-level import graph of a crate's `src/`, for the layout tests: two files that import
//! each other (directly or round a longer loop) are one concern split in two, and harder to
//! read than one long file.
//!
//! An edge is a `crate::a::b` or `super::x` path in a file's code (test modules and comments
//! left out), resolved to the deepest module file that exists. A module and its own descendants
//! are left out of each other's edges: a parent naming its child's items (`mod send; use
//! send::Requests`) while the child uses its parent's types is how Rust modules are built, not
//! a loop between peers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
pub fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The paths a line names from `crate::` or `super::` (groups `{a, b::c}` taken apart), as
/// module paths relative to the root.
fn named(line: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (start, _) in line.match_indices("crate::").chain(line.match_indices("super::")) {
        if start > 0 && line[..start].ends_with("super::") {
            continue;
        }
        let mut rest = &line[start..];
        let mut base: Vec<String> = Vec::new();
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            base = here.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
        }
        let paths: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap_or_default().split(',').collect(),
            None => vec![rest],
        };
        for p in paths {
            let segs = p
                .trim()
                .split("::")
                .map(|s| s.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default());
            let mut full = base.clone();
            full.extend(segs.take_while(|s| !s.is_empty()).map(str::to_string));
            out.push(full);
        }
    }
    out
}

/// The loops among `src`'s files, each as `a.rs -> b.rs -> a.rs`; empty when imports run one way.
pub fn file_import_cycles(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(src, &mut all);
    let modules: BTreeMap<Vec<String>, String> = all
        .iter()
        .map(|p| (module_of(p.strip_prefix(src).unwrap()), p.strip_prefix(src).unwrap().display().to_string()))
        .collect();
    let mut graph: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for path in &all {
        let here = module_of(path.strip_prefix(src).unwrap());
        let here = modules.keys().find(|m| **m == here).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let deps = graph.entry(here).or_default();
        for line in code.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
            for mut target in named(line, here) {
                while !target.is_empty() && !modules.contains_key(&target) {
                    target.pop();
                }
                let Some((m, _)) = modules.get_key_value(&target) else { continue };
                let related = m.starts_with(here) || here.starts_with(m);
                if !related {
                    deps.insert(m);
                }
            }
        }
    }
    let mut cycles = BTreeSet::new();
    for start in graph.keys() {
        // Depth-first from each file: a path back to it is a loop (reported once, from its
        // smallest member).
        let mut stack = vec![(*start, vec![*start])];
        let mut seen = BTreeSet::new();
        while let Some((n, path)) = stack.pop() {
            for &m in graph.get(n).into_iter().flatten() {
                if m == *start && path.iter().all(|p| *p >= *start) {
                    let names: Vec<&str> = path.iter().chain([&m]).map(|p| modules[*p].as_str()).collect();
                    cycles.insert(names.join(" -> "));
                } else if m > *start && seen.insert(m) {
                    let mut next = path.clone();
                    next.push(m);
                    stack.push((m, next));
                }
            }
        }
    }
    cycles.into_iter().collect()
}
