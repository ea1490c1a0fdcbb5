//! The HTTP cache test suite (http-tests' cache-tests, a Node.js project) made ready to run:
//! found ([`locate`]), copied into a scratch folder ([`copy_tree`]), its npm dependencies
//! installed once per `package.json` and kept ([`install`]), what it runs read from its own test
//! files ([`read_meta`]) with the published results of other caches ([`read_peer_results`]), and
//! its two programs, the origin server and the client, as commands ([`node_script`]).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::LabError;

/// The environment variable naming the suite's folder when `--suite` is not given.
pub const SUITE_ENV: &str = "CACHE_TESTS_DIR";

/// One test of the suite, as its test files declare it.
#[derive(Debug, Clone, Deserialize)]
pub struct TestInfo {
    pub id: String,
    /// `required`, `optimal` or `check` (a test that declares none is required).
    pub kind: String,
    /// Run only against a browser's cache: the client skips it for a proxy.
    #[serde(default)]
    pub browser_only: bool,
}

/// A cache whose results the suite publishes (`results/index.mjs`).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct PeerInfo {
    pub file: String,
    pub name: String,
    /// `browser`, `rev-proxy` or `cdn`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub version: String,
}

/// What the suite runs and whom it compares with.
#[derive(Debug, Deserialize)]
pub struct Meta {
    pub tests: Vec<TestInfo>,
    pub peers: Vec<PeerInfo>,
}

/// A run's results: test id → `true`, or `[kind of failure, message]`.
pub type Results = BTreeMap<String, serde_json::Value>;

/// The suite's folder: `given`, else `$CACHE_TESTS_DIR`, else `../shared/cache-tests` beside the
/// repository this program was built from.
pub fn locate(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os(SUITE_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/cache-tests")
}

/// Copy the suite from `from` into `to` (created), leaving out `node_modules` and `.git`. The
/// copies are writable by their owner (the shared original may be read-only, and npm writes
/// beside `package.json`).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "node_modules" || name == ".git" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
            let mode = std::fs::metadata(&dst)?.permissions().mode();
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode | 0o200))?;
        }
    }
    Ok(())
}

/// Give the suite at `suite` its production dependencies (`npm i --omit=dev`). They are
/// installed once per `package.json` (and `package-lock.json`, and Node version) under `cache`
/// and linked in: a later run with the same files installs nothing. An install goes to a folder
/// of its own and is renamed into place when complete, so a failed or concurrent one never
/// leaves a half-filled cache. npm's output goes to `log`.
pub(crate) async fn install(suite: &Path, cache: &Path, log: &Path) -> Result<(), LabError> {
    let version =
        tokio::process::Command::new("node").arg("--version").output().await.map_err(|e| LabError::Missing {
            what: "node",
            path: "PATH".into(),
            why: if e.kind() == std::io::ErrorKind::NotFound { "not on PATH" } else { "cannot run" },
        })?;
    let mut hash = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    hash.update(&version.stdout);
    let manifests = ["package.json", "package-lock.json"];
    for file in manifests {
        hash.update(file.as_bytes());
        hash.update(&std::fs::read(suite.join(file)).unwrap_or_default());
    }
    let key: String = hash.finish().as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    let ready = std::path::absolute(cache.join(format!("node-{key}")))?;
    if !ready.join("node_modules").is_dir() {
        let guard = RemovedOnDrop(cache.join(format!("node-{key}.partial-{}", std::process::id())));
        let partial = &guard.0;
        let _ = std::fs::remove_dir_all(partial);
        std::fs::create_dir_all(partial)?;
        for file in manifests {
            if suite.join(file).is_file() {
                std::fs::copy(suite.join(file), partial.join(file))?;
            }
        }
        let status = tokio::process::Command::new("npm")
            .args(["install", "--omit=dev", "--no-audit", "--no-fund"])
            .current_dir(partial)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(log)?)
            .stderr(std::fs::File::create(log.with_extension("err.log"))?)
            .kill_on_drop(true)
            .status()
            .await
            .map_err(|_| LabError::Missing { what: "npm", path: "PATH".into(), why: "cannot run" })?;
        if !status.success() {
            let tail = crate::harness::hosts::log_tail(&log.with_extension("err.log"));
            return Err(LabError::Suite(format!("npm install failed ({status}): {tail}")));
        }
        // Another run may have finished the same install first: then its copy is used (and
        // this one is removed with the guard).
        let _ = std::fs::rename(partial, &ready);
    }
    std::os::unix::fs::symlink(ready.join("node_modules"), suite.join("node_modules"))?;
    Ok(())
}

