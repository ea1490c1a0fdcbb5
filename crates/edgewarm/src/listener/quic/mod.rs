//! HTTP/3 listeners (`listeners[].http3`): a QUIC endpoint on a UDP socket at the TCP
//! listener's address and port, serving that listener's `http` routes. Each worker's endpoint
//! is quinn's (its endpoint task, a task per connection): [`accept_loop`] decides Retry and the
//! limits, and [`connection()`] what is around a connection (the route, 0-RTT, the handshake's
//! count, the log line).
//!
//! One driver, chosen by measurement. A loop of our own on quinn-proto (each worker stepping its
//! connections in place, no task or channel per connection) ran beside quinn's as the default
//! for a while: it took about 2 % fewer instructions on short answers, yet used 6 to 10 % more of
//! the edge's CPU on a real browser's page (docs/benchmarks.md), with as many wake-ups and
//! system calls a request; a browser is who the edge serves, and quinn's driver is code we
//! do not keep. The patches to quinn-proto's behaviour ([`padding`], [`initial`],
//! [`next_keys`]) sit in the TLS session and packet keys, below any driver.
//!
//! A connection attempt goes: address check (a Retry when unvalidated handshakes pile up) →
//! connection limit → QUIC handshake, whose server name picks the route with the TCP lookup
//! rules ([`tls`]) → on a worker, like a TCP connection → the route's HTTP/3 driver
//! ([`crate::action::http::serve_quic`]) → one access-log line with `alpn=h3`.
//!
//! One endpoint per worker ([`serve`]), each with its own socket on the shared port. Datagrams
//! that cannot be QUIC for us are counted as they arrive ([`socket`]) and dropped by quinn
//! before they cost more than a parse. Across an upgrade, the new process relays the old one's
//! datagrams to it ([`relay`]).

#[cfg(test)]
mod assumptions;
mod cid;
mod connection;
mod initial;
mod next_keys;
pub(crate) mod padding;
pub(crate) mod relay;
mod socket;
mod tls;
mod zero_rtt;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::Context;
use crate::config::ListenerConfig;
use crate::metrics::{
    ListenerLabel, QuicHandshake as Outcome, QuicRelayLabel, QuicRelayed, QuicResult, QuicZeroRttLabel, ZeroRtt,
};
use connection::{connection, Connecting, Handshaking};

/// Handshakes in progress (accepted, not yet complete) above which a client whose address is
/// not validated yet is sent a Retry: it costs an honest client one round trip, and a spoofed
/// flood of Initial packets nothing but the Retry itself (RFC 9000 §8.1).
const RETRY_ABOVE: usize = 32;

/// What a listener's endpoints share: one connection limit and one count of handshakes in
/// progress for the listener, whichever worker a client lands on.
struct Shared {
    config: Arc<ListenerConfig>,
    limit: Arc<Semaphore>,
    handshaking: Arc<AtomicUsize>,
    /// The listener's lists and per-client cap, counting with its TCP side.
    admission: crate::limits::admission::Admission,
}

