//! `edgewarm-lab lab`'s options: the ones every scenario reads, and each scenario's own,
//! flattened in (the tiers' and the fleet's).

use std::path::PathBuf;
use std::time::Duration;

use crate::wan::impair::{parse_burst, parse_jitter, parse_loss};

#[derive(Debug, Clone, clap::Args)]
pub struct LabOpts {
    // The list is made from the registration list, `scenarios::ALL`.
    #[arg(long, default_value = "default", help = crate::scenarios::summary(), long_help = crate::scenarios::help())]
    pub scenario: String,
    /// A scenario file (YAML; see docs/lab.md) instead of a named scenario.
    #[arg(long)]
    pub scenario_file: Option<PathBuf>,
    /// Another proxy to measure beside edgewarm, run in the edge namespace:
    /// `NAME[:MODE]=COMMAND`. The command must listen on {listen} and reach the origin at
    /// {origin}; {dir} is the run folder (ca.pem, origin.pem/key, edge.pem/key,
    /// edge.bundle.pem). MODE is the minimum it is held to: `tunnel` (default: 3(r+R); clients
    /// ask for a.test, the origin's name), `prewarm` or `http` (3r+R; clients ask for b.test or
    /// h.test, the edge certificate's names). Repeatable. See examples/peers/.
    #[arg(long = "proxy", value_name = "NAME[:MODE]=COMMAND")]
    pub proxies: Vec<String>,
    /// Also measure the shipped peers that are installed: nginx (stream + ssl_preread tunnel;
    /// HTTPS reverse proxy with upstream keep-alive), HAProxy (tcp + req_ssl_sni tunnel; mode
    /// http with http-reuse always) and Apache Traffic Server (tunnel_route; with ATS_SERVER
    /// naming a fixed build, its tunnel_prewarm pool). Configs: examples/peers/.
    #[arg(long)]
    pub peers: bool,
    /// Cap every link's bandwidth with tbf, e.g. 100mbit.
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Override the client↔edge RTT.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub r: Option<Duration>,
    /// Override the edge↔origin RTT.
    #[arg(long = "big-r", value_parser = humantime::parse_duration)]
    pub big_r: Option<Duration>,
    /// How many of what the scenario runs (see --help).
    #[arg(long, long_help = crate::scenarios::requests_help())]
    pub requests: Option<usize>,
    /// `pages` only: the pages to load (login, news, app, split; default all).
    #[arg(long, value_delimiter = ',')]
    pub pages: Vec<String>,
    /// The modes to measure instead of the scenario's (scenario file names: direct, tunnel,
    /// prewarm, http, h3, 0rtt_http, …); for `pages`, to load the pages through (direct,
    /// tunnel, prewarm, http, h3: the default; cache, cache-no-hints: the cached site with a
    /// warm-edge visit, see docs/lab.md).
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
    /// `pages` only: the origin thinks this long more before each page's HTML (its assets are
    /// not delayed): the time a 103 Early Hints can use, e.g. 300ms.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub html_think: Option<Duration>,
    /// Page workload: each new connection fetches a page, then this many sub-resources at
    /// once over HTTP/2; the report adds the page time against its minimum (one more r+R).
    /// Default: the scenario's (10 for lossy, else 0: one request).
    #[arg(long)]
    pub page: Option<usize>,
    /// Packet loss on link B (edge↔origin, R), a percentage: `1%`. Several, comma-separated
    /// (`0%,1%,2%`), are measured one after the other, each on a topology of its own.
    #[arg(long, value_delimiter = ',', value_parser = parse_loss)]
    pub loss: Vec<f64>,
    /// Packet loss on link A (client↔edge, r), a percentage.
    #[arg(long, value_parser = parse_loss)]
    pub loss_r: Option<f64>,
    /// Link B loses packets in bursts of this mean length (packets; Gilbert model, see
    /// docs/lab.md) instead of one at a time; the long-run loss stays --loss.
    #[arg(long, value_parser = parse_burst)]
    pub burst: Option<f64>,
    /// Link A loses packets in bursts of this mean length (with --loss-r).
    #[arg(long, value_parser = parse_burst)]
    pub burst_r: Option<f64>,
    /// Jitter on link B: each packet waits up to this much more than the one-way delay, at
    /// random, without overtaking the packet before it.
    #[arg(long, value_parser = parse_jitter)]
    pub jitter: Option<Duration>,
    /// Jitter on link A.
    #[arg(long, value_parser = parse_jitter)]
    pub jitter_r: Option<Duration>,
    /// Seed of the loss and jitter decisions (default: from the clock; the report gives it, so
    /// a run's pattern can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where run folders go.
    #[arg(long, default_value = "lab-runs")]
    pub out: PathBuf,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The proxy binary to measure; default: `edgewarm` next to this program (both are built
    /// into the same target folder), else `edgewarm` on PATH.
    #[arg(long, value_name = "PATH")]
    pub edgewarm: Option<PathBuf>,
    #[command(flatten)]
    pub tiers: crate::harness::tiers::opts::TierOpts,
    #[command(flatten)]
    pub fleet: crate::scenarios::fleet::opts::FleetOpts,
}
