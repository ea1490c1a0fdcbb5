//! The listening sockets: bound before the proxy starts (so tests can bind port 0, and a bad
//! configuration binds nothing), or taken over from an older process at an upgrade.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use tokio::net::TcpListener;

use crate::config::{Config, ListenerConfig};
use crate::transport::sockopt;
use crate::upgrade::RelayPair as Pair;

/// Listening sockets, bound before the proxy starts so that tests can bind port 0 and so that a
/// bad config never binds anything.
pub struct Bound {
    pub admin: TcpListener,
    pub listeners: Vec<Listener>,
}

/// One configured listener's sockets: TCP, and for HTTP/3 one UDP socket per worker at the same
/// address and port.
pub struct Listener {
    pub tcp: TcpListener,
    pub udp: Vec<std::net::UdpSocket>,
    /// One per UDP socket: how a newer process will relay this one's QUIC datagrams to it.
    pub relays: Vec<Pair>,
    /// After an upgrade, one per UDP socket: where the older process's datagrams go.
    pub to_old: Vec<OwnedFd>,
    pub config: ListenerConfig,
}

impl Bound {
    pub fn bind(config: &Config) -> std::io::Result<Self> {
        let admin = bind_plain(config.admin.listen)?;
        let listeners = config.listeners.iter().map(|l| bind_one(config, l)).collect::<std::io::Result<_>>()?;
        Ok(Self { admin, listeners })
    }

    /// The sockets of an upgrade ([`crate::upgrade`]): handed sockets where the configuration
    /// names the same address, bound afresh where it names a new one. Handed sockets the
    /// configuration no longer names are closed here (the old process closes its own).
    pub fn adopt(config: &Config, handed: crate::upgrade::Sockets) -> std::io::Result<Self> {
        let mut handed_listeners = handed.listeners;
        let admin = if handed.admin.0 == config.admin.listen {
            TcpListener::from_std(nonblocking(std::net::TcpListener::from(handed.admin.1))?)?
        } else {
            bind_plain(config.admin.listen)?
        };
        let mut listeners = Vec::with_capacity(config.listeners.len());
        for l in &config.listeners {
            let Some(at) = handed_listeners.iter().position(|h| h.listen == l.listen) else {
                listeners.push(bind_one(config, l)?);
                continue;
            };
            let h = handed_listeners.swap_remove(at);
            let tcp = nonblocking(std::net::TcpListener::from(h.tcp))?;
            let (udp, to_old) = match (l.http3, h.udp.is_empty()) {
                (false, _) => (Vec::new(), Vec::new()),
                (true, false) => {
                    // Steered again: the process that handed them over may predate steering.
                    let group: Vec<_> = h.udp.into_iter().map(std::net::UdpSocket::from).collect();
                    steer(&group, l.listen);
                    (group, h.relays)
                }
                (true, true) => (bind_udp_group(config, tcp.local_addr()?)?, Vec::new()),
            };
            let relays = pairs(udp.len())?;
            listeners.push(Listener { tcp: TcpListener::from_std(tcp)?, udp, relays, to_old, config: l.clone() });
        }
        Ok(Self { admin, listeners })
    }

    /// Duplicates of every socket, for the next upgrade.
    pub fn dup_sockets(&self) -> std::io::Result<crate::upgrade::Sockets> {
        use std::os::fd::AsFd;
        let admin = (self.admin.local_addr()?, self.admin.as_fd().try_clone_to_owned()?);
        let listeners = self
            .listeners
            .iter()
            .map(|l| {
                Ok(crate::upgrade::HandedListener {
                    listen: l.config.listen,
                    tcp: l.tcp.as_fd().try_clone_to_owned()?,
                    udp: l.udp.iter().map(|u| u.as_fd().try_clone_to_owned()).collect::<std::io::Result<_>>()?,
                    relays: l.relays.iter().map(|p| p.send.try_clone()).collect::<std::io::Result<_>>()?,
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(crate::upgrade::Sockets { admin, listeners })
    }

    /// Addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.tcp.local_addr().ok()).collect()
    }
}

fn bind_one(config: &Config, l: &ListenerConfig) -> std::io::Result<Listener> {
    let std = sockopt::bind_listener(l.listen, l.tcp_fastopen)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", l.listen)))?;
    // The same port as TCP's (port 0 in tests: the one TCP was given), so that one `Alt-Svc`
    // names both.
    let udp = if l.http3 { bind_udp_group(config, std.local_addr()?)? } else { Vec::new() };
    let relays = pairs(udp.len())?;
    Ok(Listener { tcp: TcpListener::from_std(std)?, udp, relays, to_old: Vec::new(), config: l.clone() })
}

/// A relay for each of `n` UDP sockets ([`crate::listener::quic::relay`]).
fn pairs(n: usize) -> std::io::Result<Vec<Pair>> {
    (0..n).map(|_| Pair::new()).collect()
}

/// HTTP/3: one UDP socket per worker at `addr`, in a reuseport group that steers each
/// connection's packets to the socket whose endpoint holds it. Without steering (a kernel that
/// refuses the program), a client whose address changes mid-connection has to reconnect.
fn bind_udp_group(config: &Config, addr: SocketAddr) -> std::io::Result<Vec<std::net::UdpSocket>> {
    let sockets = config.worker_count().max(1);
    let group = (0..sockets)
        .map(|_| sockopt::bind_udp(addr, sockets > 1))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on udp {addr}: {e}")))?;
    steer(&group, addr);
    Ok(group)
}

/// Attach the connection-ID steering program to a listener's UDP group (one program per group);
/// a kernel that refuses it leaves the hash, and a warning.
fn steer(group: &[std::net::UdpSocket], addr: SocketAddr) {
    if let (true, Some(first)) = (group.len() > 1, group.first()) {
        if let Err(e) = sockopt::steer_quic_by_connection_id(first) {
            tracing::warn!(listen = %addr, error = %e, "QUIC packets not steered by connection ID: clients that change address reconnect");
        }
    }
}

/// A received listening socket for tokio (it may come without `O_NONBLOCK`).
fn nonblocking(l: std::net::TcpListener) -> std::io::Result<std::net::TcpListener> {
    l.set_nonblocking(true)?;
    Ok(l)
}

fn bind_plain(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let std = sockopt::bind_listener(addr, 0)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    TcpListener::from_std(std)
}
