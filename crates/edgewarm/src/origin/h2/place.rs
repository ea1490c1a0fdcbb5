//! Placement: which standing connection a request rides, when the set grows for demand, and
//! which worker a new connection runs on.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::Request;
use tokio::time::Instant;

use super::{Conn, H2Upstream, Sent, State, UpstreamError};
use crate::origin::multiplexed::Held;
use crate::origin::seam::Affinity;

impl H2Upstream {
    /// Start a request: on the connection its client's requests rode before (`affinity`), else
    /// on this worker's least loaded connection with a free stream, else on another worker's
    /// (spill); if all are full, on a new connection (up to `max_connections`); else wait for
    /// room, bounded by the connect timeout (then a 503).
    ///
    /// `build` makes the request each time it is placed on a stream: h2 takes it whole, and a
    /// connection found going away at that moment means placing it again elsewhere.
    /// `affinity`: the client connection's hint (its last origin connection's id + 1, 0 for
    /// none), updated here.
    pub(crate) async fn send(
        self: &Arc<Self>,
        build: &mut (dyn FnMut() -> Request<()> + Send),
        end_of_stream: bool,
        affinity: &Affinity,
    ) -> Result<Sent, UpstreamError> {
        // Waiting for room is bounded like a connect, from the moment the request came (a
        // connect it spilled into counts too): a busy origin gets a 503, not a hang.
        let entered = Instant::now();
        let mut deadline = None;
        // Registered only once a look found no room (see `Room`): the common case, a free
        // place on the first look, touches no waiter list.
        let mut waiter = None;
        loop {
            if self.core.retired.is_cancelled() {
                return Err(UpstreamError::Retired);
            }
            let (best, open) = {
                let mut st = self.state();
                // The reservation is taken under the lock.
                let least = |cs: &mut dyn Iterator<Item = &Arc<Conn>>| cs.min_by_key(|c| c.active_streams()).cloned();
                // A connection of this worker first (see `crate::workers`): the request's
                // frames, h2's stream state and the wake-ups then stay on one core (crossing
                // cores costs CPU; docs/benchmarks-history.md has the measurement).
                // Among its own, the one this client's requests rode before, while it has
                // room: a client's burst (a page's sub-resources) goes out on one connection in
                // one write and comes back together, and a packet lost on another connection
                // does not hold it (TCP delivers in order, so a loss stalls every stream on its
                // connection). Else the least loaded (ties: the oldest), so that clients, and
                // the stalls a loss causes, are spread over the connections (first fit put
                // every client on the oldest: docs/benchmarks.md, "standing connections under
                // loss").
                let worker = crate::workers::current();
                let mine = |c: &&Arc<Conn>| !c.retiring() && c.worker == worker;
                let pinned = affinity.conn.load(Ordering::Relaxed);
                let local = st
                    .conns
                    .iter()
                    .filter(mine)
                    .find(|c| c.id.wrapping_add(1) == pinned)
                    .and_then(|c| Some((c.try_reserve()?, c.clone())))
                    .or_else(|| {
                        let c = least(&mut st.conns.iter().filter(mine))?;
                        Some((c.try_reserve()?, c))
                    });
                // Then another worker's connection (spill): the least loaded (it usually has
                // room: tried alone first, since each look at a stream limit takes h2's lock),
                // then any with room. A full worker does not open a connection of its own
                // while another worker's has room: that was measured to gain nothing
                // (docs/benchmarks-history.md, "placement").
                let best = local
                    .or_else(|| {
                        let c = least(&mut st.conns.iter().filter(|c| !c.retiring()))?;
                        Some((c.try_reserve()?, c))
                    })
                    .or_else(|| {
                        let c = least(&mut st.conns.iter().filter(|c| c.has_room()))?;
                        Some((c.try_reserve()?, c))
                    })
                    .map(|(slot, c)| (c, slot));
                let live = st.conns.iter().filter(|c| !c.retiring()).count();
                // Nothing standing and the origin refusing its connects: 503 now, as prewarm
                // pools and HTTP/1.1 answer, not after `timeouts.connect` of waiting for a
                // connection the backoff will not open (issue 57). The upkeep keeps probing;
                // the first connect that succeeds serves again. A silent origin is waited for.
                if best.is_none() && live == 0 {
                    if let Some(why) = st.connects.refusing() {
                        return Err(UpstreamError::Down(format!("{why} (the origin's connects are failing)")));
                    }
                }
                let total = live + st.connects.opening;
                // Open another connection only if none is being opened (it will have room:
                // at start-up every early request would otherwise open its own), the origin is
                // not in backoff, and the ceiling allows. Decided and counted under the lock,
                // so two requests cannot both spill past the ceiling.
                let backoff = st.connects.in_backoff(Instant::now());
                let open =
                    best.is_none() && st.connects.opening == 0 && !backoff && total < st.settings.max_connections;
                if open {
                    st.connects.opening += 1;
                    // Opened on this worker (the task below runs here): its requests need it.
                    if let Some(w) = worker {
                        st.opening_on.push(w);
                    }
                }
                (best, open)
            };
            if let Some((conn, slot)) = best {
                match conn.send(build(), end_of_stream) {
                    Ok((response, body, reused)) => {
                        affinity.conn.store(conn.id.wrapping_add(1), Ordering::Relaxed);
                        return Ok(Sent { response, body, slot, conn_id: conn.id, reused });
                    }
                    // The connection is going away (GOAWAY seen) or broken: the request was
                    // never sent, so it may go on another connection.
                    Err(e) if e.is_go_away() || e.is_io() || e.reason().is_some() => {
                        conn.retire();
                        continue;
                    }
                    Err(e) => return Err(UpstreamError::H2(e)),
                }
            }
            if open {
                self.core.metrics.upstream.spills.get_or_create(&self.core.labels).inc();
                // In its own task: if this request is dropped (its client went away) the
                // connect still finishes its bookkeeping, and the connection joins the set.
                let me = self.clone();
                match tokio::spawn(async move { me.open(crate::workers::current(), true).await }).await {
                    Ok(Ok(_)) => continue,
                    Ok(Err(e)) if self.live() == 0 => return Err(e),
                    _ => {}
                }
            }
            let deadline = *deadline.get_or_insert_with(|| entered + self.state().connect_timeout);
            match waiter.as_mut() {
                // First time full: register, then look again before sleeping.
                None => waiter = Some(self.room.wait()),
                Some(w) => {
                    self.core.wake.notify_one();
                    if tokio::time::timeout_at(deadline, w.notified.as_mut()).await.is_err() {
                        return Err(self.waited_out());
                    }
                    // Woken: register afresh for the next round (a `Notified` fires once).
                    waiter = Some(self.room.wait());
                }
            }
        }
    }

