//! The node's NATS connection. One attempt is bounded whole by `fleet.connect_timeout`: the
//! TCP connect, TLS, NATS's greeting (INFO, CONNECT, PING/PONG: async-nats bounds them all by
//! its `connection_timeout` since nats.rs #1544; 0.46 bounded the TCP connect alone, and a
//! server that accepted and said nothing held a node for good), and the first JetStream
//! answer ([`Link::silent_jetstream`]). The servers of `fleet.nats` are tried in turn, one
//! after the other, never the same one twice in a row while another is listed.
//!
//! A new connection, whatever ended the last one (a NATS restart, a reset link, the watch's
//! drop of a stalled one), raises the fence and restarts the purge stream at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::Fleet;

/// The state of the current connection, as the purge stream needs it.
#[derive(Default)]
pub(super) struct Link {
    /// When the current connection was made.
    since: Mutex<Option<Instant>>,
    /// JetStream has answered on the current connection.
    answered: AtomicBool,
    /// Whole turns of the servers failed since the last connection (each waits a little
    /// longer before the next, up to 0.5 s).
    rounds: AtomicUsize,
}

impl Link {
    fn connected(&self) {
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.answered.store(false, Ordering::Relaxed);
        self.rounds.store(0, Ordering::Relaxed);
    }

    /// The wait before trying server `index` of the turn: none to move on to the next server
    /// (a node waits `connect_timeout` per server, not a growing backoff each), a short and
    /// growing one to start a turn again (a link back is used at once, the client's own
    /// backoff grows to seconds).
    fn delay(&self, index: usize, first: bool) -> Duration {
        if index != 0 || first {
            return Duration::ZERO;
        }
        let rounds = self.rounds.fetch_add(1, Ordering::Relaxed) + 1;
        Duration::from_millis(100 * rounds.min(5) as u64)
    }

    pub(super) fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// The current connection has been up `limit` and JetStream has not answered on it yet:
    /// the attempt is over, the next server is due.
    pub(super) fn silent_jetstream(&self, limit: Duration) -> bool {
        let since = *self.since.lock().unwrap_or_else(|p| p.into_inner());
        !self.answered.load(Ordering::Relaxed) && since.is_some_and(|at| at.elapsed() >= limit)
    }
}

/// How `fleet` connects to NATS, and what it does on the client's events.
pub(super) fn options(fleet: &Arc<Fleet>) -> async_nats::ConnectOptions {
    let weak = Arc::downgrade(fleet);
    let turn = Arc::new(AtomicUsize::new(0));
    async_nats::ConnectOptions::new()
        .name(format!("edgewarm {}", fleet.config.name))
        .retry_on_initial_connect()
        .connection_timeout(fleet.config.connect_timeout)
        // The servers listed, not those a cluster's INFO advertises (often addresses a node
        // cannot reach): `fleet.nats` is the turn.
        .ignore_discovered_servers()
        .reconnect_to_server_callback({
            let weak = weak.clone();
            move |servers, _| {
                let (turn, weak) = (turn.clone(), weak.clone());
                async move {
                    let at = turn.fetch_add(1, Ordering::Relaxed);
                    let index = at % servers.len().max(1);
                    let next = servers.get(index)?;
                    let delay = weak.upgrade().map_or(Duration::ZERO, |f| f.link.delay(index, at == 0));
                    Some(async_nats::ReconnectToServer { addr: next.addr.clone(), delay: Some(delay) })
                }
            }
        })
        .event_callback(move |event| {
            let weak = weak.clone();
            async move {
                let Some(fleet) = weak.upgrade() else { return };
                match event {
                    async_nats::Event::Connected => {
                        fleet.link.connected();
                        fleet.connected.store(true, Ordering::Relaxed);
                        fleet.connects.fetch_add(1, Ordering::Relaxed);
                        // Back from an absence: no hit until what it missed is applied.
                        fleet.caches.fence().store(true, Ordering::Relaxed);
                        fleet.reconnected.notify_one();
                        tracing::info!("fleet: connected to NATS");
                    }
                    async_nats::Event::Disconnected => {
                        fleet.connected.store(false, Ordering::Relaxed);
                        tracing::warn!("fleet: disconnected from NATS: purges wait until it is back");
                    }
                    other => tracing::debug!(event = %other, "fleet: NATS event"),
                }
            }
        })
}

/// Drop `client`'s connection for the next server's, unless it is already between
/// connections: a reconnection asked then would be carried out once connected, throwing the
/// fresh connection away (and the purge stream's first requests with it).
pub(super) fn next_server(client: &async_nats::Client, why: &'static str) {
    if client.connection_state() != async_nats::connection::State::Connected {
        return;
    }
    tracing::warn!("fleet: {why}: trying the next NATS server");
    let client = client.clone();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), client.force_reconnect()).await;
    });
}