/// An accept loop, to be awaited until it has stopped accepting.
pub(crate) type Loop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Serve a listener's HTTP/3: one endpoint per UDP socket (they share the port through
/// SO_REUSEPORT), each on its own worker, so that a QUIC connection's datagrams, its packets'
/// processing and its requests stay on one core as a TCP connection's do. The endpoints share
/// one server configuration: one session store (a ticket resumes whichever worker the client
/// lands on next time) and one key for address-validation tokens.
///
/// A client whose address or port changes mid-connection (NAT rebinding, migration) would land
/// on another worker's socket by the kernel's hash, whose endpoint does not know the connection.
/// So the group steers packets by connection ID ([`crate::transport::sockopt::steer_quic_by_connection_id`],
/// attached when the sockets are bound), and each endpoint's IDs name its socket ([`cid`]).
pub(crate) fn serve(
    sockets: Vec<std::net::UdpSocket>,
    relays: Vec<crate::upgrade::RelayPair>,
    to_old: Vec<std::os::fd::OwnedFd>,
    config: &ListenerConfig,
    cx: &Arc<Context>,
    sessions: Arc<crate::tls::sessions::SessionStore>,
) -> std::io::Result<Vec<Loop>> {
    let snapshot = cx.snapshot.borrow().clone();
    let settings = tls::QuicSettings {
        streams: crate::transport::MAX_CLIENT_STREAMS,
        idle: snapshot.timeouts.idle,
        max_connections: config.max_connections,
        congestion: config.quic_congestion.clone(),
    };
    // Labelled like the endpoints' own metrics: the address bound (port 0 resolved).
    let bound =
        sockets.first().and_then(|s| s.local_addr().ok()).map_or_else(|| config.listen.to_string(), |a| a.to_string());
    let quic = &cx.metrics.quic;
    let zero_rtt = |result| quic.zero_rtt.get_or_create(&QuicZeroRttLabel { listener: bound.clone(), result }).clone();
    let (accepted, rejected) = (zero_rtt(ZeroRtt::Accepted), zero_rtt(ZeroRtt::Rejected));
    let resumed = quic.resumed.get_or_create(&ListenerLabel { listener: bound }).clone();
    let server =
        tls::server_config(cx.snapshot.clone(), tls::sessions(sessions, resumed, rejected), accepted, &settings)
            .map_err(std::io::Error::other)?;
    let clients = cx.clients.listener(
        sockets.first().and_then(|s| s.local_addr().ok()).map_or_else(|| config.listen.to_string(), |a| a.to_string()),
        config.ipv6_prefix,
    );
    let shared = Arc::new(Shared {
        config: Arc::new(config.clone()),
        limit: Arc::new(Semaphore::new(config.max_connections)),
        handshaking: Arc::new(AtomicUsize::new(0)),
        admission: crate::limits::admission::Admission::new(config, clients, cx.metrics.limited.clone()),
    });
    let mut loops: Vec<Loop> = Vec::new();
    let keys = Arc::new(cx.quic.keys());
    let mut to_old = to_old.into_iter();
    for ((i, socket), pair) in sockets.into_iter().enumerate().zip(relays) {
        let (server, shared, cx2, keys) = (server.clone(), shared.clone(), cx.clone(), keys.clone());
        let to_old = to_old.next();
        let run = async move {
            let parts = endpoint_parts(socket, i, (pair, to_old), &keys, &cx2);
            let endpoint = parts.and_then(|(socket, config)| {
                let runtime = Arc::new(quinn::TokioRuntime);
                quinn::Endpoint::new_with_abstract_socket(config, Some(server), socket, runtime)
            });
            match endpoint {
                Ok(endpoint) => accept_loop(endpoint, shared, cx2).await,
                Err(e) => tracing::error!(error = %e, "cannot serve HTTP/3 on a worker"),
            }
        };
        match cx.workers.get(i) {
            Some(worker) => {
                let handle = worker.spawn(run);
                loops.push(Box::pin(async move {
                    let _ = handle.await;
                }));
            }
            None => loops.push(Box::pin(run)),
        }
    }
    Ok(loops)
}