    /// Why a request waited `timeouts.connect` for a place and found none: how the last
    /// connect failed, if one did, else that every connection was full or still opening
    /// (never a TLS handshake timeout that did not happen).
    fn waited_out(&self) -> UpstreamError {
        let st = self.state();
        let live = st.conns.iter().any(|c| !c.retiring());
        UpstreamError::Down(match st.connects.last_failure() {
            Some(last) if !live => format!("none opened within timeouts.connect; the last connect: {last}"),
            _ if live => "every origin connection at its stream limit for timeouts.connect".into(),
            _ => "none opened within timeouts.connect".into(),
        })
    }

    /// The worker for a new standing connection: the one with the fewest of this upstream's
    /// connections, live or opening, so each worker's requests find one of their own (ties go
    /// round robin, so that routes' first connections do not all land on worker 0).
    pub(super) fn place(&self, st: &mut State) -> Option<usize> {
        let n = self.workers.len();
        let (start, _) = self.workers.next()?;
        let load = |w: usize| {
            st.conns.iter().filter(|c| !c.retiring() && c.worker == Some(w)).count()
                + st.opening_on.iter().filter(|&&o| o == w).count()
        };
        let best = (0..n).map(|k| (start + k) % n).min_by_key(|&w| load(w))?;
        st.opening_on.push(best);
        Some(best)
    }
}
