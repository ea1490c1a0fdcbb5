//! What each node of the fleet has applied, as the nodes tell each other on a plain NATS
//! subject (`edgewarm.STREAM.node`: `{"name", "applied"}`, after each purge and every second):
//! the nodes heard from in the last [`LIVE`] are the live fleet `?wait=fleet` waits for.
//!
//! A node also hears its own word come back. When it has not for [`SILENT`] (its link cut:
//! a dark link stalls a TCP connection rather than closing it, so the NATS client may not
//! notice for a while), it raises its cache's fence: no hit until it has caught up again, or
//! until `fleet.fence_for` has passed (then it serves its cache: a NATS outage must not send
//! every node's traffic to the origins for good).
//! Because `SILENT` (checked every [`WATCH`]) ends before `LIVE`, a node that `?wait=fleet`
//! stopped waiting for has already stopped serving hits: no acknowledged purge is served
//! stale by a node that was cut off. The answer names such nodes (`silent`).
//!
//! The wait knows from its start how long each node is waited for: a node last heard at `t` is
//! waited for until `t + LIVE` (when it has fenced itself for sure), and the wait wakes at that
//! very instant, not on a heartbeat's tick. So a node cut just before the call is waited for at
//! most `LIVE` (3.5 s), and the call answers well inside its 5 s unless a node it still hears
//! from has not applied the purge (that one is `missing`: a 504).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Fleet;

/// A node not heard from for this long is not waited for: it has fenced itself by then
/// ([`SILENT`] after its last echo, seen at the next [`WATCH`]), with 0.75 s to spare for
/// its echo reaching it later than its word reached this node.
const LIVE: Duration = Duration::from_millis(3500);
const EVERY: Duration = Duration::from_secs(1);
/// A node that has not heard its own word for this long takes itself for cut off.
pub(super) const SILENT: Duration = Duration::from_millis(2500);
/// How often a node checks that it still hears itself.
pub(super) const WATCH: Duration = Duration::from_millis(250);
/// A node not heard from for this long is forgotten (not listed as silent).
const FORGET: Duration = Duration::from_secs(600);

#[derive(Serialize, Deserialize)]
struct Heard {
    name: String,
    applied: u64,
}

pub(super) struct Peers {
    me: String,
    nodes: Mutex<HashMap<String, (u64, Instant)>>,
    changed: Notify,
    /// When this node last heard its own word through NATS.
    echo: Mutex<Option<Instant>>,
}

/// What `?wait=fleet` found: the live nodes that applied the purge, those that had not when
/// the wait ended, and those it did not wait for (not heard from lately: fenced themselves).
pub(super) struct Waited {
    pub(super) applied: Vec<String>,
    pub(super) missing: Vec<String>,
    pub(super) silent: Vec<String>,
}

impl Peers {
    pub(super) fn new(me: &str) -> Self {
        Self { me: me.to_string(), nodes: Mutex::default(), changed: Notify::new(), echo: Mutex::default() }
    }

    /// This node heard itself.
    fn echoed(&self) {
        *self.echo.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// How long since this node last heard itself, once that is over [`SILENT`] (`None`: it
    /// heard itself lately, or never has: a start is the start fence's business).
    pub(super) fn silence(&self) -> Option<Duration> {
        let echo = *self.echo.lock().unwrap_or_else(|p| p.into_inner());
        echo.map(|at| at.elapsed()).filter(|quiet| *quiet > SILENT)
    }

    /// `name` has applied up to `seq`.
    pub(super) fn applied(&self, name: &str, seq: u64) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let entry = nodes.entry(name.to_string()).or_insert((0, Instant::now()));
        *entry = (entry.0.max(seq), Instant::now());
        drop(nodes);
        self.changed.notify_waiters();
    }

    /// Wait (at most `limit`) until every live node has applied `seq`: (those that have,
    /// those that had not, those not waited for).
    pub(super) async fn wait_applied(&self, seq: u64, limit: Duration) -> Waited {
        let deadline = Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            let (waited, until) = self.split(seq, Instant::now());
            if waited.missing.is_empty() || Instant::now() >= deadline {
                return waited;
            }
            // Woken by news, or at the instant the next lagging node stops being waited for.
            let wake = until.map_or(deadline, |at| at.min(deadline));
            let _ = tokio::time::timeout_at(wake, changed).await;
        }
    }

    /// Who has applied `seq` as of `now`, and when the first node still missing stops being
    /// waited for (`None`: only this node is missing, waited for until the deadline).
    fn split(&self, seq: u64, now: Instant) -> (Waited, Option<Instant>) {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let mut w = Waited { applied: Vec::new(), missing: Vec::new(), silent: Vec::new() };
        let mut until: Option<Instant> = None;
        for (name, (applied, seen)) in nodes.iter() {
            // This node counts whatever it last heard of itself; the others while live.
            let quiet = now.duration_since(*seen);
            if *name != self.me && quiet >= LIVE {
                if *applied < seq && quiet < FORGET {
                    w.silent.push(name.clone());
                }
                continue;
            }
            if *applied >= seq {
                w.applied.push(name.clone())
            } else {
                w.missing.push(name.clone());
                if *name != self.me {
                    let end = *seen + LIVE;
                    until = Some(until.map_or(end, |u| u.min(end)));
                }
            }
        }
        if !nodes.contains_key(&self.me) {
            w.missing.push(self.me.clone());
        }
        for list in [&mut w.applied, &mut w.missing, &mut w.silent] {
            list.sort();
        }
        (w, until)
    }

    pub(super) fn status(&self) -> serde_json::Value {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut list: Vec<_> = nodes
            .iter()
            .map(|(name, (applied, seen))| {
                serde_json::json!({"name": name, "applied": applied, "seen_ms_ago": now.duration_since(*seen).as_millis() as u64})
            })
            .collect();
        list.sort_by_key(|v| v["name"].as_str().unwrap_or_default().to_string());
        serde_json::Value::Array(list)
    }
}

