//! Debian's `nats-server` with JetStream, on 127.0.0.1 only, its store in a temporary folder:
//! what a fleet of edges shares purges through.

use std::process::{Command, Stdio};

use crate::*;

pub struct Nats {
    pub port: u16,
    server: Option<ChildGuard>,
    dir: tempfile::TempDir,
    jetstream: bool,
}

/// Start a JetStream server on a free port.
pub fn nats() -> Nats {
    let mut n = Nats { port: free_port(), server: None, dir: tempfile::tempdir().unwrap(), jetstream: true };
    n.start();
    n
}

/// Start a server without JetStream on a free port: it speaks NATS, and no JetStream request
/// gets an answer from it.
pub fn nats_without_jetstream() -> Nats {
    let mut n = Nats { port: free_port(), server: None, dir: tempfile::tempdir().unwrap(), jetstream: false };
    n.start();
    n
}

impl Nats {
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// (Re)start it on the same port and store (a restarted server keeps its streams).
    pub fn start(&mut self) {
        let mut c = Command::new("nats-server");
        if self.jetstream {
            c.arg("-js");
        }
        c.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.server = Some(ChildGuard(c.spawn().expect("nats-server (scripts/deps.sh installs it)")));
        wait_for_port(self.port);
    }

    /// Kill it (SIGKILL, as `kill -9`): no goodbye to its clients; its store stays for
    /// [`Nats::start`].
    pub fn stop(&mut self) {
        self.server = None;
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Stop (SIGSTOP) or resume (SIGCONT) the server: its connections stay open and nothing
    /// answers on them, as over a link gone dark.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.server.as_ref().expect("running").0.id().to_string();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
    }
}
