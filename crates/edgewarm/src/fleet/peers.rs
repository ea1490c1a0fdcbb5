//! What each node of the fleet has applied, as the nodes tell each other on a plain NATS
//! subject (`edgewarm.STREAM.node`: `{"name", "applied"}`, after each purge and every second):
//! the nodes heard from in the last [`LIVE`] are the live fleet `?wait=fleet` waits for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Fleet;

/// A node not heard from for this long is not waited for.
const LIVE: Duration = Duration::from_secs(5);
const EVERY: Duration = Duration::from_secs(1);

#[derive(Serialize, Deserialize)]
struct Heard {
    name: String,
    applied: u64,
}

pub(super) struct Peers {
    me: String,
    nodes: Mutex<HashMap<String, (u64, Instant)>>,
    changed: Notify,
}

impl Peers {
    pub(super) fn new(me: &str) -> Self {
        Self { me: me.to_string(), nodes: Mutex::default(), changed: Notify::new() }
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
    /// those that had not).
    pub(super) async fn wait_applied(&self, seq: u64, limit: Duration) -> (Vec<String>, Vec<String>) {
        let deadline = Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            let (done, missing) = self.split(seq);
            if missing.is_empty() || Instant::now() >= deadline {
                return (done, missing);
            }
            let _ = tokio::time::timeout_at(deadline, changed).await;
        }
    }

    fn split(&self, seq: u64) -> (Vec<String>, Vec<String>) {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (mut done, mut missing) = (Vec::new(), Vec::new());
        for (name, (applied, seen)) in nodes.iter() {
            // This node counts whatever it last heard of itself; the others while live.
            if *name != self.me && now.duration_since(*seen) > LIVE {
                continue;
            }
            if *applied >= seq {
                done.push(name.clone())
            } else {
                missing.push(name.clone())
            }
        }
        if !nodes.contains_key(&self.me) {
            missing.push(self.me.clone());
        }
        done.sort();
        missing.sort();
        (done, missing)
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
                    Ok(h) => fleet.peers.applied(&h.name, h.applied),
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
