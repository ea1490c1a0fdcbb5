//! The lab's scenarios: the link delays, TLS version, modes and load of a run, named
//! (`--scenario`) or from a file, narrowed by the command line.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::error::LabError;
use crate::wan::impair::Impairments;

mod links;
use crate::scenarios::model::Mode;
use crate::scenarios::opts::LabOpts;
use links::clock_seed;

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub r_ms: f64,
    pub big_r_ms: f64,
    pub tls12: bool,
    pub modes: Vec<ModeRun>,
    /// Open-loop ramp instead of sequential connections: (from, to) per second over `secs`.
    pub ramp: Option<Ramp>,
    /// Further edge↔origin RTTs, each measured on a topology of its own after the first.
    #[serde(default)]
    pub more_big_r_ms: Vec<f64>,
    /// Bandwidth cap on every link (tbf), e.g. `100mbit`.
    pub bandwidth: Option<String>,
    /// Page workload: sub-resources fetched over HTTP/2 after each page (0: one request).
    #[serde(default)]
    pub page: usize,
    /// Loss and jitter on the links; link B's loss is the first of the losses measured.
    pub impair: Impairments,
    /// Further loss rates on link B, each measured on a topology of its own after the first
    /// (for every edge↔origin RTT).
    pub more_loss: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ramp {
    pub from: f64,
    pub to: f64,
    pub secs: f64,
}

/// A mode, measured with a post-quantum ClientHello (what current clients send, ~1.5 KB) or a
/// classical one (~250 bytes). The difference matters only with Fast Open: a hello larger than
/// one segment cannot ride in the SYN, so TFO saves nothing for it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ModeRun {
    pub mode: Mode,
    pub pq_hello: bool,
    /// The client connects with TCP Fast Open too.
    #[serde(default)]
    pub client_tfo: bool,
    /// The client resumes with a ticket and sends its request as TLS 1.3 early data (0-RTT),
    /// to the routes that accept it (z.test: http `early_data: safe`; p.test: prewarm
    /// `early_data: opaque`).
    #[serde(default)]
    pub zero_rtt: bool,
}

impl ModeRun {
    pub fn label(self) -> String {
        // The hello's size decides whether Fast Open can carry it, so say which one it was.
        let hello = if self.pq_hello { "PQ hello" } else { "X25519 hello" };
        let zero = if self.zero_rtt { "0-RTT + " } else { "" };
        match (self.client_tfo, self.mode) {
            (true, m) => format!("client TFO + {zero}{}, {hello}", m.label()),
            (false, Mode::TunnelTfo) => format!("{}, {hello}", self.mode.label()),
            (false, m) => format!("{zero}{}", m.label()),
        }
    }

    /// Names accepted in scenario files.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        let run = |mode, pq_hello, client_tfo| Some(Self { mode, pq_hello, client_tfo, zero_rtt: false });
        // 0-RTT with Fast Open needs the hello and the request in one SYN: the classical hello.
        let zero = |mode, client_tfo: bool| Some(Self { mode, pq_hello: !client_tfo, client_tfo, zero_rtt: true });
        match name {
            "direct" => run(Mode::Direct, true, false),
            "tunnel" => run(Mode::Tunnel, true, false),
            "tunnel_tfo" => run(Mode::TunnelTfo, true, false),
            "tunnel_tfo_x25519" => run(Mode::TunnelTfo, false, false),
            "client_tfo_tunnel_tfo_x25519" => run(Mode::TunnelTfo, false, true),
            "prewarm" => run(Mode::Prewarm, true, false),
            "client_tfo_prewarm" => run(Mode::Prewarm, true, true),
            "client_tfo_prewarm_x25519" => run(Mode::Prewarm, false, true),
            "http" => run(Mode::Http, true, false),
            "client_tfo_http" => run(Mode::Http, true, true),
            "client_tfo_http_x25519" => run(Mode::Http, false, true),
            "0rtt_http" => zero(Mode::Http, false),
            "h3" => run(Mode::H3, true, false),
            "0rtt_h3" => zero(Mode::H3, false),
            "http_h3_origin" => run(Mode::HttpH3Origin, true, false),
            "client_tfo_0rtt_http" => zero(Mode::Http, true),
            "client_tfo_0rtt_prewarm" => zero(Mode::Prewarm, true),
            _ => None,
        }
    }
}

