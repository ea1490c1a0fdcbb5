//! The `edgewarm` command: argument parsing, logging set-up and signals. Everything else is
//! in the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use edgewarm::config::Config;
use edgewarm::route::RouteTable;
use edgewarm::server::{Bound, Server};
use edgewarm::tls::client::Resumption;
use edgewarm::upgrade::steps::Upgrades;
use edgewarm::upgrade::successor;
use tokio::signal::unix::{signal, SignalKind};

/// mimalloc instead of glibc's malloc: the HTTP path allocates a few dozen small blocks per
/// request across threads, where glibc's malloc showed up in profiles (docs/benchmarks-history.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Config errors exit with 64 (EX_USAGE) before any port is bound, so a supervisor can tell a
/// bad file from a crash.
const EXIT_CONFIG: u8 = 64;
/// A listener could not be bound (address in use, no permission): EX_UNAVAILABLE.
const EXIT_BIND: u8 = 69;

#[derive(Parser)]
#[command(
    name = "edgewarm",
    version,
    about = "Edge TLS/HTTP proxy: tunnels, standing origin connections, a cache, HTTP/3"
)]
struct Cli {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Run {
        #[arg(long, short)]
        config: PathBuf,
        /// Take over from the edgewarm running with this configuration: receive its listening
        /// sockets over `upgrade.socket`, warm the origin connections, then serve while the
        /// old process drains and exits. Fails (and the old one serves on) if nothing runs.
        #[arg(long)]
        upgrade: bool,
    },
    /// Validate a config file and exit (0 good, 64 bad).
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Write the man pages into DIR, or print a shell's completions (for packaging).
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: Generate,
    },
    /// Moved: the lab and load generator are the `edgewarm-lab` binary.
    #[command(hide = true, disable_help_flag = true)]
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    #[command(hide = true, disable_help_flag = true)]
    Load {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum Generate {
    /// edgewarm.1, edgewarm-run.1, edgewarm-check.1.
    Man {
        dir: PathBuf,
    },
    Completions {
        shell: clap_complete::Shell,
    },
}

fn generate(what: Generate) -> ExitCode {
    use clap::CommandFactory;
    match what {
        Generate::Man { dir } => match clap_mangen::generate_to(Cli::command(), &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("edgewarm: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        },
        Generate::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "edgewarm", &mut script);
            match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        // The route table loads every certificate and key the routes name: `check` catches a
        // missing or mismatched file, not just YAML mistakes.
        Command::Check { config } => {
            match Config::load(&config)
                .and_then(|c| RouteTable::new(&c, &Resumption::default(), &edgewarm::acme::Acme::default()).map(|_| c))
            {
                Ok(c) => {
                    println!("{}: ok ({} listeners, {} routes)", config.display(), c.listeners.len(), c.routes.len());
                    ExitCode::SUCCESS
                }
                Err(e) => config_error(&config, &e),
            }
        }
        Command::Generate { what } => generate(what),
        // The proxy binary links none of the lab; say where it went instead of "unknown command".
        Command::Lab { .. } | Command::Load { .. } => {
            eprintln!("edgewarm: the lab and the load generator are `edgewarm-lab lab` and `edgewarm-lab load` (scripts/lab.sh runs the lab)");
            ExitCode::from(EXIT_CONFIG)
        }
        Command::Run { config: path, upgrade } => {
            let config = match Config::load(&path) {
                Ok(c) => c,
                Err(e) => return config_error(&path, &e),
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("edgewarm: cannot start runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(path.clone(), config, upgrade)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(RunError::Config(e)) => config_error(&path, &e),
                Err(RunError::Other(e)) => {
                    eprintln!("edgewarm: {e:#}");
                    ExitCode::from(EXIT_BIND)
                }
            }
        }
    }
}

fn config_error(path: &Path, e: &edgewarm::config::ConfigError) -> ExitCode {
    eprintln!("edgewarm: {}: {e}", path.display());
    ExitCode::from(EXIT_CONFIG)
}

/// `run` fails either on the configuration (exit 64, nothing bound) or on binding (exit 69).
enum RunError {
    Config(edgewarm::config::ConfigError),
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for RunError {
    fn from(e: E) -> Self {
        Self::Other(e.into())
    }
}

async fn run(path: PathBuf, config: Config, upgrade: bool) -> Result<(), RunError> {
    // Certificates and keys are loaded here, still before any port is bound. The pools start
    // warming now: during an upgrade, while the sockets are handed over.
    let server = Server::new(&config).map_err(RunError::Config)?;
    let (bound, takeover) = if upgrade {
        let (takeover, handed) = edgewarm::upgrade::takeover::connect(&config.upgrade.socket)
            .await
            .map_err(|e| anyhow::anyhow!("upgrade: {e}; a running process, if any, is untouched"))?;
        // A file's keys (`tls.ticket_keys`) are read by both processes; else the old one's.
        if let Err(e) = server.adopt_ticket_keys(&handed.ticket_keys) {
            tracing::warn!(error = %e, "upgrade: the old process's ticket keys are unusable; its clients do a full handshake");
        }
        if let Some(keys) = &handed.quic {
            server.adopt_quic_keys(keys)?;
        }
        (Bound::adopt(&config, handed.sockets)?, Some((takeover, handed.wait)))
    } else {
        (Bound::bind(&config)?, None)
    };
    if config.listeners.iter().any(|l| l.tcp_fastopen > 0)
        && !matches!(edgewarm::transport::sockopt::fastopen_sysctl(), Some(v) if v & 2 != 0)
    {
        tracing::warn!("net.ipv4.tcp_fastopen lacks the server bit (2): listeners will not accept data in SYNs");
    }
    let next_upgrade = bound.dup_sockets()?;
    // Before the warm-up: a stop signal now stops this process, never the old one.
    tokio::spawn(signals(path.clone(), server.clone()));
    let takeover = match takeover {
        Some((takeover, wait)) => {
            successor::warm(&*server, wait, config.upgrade.warm_timeout).await;
            Some(takeover)
        }
        None => None,
    };
    let admin_addr = bound.admin.local_addr()?;
    tracing::info!(admin = %admin_addr, version = env!("CARGO_PKG_VERSION"), "edgewarm starting");
    let admin = tokio::spawn(server.admin(bound.admin));
    let upgrades = Upgrades::start(server.clone(), takeover, config.upgrade.clone(), next_upgrade);
    server.run(bound.listeners).await;
    server.stop_admin();
    let _ = admin.await;
    let outcome = upgrades.end(server.quic_relaying(), config.timeouts.shutdown_grace).await;
    tracing::info!("edgewarm stopped");
    outcome.map_err(|e| RunError::Other(anyhow::anyhow!("upgrade: {e}; the running process serves on")))
}

/// SIGUSR2 (`kill -USR2` to the unit's main PID): start the binary now at this
/// process's path, as `run --upgrade` with the same configuration. It runs in this service's
/// cgroup, so systemd can follow it as the main process; after a package upgrade the path holds
/// the new binary.
fn spawn_upgrade(config: &Path) {
    let exe = match std::env::current_exe() {
        // Replaced on disk since this process started: the path is what is wanted.
        Ok(p) => PathBuf::from(p.to_string_lossy().trim_end_matches(" (deleted)")),
        Err(e) => {
            tracing::error!(error = %e, "upgrade: cannot find this binary's path");
            return;
        }
    };
    match std::process::Command::new(&exe).args(["run", "--upgrade", "--config"]).arg(config).spawn() {
        Ok(mut child) => {
            tracing::info!(binary = %exe.display(), pid = child.id(), "upgrade: started the new process");
            // Reap it if it fails while this process still runs; after a hand-over this one exits
            // first and the new process is the service's main process.
            std::thread::spawn(move || match child.wait() {
                Ok(status) if !status.success() => tracing::error!(%status, "upgrade: the new process failed"),
                _ => {}
            });
        }
        Err(e) => tracing::error!(binary = %exe.display(), error = %e, "upgrade: cannot start the new process"),
    }
}

/// SIGHUP reloads; the first SIGTERM/SIGINT drains, a second one cuts open tunnels at once.
async fn signals(path: PathBuf, server: Arc<Server>) {
    let (Ok(mut hup), Ok(mut term), Ok(mut int), Ok(mut usr2)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = hup.recv() => match Config::load(&path) {
                Ok(config) => match server.reload(&config) {
                    Ok(()) => tracing::info!(config = %path.display(), "configuration reloaded"),
                    Err(e) => tracing::error!(config = %path.display(), error = %e, "reload refused, keeping the running configuration"),
                },
                Err(e) => {
                    server.metrics().config_reloads.get_or_create(&edgewarm::metrics::ResultLabel { result: "error" }).inc();
                    tracing::error!(config = %path.display(), error = %e, "reload failed, keeping the running configuration");
                }
            },
            _ = usr2.recv() => spawn_upgrade(&path),
            _ = term.recv() => stopping = stop(&server, stopping),
            _ = int.recv() => stopping = stop(&server, stopping),
        }
    }
}

fn stop(server: &Server, already: bool) -> bool {
    if already {
        tracing::info!("second stop signal: closing open connections now");
        server.cut_now();
    } else {
        tracing::info!("stop signal: no longer accepting, draining open connections");
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        server.shutdown();
    }
    true
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
