//! The fleet's NATS: Debian's `nats-server -js` as a child of the lab in the shield's
//! namespace (every address it has there, none of the host's), its store in the run folder;
//! each node's `fleet:` section pointing at it; and a node's `/fleet`.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::error::LabError;
use crate::harness::hosts::{admin_in, spawn, Guard, Wait};

/// The client port, on every address of the shield's namespace.
const PORT: u16 = 4222;
/// The monitoring port (`/healthz`): how the lab knows it is up.
const MONITOR: u16 = 8222;

/// `nats-server` on PATH, or why the run cannot start (said before anything is built).
pub(crate) fn installed() -> Result<(), LabError> {
    let paths = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&paths).any(|d| d.join("nats-server").is_file()) {
        return Ok(());
    }
    Err(LabError::Missing { what: "nats-server", path: "PATH".into(), why: "the fleet shares purges through it" })
}

/// Start it in `ns` with JetStream, its store and log in `dir`; waited for (`/healthz`).
/// Killed when the guard drops, and with the namespace.
pub(crate) async fn start(ns: &str, dir: &Path) -> Result<Guard, LabError> {
    let store = dir.join("nats").display().to_string();
    let (port, monitor) = (PORT.to_string(), MONITOR.to_string());
    let args = ["nats-server", "-js", "-a", "0.0.0.0", "-p", &port, "-m", &monitor, "-sd", &store];
    let log = dir.join("nats.log");
    let mut child = spawn(crate::wan::netns::command(ns, &args), &log)?;
    let health = format!("http://127.0.0.1:{MONITOR}/healthz");
    Wait::new("nats-server", &log)
        .child(&mut child)
        .until(|| async {
            let cmd = crate::wan::netns::command(ns, &["curl", "-sf", "--max-time", "1", &health]);
            tokio::process::Command::from(cmd).output().await.is_ok_and(|o| o.status.success())
        })
        .await?;
    Ok(child)
}

/// The `fleet:` section of node `name`, which reaches NATS at `nats`.
pub(crate) fn section(nats: Ipv4Addr, name: &str) -> String {
    format!("fleet: {{nats: [\"nats://{nats}:{PORT}\"], name: {name}}}\n")
}

/// The `/fleet` of the edgewarm in `ns` (`null` if it did not answer).
pub(crate) async fn status(ns: &str) -> serde_json::Value {
    let body = admin_in(ns, "/fleet").await.unwrap_or_default();
    serde_json::from_str(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_s_section_is_one_edgewarm_accepts() {
        let s = section(Ipv4Addr::new(10, 77, 20, 2), "edge0");
        assert_eq!(s, "fleet: {nats: [\"nats://10.77.20.2:4222\"], name: edge0}\n");
        // After an edge's configuration, as the lab writes it.
        let edge = crate::harness::tiers::config::edge("/run/lab", 0, crate::harness::tiers::opts::TierProtocol::H2);
        let text = edge + &s;
        let config = edgewarm::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}
