//! ACME's store for a fleet: the account, the certificates and the pending challenge answers in
//! a JetStream key-value bucket (`STREAM_ACME`, keys `FOLDER/account.json`,
//! `FOLDER/certs/NAME.pem`, `FOLDER/challenges/NAME`), so one account and one certificate per
//! name serve every node, and a validation that lands on any node is answered. A lease per
//! name (`FOLDER/leases/NAME`: holder and until when, taken by compare-and-set) lets one node
//! order while the others wait for its certificate; a holder that dies lets it lapse.
//!
//! The node's own folder stays a copy of what it used: NATS unreachable, it serves (and
//! starts with) the certificates it had.

use std::sync::Weak;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use super::Fleet;
use crate::acme::store::{DirStore, Store, StoreError};

/// Every call to NATS is bounded: an order or a validation waits at most this for one.
const WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Lease {
    holder: String,
    /// Unix seconds.
    until: u64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Whether `me` may take a lease held as `held` (`None`: nobody's, or unreadable) at `now`.
fn may_take(held: Option<&Lease>, me: &str, now: u64) -> bool {
    held.is_none_or(|lease| lease.holder == me || lease.until <= now)
}

pub(super) struct KvStore {
    fleet: Weak<Fleet>,
    bucket: String,
    opened: OnceCell<kv::Store>,
    local: DirStore,
    /// The ACME server's folder name: one fleet may move from a staging server to another.
    folder: String,
    me: String,
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore").field("bucket", &self.bucket).field("folder", &self.folder).finish_non_exhaustive()
    }
}

impl KvStore {
    pub(super) fn new(fleet: Weak<Fleet>, bucket: String, local: DirStore, folder: &str, me: &str) -> Self {
        Self { fleet, bucket, opened: OnceCell::new(), local, folder: folder.to_string(), me: me.to_string() }
    }

    async fn kv(&self, key: &str) -> Result<&kv::Store, StoreError> {
        let js = self
            .fleet
            .upgrade()
            .and_then(|f| f.jetstream.get().filter(|_| f.connected.load(std::sync::atomic::Ordering::Relaxed)).cloned())
            .ok_or_else(|| StoreError::other(key, "not connected to NATS"))?;
        self.opened
            .get_or_try_init(|| super::bucket::open(&js, &self.bucket))
            .await
            .map_err(|e| StoreError::other(key, e))
    }

    fn path(&self, key: &str) -> String {
        format!("{}/{key}", self.folder)
    }

    /// The entry's value and revision (`None`: none, or deleted).
    async fn entry(&self, key: &str) -> Result<Option<kv::Entry>, StoreError> {
        let kv = self.kv(key).await?;
        match tokio::time::timeout(WITHIN, kv.entry(self.path(key))).await {
            Ok(Ok(entry)) => Ok(entry),
            Ok(Err(e)) => Err(StoreError::other(key, e)),
            Err(_) => Err(StoreError::other(key, "NATS did not answer in time")),
        }
    }

    /// Challenge answers live only in the bucket; the rest is also kept in the node's folder.
    fn kept_locally(key: &str) -> bool {
        !key.starts_with("challenges/")
    }
}

impl Store for KvStore {
    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let found = match self.entry(key).await {
                Ok(entry) => entry.filter(|e| e.operation == kv::Operation::Put).map(|e| e.value.to_vec()),
                Err(e) if Self::kept_locally(key) => {
                    tracing::debug!(error = %e, "ACME store: NATS unreachable, the node's copy is read");
                    return self.local.read(key);
                }
                Err(e) => return Err(e),
            };
            match found {
                Some(value) => {
                    if Self::kept_locally(key) && self.local.read(key).ok().flatten().as_ref() != Some(&value) {
                        if let Err(e) = self.local.write(key, &value) {
                            tracing::warn!(error = %e, "ACME store: the node's copy was not updated");
                        }
                    }
                    Ok(Some(value))
                }
                // Not in the bucket (yet): what this node had before it joined still counts.
                None if Self::kept_locally(key) => self.local.read(key),
                None => Ok(None),
            }
        })
    }

    fn save<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if Self::kept_locally(key) {
                self.local.write(key, value)?;
            }
            let kv = self.kv(key).await?;
            match tokio::time::timeout(WITHIN, kv.put(self.path(key), value.to_vec().into())).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(StoreError::other(key, e)),
                Err(_) => Err(StoreError::other(key, "NATS did not answer in time")),
            }
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let kv = self.kv(key).await?;
            match tokio::time::timeout(WITHIN, kv.delete(self.path(key))).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(StoreError::other(key, e)),
                Err(_) => Err(StoreError::other(key, "NATS did not answer in time")),
            }
        })
    }

    fn lease<'a>(&'a self, name: &'a str, ttl: Duration) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let key = format!("leases/{name}");
            let entry = self.entry(&key).await?;
            let live = entry.as_ref().filter(|e| e.operation == kv::Operation::Put);
            let held = live.and_then(|e| serde_json::from_slice::<Lease>(&e.value).ok());
            if !may_take(held.as_ref(), &self.me, now()) {
                return Ok(false);
            }
            let lease = Lease { holder: self.me.clone(), until: now() + ttl.as_secs() };
            let value = serde_json::to_vec(&lease).map_err(|e| StoreError::other(&key, e))?;
            let kv = self.kv(&key).await?;
            // Compare-and-set on what was read: of two nodes taking it at once, one wins.
            let taken = match &entry {
                Some(e) => tokio::time::timeout(WITHIN, kv.update(self.path(&key), value.into(), e.revision))
                    .await
                    .map(|r| r.is_ok()),
                None => tokio::time::timeout(WITHIN, kv.create(self.path(&key), value.into())).await.map(|r| r.is_ok()),
            };
            Ok(taken.unwrap_or(false))
        })
    }

    fn release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let key = format!("leases/{name}");
            let Ok(Some(entry)) = self.entry(&key).await else { return };
            let mine = serde_json::from_slice::<Lease>(&entry.value).is_ok_and(|l| l.holder == self.me);
            let Ok(kv) = self.kv(&key).await else { return };
            if mine {
                let lapsed = serde_json::to_vec(&Lease { holder: self.me.clone(), until: 0 }).unwrap_or_default();
                let _ = tokio::time::timeout(WITHIN, kv.update(self.path(&key), lapsed.into(), entry.revision)).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_taken_when_free_lapsed_or_already_ours() {
        let held = |holder: &str, until| Lease { holder: holder.into(), until };
        assert!(may_take(None, "a", 100));
        assert!(may_take(Some(&held("a", 200)), "a", 100), "ours: extended");
        assert!(!may_take(Some(&held("b", 200)), "a", 100), "another node's, live");
        assert!(may_take(Some(&held("b", 100)), "a", 100), "another node's, lapsed (it died)");
    }
}
