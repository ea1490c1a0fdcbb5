//! A fleet of edges that purges as one, through NATS JetStream (`fleet:`): a purge made on any
//! node is appended to a stream ([`message`]), applied at once by the node asked, and applied
//! by every node from its own durable consumer, the one asked included, so all apply the same
//! purges in the same order, and a node that was away (restarted, cut off) replays what it
//! missed. The connection to NATS, its bounds and its servers' turn: [`link`]. The nodes tell
//! each other what they have applied ([`peers`]), which is what `?wait=fleet` waits on.
//!
//! ACME for the fleet ([`acme_store`]): one account and one certificate per name for every
//! node, each name ordered by one node at a time, challenges answered by any.
//!
//! A node that stops hearing itself through NATS takes itself for cut off ([`watch`]).
//!
//! The fleet's ticket keys ([`tickets`]): shared and rotated through a key-value bucket, so a
//! client resumes its session on any node.
//!
//! The cache's fence: while a node has not caught up with the stream (at start, and after a
//! reconnection), its caches serve no stored response (they pass requests to the origin), so
//! nothing purged while it was away is served. NATS unreachable at start: after `catch_up` the
//! node serves its local state and catches up once it connects. A node away longer than the
//! stream keeps purges (`keep`) cannot know what it missed: it drops its caches (logged,
//! `edgewarm_fleet_cache_drops_total`).

mod acme_store;
mod bucket;
mod link;
mod message;
mod peers;
mod tickets;
mod watch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use crate::cache::{Caches, Purge};
use crate::config::FleetConfig;
use crate::tls::process_keys::ProcessKeys;
use message::PurgeMessage;
use peers::{Peers, Waited};

/// How long `?wait=fleet` waits for the live nodes to apply a purge.
const WAIT_FLEET: Duration = Duration::from_secs(5);
/// A purge delivered and not acknowledged for this long is delivered again. Short: purges sent
/// into a connection that went dark are redelivered as soon as the node is back, before the
/// purges made after them (nats-server serves redeliveries first).
const ACK_WAIT: Duration = Duration::from_secs(2);

/// A purge could not be shared.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("not connected to NATS: the purge was not made (retry, or purge each node locally)")]
    NotConnected,
    #[error("the purge stream did not take it: {0}")]
    Publish(String),
}

pub struct Fleet {
    config: FleetConfig,
    jetstream: OnceCell<jetstream::Context>,
    caches: Arc<Caches>,
    /// The process's ticket keys, to follow the fleet's (none: a `tls.ticket_keys` file rules).
    tickets: Option<Arc<ProcessKeys>>,
    drops: prometheus_client::metrics::counter::Counter,
    /// The stream sequence up to which this node has applied every purge.
    applied: AtomicU64,
    /// Purges applied beyond `applied` (a redelivery fills the gap below them).
    ahead: std::sync::Mutex<std::collections::BTreeSet<u64>>,
    connected: AtomicBool,
    /// Connections made to NATS (the first, then each reconnection).
    connects: AtomicU64,
    link: link::Link,
    /// Caught up with the stream once: the start fence is over (later fences are lowered by
    /// catching up again, or by `fence_for`, never by the start's `catch_up`).
    caught_up_once: AtomicBool,
    peers: Peers,
    /// A purge was applied: tell the others now, not at the next heartbeat.
    signal: Arc<tokio::sync::Notify>,
    /// Connected again after a disconnection: the node takes its place in the stream anew.
    reconnected: tokio::sync::Notify,
    /// Cancelled when the server shuts down: a draining process applies no more purges (its
    /// successor, or its next start, replays them from the node's place in the stream).
    stop: tokio_util::sync::CancellationToken,
}