/// A folder removed when this drops: an install cut short (an error, Ctrl-C) leaves nothing.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Prints the suite's tests (id, kind, whether browser-only) and the caches whose results it
/// publishes, as JSON, from the suite's own modules (some kinds are computed there).
const META_SCRIPT: &str = "\
const suites = (await import('./tests/index.mjs')).default
const peers = (await import('./results/index.mjs')).default
const tests = []
for (const suite of suites) {
  for (const t of suite.tests) {
    tests.push({ id: t.id, kind: t.kind || 'required', browser_only: t.browser_only === true })
  }
}
process.stdout.write(JSON.stringify({ tests, peers }))
";

/// The suite's tests and published peers ([`META_SCRIPT`], run in `suite`).
pub(crate) async fn read_meta(suite: &Path) -> Result<Meta, LabError> {
    let out = tokio::process::Command::new("node")
        .args(["--input-type=module", "-e", META_SCRIPT])
        .current_dir(suite)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(LabError::Suite(format!("cannot read the suite's tests: {}", err.trim())));
    }
    let meta: Meta =
        serde_json::from_slice(&out.stdout).map_err(|e| LabError::Suite(format!("the suite's test list: {e}")))?;
    if meta.tests.is_empty() {
        return Err(LabError::Suite("the suite declares no tests".into()));
    }
    Ok(meta)
}

/// The published results of every peer that is not a browser (browsers run another set of
/// tests), each with its results; a peer whose file is missing or unreadable is left out.
pub(crate) fn read_peer_results(suite: &Path, peers: &[PeerInfo]) -> Vec<(PeerInfo, Results)> {
    peers
        .iter()
        .filter(|p| p.kind != "browser")
        .filter_map(|p| {
            let text = std::fs::read(suite.join("results").join(&p.file)).ok()?;
            Some((p.clone(), serde_json::from_slice(&text).ok()?))
        })
        .collect()
}

/// The suite's npm script `name` (`server`, `cli`) as the command npm would run, without npm in
/// between (so that killing it kills the program itself): `node` and its arguments from
/// `package.json`, with the `npm_package_config_*` variables npm sets from its `config`. The
/// caller adds `npm_config_*` ones, as `npm run NAME --key=value` would.
pub(crate) fn node_script(suite: &Path, name: &str) -> Result<std::process::Command, LabError> {
    let text = std::fs::read(suite.join("package.json"))?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| LabError::Suite(format!("package.json: {e}")))?;
    let script = manifest["scripts"][name]
        .as_str()
        .ok_or_else(|| LabError::Suite(format!("package.json has no script {name:?}")))?;
    let mut words = script.split_whitespace();
    if words.next() != Some("node") {
        return Err(LabError::Suite(format!("script {name:?} is not a plain `node …` command: {script}")));
    }
    let mut cmd = std::process::Command::new("node");
    cmd.args(words).current_dir(suite).stdin(std::process::Stdio::null());
    // Nothing of an npm that may have started this program leaks into the suite's settings.
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("npm_") {
            cmd.env_remove(var);
        }
    }
    if let Some(config) = manifest["config"].as_object() {
        for (key, value) in config {
            let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            cmd.env(format!("npm_package_config_{key}"), value);
        }
    }
    Ok(cmd)
}