/// The socket and endpoint configuration for the UDP socket at `index` in its listener's group,
/// in the runtime that calls it (the endpoint's driver runs there). Its connection IDs name the
/// socket ([`cid`]), so their packets come back to it from any client address. Undecodable
/// datagrams are counted on the way in ([`socket`]).
fn endpoint_parts(
    socket: std::net::UdpSocket,
    index: usize,
    (pair, to_old): (crate::upgrade::RelayPair, Option<std::os::fd::OwnedFd>),
    keys: &crate::upgrade::QuicKeys,
    cx: &Context,
) -> std::io::Result<(Arc<dyn quinn::AsyncUdpSocket>, quinn::EndpointConfig)> {
    let listener = socket.local_addr()?.to_string();
    let socket = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)?;
    // Past 255 sockets a byte cannot name one: those connections' packets go by the hash, and
    // are not relayed across an upgrade.
    let index = u8::try_from(index).ok();
    let relayed =
        |result| cx.metrics.quic.relayed.get_or_create(&QuicRelayLabel { listener: listener.clone(), result }).clone();
    // Every earlier process's datagrams go to the latest, which passes on what is not its own.
    let to_old = match (to_old, keys.earlier.is_empty(), index) {
        (Some(fd), false, Some(index)) => Some(relay::ToOld::new(
            fd,
            cid::PreviousCids::new(index, &keys.earlier),
            relayed(QuicRelayed::Sent),
            relayed(QuicRelayed::Dropped),
        )?),
        _ => None,
    };
    let relay = socket::Relay {
        from_next: tokio::net::UnixDatagram::from_std(pair.receive)?,
        handed_over: cx.quic.handed_over.clone(),
        to_old,
    };
    let socket: Arc<dyn quinn::AsyncUdpSocket> =
        Arc::new(socket::Counted::new(socket, &cx.metrics.quic, &listener, relay));
    let reset = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &keys.reset);
    let mut config = quinn::EndpointConfig::new(Arc::new(reset));
    if let Some(index) = index {
        let (key, earlier, family) = (keys.cid, keys.earlier.clone(), keys.family_accepted());
        config.cid_generator(move || Box::new(cid::SocketCids::new(index, key, &earlier, &family)));
    }
    Ok((socket, config))
}

/// The `route` label of the HTTP/3 session store's replay counter (one store per listener).
pub(crate) const SESSIONS_LABEL: &str = "<h3>";

async fn accept_loop(endpoint: quinn::Endpoint, shared: Arc<Shared>, cx: Arc<Context>) {
    let Ok(local) = endpoint.local_addr() else { return };
    let count =
        |result| cx.metrics.quic.handshakes.get_or_create(&QuicResult { listener: local.to_string(), result }).inc();
    tracing::info!(listen = %local, worker = ?crate::workers::current(), "listening for HTTP/3 (QUIC)");
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i { Some(i) => i, None => break },
            () = cx.stop.cancelled() => break,
        };
        // Checked before a Retry is considered: a refused address is not sent one. A place
        // taken for a client then asked to retry is given back at once (dropped).
        let Ok(place) = shared.admission.check(incoming.remote_address().ip()) else {
            count(Outcome::Refused);
            incoming.refuse();
            continue;
        };
        let piling_up = shared.handshaking.load(Ordering::Relaxed) >= RETRY_ABOVE;
        // `may_retry` is false for a client already answering a Retry: it is not sent another.
        if piling_up && !incoming.remote_address_validated() && incoming.may_retry() {
            count(Outcome::Retry);
            let _ = incoming.retry();
            continue;
        }
        let Ok(permit) = shared.limit.clone().try_acquire_owned() else {
            count(Outcome::Refused);
            incoming.refuse();
            continue;
        };
        let guard = Handshaking::enter(&shared.handshaking);
        // A failed accept still gets its connection's count and access-log line, in the task.
        let remote = incoming.remote_address();
        let connecting = Connecting { remote, connecting: incoming.accept().map_err(|e| e.to_string()) };
        // Served here, on this endpoint's worker.
        let task = connection(connecting, local, guard, shared.config.clone(), cx.clone(), (permit, place));
        tokio::spawn(cx.tracker.track_future(task));
    }
    // No new connections; those open finish on `stop` (GOAWAY) or `cut`.
    endpoint.set_server_config(None);
    // A connection's task ends as it closes, but its CONNECTION_CLOSE is sent by quinn after
    // that (and sent again to any packet in its closing period): the drain waits for the
    // endpoint to be idle, or the process could exit first and leave the client to its idle
    // timeout.
    cx.quic.keep(endpoint.clone());
    cx.tracker.spawn(async move { endpoint.wait_idle().await });
}
