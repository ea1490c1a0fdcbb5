//! Where ACME's secrets live between runs: the account's credentials and, per name, the
//! certificate chain with its key. Behind [`Store`] so a fleet can keep them somewhere shared
//! (`crate::fleet`'s key-value bucket: then also the pending challenge answers, and a lease
//! per name so one node orders it); [`DirStore`] is the one node's folder.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;

/// A store failed to read or write; the key says which entry.
#[derive(Debug, thiserror::Error)]
#[error("ACME store {key}: {source}")]
pub struct StoreError {
    pub key: String,
    #[source]
    pub source: std::io::Error,
}

impl StoreError {
    pub fn other(key: &str, why: impl std::fmt::Display) -> Self {
        Self { key: key.to_string(), source: std::io::Error::other(why.to_string()) }
    }
}

/// Named blobs. Keys are relative paths of plain segments (`account.json`,
/// `certs/www.example.com.pem`), made by this module's callers, never by clients.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The entry, or `None` when there is none.
    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
    /// Replace the entry whole: a reader sees the old value or the new one, never a mix.
    fn save<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Shared by several nodes: challenge answers go through it, and orders need a lease.
    fn shared(&self) -> bool {
        false
    }
    /// Remove the entry (a challenge answered).
    fn remove<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    /// Take or extend this node's lease on `name` for `ttl`: `true` if this node may order it
    /// now. One node alone always may.
    fn lease<'a>(&'a self, _name: &'a str, _ttl: Duration) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async { Ok(true) })
    }
    /// Give the lease on `name` up (its order ended).
    fn release<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Files under one folder: folders 0700, files 0600, each written to a temporary file, synced
/// and renamed into place (a crash mid-write leaves the old file).
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The entry, read now (files are small: at start, before anything serves).
    pub fn read(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match std::fs::read(self.path(key)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError { key: key.to_string(), source }),
        }
    }

    pub fn write(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        write_atomically(&self.path(key), value).map_err(|source| StoreError { key: key.to_string(), source })
    }

    fn path(&self, key: &str) -> PathBuf {
        // Keys come from this module, but a name is a client-visible string once: keep every
        // segment a plain one, so no key leaves the root.
        let safe: Vec<String> = key
            .split('/')
            .map(|s| s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect())
            .map(|s: String| if s.starts_with('.') { s.replacen('.', "_", 1) } else { s })
            .collect();
        self.root.join(safe.join("/"))
    }
}

fn write_atomically(path: &Path, value: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    // Unique per write: two writers (a process and its upgrade, two names' loops) never share one.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(value)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    // The rename itself survives a crash only once the folder is synced.
    std::fs::File::open(dir)?.sync_all()
}

impl Store for DirStore {
    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move { self.read(key) })
    }

    fn save<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.write(key, value) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saves_atomically_with_private_modes_and_stays_under_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path().join("acme"));
        assert!(store.read("certs/a.example.com.pem").unwrap().is_none());
        store.write("certs/a.example.com.pem", b"one").unwrap();
        store.write("certs/a.example.com.pem", b"two").unwrap();
        assert_eq!(store.read("certs/a.example.com.pem").unwrap().unwrap(), b"two");
        let file = dir.path().join("acme/certs/a.example.com.pem");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let folder = dir.path().join("acme/certs");
        assert_eq!(std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777, 0o700);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1);
        // A key that tries to climb out lands inside the root.
        store.write("../escape", b"x").unwrap();
        assert!(!dir.path().join("escape").exists());
        assert_eq!(store.read("../escape").unwrap().unwrap(), b"x");
    }
}
