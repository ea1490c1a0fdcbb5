//! The lab's processes on its hosts: the lab origin and edgewarm started in their namespaces as
//! children of the lab ([`start_hosts`], [`spawn`]), killed when their [`Guard`] drops, and
//! asked over the edge's admin listener whether they are ready ([`wait_ready`], [`admin`]);
//! [`log_tail`]: what an error shows of a child's log. [`Wait`] is the lab's one readiness
//! wait: every "until it is up" of every scenario and tool is one.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::error::LabError;
use crate::wan::netns::{Topology, ORIGIN};

/// A child process killed when dropped.
pub(crate) struct Guard(Child);

impl Guard {
    /// The child's exit status if it has exited (it is not waited for).
    pub(crate) fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

/// The lab origin (`origin_args` added to its command line) and edgewarm (`page`: the prewarm
/// route offers h2 too, and the browser lab's routes are there), each in its namespace, and the
/// far edge beside the origin, once edgewarm's pools are warm. Killed when the guards drop.
pub(crate) async fn start_hosts(
    topo: &Topology,
    exe: &str,
    proxy: &str,
    dir: &Path,
    logs: &str,
    page: bool,
    origin_args: &[String],
) -> Result<Hosts, LabError> {
    let d = dir.display().to_string();
    let (listen, cert, key) = (format!("{ORIGIN}:443"), format!("{d}/origin.pem"), format!("{d}/origin.key"));
    let mut args = vec![exe, "origin", "--listen", &listen, "--cert", &cert, "--key", &key];
    args.extend(origin_args.iter().map(String::as_str));
    let origin_cmd = topo.command(&topo.origin, &args);
    let origin = spawn(origin_cmd, &dir.join(format!("origin{logs}.log")))?;
    let far = far_edge(topo, proxy, dir, logs)?;
    std::fs::write(dir.join("edge.yaml"), crate::harness::files::edge_config(&d, page))?;
    let edge_cmd = topo.command(&topo.edge, &[proxy, "run", "--config", &format!("{d}/edge.yaml")]);
    let edge = spawn(edge_cmd, &dir.join(format!("edge{logs}.log")))?;
    wait_ready(topo, &dir.join(format!("edge{logs}.log"))).await?;
    Ok(Hosts { _origin: origin, _far: far, _edge: edge })
}

/// The processes [`start_hosts`] started, killed when dropped.
pub(crate) struct Hosts {
    _origin: Guard,
    _far: Guard,
    _edge: Guard,
}

/// The far edge beside the origin ([`crate::harness::files::far_edge_config`]), in the origin
/// namespace: the other end of the edge's HTTP/3 origin route.
pub(crate) fn far_edge(topo: &Topology, proxy: &str, dir: &Path, logs: &str) -> Result<Guard, LabError> {
    let d = dir.display().to_string();
    std::fs::write(dir.join("far-edge.yaml"), crate::harness::files::far_edge_config(&d))?;
    let far_cmd = topo.command(&topo.origin, &[proxy, "run", "--config", &format!("{d}/far-edge.yaml")]);
    spawn(far_cmd, &dir.join(format!("far-edge{logs}.log")))
}

pub(crate) fn spawn(cmd: std::process::Command, log: &Path) -> Result<Guard, LabError> {
    let mut cmd = Command::from(cmd);
    cmd.stdout(Stdio::null()).stderr(std::fs::File::create(log)?).kill_on_drop(true);
    Ok(Guard(cmd.spawn()?))
}

/// The `edgewarm` binary to run in the edge namespace: `--edgewarm`, else the one built beside
/// this program (`cargo build` puts both in one folder), else whatever PATH has.
pub(crate) fn proxy_binary(given: Option<&Path>) -> Result<String, LabError> {
    let beside = std::env::current_exe()?.with_file_name("edgewarm");
    let found = match given {
        Some(p) => p.is_file().then(|| p.to_path_buf()),
        None if beside.is_file() => Some(beside),
        None => std::env::var_os("PATH")
            .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("edgewarm")).find(|p| p.is_file())),
    };
    let missing = || {
        let what =
            given.map_or_else(|| "edgewarm (beside edgewarm-lab or on PATH)".into(), |p| p.display().to_string());
        LabError::NoProxy(format!("proxy binary not found: {what}; build it with `cargo build --release -p edgewarm`"))
    };
    let path = found.ok_or_else(missing)?;
    // Absolute, because the edge runs it from inside `ip netns exec`.
    Ok(std::fs::canonicalize(&path)?.to_string_lossy().into_owned())
}

