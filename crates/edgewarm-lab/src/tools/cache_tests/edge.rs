//! edgewarm in front of the cache test suite's origin ([`crate::tools::cache_tests`]): its
//! configuration (one `http` route for [`NAME`] whose origin is the suite's server over cleartext
//! HTTP/1.1, with the edge cache on or off), the process started on loopback, and the waits
//! until it and the origin answer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::LabError;
use crate::harness::edge_yaml::{head, route, REJECT_OTHERS};
use crate::harness::hosts::{spawn, Guard, Wait};

/// The name the client asks for: it resolves to 127.0.0.1 without any set-up, the client sends
/// it as SNI and `Host`, and the route and the edge's certificate are for it.
pub(crate) const NAME: &str = "localhost";

/// What the edge is given.
pub(crate) struct EdgePlan {
    /// Absolute folder holding `edge.pem` and `edge.key`; the configuration and the log go there
    /// too.
    pub(crate) dir: PathBuf,
    /// The upgrade socket (absolute; in a scratch folder, so that the killed edge's is removed).
    pub(crate) upgrade_socket: PathBuf,
    pub(crate) listen: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// The suite's origin server (plain HTTP/1.1).
    pub(crate) origin: SocketAddr,
    /// Whether the route caches (`cache: {}`: on, with its defaults).
    pub(crate) cache: bool,
}

/// The edge's configuration: one `http` route for [`NAME`], every other name refused.
pub(crate) fn config(plan: &EdgePlan) -> String {
    let (d, socket) = (plan.dir.display(), plan.upgrade_socket.display());
    let (listen, admin, origin) = (plan.listen, plan.admin, plan.origin);
    let cache = if plan.cache { "    cache: {}\n" } else { "" };
    head(admin, socket, &[format!("listen: \"{listen}\"")])
        + "routes:\n"
        + &route(NAME, "http", origin, &format!("{d}/edge"))
        + "    upstream: {tls: false, protocol: http/1.1}\n"
        + cache
        + REJECT_OTHERS
}

/// Write the configuration and start `proxy` with it, its log in `edge.log`; returns once its
/// admin listener says it is ready (`/ready`).
pub(crate) async fn start(proxy: &str, plan: &EdgePlan) -> Result<Guard, LabError> {
    let file = plan.dir.join("edge.yaml");
    std::fs::write(&file, config(plan))?;
    let log = plan.dir.join("edge.log");
    let mut cmd = std::process::Command::new(proxy);
    cmd.arg("run").arg("--config").arg(&file).stdin(std::process::Stdio::null());
    let mut edge = spawn(cmd, &log)?;
    let admin = plan.admin;
    Wait::new("edgewarm", &log)
        .child(&mut edge)
        .until(|| async move { http_status(admin, "/ready").await == Some(200) })
        .await?;
    Ok(edge)
}

/// `N` distinct ports on 127.0.0.1 that were free a moment ago, for children to listen on.
pub(crate) fn free_ports<const N: usize>() -> std::io::Result<[u16; N]> {
    // All held at once, so that no two are the same.
    let held = (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&held) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// The status of `GET path` on a plain HTTP listener (edgewarm's admin), if it answers.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf).split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), exchange).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cache: bool) -> EdgePlan {
        EdgePlan {
            dir: PathBuf::from("/run/x"),
            upgrade_socket: PathBuf::from("/tmp/y/upgrade.sock"),
            listen: "127.0.0.1:8443".parse().unwrap(),
            admin: "127.0.0.1:9901".parse().unwrap(),
            origin: "127.0.0.1:8000".parse().unwrap(),
            cache,
        }
    }

    /// Without the cache the configuration is one edgewarm accepts today; with it, the same plus
    /// `cache: {}` under the route.
    #[test]
    fn the_configuration_parses_and_the_cache_is_one_key() {
        let off = config(&plan(false));
        edgewarm::config::Config::parse(&off).unwrap_or_else(|e| panic!("{e}\n{off}"));
        let on = config(&plan(true));
        assert_eq!(on.replace("    cache: {}\n", ""), off);
        assert!(on.contains("    upstream: {tls: false, protocol: http/1.1}\n    cache: {}\n"), "{on}");
    }
}
