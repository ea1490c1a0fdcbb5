//! The shape of the lab's source tree, checked.

/// No two files import each other, directly or round a loop (a module and its own
/// descendants aside): each concern sits in one file and imports run one way.
#[test]
fn files_do_not_import_each_other() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = edgewarm_test_support::layout::file_import_cycles(&src);
    assert!(cycles.is_empty(), "import loops between files:\n{}", cycles.join("\n"));
}
