//! The load generator run in the three-host lab's client namespace for one mode of a
//! [`Scenario`]: the command line that asks for it, and its JSON report read back. Shared by
//! the scenarios that measure modes (`modes`, `upgrade`).

use std::net::SocketAddrV4;

use tokio::process::Command;

use crate::error::LabError;
use crate::scenarios::model::Mode;
use crate::scenarios::spec::{ModeRun, Scenario};
use crate::tools::load::LoadReport;
use crate::wan::netns::Topology;

#[expect(clippy::too_many_arguments)]
pub(crate) async fn load(
    topo: &Topology,
    exe: &str,
    d: &str,
    scenario: &Scenario,
    name: &str,
    target: SocketAddrV4,
    requests: usize,
    run: ModeRun,
) -> Result<LoadReport, LabError> {
    let tls = if scenario.tls12 { "1.2" } else { "1.3" };
    let n = requests.to_string();
    let url = format!("https://{name}/");
    let to = target.to_string();
    let ca = format!("{d}/ca.pem");
    let mut args =
        vec![exe, "load", &url, "--connect-to", &to, "--cacert", &ca, "--requests", &n, "--tls", tls, "--json"];
    if !run.pq_hello {
        args.push("--classic-kx");
    }
    if run.client_tfo {
        args.push("--tfo");
    }
    if run.zero_rtt {
        args.push("--zero-rtt");
    }
    if run.mode == Mode::H3 {
        args.extend(["--alpn", "h3"]);
    }
    let page = scenario.page.to_string();
    if scenario.page > 0 {
        args.extend(["--alpn", "h2", "--page", &page]);
    }
    let ramp_args;
    if let (Some(ramp), true) = (scenario.ramp, requests > 2) {
        ramp_args = [ramp.from.to_string(), ramp.to.to_string(), format!("{}s", ramp.secs)];
        args.extend(["--rate", &ramp_args[0], "--ramp-to", &ramp_args[1], "--duration", &ramp_args[2]]);
    }
    let out = Command::from(topo.command(&topo.client, &args)).kill_on_drop(true).output().await?;
    let fail = |detail: String| LabError::Load { mode: run.label(), detail };
    if !out.status.success() {
        return Err(fail(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| fail(e.to_string()))
}
