//! A node cut off from NATS without knowing it (see [`super::peers`]): the fence goes up once
//! per silence, and down again after `fence_for` if the silence lasts. The stalled connection
//! is dropped for new attempts: the client's pings do not find a dark link while anything is
//! sent (each command puts its ping off), and TCP would resume the old one only at its next
//! retransmission, seconds after the link is back.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{link, peers, Fleet};

/// Watch `fleet`'s silence until it stops or is dropped; `client` is its NATS connection.
pub(super) fn start(fleet: &Arc<Fleet>, client: async_nats::Client) {
    let (weak, stop, fence_for) = (Arc::downgrade(fleet), fleet.stop.clone(), fleet.config.fence_for);
    let reconnect = client;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(peers::WATCH);
        // (fenced for this silence, let go of it)
        let mut state = (false, false);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = stop.cancelled() => return,
            }
            let Some(fleet) = weak.upgrade() else { return };
            let Some(quiet) = fleet.peers.silence() else {
                state = (false, false);
                continue;
            };
            if !state.0 {
                state.0 = true;
                fleet.caches.fence().store(true, Ordering::Relaxed);
                tracing::warn!(?quiet, "fleet: no word back from NATS: no cache hits until caught up again");
                // (Not while the client is between connections already: see `next_server`.)
                link::next_server(&reconnect, "the connection is stalled");
            } else if !state.1 && quiet > peers::SILENT + fence_for {
                state.1 = true;
                fleet.caches.fence().store(false, Ordering::Relaxed);
                tracing::warn!(
                    ?quiet,
                    "fleet: still cut off from NATS: serving the local cache; purges made meanwhile apply when it is back"
                );
            }
        }
    });
}
