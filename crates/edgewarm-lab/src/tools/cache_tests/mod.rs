//! `edgewarm-lab cache-tests`: the HTTP cache test suite of the http-tests project
//! ([`crate::tools::cache_tests::suite`]) run against edgewarm, and compared with the published results of
//! other caches ([`crate::tools::cache_tests::report`]).
//!
//! The suite is copied into a scratch folder (removed afterwards, also on an error or Ctrl-C)
//! and its npm dependencies installed (kept under `--out` between runs). Its origin server
//! listens on 127.0.0.1; edgewarm ([`crate::tools::cache_tests::edge`]) listens on 127.0.0.1 too, terminates
//! TLS with a certificate for `localhost` from a CA of the run's own, and carries every request
//! to that origin over cleartext HTTP/1.1, with its cache on (the default) or off
//! (`--no-cache`). The suite's client then runs every test at `https://localhost:PORT`,
//! trusting the run's CA (`NODE_EXTRA_CA_CERTS`). Everything is bounded by `--timeout`: past
//! it, the children are killed and the run fails.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) mod edge;
pub mod report;
pub mod suite;

use crate::error::LabError;
use crate::harness::hosts::{listening, log_tail, proxy_binary, spawn, Wait};
use edge::{EdgePlan, NAME};
use report::{CacheReport, RunResults};
use suite::Results;

#[derive(Debug, Clone, clap::Args)]
pub struct CacheTestsOpts {
    /// The suite's folder [default: $CACHE_TESTS_DIR, else ../shared/cache-tests beside the
    /// repository edgewarm-lab was built from].
    #[arg(long, value_name = "DIR")]
    pub suite: Option<PathBuf>,
    /// The proxy binary; default: `edgewarm` next to this program, else on PATH.
    #[arg(long, value_name = "PATH")]
    pub edgewarm: Option<PathBuf>,
    /// Run edgewarm as a plain reverse proxy: its route without `cache` (by default the route
    /// has `cache: {}`, the edge cache on with its defaults).
    #[arg(long)]
    pub no_cache: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where run folders go; the suite's npm dependencies are kept here between runs.
    #[arg(long, default_value = "lab-runs")]
    pub out: PathBuf,
    /// The whole run (install, start-up, the suite) must be over within this.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub timeout: Duration,
}

/// Loaded into the suite's origin server before its own code (`--require`): a listener given
/// only a port listens on 127.0.0.1 instead of every interface.
const LOOPBACK_ONLY: &str = "\
// Written by edgewarm-lab cache-tests: the suite's origin listens on loopback only.
const net = require('net')
const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (port, ...rest) {
  if (typeof port === 'number' || (typeof port === 'string' && /^[0-9]+$/.test(port))) {
    return listen.call(this, Number(port), '127.0.0.1', ...rest)
  }
  return listen.call(this, port, ...rest)
}
";

/// Run the suite against edgewarm and tally it. Fails when the harness does (the suite, node,
/// npm or edgewarm missing, a child that does not start, a client that runs no test), not when
/// tests fail.
pub async fn run(opts: &CacheTestsOpts) -> Result<CacheReport, LabError> {
    let suite = suite::locate(opts.suite.as_deref());
    if !suite.join("package.json").is_file() || !suite.join("tests").is_dir() {
        return Err(LabError::NoSuite(suite.display().to_string()));
    }
    let proxy = proxy_binary(opts.edgewarm.as_deref())?;
    match tokio::time::timeout(opts.timeout, run_suite(opts, &suite, &proxy)).await {
        Ok(r) => r,
        Err(_) => Err(LabError::Suite(format!(
            "not over within {} (--timeout): stopped",
            humantime::format_duration(opts.timeout)
        ))),
    }
}

