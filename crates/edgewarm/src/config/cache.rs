//! `routes[].cache`: an `http` route's edge cache. Off unless the map is written; `cache: {}`
//! turns it on with these defaults. What is keyed and what is never stored is in
//! docs/config.md ("The edge cache").

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::{duration, size, ConfigError};

/// One route's cache settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// The memory tier's budget: bodies, headers and index together (256 MiB).
    #[serde(default = "default_max_size", deserialize_with = "bytes")]
    pub max_size: u64,
    /// Larger responses pass through and are not stored (8 MiB). One known by its
    /// `Content-Length` is never buffered; one without is dropped from storage when it passes this.
    #[serde(default = "default_max_object_size", deserialize_with = "bytes")]
    pub max_object_size: u64,
    /// How long after going stale a response may still be served while one request
    /// revalidates it in the background, where the origin's `stale-while-revalidate` says
    /// nothing (0: only the origin's).
    #[serde(default, with = "duration")]
    pub stale_while_revalidate: Duration,
    /// How long after going stale a response may still be served when the origin fails (5xx,
    /// timeout, refused), where the origin's `stale-if-error` says nothing (0: only the origin's).
    #[serde(default, with = "duration")]
    pub stale_if_error: Duration,
    /// Store responses that carry `Set-Cookie`, without it: the client that caused the fetch
    /// gets its cookie, later clients get the stored copy without one. Off: such responses are
    /// not stored.
    #[serde(default)]
    pub store_set_cookie: bool,
    /// How long a URL whose response could not be stored goes straight to the origin, without
    /// waiting behind another request for it (Varnish's hit-for-miss; 2 minutes).
    #[serde(default = "default_remember_uncacheable", with = "duration")]
    pub remember_uncacheable: Duration,
    /// A disk tier under the memory tier, kept across restarts (off unless written).
    #[serde(default)]
    pub disk: Option<DiskConfig>,
}

/// `routes[].cache.disk`: where the disk tier keeps its files, and how much it may hold.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// A directory of this route's alone (created if missing).
    pub path: PathBuf,
    /// Bytes of files (headers and bodies) the tier may hold.
    #[serde(deserialize_with = "bytes")]
    pub max_size: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_size: default_max_size(),
            max_object_size: default_max_object_size(),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            store_set_cookie: false,
            remember_uncacheable: default_remember_uncacheable(),
            disk: None,
        }
    }
}

fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    size::deserialize_opt(d)?.ok_or_else(|| serde::de::Error::custom("a size is required"))
}

fn default_max_size() -> u64 {
    256 << 20
}
fn default_max_object_size() -> u64 {
    8 << 20
}
fn default_remember_uncacheable() -> Duration {
    Duration::from_secs(120)
}

impl CacheConfig {
    /// Checks what serde cannot; `key` names a key under the route.
    pub(super) fn validate(&self, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        if self.max_size == 0 {
            return Err(ConfigError::invalid(key("cache.max_size"), "must be greater than zero"));
        }
        // The memory tier weighs an entry in 32 bits; a larger object belongs on a disk tier.
        if self.max_object_size == 0 || self.max_object_size > 1 << 30 {
            return Err(ConfigError::invalid(key("cache.max_object_size"), "must be 1 byte to 1GiB"));
        }
        if self.max_object_size > self.max_size {
            return Err(ConfigError::invalid(
                key("cache.max_object_size"),
                "is larger than cache.max_size: no object that size could ever be stored",
            ));
        }
        if let Some(disk) = &self.disk {
            if !disk.path.is_absolute() {
                return Err(ConfigError::invalid(key("cache.disk.path"), "must be an absolute path"));
            }
            if disk.max_size == 0 {
                return Err(ConfigError::invalid(key("cache.disk.max_size"), "must be greater than zero"));
            }
        }
        Ok(())
    }
}
