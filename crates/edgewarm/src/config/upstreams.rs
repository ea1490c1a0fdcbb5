//! `upstreams:`, the named upstreams, and `routes[].upstream: NAME`, the routes that use them.
//!
//! A block of `upstreams:` is a route's `upstream:` map with its servers beside it (`origin` or
//! `origins`, `origin_tls`): one [`UpstreamConfig`] reads both forms ([`super::upstream`]). A
//! route names one with a string, or keeps today's map, which is an upstream of its own.
//! At parse the named block is copied into each route that names it ([`Config::resolve_upstreams`]),
//! so everything after reads one shape; the name stays in [`HttpConfig::upstream_name`], which is
//! what the routes that share the upstream's standing connections and server health are known by.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{ActionConfig, Config, HttpConfig, UpstreamConfig};

/// `routes[].upstream` as written: a name, or the route's own settings.
#[derive(Debug, Clone)]
pub(super) enum UpstreamChoice {
    Named(String),
    Own(Box<UpstreamConfig>),
}

impl<'de> Deserialize<'de> for UpstreamChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Choice;
        impl<'de> Visitor<'de> for Choice {
            type Value = UpstreamChoice;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the name of an upstream (a key of upstreams:) or a map of upstream settings")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(UpstreamChoice::Named(name.to_string()))
            }

            // Read by the derived struct itself, so an unknown key inside is refused by name
            // (and line), as everywhere else in the file.
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                UpstreamConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|u| UpstreamChoice::Own(Box::new(u)))
            }
        }
        d.deserialize_any(Choice)
    }
}

/// Why `upstream: NAME` cannot go with a route's own servers or their TLS.
pub(super) const BESIDE_NAMED: &str = "not beside upstream: NAME: the named upstream's block in upstreams: holds \
                                       its servers and their TLS (write them there, or give the route an upstream \
                                       map of its own)";

impl Config {
    /// Copy each named upstream into the routes that name it (its servers, their TLS, its
    /// settings). A route naming none that exists, or with servers of its own beside the
    /// name, is left as written: validation refuses it, naming the key.
    pub(super) fn resolve_upstreams(&mut self) {
        for r in &mut self.routes {
            let ActionConfig::Http(h) = &mut r.action else { continue };
            let Some(block) = h.upstream_name.as_ref().and_then(|n| self.upstreams.get(n)) else { continue };
            if r.misplaced.is_none() {
                resolve(h, block.clone());
            }
        }
    }
}

impl Config {
    /// `h` as if it named the upstream `name` (a rule's `upstream:`): that block's servers,
    /// their TLS and its settings in place of the route's own.
    pub fn naming(&self, h: &HttpConfig, name: &str) -> Option<HttpConfig> {
        let block = self.upstreams.get(name)?;
        let mut h = HttpConfig { upstream_name: Some(name.to_string()), ..h.clone() };
        resolve(&mut h, block.clone());
        Some(h)
    }
}

fn resolve(h: &mut HttpConfig, mut block: UpstreamConfig) {
    h.origin = block.origin.take();
    h.origins = block.origins.take();
    h.origin_tls_set = block.origin_tls.is_some();
    h.origin_tls = block.origin_tls.take().unwrap_or_default();
    h.upstream = block;
}

/// Whether `name` can name an upstream: it labels the metrics of the upstream's sets, so it
/// is kept to what a label reads plainly.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