async fn run_suite(opts: &CacheTestsOpts, source: &Path, proxy: &str) -> Result<CacheReport, LabError> {
    let cache = !opts.no_cache;
    let dir = crate::harness::files::empty_run_dir(&opts.out, "cache-tests")?;
    crate::harness::files::write_pki(&dir, &[("edge", &[NAME])])?;
    // Declared first, so it is removed last: after the children below are killed.
    let scratch = tempfile::Builder::new().prefix("edgewarm-cache-tests-").tempdir()?;
    let suite = scratch.path().join("cache-tests");
    suite::copy_tree(source, &suite)?;
    tracing::info!("installing the suite's npm dependencies (kept under {})", opts.out.display());
    suite::install(&suite, &opts.out.join("cache-tests-node"), &dir.join("npm-install.log")).await?;
    let meta = suite::read_meta(&suite).await?;

    let [origin, listen, admin] = edge::free_ports()?.map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    let preload = scratch.path().join("loopback-only.cjs");
    std::fs::write(&preload, LOOPBACK_ONLY)?;
    let mut server = suite::node_script(&suite, "server")?;
    server
        .env("NODE_OPTIONS", format!("--require {:?}", preload.display().to_string()))
        .env("npm_config_port", origin.port().to_string())
        .env("npm_config_pidfile", scratch.path().join("server.pid"));
    let origin_log = dir.join("origin.log");
    let mut origin_server = spawn(server, &origin_log)?;
    Wait::new("the suite's origin server", &origin_log).child(&mut origin_server).until(|| listening(origin)).await?;

    let plan = EdgePlan {
        dir: dir.clone(),
        upgrade_socket: scratch.path().join("upgrade.sock"),
        listen,
        admin,
        origin,
        cache,
    };
    let _edge = edge::start(proxy, &plan).await.map_err(|e| hint_no_cache(e, cache, &dir))?;

    let base = format!("https://{NAME}:{}", plan.listen.port());
    tracing::info!("running the suite against edgewarm at {base} (about a minute)");
    let started = Instant::now();
    let own = client(&suite, &base, &dir).await?;
    let client_seconds = started.elapsed().as_secs_f64();
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&own).unwrap_or_default())?;

    let peers = suite::read_peer_results(&suite, &meta.peers);
    let report = CacheReport::new(RunResults {
        cache,
        tests: &meta.tests,
        own: &own,
        peers: &peers,
        client_seconds,
        run_dir: dir.clone(),
    });
    crate::harness::report::save(&report)?;
    if report.tests_run == 0 {
        return Err(LabError::Suite(format!("the client ran no test: see {}", dir.join("client.log").display())));
    }
    Ok(report)
}

/// The suite's client against `base`, trusting the run's CA: its results (test id → `true` or
/// `[kind, message]`). Its error output goes to `client.log` in `dir`.
async fn client(suite: &Path, base: &str, dir: &Path) -> Result<Results, LabError> {
    let mut cli = suite::node_script(suite, "cli")?;
    cli.env("npm_config_base", base).env("npm_config_id", "").env("NODE_EXTRA_CA_CERTS", dir.join("ca.pem"));
    let log = dir.join("client.log");
    let out =
        tokio::process::Command::from(cli).stderr(std::fs::File::create(&log)?).kill_on_drop(true).output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(LabError::Suite(format!("the client failed ({}): {}", out.status, log_tail(&log))));
    }
    // The results are one JSON object; anything the client printed before it is skipped.
    let json = stdout.find('{').map_or("", |i| &stdout[i..]);
    serde_json::from_str(json)
        .map_err(|e| LabError::Suite(format!("the client's results: {e}; stderr: {}", log_tail(&log))))
}

/// An edge that refused `routes[0].cache` predates the cache: say how to run without it.
fn hint_no_cache(e: LabError, cache: bool, dir: &Path) -> LabError {
    let log = std::fs::read_to_string(dir.join("edge.log")).unwrap_or_default();
    match e {
        LabError::NotReady { what, detail } if cache && log.contains("routes[0].cache") => LabError::NotReady {
            what,
            detail: format!("{detail} (this edgewarm has no routes[].cache yet: --no-cache runs without it)"),
        },
        e => e,
    }
}