/// Tell the fleet what this node applied (every second and after each purge) and hear what the
/// others did, until the fleet is dropped.
pub(super) async fn run(fleet: Weak<Fleet>, client: async_nats::Client, stream: String, signal: Arc<Notify>) {
    let subject = format!("edgewarm.{stream}.node");
    let mut heard = match client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "fleet: cannot hear the other nodes: ?wait=fleet waits for this node alone");
            return;
        }
    };
    let mut every = tokio::time::interval(EVERY);
    // What the others were last told (none: tell them at the next chance, heartbeat or not).
    let mut told: Option<u64> = None;
    loop {
        tokio::select! {
            _ = every.tick() => told = None,
            () = signal.notified() => {}
            message = heard.next() => {
                let Some(message) = message else { return };
                let Some(fleet) = fleet.upgrade() else { return };
                match serde_json::from_slice::<Heard>(&message.payload) {
                    Ok(h) => {
                        if h.name == fleet.config.name {
                            fleet.peers.echoed();
                        }
                        fleet.peers.applied(&h.name, h.applied)
                    }
                    Err(e) => tracing::debug!(error = %e, "fleet: a node message that does not parse"),
                }
                continue;
            }
        }
        let Some(fleet) = fleet.upgrade() else { return };
        let applied = fleet.applied.load(std::sync::atomic::Ordering::Relaxed);
        if told != Some(applied) {
            let me = Heard { name: fleet.config.name.clone(), applied };
            if let Ok(body) = serde_json::to_vec(&me) {
                let _ = client.publish(subject.clone(), body.into()).await;
            }
            told = Some(applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On tokio's paused clock: a lagging live node is waited for (bounded) and named missing;
    /// one that fell silent is not waited for and named silent; a node that stops hearing
    /// itself knows it after `SILENT`, not before.
    #[tokio::test(start_paused = true)]
    async fn the_wait_skips_silent_nodes_and_a_node_knows_its_own_silence() {
        let peers = Peers::new("a");
        assert_eq!(peers.silence(), None, "never heard itself: the start fence's business");
        peers.echoed();
        peers.applied("a", 3);
        peers.applied("b", 2);
        let w = peers.wait_applied(3, Duration::from_secs(2)).await;
        assert_eq!((w.applied, w.missing, w.silent), (vec!["a".into()], vec!["b".into()], vec![]));
        // (The bounded wait took its 2 s.)
        peers.echoed();
        peers.applied("b", 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(peers.silence(), None, "within SILENT");
        tokio::time::advance(SILENT).await;
        assert!(peers.silence().is_some());
        // b silent past LIVE: not waited for, and said.
        let w = peers.wait_applied(3, Duration::from_secs(10)).await;
        assert_eq!((w.applied, w.missing, w.silent), (vec!["a".into()], vec![], vec!["b".into()]));
        peers.applied("b", 3);
        let w = peers.wait_applied(3, Duration::from_secs(10)).await;
        assert_eq!(w.applied, vec!["a".to_string(), "b".to_string()]);
        peers.echoed();
        assert_eq!(peers.silence(), None, "heard itself again");
    }

    /// On tokio's paused clock: a node cut 0.6 s before the call (heard then, never since) is
    /// waited for only until `LIVE` after its last word, the instant it has fenced itself, not
    /// until the next heartbeat's tick at the edge of the 5 s (the call sat 5,002 ms before and
    /// answered one tick from a 504); a node heard again during the wait is waited for longer,
    /// and one that applies the purge ends the wait at once.
    #[tokio::test(start_paused = true)]
    async fn a_node_cut_just_before_the_call_is_waited_for_only_until_it_has_fenced_itself() {
        assert!(LIVE > SILENT + WATCH, "a node not waited for has fenced itself");
        assert!(LIVE <= Duration::from_secs(4), "well inside the call's 5 s");
        let peers = Peers::new("a");
        peers.echoed();
        peers.applied("a", 7);
        peers.applied("b", 6);
        tokio::time::advance(Duration::from_millis(600)).await;
        peers.applied("a", 7);
        let start = Instant::now();
        let w = peers.wait_applied(7, Duration::from_secs(5)).await;
        assert_eq!((w.applied, w.missing, w.silent), (vec!["a".into()], vec![], vec!["b".into()]));
        assert_eq!(start.elapsed(), LIVE - Duration::from_millis(600), "known silent the moment it fenced");

        // b heard again 1 s into the wait (still behind): waited for until LIVE after that.
        peers.applied("b", 6);
        let start = Instant::now();
        let wait = peers.wait_applied(8, Duration::from_secs(5));
        let news = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            peers.applied("b", 6);
            tokio::time::sleep(Duration::from_secs(1)).await;
            peers.applied("a", 8);
        };
        let (w, ()) = tokio::join!(wait, news);
        assert_eq!((w.applied, w.missing, w.silent), (vec!["a".into()], vec![], vec!["b".into()]));
        assert_eq!(start.elapsed(), Duration::from_secs(1) + LIVE);

        // b applies 0.5 s into the wait: the wait ends then.
        peers.applied("b", 8);
        let start = Instant::now();
        let wait = peers.wait_applied(9, Duration::from_secs(5));
        let news = async {
            peers.applied("a", 9);
            tokio::time::sleep(Duration::from_millis(500)).await;
            peers.applied("b", 9);
        };
        let (w, ()) = tokio::join!(wait, news);
        assert_eq!((w.applied, w.missing), (vec!["a".to_string(), "b".to_string()], vec![]));
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }
}
