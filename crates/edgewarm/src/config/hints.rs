//! `routes[].early_hints`: `103 Early Hints` on an `http` route. Without the map the origin's
//! own 103s are passed on to HTTP/2 and HTTP/3 clients and nothing is learned; `early_hints: {}`
//! also turns learning on: the edge remembers the `rel=preload` and `rel=preconnect` `Link`
//! entries of a page's shareable HTML response and sends them as a 103 at once on the next
//! navigation to it. What is learned from, and why: docs/config.md ("Early Hints").

use serde::{Deserialize, Deserializer};

use super::{size, ConfigError};

/// One route's early-hints settings (the map written).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyHintsConfig {
    /// Learn `Link` preloads per URL and send them at the next navigation (on with the map).
    #[serde(default = "yes")]
    pub learn: bool,
    /// Pass the origin's own 103s on (on, with or without the map).
    #[serde(default = "yes")]
    pub from_origin: bool,
    /// The learned hints' memory: URLs and `Link` bytes together (4 MiB).
    #[serde(default = "default_max_size", deserialize_with = "bytes")]
    pub max_size: u64,
    /// `Link` bytes kept per URL (2 KiB): entries past it are left out, never cut.
    #[serde(default = "default_max_link_bytes", deserialize_with = "bytes")]
    pub max_link_bytes: u64,
}

impl Default for EarlyHintsConfig {
    fn default() -> Self {
        Self { learn: true, from_origin: true, max_size: default_max_size(), max_link_bytes: default_max_link_bytes() }
    }
}

fn yes() -> bool {
    true
}
fn default_max_size() -> u64 {
    4 << 20
}
fn default_max_link_bytes() -> u64 {
    2 << 10
}

fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    size::deserialize_opt(d)?.ok_or_else(|| serde::de::Error::custom("a size is required"))
}

/// A 103 larger than this would risk a client's header limits, and hints past it cost a round
/// trip of their own on a cold connection anyway.
const MAX_LINK_BYTES: u64 = 16 << 10;

impl EarlyHintsConfig {
    /// Checks what serde cannot; `key` names a key under the route.
    pub(super) fn validate(&self, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        // The store weighs an entry in 32 bits (as the cache's memory tier does).
        if self.max_size == 0 || self.max_size > 1 << 30 {
            return Err(ConfigError::invalid(key("early_hints.max_size"), "must be 1 byte to 1GiB"));
        }
        if self.max_link_bytes == 0 || self.max_link_bytes > MAX_LINK_BYTES {
            return Err(ConfigError::invalid(key("early_hints.max_link_bytes"), "must be 1 byte to 16KiB"));
        }
        if self.max_link_bytes > self.max_size {
            return Err(ConfigError::invalid(
                key("early_hints.max_link_bytes"),
                "is larger than early_hints.max_size: no page's hints could ever be kept",
            ));
        }
        Ok(())
    }
}
