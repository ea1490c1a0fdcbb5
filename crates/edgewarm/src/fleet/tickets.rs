//! The fleet's session-ticket keys, so a client resumes its TLS session on any node (used when
//! no `tls.ticket_keys` file is set). One entry of a JetStream key-value bucket holds the
//! current key and the previous one; every node watches it and follows it
//! ([`crate::tls::process_keys::ProcessKeys::follow`]). Rotation: the first node to see the
//! entry older than [`ROTATION`] replaces it by compare-and-set on the revision it read, so one
//! rotation happens however many nodes try, and nobody copies a file. An entry that does not
//! parse (another writer) is logged and replaced the same way.
//!
//! 0-RTT is not affected: routes with `early_data` keep stateful sessions in the node's memory,
//! so a first flight replayed to another node finds nothing to resume there.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::tls::process_keys::{fresh_line, ProcessKeys, ROTATION};

const KEY: &str = "ticket_keys";

/// The entry: base64 keys, the first encrypts; when it was written (Unix seconds).
#[derive(Serialize, Deserialize)]
struct Shared {
    keys: Vec<String>,
    since: u64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Shared {
    fn first() -> Vec<u8> {
        serde_json::to_vec(&Self { keys: vec![fresh_line()], since: now() }).unwrap_or_default()
    }

    /// A new key first, this entry's current one kept to decrypt.
    fn rotated(&self) -> Vec<u8> {
        let keys = std::iter::once(fresh_line()).chain(self.keys.first().cloned()).collect();
        serde_json::to_vec(&Self { keys, since: now() }).unwrap_or_default()
    }
}

/// The bucket's name for the fleet's stream (`EDGEWARM_PURGES_TICKETS`).
pub(super) fn bucket(stream: &str) -> String {
    format!("{stream}_TICKETS")
}

/// Follow and rotate the fleet's keys while the connection lasts; the caller retries.
pub(super) async fn keep(js: &jetstream::Context, bucket: &str, keys: &Arc<ProcessKeys>) -> Result<(), String> {
    let store = super::bucket::open(js, bucket).await?;
    // The first node to come writes the first key; `create` fails for the others, who read it.
    if store.entry(KEY).await.map_err(|e| format!("read: {e}"))?.is_none() {
        let _ = store.create(KEY, Shared::first().into()).await;
    }
    let mut watch = store.watch_with_history(KEY).await.map_err(|e| format!("watch: {e}"))?;
    // What was last read: its revision (the compare-and-set's) and its contents, if they parsed.
    let mut read: Option<(u64, Option<Shared>)> = None;
    // The revision this node last tried to replace: not again until the watch brings another.
    let mut tried = None;
    loop {
        let due = match &read {
            Some((revision, _)) if tried == Some(*revision) => Duration::MAX,
            Some((_, Some(shared))) => {
                let at = shared.since.saturating_add(ROTATION.as_secs());
                Duration::from_secs(at.saturating_sub(now())) + spread()
            }
            // Unreadable: replaced at once (after the spread, so the nodes do not all try).
            Some((_, None)) => spread(),
            None => Duration::MAX,
        };
        tokio::select! {
            entry = watch.next() => {
                let entry = entry.ok_or("the key watch ended")?.map_err(|e| e.to_string())?;
                if entry.operation != kv::Operation::Put {
                    // Deleted by hand: made again (fresh), and followed from the watch.
                    let _ = store.create(KEY, Shared::first().into()).await;
                    continue;
                }
                let shared = match serde_json::from_slice::<Shared>(&entry.value) {
                    Err(e) => {
                        tracing::warn!(error = %e, "fleet: the shared ticket keys do not parse: replacing them");
                        None
                    }
                    Ok(shared) => match keys.follow(&shared.keys.join("\n")) {
                        Ok(()) => Some(shared),
                        Err(e) => {
                            tracing::warn!(error = %e, "fleet: the shared ticket keys are not keys: replacing them");
                            None
                        }
                    },
                };
                read = Some((entry.revision, shared));
            }
            () = tokio::time::sleep(due.min(Duration::from_secs(24 * 3600))) => {
                let Some((revision, shared)) = &read else { continue };
                let next = shared.as_ref().map_or_else(Shared::first, Shared::rotated);
                // Compare-and-set: of the nodes that try, one succeeds; all follow the watch.
                match store.update(KEY, next.into(), *revision).await {
                    Ok(_) => tracing::info!("fleet: ticket keys rotated for the fleet"),
                    Err(e) => tracing::debug!(error = %e, "fleet: another node rotated the ticket keys"),
                }
                tried = Some(*revision);
            }
        }
    }
}

/// 0 to 10 s: the nodes that see a rotation due at once do not all write at once.
fn spread() -> Duration {
    let mut byte = [0u8; 2];
    let _ = aws_lc_rs::rand::fill(&mut byte);
    Duration::from_millis(u64::from(u16::from_le_bytes(byte)) % 10_000)
}
