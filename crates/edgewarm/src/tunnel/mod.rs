//! The blind tunnel: connect the origin, replay the ClientHello, relay until done.
//!
//! Nothing is decrypted: the client's handshake continues with the origin as if edgewarm were
//! not there, so certificates, session tickets and 0-RTT stay between those two.

pub mod connect;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::config::OriginAddr;
use crate::error::CloseReason;
use crate::metrics::{Metrics, RouteMetrics, RouteReason};
use crate::relay::{self, Direction, End, Side};

/// What a finished tunnel reports for the access log.
#[derive(Debug, Default)]
pub struct TunnelReport {
    pub origin_addr: Option<SocketAddr>,
    pub connect_time: Option<Duration>,
    /// From accept to the origin's first byte.
    pub first_byte: Option<Duration>,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

pub struct Tunnel<'a> {
    pub route: &'a str,
    pub origin: &'a OriginAddr,
    pub fastopen: bool,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub mode: relay::Mode,
    pub accepted: Instant,
    pub metrics: &'a Metrics,
    pub route_metrics: &'a RouteMetrics,
    pub cancel: &'a CancellationToken,
}

impl Tunnel<'_> {
    /// Run the tunnel; `hello` is every byte read from the client so far.
    pub async fn run(
        &self,
        client: &TcpStream,
        hello: &[u8],
        report: &mut TunnelReport,
    ) -> Result<CloseReason, connect::ConnectError> {
        let route = || self.route.to_string();
        let started = Instant::now();
        let (origin, addr) = match connect::connect(self.origin, self.fastopen, self.connect_timeout, hello).await {
            Ok(ok) => ok,
            Err(e) => {
                let reason = e.close_reason().label().to_string();
                self.metrics.origin_connect_errors.get_or_create(&RouteReason { route: route(), reason }).inc();
                return Err(e);
            }
        };
        let connect_time = started.elapsed();
        let m = self.route_metrics;
        m.connect.observe(connect_time.as_secs_f64());
        report.origin_addr = Some(addr);
        report.connect_time = Some(connect_time);

        let up = Direction::new(m.bytes_up.clone());
        let down = Direction::new(m.bytes_down.clone());
        up.add(hello.len());
        let mut first_byte = None;
        let relay =
            relay::Relay { mode: self.mode, idle: self.idle_timeout, up: &up, down: &down, cancel: self.cancel };
        let end = relay.run(client, &origin, || first_byte = Some(self.accepted.elapsed())).await;
        if let Some(t) = first_byte {
            m.first_byte.observe(t.as_secs_f64());
        }
        report.first_byte = first_byte;
        report.bytes_up = up.bytes();
        report.bytes_down = down.bytes();
        Ok(match end {
            End::Done => CloseReason::Done,
            End::Idle => CloseReason::IdleTimeout,
            End::Reset(Side::Client) => CloseReason::ClientReset,
            End::Reset(Side::Origin) => CloseReason::OriginReset,
            End::Shutdown => CloseReason::Shutdown,
        })
    }
}