impl Fleet {
    /// Start the node's part of the fleet (inside the runtime): the fence is raised until the
    /// node has caught up. `tickets`: the keys that follow the fleet's, if any.
    pub fn start(
        config: FleetConfig,
        caches: Arc<Caches>,
        tickets: Option<Arc<ProcessKeys>>,
        drops: prometheus_client::metrics::counter::Counter,
    ) -> Arc<Self> {
        caches.fence().store(true, Ordering::Relaxed);
        let fleet = Arc::new(Self {
            peers: Peers::new(&config.name),
            config,
            jetstream: OnceCell::new(),
            caches,
            tickets,
            drops,
            applied: AtomicU64::new(0),
            ahead: std::sync::Mutex::default(),
            connected: AtomicBool::new(false),
            connects: AtomicU64::new(0),
            link: link::Link::default(),
            caught_up_once: AtomicBool::new(false),
            signal: Arc::default(),
            reconnected: tokio::sync::Notify::new(),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        let weak = Arc::downgrade(&fleet);
        let stop = fleet.stop.clone();
        tokio::spawn(async move {
            if let Some(fleet) = weak.upgrade() {
                tokio::select! {
                    () = fleet.run() => {}
                    () = stop.cancelled() => {}
                }
            }
        });
        let weak = Arc::downgrade(&fleet);
        let catch_up = fleet.config.catch_up;
        tokio::spawn(async move {
            tokio::time::sleep(catch_up).await;
            let Some(fleet) = weak.upgrade() else { return };
            // Caught up already: a fence up now is a cut's, not the start's.
            if !fleet.caught_up_once.load(Ordering::Relaxed) && fleet.caches.fence().swap(false, Ordering::Relaxed) {
                tracing::warn!(
                    "fleet: not caught up with the purge stream after {catch_up:?} (NATS unreachable?): serving \
                     the local cache, and catching up once connected"
                );
            }
        });
        fleet
    }

    /// Where ACME keeps its account, certificates and challenge answers: the fleet's bucket.
    pub fn acme_stores(self: &Arc<Self>) -> Arc<crate::acme::StoreMaker> {
        let (fleet, bucket, me) =
            (Arc::downgrade(self), format!("{}_ACME", self.config.stream), self.config.name.clone());
        Arc::new(move |local, folder| {
            Arc::new(acme_store::KvStore::new(fleet.clone(), bucket.clone(), local, folder, &me))
                as Arc<dyn crate::acme::store::Store>
        })
    }

    /// Stop consuming purges and talking to the fleet (shutdown, upgrade).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    fn subject(&self) -> String {
        format!("edgewarm.{}.purge", self.config.stream)
    }

    /// Append `what` to the fleet's stream, then apply it here: its sequence once the stream
    /// has stored it, and how many entries this node's caches dropped.
    ///
    /// Applied here before the answer, not only when the stream hands it back (it still does:
    /// the stream keeps the fleet's order, and a purge applies twice harmlessly): the node that
    /// acknowledged never serves the object again, even if NATS dies right after storing it.
    pub async fn purge(&self, what: &Purge) -> Result<(u64, u64), FleetError> {
        let js =
            self.jetstream.get().filter(|_| self.connected.load(Ordering::Relaxed)).ok_or(FleetError::NotConnected)?;
        let body = serde_json::to_vec(&PurgeMessage::from(what)).map_err(|e| FleetError::Publish(e.to_string()))?;
        let ack = js.publish(self.subject(), body.into()).await.map_err(|e| FleetError::Publish(e.to_string()))?;
        let ack = ack.await.map_err(|e| FleetError::Publish(e.to_string()))?;
        Ok((ack.sequence, self.caches.purge(what)))
    }

    /// Wait until every live node has applied `seq` (bounded): the nodes that have, those that
    /// had not when the wait ended, and those not waited for (silent: fenced themselves).
    pub async fn wait_fleet(&self, seq: u64) -> (Vec<String>, Vec<String>, Vec<String>) {
        let Waited { applied, missing, silent } = self.peers.wait_applied(seq, WAIT_FLEET).await;
        (applied, missing, silent)
    }

    /// `/fleet`.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.config.name,
            "connected": self.connected.load(Ordering::Relaxed),
            "connects": self.connects.load(Ordering::Relaxed),
            "applied": self.applied.load(Ordering::Relaxed),
            "caught_up": !self.caches.fence().load(Ordering::Relaxed),
            // Whose keys tickets are made with: the fleet's, the node's own (not yet joined),
            // or the `tls.ticket_keys` file's.
            "ticket_keys": match &self.tickets {
                Some(keys) if keys.following() => "fleet",
                Some(_) => "own",
                None => "file",
            },
            "peers": self.peers.status(),
        })
    }

    async fn run(self: Arc<Self>) {
        let options = link::options(&self);
        let client = match options.connect(self.config.nats.clone()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "fleet: cannot use the NATS servers: purges stay local to this node");
                return;
            }
        };
        let js = jetstream::new(client.clone());
        let _ = self.jetstream.set(js.clone());
        let (stop, peers) = (
            self.stop.clone(),
            peers::run(Arc::downgrade(&self), client.clone(), self.config.stream.clone(), self.signal.clone()),
        );
        tokio::spawn(async move {
            tokio::select! {
                () = peers => {}
                () = stop.cancelled() => {}
            }
        });
        watch::start(&self, client.clone());
        if let Some(keys) = self.tickets.clone() {
            let (js, bucket, stop) = (js.clone(), tickets::bucket(&self.config.stream), self.stop.clone());
            let follow = async move {
                loop {
                    if let Err(e) = tickets::keep(&js, &bucket, &keys).await {
                        tracing::warn!(error = %e, "fleet: ticket keys: retrying in a second");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            };
            tokio::spawn(async move {
                tokio::select! {
                    () = follow => {}
                    () = stop.cancelled() => {}
                }
            });
        }
        // The stream's requests wait at most `connect_timeout` for their answer: one lost with
        // a dropped connection costs that, not the client's 5 s.
        let mut quick = js.clone();
        quick.set_timeout(self.config.connect_timeout);
        loop {
            // A connection made before this start is no news to it (a stored wake-up is taken).
            let _ = tokio::time::timeout(Duration::ZERO, self.reconnected.notified()).await;
            let outcome = tokio::select! {
                outcome = self.consume(&quick) => outcome,
                // Connected again, whatever the stream was waiting on: what was sent into the
                // old connection would come back only as slow redeliveries, and a request sent
                // into it never: start again at once.
                () = self.reconnected.notified() => Err("connected again: taking its place anew".into()),
            };
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "fleet: purge stream: starting again");
            }
            if self.link.silent_jetstream(self.config.connect_timeout) {
                link::next_server(&client, "JetStream did not answer within connect_timeout");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Apply the stream's purges from this node's durable consumer, for as long as it flows.
    async fn consume(&self, js: &jetstream::Context) -> Result<(), String> {
        let stream = js
            .get_or_create_stream(stream::Config {
                name: self.config.stream.clone(),
                subjects: vec![self.subject()],
                max_age: self.config.keep,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        self.link.answered();
        let config = |from: Option<u64>| pull::Config {
            durable_name: Some(self.config.name.clone()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            deliver_policy: from.map_or(jetstream::consumer::DeliverPolicy::All, |start_sequence| {
                jetstream::consumer::DeliverPolicy::ByStartSequence { start_sequence }
            }),
            ..Default::default()
        };
        let name = &self.config.name;
        // Made anew (gone: deleted by hand, or a start again cut between delete and create
        // below): from where this node is, not the stream's first purge.
        let mine = self.applied.load(Ordering::Relaxed);
        let mut consumer: jetstream::consumer::Consumer<pull::Config> = stream
            .get_or_create_consumer(name, config((mine > 0).then_some(mine + 1)))
            .await
            .map_err(|e| e.to_string())?;
        // Purges the server sent into a connection that went dark wait for redelivery, a few
        // at a time, interleaved with newer ones. Back from such a cut, the node's place is
        // made again right after the last purge it applied with none missing below: what it
        // missed comes at once and in order.
        let (unacknowledged, acked) = {
            let info = consumer.info().await.map_err(|e| e.to_string())?;
            (info.num_ack_pending, info.ack_floor.stream_sequence)
        };
        if unacknowledged > 0 {
            let from = self.applied.load(Ordering::Relaxed).max(acked) + 1;
            stream.delete_consumer(name).await.map_err(|e| e.to_string())?;
            consumer = stream.create_consumer(config(Some(from))).await.map_err(|e| e.to_string())?;
            // Everything from `from` on comes again.
            self.ahead.lock().unwrap_or_else(|p| p.into_inner()).clear();
            tracing::info!(from, unacknowledged, "fleet: replaying the purge stream from where this node is");
        }
        // Purges this node has not applied that the stream no longer holds (away longer than
        // `keep`, or the stream purged by hand): nothing says what they were, so everything goes.
        // What this node has applied: its own count once it applied something, else (just
        // started) the server's record of its consumer.
        let first = stream.cached_info().state.first_sequence;
        let floor = consumer.info().await.map_err(|e| e.to_string())?.ack_floor.stream_sequence;
        let known = match self.applied.load(Ordering::Relaxed) {
            0 => floor,
            mine => mine,
        };
        self.raise_applied(known.max(first.saturating_sub(1)));
        if first > known.saturating_add(1) {
            let dropped = self.caches.purge(&Purge::Prefix(String::new()));
            self.drops.inc();
            tracing::warn!(
                applied = known,
                kept_from = first,
                dropped,
                "fleet: the purge stream no longer holds purges this node missed: its caches are dropped"
            );
        }
        let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
        // Caught up already (nothing pending)? Checked now and whenever no message came for
        // a moment, since a node with nothing to replay gets no message to learn it from.
        self.check_caught_up(&mut consumer).await;
        loop {
            // (A reconnection ends this in `run`, wherever it waits.)
            let next = tokio::time::timeout(Duration::from_millis(200), messages.next()).await;
            let message = match next {
                Err(_) => {
                    self.check_caught_up(&mut consumer).await;
                    continue;
                }
                Ok(None) => return Err("the consumer ended".into()),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(m))) => m,
            };
            let (seq, pending) = match message.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(e) => return Err(e.to_string()),
            };
            match PurgeMessage::parse(&message.payload) {
                Ok(what) => {
                    let purged = self.caches.purge(&what);
                    tracing::info!(seq, ?what, purged, "fleet purge applied");
                }
                // Idempotent stream, hostile or newer writers: skipped, never a crash.
                Err(e) => tracing::warn!(seq, error = %e, "fleet: a purge message that does not parse: skipped"),
            }
            message.ack().await.map_err(|e| e.to_string())?;
            self.record_applied(seq);
            self.signal.notify_one();
            if pending == 0 {
                // Nothing undelivered; whether anything delivered is still unacknowledged
                // (sent into a connection that died) only the server knows.
                self.check_caught_up(&mut consumer).await;
            }
        }
    }

    /// `seq` applied: `applied` moves up over every purge applied without a gap below it.
    fn record_applied(&self, seq: u64) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let mut floor = self.applied.load(Ordering::Relaxed);
        if seq > floor {
            ahead.insert(seq);
        }
        while ahead.remove(&(floor + 1)) {
            floor += 1;
        }
        self.applied.store(floor, Ordering::Relaxed);
        drop(ahead);
        self.peers.applied(&self.config.name, floor);
    }

    /// The server says every purge up to `floor` is applied (acknowledged by this node, or
    /// gone from the stream).
    fn raise_applied(&self, floor: u64) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let mut at = self.applied.load(Ordering::Relaxed).max(floor);
        ahead.retain(|s| *s > at);
        while ahead.remove(&(at + 1)) {
            at += 1;
        }
        self.applied.store(at, Ordering::Relaxed);
        drop(ahead);
        self.peers.applied(&self.config.name, at);
    }

    async fn check_caught_up(&self, consumer: &mut jetstream::consumer::Consumer<pull::Config>) {
        let behind = !self.ahead.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
        if !self.caches.fence().load(Ordering::Relaxed) && !behind {
            return;
        }
        if let Ok(info) = consumer.info().await {
            self.raise_applied(info.ack_floor.stream_sequence);
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                self.lower_fence();
            }
        }
    }

    fn lower_fence(&self) {
        // Still cut off (news of being caught up may be stale): the fence stays.
        if self.peers.silence().is_some() {
            return;
        }
        self.caught_up_once.store(true, Ordering::Relaxed);
        if self.caches.fence().swap(false, Ordering::Relaxed) {
            tracing::info!(applied = self.applied.load(Ordering::Relaxed), "fleet: caught up with the purge stream");
        }
    }
}
