//! The shape of the source tree, checked: the top-level modules of `src/` import each other
//! without cycles (so each can be read, tested and replaced on its own), and `lib.rs`'s module
//! map names every one of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use edgewarm_test_support::layout::files;

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Top-level module → the other top-level modules its code names as `crate::x`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = src();
    let mut all = Vec::new();
    files(&root, &mut all);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in all {
        let rel = path.strip_prefix(&root).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let deps = graph.entry(module.clone()).or_default();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    // `use crate::{a, b::c}`: the first segment of each path in the group.
                    let group = group.split('}').next().unwrap_or_default();
                    group.split(',').map(|p| p.trim().split("::").next().unwrap_or_default()).collect()
                } else {
                    vec![rest.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default()]
                };
                for name in names.into_iter().filter(|n| !n.is_empty() && *n != module) {
                    deps.insert(name.to_string());
                }
            }
        }
    }
    graph
}

#[test]
fn top_level_modules_have_no_import_cycles() {
    let graph = imports();
    assert!(graph.len() > 10, "found only {graph:?}");
    // Depth-first search with colours; a grey node met again closes a cycle.
    fn visit<'a>(
        n: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) {
        if done.contains(n) {
            return;
        }
        if let Some(i) = path.iter().position(|p| *p == n) {
            panic!("import cycle: {}", [&path[i..], &[n]].concat().join(" -> "));
        }
        path.push(n);
        for m in g.get(n).into_iter().flatten() {
            visit(m, g, done, path);
        }
        path.pop();
        done.insert(n);
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, &graph, &mut done, &mut Vec::new());
    }
}

#[test]
fn the_module_map_names_every_module() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let map: String = lib.lines().filter(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    for module in imports().keys() {
        assert!(lib.contains(&format!("mod {module};")), "lib.rs does not declare {module}");
        assert!(map.contains(&format!("[`{module}`]")), "lib.rs's module map does not mention {module}");
    }
}

/// The HTTP core's two sides stay apart: a client driver (`http/client/`) names no origin kind
/// (the `origin` module, the origin seam included), and no origin kind names a client driver, so a
/// new client protocol or a new kind of origin is one more file on its side.
#[test]
fn client_drivers_and_origin_kinds_do_not_import_each_other() {
    let root = src();
    let mut drivers = Vec::new();
    files(&root.join("http/client"), &mut drivers);
    assert!(drivers.len() >= 2, "found only {drivers:?}");
    let code = |path: &Path| -> String {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")).collect::<Vec<_>>().join("\n")
    };
    for path in &drivers {
        let text = code(path);
        for origin in ["crate::origin", "http::origin", "super::origin"] {
            assert!(!text.contains(origin), "{} imports an origin kind ({origin})", path.display());
        }
    }
    let mut origins = Vec::new();
    files(&root.join("origin"), &mut origins);
    for path in &origins {
        let text = code(path);
        assert!(
            !text.contains("http::client") && !text.contains("super::client"),
            "{} imports a client driver",
            path.display()
        );
    }
}

/// No two files import each other, directly or round a loop (a module and its own
/// descendants aside): each concern sits in one file and imports run one way.
#[test]
fn files_do_not_import_each_other() {
    let cycles = edgewarm_test_support::layout::file_import_cycles(&src());
    assert!(cycles.is_empty(), "import loops between files:\n{}", cycles.join("\n"));
}