/// A scenario file (`edgewarm-lab lab --scenario-file F`). Durations as `20ms`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    #[serde(with = "humantime_serde_compat")]
    r: Duration,
    /// One edge↔origin RTT, or several measured one after the other.
    #[serde(default, deserialize_with = "durations")]
    big_r: Vec<Duration>,
    #[serde(default = "tls13")]
    tls: String,
    /// direct, tunnel, tunnel_tfo, tunnel_tfo_x25519, client_tfo_tunnel_tfo_x25519, prewarm,
    /// client_tfo_prewarm, client_tfo_prewarm_x25519.
    modes: Vec<String>,
    #[serde(default)]
    ramp: Option<RampFile>,
    /// Link B's loss, a percentage (`1%`), or several measured one after the other.
    #[serde(default, deserialize_with = "texts")]
    loss: Vec<String>,
    /// Link A's loss, a percentage.
    #[serde(default)]
    loss_r: Option<String>,
    /// Mean loss burst on link B / link A, packets (Gilbert model).
    #[serde(default)]
    burst: Option<f64>,
    #[serde(default)]
    burst_r: Option<f64>,
    /// Jitter on link B / link A, as `5ms`.
    #[serde(default)]
    jitter: Option<String>,
    #[serde(default)]
    jitter_r: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RampFile {
    from: f64,
    to: f64,
    #[serde(with = "humantime_serde_compat")]
    duration: Duration,
}

fn tls13() -> String {
    "1.3".into()
}

mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
    }
}

/// One value or a list of them, each as text (a YAML number too, so that its error can say
/// what was expected rather than "invalid type").
fn texts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    use serde::Deserialize;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Number(f64),
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Text),
        Many(Vec<Text>),
    }
    let text = |t| match t {
        Text::Text(s) => s,
        Text::Number(n) => n.to_string(),
    };
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(t) => vec![text(t)],
        OneOrMany::Many(v) => v.into_iter().map(text).collect(),
    })
}

fn durations<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
    let list = texts(d)?;
    list.iter()
        .map(|t| humantime::parse_duration(t).map_err(|e| serde::de::Error::custom(format!("{t:?}: {e}"))))
        .collect()
}

