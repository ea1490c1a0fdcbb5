//! The `edgewarm-lab` command: `lab` (the WAN lab), `load` (the load generator), `origin`
//! (the lab's HTTPS origin), `forward` (a plain forwarder, the peek's baseline) and
//! `cache-tests` (the HTTP cache test suite against edgewarm). Argument
//! parsing, logging and exit codes; the work is in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use edgewarm_lab::scenarios::opts::LabOpts;

/// Usage errors (bad scenario, bad options) exit with 64 (EX_USAGE), before anything is created.
const EXIT_USAGE: u8 = 64;
/// The origin could not bind its address: EX_UNAVAILABLE.
const EXIT_BIND: u8 = 69;

#[derive(Parser)]
#[command(name = "edgewarm-lab", version, about = "edgewarm's WAN lab, load generator and lab origin")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Emulate WAN round trips in network namespaces and measure TTFB per mode (needs root).
    Lab(Box<LabOpts>),
    /// Load generator: every request on a new TCP + TLS (or QUIC) connection.
    Load(edgewarm_lab::tools::load::LoadOpts),
    /// Headless Chromium loads a page, as a first and a returning visit, and reports its
    /// timings as JSON (the browser lab runs it in the client namespace).
    Browse(edgewarm_lab::tools::browse::BrowseOpts),
    /// The lab's HTTPS origin (HTTP/1.1 and HTTP/2), with the browser lab's pages.
    Origin(edgewarm_lab::tools::origin::OriginOpts),
    /// Run the HTTP cache test suite (http-tests' cache-tests) against edgewarm and compare
    /// with the published results of other caches.
    CacheTests(edgewarm_lab::tools::cache_tests::CacheTestsOpts),
    /// A plain TCP forwarder from edgewarm's own connect and relay code, without the peek:
    /// the baseline that prices edgewarm's peek (scripts/bench-peek.sh).
    Forward(ForwardOpts),
}

#[derive(clap::Args)]
struct ForwardOpts {
    /// Address to listen on.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Where every connection goes.
    #[arg(long)]
    origin: std::net::SocketAddr,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("edgewarm-lab: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Lab(opts) => lab(*opts).await,
            Command::Load(opts) => load(opts).await,
            Command::Browse(opts) => browse(opts).await,
            Command::Origin(opts) => origin(opts).await,
            Command::Forward(opts) => forward(opts).await,
            Command::CacheTests(opts) => cache_tests(opts).await,
        }
    })
}

async fn lab(opts: LabOpts) -> ExitCode {
    match edgewarm_lab::scenarios::for_opts(&opts) {
        Ok(entry) => finish(&opts, (entry.run)(&opts)).await,
        Err(e) => {
            eprintln!("edgewarm-lab lab: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Run a lab and print its report (Markdown, or `--json`); a report with failed parts is
/// printed and saved, and the exit code says it failed. Ctrl-C drops the lab future: its
/// guards kill the children and remove the namespaces.
async fn finish(opts: &LabOpts, lab: edgewarm_lab::scenarios::Run<'_>) -> ExitCode {
    tokio::select! {
        r = lab => match r {
            Ok(report) => {
                if opts.json {
                    println!("{}", report.json());
                } else {
                    println!("{}", report.markdown());
                    println!("saved in {}", report.run_dir().display());
                }
                let failed = report.failed();
                if failed > 0 {
                    eprintln!("edgewarm-lab lab: {failed} part(s) of the run failed (see the report)");
                    return ExitCode::FAILURE;
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("edgewarm-lab lab: {e}");
                if e.is_usage() { ExitCode::from(EXIT_USAGE) } else { ExitCode::FAILURE }
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("edgewarm-lab lab: interrupted, cleaning up");
            ExitCode::from(130)
        }
    }
}

/// Run the cache test suite and print its report (Markdown, or `--json`). Failing tests are
/// the report, not an error: only a broken run exits non-zero. Ctrl-C drops the run: its guards
/// kill the children and remove the scratch folder.
async fn cache_tests(opts: edgewarm_lab::tools::cache_tests::CacheTestsOpts) -> ExitCode {
    tokio::select! {
        r = edgewarm_lab::tools::cache_tests::run(&opts) => match r {
            Ok(report) => {
                if opts.json {
                    println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
                } else {
                    println!("{}", report.markdown());
                    println!("saved in {}", report.run_dir.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("edgewarm-lab cache-tests: {e}");
                if e.is_usage() { ExitCode::from(EXIT_USAGE) } else { ExitCode::FAILURE }
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("edgewarm-lab cache-tests: interrupted, cleaning up");
            ExitCode::from(130)
        }
    }
}

async fn load(opts: edgewarm_lab::tools::load::LoadOpts) -> ExitCode {
    match edgewarm_lab::tools::load::run(&opts).await {
        Ok(report) if opts.json => {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{}", report.render_text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("edgewarm-lab load: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

async fn browse(opts: edgewarm_lab::tools::browse::BrowseOpts) -> ExitCode {
    match edgewarm_lab::tools::browse::run(&opts).await {
        Ok(loads) => {
            println!("{}", serde_json::to_string(&loads).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("edgewarm-lab browse: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn origin(opts: edgewarm_lab::tools::origin::OriginOpts) -> ExitCode {
    let tls = match edgewarm_lab::tools::origin::tls_config(&opts) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("edgewarm-lab origin: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let listener = match bind("origin", opts.listen, 256) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let served = edgewarm_lab::tools::origin::serve(listener, tls, &opts, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("edgewarm-lab origin: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

async fn forward(opts: ForwardOpts) -> ExitCode {
    let listener = match bind("forward", opts.listen, 0) {
        Ok(l) => l,
        Err(code) => return code,
    };
    tokio::select! {
        () = edgewarm::relay::plain::plain_forward(listener, opts.origin) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    ExitCode::SUCCESS
}

/// A listener for `command` (with a Fast Open queue of `fastopen`, 0 for none), or its
/// one-line error and EX_UNAVAILABLE.
fn bind(command: &str, addr: std::net::SocketAddr, fastopen: u32) -> Result<tokio::net::TcpListener, ExitCode> {
    edgewarm::transport::sockopt::bind_listener(addr, fastopen).and_then(tokio::net::TcpListener::from_std).map_err(
        |e| {
            eprintln!("edgewarm-lab {command}: {addr}: {e}");
            ExitCode::from(EXIT_BIND)
        },
    )
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // chromiumoxide warns of every DevTools event it has no type for.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,chromiumoxide=error"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
