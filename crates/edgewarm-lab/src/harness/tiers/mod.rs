//! The two-tier hosts' processes, shared by the scenarios built on them (`two-tier`, `fleet`):
//! the run folder with its PKI and each tier's configuration ([`config`]), written and checked
//! with `edgewarm check` ([`write_configs`]), then the origin, the shield and the edges started
//! in their namespaces ([`crate::wan::tiers`]) and waited for ([`start`]). The options are
//! [`opts::TierOpts`].

pub(crate) mod config;
pub mod opts;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::error::LabError;
use crate::harness::hosts::{admin_in, spawn, Guard, Wait};
use crate::wan::tiers::{self as net, Tiers};
use config::{CONNECTIONS, NAME, ORIGIN_NAME};
use opts::{TierOpts, TierProtocol};

/// The origin's objects may be kept an hour: the run is far shorter, so nothing goes stale.
const CACHE_CONTROL: &str = "public, max-age=3600";

/// The run's folder with its PKI and each tier's configuration, written and checked;
/// `extra(tier)` is appended to each (`None`: the shield's, `Some(i)`: edge `i`'s), as the
/// fleet scenario adds its NATS section.
pub(crate) fn write_configs(
    out: &Path,
    tiers: &TierOpts,
    name: &str,
    proxy: &str,
    extra: impl Fn(Option<u8>) -> String,
) -> Result<PathBuf, LabError> {
    let dir = crate::harness::files::empty_run_dir(out, name)?;
    crate::harness::files::write_pki(
        &dir,
        &[("origin", &[ORIGIN_NAME][..]), ("shield", &[NAME][..]), ("edge", &[NAME][..])],
    )?;
    let d = dir.display().to_string();
    let shield =
        config::shield(&d, tiers.edges, tiers.tier_protocol, tiers.origin_protocol).map_err(LabError::Tiers)?;
    write_checked(proxy, &dir.join("shield.yaml"), &(shield + &extra(None)), tiers)?;
    for i in 0..tiers.edges {
        let edge = config::edge(&d, i, tiers.tier_protocol) + &extra(Some(i));
        write_checked(proxy, &dir.join(format!("edge{i}.yaml")), &edge, tiers)?;
    }
    Ok(dir)
}

/// Write a tier's configuration to `file` and have `edgewarm check` read it: what it refuses
/// (a key this edgewarm does not know, such as `upstream.protocol: h3` before that kind
/// exists) stops the run before anything is built, with edgewarm's own words.
pub(crate) fn write_checked(proxy: &str, file: &Path, text: &str, tiers: &TierOpts) -> Result<(), LabError> {
    std::fs::write(file, text)?;
    let out = std::process::Command::new(proxy).arg("check").arg("--config").arg(file).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(LabError::Tiers(format!(
        "--tier-protocol {} / --origin-protocol {}: edgewarm refuses {}: {}",
        tiers.tier_protocol.name(),
        tiers.origin_protocol.name(),
        file.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The origin, the shield and the edges, each in its namespace, started in that order (each
/// tier's origin first) and each waited for. Killed when the guards drop.
pub(crate) async fn start(
    net: &Tiers,
    exe: &str,
    proxy: &str,
    dir: &Path,
    tiers: &TierOpts,
) -> Result<Vec<Guard>, LabError> {
    let d = dir.display().to_string();
    let port = config::origin_port(tiers.origin_protocol);
    let listen = format!("{}:{port}", net::ORIGIN);
    let (cert, key, log) = (format!("{d}/origin.pem"), format!("{d}/origin.key"), format!("{d}/origin-access.log"));
    let mut args = vec![exe, "origin", "--listen", &listen, "--cache-control", CACHE_CONTROL, "--access-log", &log];
    let cleartext = tiers.origin_protocol == TierProtocol::H2c;
    if cleartext {
        args.push("--cleartext");
    } else {
        args.extend(["--cert", &cert, "--key", &key]);
    }
    let origin_log = dir.join("origin.log");
    let mut origin = spawn(crate::wan::netns::command(&net.origin, &args), &origin_log)?;
    // Asked from the shield's namespace, over the link the shield will use.
    let url = if cleartext {
        format!("http://{}:{port}/probe", net::ORIGIN)
    } else {
        format!("https://{ORIGIN_NAME}:{port}/probe")
    };
    let resolve = format!("{ORIGIN_NAME}:{port}:{}", net::ORIGIN);
    let ca = format!("{d}/ca.pem");
    let probe = ["curl", "-sf", "-o", "/dev/null", "--max-time", "1", "--cacert", &ca, "--resolve", &resolve, &url];
    Wait::new("lab origin", &origin_log)
        .child(&mut origin)
        .until(|| async {
            Command::from(crate::wan::netns::command(&net.shield, &probe)).status().await.is_ok_and(|s| s.success())
        })
        .await?;
    let mut guards = vec![origin];
    let edgewarm = |ns: &str, name: &str| {
        let config = format!("{d}/{name}.yaml");
        spawn(crate::wan::netns::command(ns, &[proxy, "run", "--config", &config]), &dir.join(format!("{name}.log")))
    };
    guards.push(edgewarm(&net.shield, "shield")?);
    ready(&net.shield, guards.last_mut(), &dir.join("shield.log")).await?;
    for (i, ns) in net.edges.iter().enumerate() {
        guards.push(edgewarm(ns, &format!("edge{i}"))?);
    }
    for (i, ns) in net.edges.iter().enumerate() {
        ready(ns, guards.get_mut(2 + i), &dir.join(format!("edge{i}.log"))).await?;
    }
    Ok(guards)
}

/// Wait until the edgewarm in `ns` answers `/ready`, then (at most 5 s more) until its
/// standing connections to the next tier are open. Their metrics depend on the origin kind, so
/// a kind that reports neither is not waited for: the warm-up requests then tell whether the
/// path works.
async fn ready(ns: &str, child: Option<&mut Guard>, log: &Path) -> Result<(), LabError> {
    let child = child.ok_or(LabError::NotReady { what: "edgewarm", detail: "not started".into() })?;
    Wait::new("edgewarm", log).child(child).until(|| async { admin_in(ns, "/ready").await.is_some() }).await?;
    let standing = || async {
        let m = admin_in(ns, "/metrics").await.unwrap_or_default();
        let get = |name| edgewarm::metrics::sample(&m, name, &[("route", NAME)]).unwrap_or(0.0);
        get("edgewarm_upstream_connections") >= CONNECTIONS as f64 || get("edgewarm_pool_ready") >= 1.0
    };
    // Not an error if they never show: see above.
    let _ = Wait::new("edgewarm", log).within(Duration::from_secs(5)).until(standing).await;
    Ok(())
}