impl Scenario {
    /// Load a scenario file; errors name the field.
    pub fn from_file(path: &Path) -> Result<Self, LabError> {
        let bad = |m: String| LabError::ScenarioFile(format!("{}: {m}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let f: ScenarioFile = serde_norway::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let modes = f
            .modes
            .iter()
            .map(|m| ModeRun::parse(m).ok_or_else(|| bad(format!("modes: unknown mode {m:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let tls12 = match f.tls.as_str() {
            "1.2" => true,
            "1.3" => false,
            t => return Err(bad(format!("tls: {t:?} is not 1.2 or 1.3"))),
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let big_r: Vec<f64> = f.big_r.iter().map(|d| ms(*d)).collect();
        let (&first, rest) = big_r.split_first().ok_or_else(|| bad("big_r: required".into()))?;
        let (impair, loss) = links::from_file(&f).map_err(bad)?;
        Ok(Self {
            name: f.name,
            r_ms: ms(f.r),
            big_r_ms: first,
            more_big_r_ms: rest.to_vec(),
            tls12,
            modes,
            ramp: f.ramp.map(|r| Ramp { from: r.from, to: r.to, secs: r.duration.as_secs_f64() }),
            bandwidth: None,
            page: 0,
            impair,
            more_loss: loss.get(1..).unwrap_or_default().to_vec(),
        })
    }
}

impl Scenario {
    /// What `lab` measures: the named scenario or the file, narrowed by the command line.
    pub fn for_lab(opts: &LabOpts) -> Result<Self, LabError> {
        let mut s = match &opts.scenario_file {
            Some(path) => Self::from_file(path)?,
            None => Self::named(&opts.scenario).ok_or_else(|| super::unknown(&opts.scenario))?,
        };
        if opts.bandwidth.is_some() {
            s.bandwidth.clone_from(&opts.bandwidth);
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        s.r_ms = opts.r.map_or(s.r_ms, ms);
        s.big_r_ms = opts.big_r.map_or(s.big_r_ms, ms);
        s.page = opts.page.unwrap_or(s.page);
        if !opts.modes.is_empty() {
            let unknown = |m: &String| LabError::ScenarioFile(format!("--modes: unknown mode {m:?}"));
            s.modes =
                opts.modes.iter().map(|m| ModeRun::parse(m).ok_or_else(|| unknown(m))).collect::<Result<_, _>>()?;
        }
        s.impair_from(opts);
        Ok(s)
    }

    pub fn named(name: &str) -> Option<Self> {
        let pq = |mode| ModeRun { mode, pq_hello: true, client_tfo: false, zero_rtt: false };
        let all = vec![
            pq(Mode::Direct),
            pq(Mode::Tunnel),
            pq(Mode::TunnelTfo),
            ModeRun { mode: Mode::TunnelTfo, pq_hello: false, client_tfo: false, zero_rtt: false },
            pq(Mode::Prewarm),
            pq(Mode::Http),
        ];
        let base = |r, big_r, tls12, modes| Self {
            name: name.into(),
            r_ms: r,
            big_r_ms: big_r,
            tls12,
            modes,
            ramp: None,
            more_big_r_ms: Vec::new(),
            bandwidth: None,
            page: 0,
            impair: Impairments { seed: clock_seed(), ..Impairments::default() },
            more_loss: Vec::new(),
        };
        let (r, big_r, tls12) = match name {
            "default" => (20.0, 100.0, false),
            "ats-poc" => (58.0, 10.0, true),
            "far-origin" => (16.0, 265.0, true),
            "ramp" => {
                let ramp = Some(Ramp { from: 5.0, to: 150.0, secs: 30.0 });
                return Some(Self { ramp, ..base(20.0, 100.0, false, vec![pq(Mode::Prewarm)]) });
            }
            // Its visits are its own (`two_tier`), not modes.
            "two-tier" | "fleet" => return Some(base(20.0, 100.0, false, Vec::new())),
            "lossy" => {
                // Page loads at a fixed 40 new clients a second (the open-loop generator at a
                // constant rate) while link B loses 0, 0.5, 1 and 2 % of its packets.
                let modes = ["direct", "prewarm", "http", "http_h3_origin"];
                let modes = modes.iter().filter_map(|m| ModeRun::parse(m)).collect();
                let ramp = Some(Ramp { from: 40.0, to: 40.0, secs: 20.0 });
                let more_loss = vec![0.005, 0.01, 0.02];
                return Some(Self { ramp, page: 10, more_loss, ..base(20.0, 150.0, false, modes) });
            }
            "tfo" => {
                // Fast Open with a hello that fits in a SYN, at three distances to the origin.
                let x25519 =
                    |client_tfo| ModeRun { mode: Mode::TunnelTfo, pq_hello: false, client_tfo, zero_rtt: false };
                let modes = vec![pq(Mode::Tunnel), x25519(false), x25519(true)];
                return Some(Self { more_big_r_ms: vec![100.0, 200.0], ..base(20.0, 20.0, false, modes) });
            }
            "floor" => {
                // The staircase from 3(r+R) down to r+R: each step takes a round trip off.
                let modes = [
                    "direct",
                    "tunnel",
                    "prewarm",
                    "http",
                    "client_tfo_http_x25519",
                    "0rtt_http",
                    "client_tfo_0rtt_http",
                    "client_tfo_0rtt_prewarm",
                    "h3",
                    "0rtt_h3",
                ];
                let modes = modes.iter().filter_map(|m| ModeRun::parse(m)).collect();
                return Some(base(20.0, 100.0, false, modes));
            }
            _ => return None,
        };
        // HTTP/3 is TLS 1.3 only: measured where the scenario is TLS 1.3.
        let modes = if tls12 { all } else { all.into_iter().chain([pq(Mode::H3)]).collect() };
        Some(base(r, big_r, tls12, modes))
    }

    pub(crate) fn r(&self) -> Duration {
        Duration::from_secs_f64(self.r_ms / 1e3)
    }
}
