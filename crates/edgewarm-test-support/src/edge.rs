//! An edgewarm running in the test's runtime, and what tests ask of it (metrics, admin,
//! reloads).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::*;
use edgewarm::config::Config;
use edgewarm::server::{Bound, Server};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// An edgewarm running in this test's runtime.
pub struct Edge {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub server: Arc<Server>,
    admin_stop: CancellationToken,
    pub run: tokio::task::JoinHandle<()>,
}

/// Start edgewarm with `routes` (YAML list items) and optional extra top-level YAML, e.g. a
/// `timeouts:` block. `listener_extra` goes into the listener entry (e.g. `proxy_protocol: true`).
pub async fn edge(routes: &str, extra: &str, listener_extra: &str) -> Edge {
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\n    {listener_extra}\n{extra}\nroutes:\n{routes}"
    );
    edge_from(&yaml).await
}

/// Start edgewarm with a whole configuration.
pub async fn edge_from(yaml: &str) -> Edge {
    let config = Config::parse(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    config.validate().unwrap();
    let server = Server::new(&config).unwrap();
    let bound = Bound::bind(&config).unwrap();
    let addr = bound.local_addrs()[0];
    let admin = bound.admin.local_addr().unwrap();
    let admin_stop = CancellationToken::new();
    tokio::spawn(edgewarm::admin::serve(bound.admin, server.admin_state(), admin_stop.clone().cancelled_owned()));
    let s = server.clone();
    let run = tokio::spawn(async move { s.run(bound.listeners).await });
    // `run` marks the server ready once its accept loops are spawned.
    while !server.is_ready() {
        tokio::task::yield_now().await;
    }
    Edge { addr, admin, server, admin_stop, run }
}

/// Wait (bounded: 10 s) until a metric reaches `want`.
pub async fn wait_for(edge: &Edge, name: &str, labels: &[(&str, &str)], want: f64) {
    for _ in 0..2000 {
        if edge.metric(name, labels) >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}{labels:?} never reached {want}: {}", edge.metric(name, labels));
}

impl Edge {
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.server.metrics().sample(name, labels).unwrap_or(0.0)
    }

    /// Wait until every accepted connection has been closed and logged, so metrics are final.
    /// Counted, not just "none open": a connection is served on a worker thread, and one just
    /// accepted may not have begun there yet.
    pub async fn settle(&self) {
        let total = |text: &str, name: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        for _ in 0..2000 {
            let text = self.server.metrics().encode();
            let (accepted, closed) = (
                total(&text, "edgewarm_connections_accepted_total"),
                total(&text, "edgewarm_connections_closed_total"),
            );
            if self.server.open_connections() == 0 && accepted == closed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("connections still open: {}", self.server.open_connections());
    }

    pub async fn stop(self) {
        self.server.shutdown();
        self.run.await.unwrap();
        self.admin_stop.cancel();
    }
}

/// A routes block tunnelling `sni` to `origin`, refusing everything else.
pub fn route_to(sni: &str, origin: SocketAddr) -> String {
    format!("  - {{sni: {sni}, action: tunnel, origin: \"{origin}\"}}\n")
}

/// GET a path on the admin listener; returns (status, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let text = String::from_utf8(read_all(&mut s).await).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}
