//! The standing origin connections of the running configuration, every kind in one registry
//! keyed by (pool key, kind).
//!
//! [`Origins::sync`] runs at start and on every reload: it starts a set for each key the new
//! route table wants, passes new settings to sets that stay (their connections are untouched),
//! and retires the sets no route wants any more (they stop opening connections; idle ones
//! close; connections in use finish their work first). So a reload never drops a connection in
//! use and never leaks one. Connections never look a set up here: each route holds its own
//! (attached before its snapshot is published); the map serves reloads, shutdown and the
//! admin listener only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::dial::TlsDial;
use super::h1::H1Upstream;
use super::h2::{Upstream, UpstreamStatus};
use super::prewarm::status::PoolStatus;
use super::prewarm::{Settings, TlsPool};
use crate::config::UpstreamConfig;
use crate::metrics::{Metrics, PoolLabels, RouteName};
use crate::tls::origin::PoolKey;
use crate::workers::Placement;

/// The kinds of standing origin connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Pre-handshaked TLS connections, each handed to one client (`prewarm` routes).
    Prewarm,
    /// Multiplexed HTTP/2 connections shared by every request (`http` routes).
    H2,
    /// Keep-alive HTTP/1.1 connections, one request at a time (`upstream.protocol: http/1.1`).
    H1,
}

/// The settings a reload may change, per kind.
#[derive(Debug, Clone)]
pub(crate) enum Want {
    Prewarm(Settings),
    H2 { settings: UpstreamConfig, connect_timeout: Duration },
    H1 { settings: UpstreamConfig, connect_timeout: Duration },
}

impl Want {
    fn kind(&self) -> Kind {
        match self {
            Self::Prewarm(_) => Kind::Prewarm,
            Self::H2 { .. } => Kind::H2,
            Self::H1 { .. } => Kind::H1,
        }
    }
}

/// A set the new configuration wants: the route that first asked for it, how to dial.
pub(crate) struct Wanted {
    pub(crate) route: RouteName,
    pub(crate) dial: TlsDial,
    pub(crate) want: Want,
}

/// One running set.
#[derive(Clone)]
pub(crate) enum Standing {
    Prewarm(Arc<TlsPool>),
    H2(Arc<Upstream>),
    H1(Arc<H1Upstream>),
}

impl Standing {
    fn start(w: Wanted, metrics: &Arc<Metrics>, workers: &Placement) -> Self {
        let key = &w.dial.key;
        let mut labels = PoolLabels { route: w.route, origin: key.origin.to_string(), alpn: key.alpn_label() };
        let metrics = metrics.clone();
        match w.want {
            Want::Prewarm(settings) => Self::Prewarm(TlsPool::start(w.dial, labels, settings, metrics)),
            Want::H2 { settings, connect_timeout } => {
                Self::H2(Upstream::start(w.dial, labels, settings, connect_timeout, metrics, workers.clone()))
            }
            Want::H1 { settings, connect_timeout } => {
                labels.alpn = "http/1.1".into();
                Self::H1(H1Upstream::start(w.dial, labels, settings, connect_timeout, metrics))
            }
        }
    }

    fn update(&self, want: Want) {
        match (self, want) {
            (Self::Prewarm(p), Want::Prewarm(settings)) => p.update(settings),
            (Self::H2(u), Want::H2 { settings, connect_timeout }) => u.update(settings, connect_timeout),
            (Self::H1(u), Want::H1 { settings, connect_timeout }) => u.update(settings, connect_timeout),
            // The kind is part of the key: a set only ever gets its own kind's settings.
            _ => {}
        }
    }

    fn retire(&self) {
        match self {
            Self::Prewarm(p) => p.retire(),
            Self::H2(u) => u.retire(),
            Self::H1(u) => u.retire(),
        }
    }
}

type Map = HashMap<(PoolKey, Kind), Standing>;

/// Every standing set of the running configuration.
pub struct Origins {
    map: Mutex<Map>,
    metrics: Arc<Metrics>,
    workers: Placement,
}

impl Origins {
    pub fn new(metrics: Arc<Metrics>, workers: Placement) -> Self {
        Self { map: Mutex::default(), metrics, workers }
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make the running sets exactly `wanted` (the first entry for a key wins, as routes with
    /// equal keys share a set). Returns every wanted set. Must run inside the runtime.
    pub(crate) fn sync(&self, wanted: Vec<Wanted>) -> Map {
        let mut map = self.map();
        let mut next = HashMap::new();
        for w in wanted {
            let key = (w.dial.key.clone(), w.want.kind());
            if let Some(set) = map.get(&key) {
                set.update(w.want);
                next.insert(key, set.clone());
                continue;
            }
            if next.contains_key(&key) {
                continue;
            }
            if !key.0.verify {
                tracing::warn!(route = %w.route, origin = %key.0.origin, "origin_tls.verify is false: origin certificates are NOT verified");
            }
            next.insert(key, Standing::start(w, &self.metrics, &self.workers));
        }
        for (key, set) in map.drain() {
            if !next.contains_key(&key) {
                set.retire();
            }
        }
        map.clone_from(&next);
        next
    }

    /// Stop every set of the kinds `which` picks (shutdown): nothing new is opened;
    /// connections in use finish.
    pub(crate) fn retire(&self, which: impl Fn(Kind) -> bool) {
        self.map().retain(|(_, kind), set| {
            let retire = which(*kind);
            if retire {
                set.retire();
            }
            !retire
        });
    }

    /// Every prewarm pool at its minimum, and every HTTP/2 set and HTTP/1.1 pool with all its
    /// standing connections: what a new process waits for before it accepts
    /// ([`crate::upgrade`]).
    pub fn warm(&self) -> bool {
        self.pools().iter().all(|p| p.ready >= p.min)
            && self.map().values().all(|s| match s {
                Standing::H2(u) => u.warm(),
                Standing::H1(h) => h.warm(),
                Standing::Prewarm(_) => true,
            })
    }

    /// The prewarm pools' numbers for `/pools`, in a stable order (route, then ALPN).
    pub fn pools(&self) -> Vec<PoolStatus> {
        let mut all: Vec<_> = self
            .map()
            .values()
            .filter_map(|s| match s {
                Standing::Prewarm(p) => Some(p.status()),
                _ => None,
            })
            .collect();
        all.sort_by(|a, b| (&a.route, &a.alpn).cmp(&(&b.route, &b.alpn)));
        all
    }

    /// The HTTP/2 sets' numbers for `/origins`, in a stable order.
    pub fn upstreams(&self) -> Vec<UpstreamStatus> {
        let mut all: Vec<_> = self
            .map()
            .values()
            .filter_map(|s| match s {
                Standing::H2(u) => Some(u.status()),
                _ => None,
            })
            .collect();
        all.sort_by(|a, b| (&a.route, &a.origin).cmp(&(&b.route, &b.origin)));
        all
    }
}