pub(crate) async fn admin(topo: &Topology, path: &str) -> Option<String> {
    admin_in(&topo.edge, path).await
}

/// `GET path` on the admin listener (127.0.0.1:9900) of the edgewarm in namespace `ns`: its
/// body if it answered 2xx.
pub(crate) async fn admin_in(ns: &str, path: &str) -> Option<String> {
    let url = format!("http://127.0.0.1:9900{path}");
    let cmd = crate::wan::netns::command(ns, &["curl", "-sf", "--max-time", "2", &url]);
    let out = Command::from(cmd).output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Until the three-host edge's pools are warm and its http routes' standing connections open
/// (at most 30 s).
pub(crate) async fn wait_ready(topo: &Topology, log: &Path) -> Result<(), LabError> {
    let warm = || async {
        let Some(m) = admin(topo, "/metrics").await else { return false };
        let ready = |route| {
            edgewarm::metrics::sample(&m, "edgewarm_pool_ready", &[("route", route), ("alpn", "none")]).unwrap_or(0.0)
        };
        let opened =
            |route| edgewarm::metrics::sample(&m, "edgewarm_pool_opened_total", &[("route", route)]).unwrap_or(0.0);
        let standing = opened("h.test").min(opened("z.test")).min(opened("q.test"));
        ready("b.test") >= 4.0 && ready("p.test") >= 4.0 && standing >= 2.0
    };
    Wait::new("edgewarm's prewarm pool and http origin connections", log)
        .within(Duration::from_secs(30))
        .until(warm)
        .await
}

/// A bounded wait until something is up: asked every [`Self::every`] (100 ms unless told) for
/// at most [`Self::within`] (60 s unless told); an error naming `what`, with the end of its
/// log, if it never is, or at once if its [`Self::child`] exits first.
pub(crate) struct Wait<'a> {
    what: &'static str,
    log: &'a Path,
    child: Option<&'a mut Guard>,
    limit: Duration,
    every: Duration,
}

impl<'a> Wait<'a> {
    pub(crate) fn new(what: &'static str, log: &'a Path) -> Self {
        Self { what, log, child: None, limit: Duration::from_secs(60), every: Duration::from_millis(100) }
    }

    /// The process whose exit ends the wait at once.
    pub(crate) fn child(self, child: &'a mut Guard) -> Self {
        Self { child: Some(child), ..self }
    }

    pub(crate) fn within(self, limit: Duration) -> Self {
        Self { limit, ..self }
    }

    pub(crate) fn every(self, every: Duration) -> Self {
        Self { every, ..self }
    }

    pub(crate) async fn until<F, Fut>(mut self, up: F) -> Result<(), LabError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let tries = (self.limit.as_millis() / self.every.as_millis().max(1)).max(1);
        for _ in 0..tries {
            if up().await {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait()) {
                let detail = format!("exited ({status}): {}", log_tail(self.log));
                return Err(LabError::NotReady { what: self.what, detail });
            }
            tokio::time::sleep(self.every).await;
        }
        Err(LabError::NotReady { what: self.what, detail: log_tail(self.log) })
    }
}

/// Whether something accepts TCP connections at `addr`.
pub(crate) async fn listening(addr: std::net::SocketAddr) -> bool {
    tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await.is_ok_and(|r| r.is_ok())
}

/// The last lines of a child's log, newest first, on one line: what an error shows of it.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
}
