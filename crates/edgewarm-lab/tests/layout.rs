//! The shape of the lab's source tree, checked: imports run one way, no scenario imports
//! another, and the top of `src/` stays small.

/// No two files import each other, directly or round a loop (a module and its own
/// descendants aside): each concern sits in one file and imports run one way.
#[test]
fn files_do_not_import_each_other() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = edgewarm_test_support::layout::file_import_cycles(&src);
    assert!(cycles.is_empty(), "import loops between files:\n{}", cycles.join("\n"));
}

/// The top of `src/` is the binary, the map and the error type beside the folders (issue 58:
/// at most 6 files there); a new concern goes in a folder.
#[test]
fn the_top_of_src_holds_at_most_six_files() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() <= 6, "{} files at the top of src/: {files:?}", files.len());
}

/// No scenario imports another: a file under `scenarios/X/` names no `scenarios::Y` (nor
/// reaches it through `super::`), so what two scenarios share lives in `harness/`, `wan/`,
/// `tools/` or the shared files of `scenarios/`. A scenario is a folder of `scenarios/` with a
/// `mod.rs`.
#[test]
fn no_scenario_imports_another() {
    let scenarios = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scenarios");
    let names: Vec<String> = std::fs::read_dir(&scenarios)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("mod.rs").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.len() >= 6, "scenario folders: {names:?}");
    let mut found = Vec::new();
    for x in &names {
        let dir = scenarios.join(x);
        let mut files = Vec::new();
        edgewarm_test_support::layout::files(&dir, &mut files);
        for file in files {
            let rel = file.strip_prefix(&dir).unwrap();
            // How far below the scenario's own module this file's module is: `super::` that
            // many times and once more reaches `scenarios`.
            let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")) {
                for y in named_scenarios(line, depth) {
                    if y != *x && names.contains(&y) {
                        found.push(format!("scenarios/{x}/{}:{}: imports scenario {y}", rel.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "a scenario imports another:\n{}", found.join("\n"));
}

/// The modules of `scenarios` a line names: after `scenarios::` (groups `{a, b::c}` taken
/// apart), or after `depth + 1` `super::`s.
fn named_scenarios(line: &str, depth: usize) -> Vec<String> {
    let ident = |s: &str| s.trim().split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("").to_string();
    let mut out = Vec::new();
    for (at, _) in line.match_indices("scenarios::") {
        let rest = &line[at + "scenarios::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => out.extend(group.split('}').next().unwrap_or("").split(',').map(ident)),
            None => out.push(ident(rest)),
        }
    }
    let up = "super::".repeat(depth + 1);
    for (at, _) in line.match_indices(&up) {
        let rest = &line[at + up.len()..];
        if !rest.starts_with("super::") && (at == 0 || !line[..at].ends_with("super::")) {
            match rest.strip_prefix('{') {
                Some(group) => out.extend(group.split('}').next().unwrap_or("").split(',').map(ident)),
                None => out.push(ident(rest)),
            }
        }
    }
    out
}
