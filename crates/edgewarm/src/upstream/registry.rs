//! The upstreams of the running configuration, kept across reloads by key.
//!
//! Like the prewarm pools ([`crate::pool::registry`]): a reload keeps every upstream whose key
//! is still wanted (its connections stay open, new settings apply), starts the new ones before
//! the new routes are published, and retires the rest gracefully (streams in flight finish).
//! HTTP/2 upstreams and HTTP/1.1 pools are kept in two maps by the same rule.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::h1::H1Upstream;
use super::{Upstream, UpstreamStatus};
use crate::config::UpstreamConfig;
use crate::metrics::{Metrics, PoolLabels, RouteName};
use crate::pool::dial::TlsDial;
use crate::tls::origin::PoolKey;
use crate::workers::Placement;

/// An upstream the new configuration needs.
pub struct Wanted {
    pub route: RouteName,
    pub dial: TlsDial,
    pub settings: UpstreamConfig,
    pub connect_timeout: Duration,
}

/// What the registry needs of a kept upstream.
trait Standing {
    fn start(w: Wanted, labels: PoolLabels, metrics: Arc<Metrics>, workers: &Placement) -> Arc<Self>;
    fn update(&self, settings: UpstreamConfig, connect_timeout: Duration);
    fn retire(&self);
}

impl Standing for Upstream {
    fn start(w: Wanted, labels: PoolLabels, metrics: Arc<Metrics>, workers: &Placement) -> Arc<Self> {
        Upstream::start(w.dial, labels, w.settings, w.connect_timeout, metrics, workers.clone())
    }
    fn update(&self, settings: UpstreamConfig, connect_timeout: Duration) {
        Upstream::update(self, settings, connect_timeout);
    }
    fn retire(&self) {
        Upstream::retire(self);
    }
}

impl Standing for H1Upstream {
    fn start(w: Wanted, mut labels: PoolLabels, metrics: Arc<Metrics>, _: &Placement) -> Arc<Self> {
        labels.alpn = "http/1.1".into();
        H1Upstream::start(w.dial, labels, w.settings, w.connect_timeout, metrics)
    }
    fn update(&self, settings: UpstreamConfig, connect_timeout: Duration) {
        H1Upstream::update(self, settings, connect_timeout);
    }
    fn retire(&self) {
        H1Upstream::retire(self);
    }
}

type Map<T> = HashMap<PoolKey, Arc<T>>;

pub struct Upstreams {
    h2: Mutex<Map<Upstream>>,
    h1: Mutex<Map<H1Upstream>>,
    metrics: Arc<Metrics>,
    workers: Placement,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Upstreams {
    pub fn new(metrics: Arc<Metrics>, workers: Placement) -> Self {
        Self { h2: Mutex::default(), h1: Mutex::default(), metrics, workers }
    }

    /// Make the set of HTTP/2 upstreams exactly `wanted`; returns each wanted key's upstream.
    pub fn sync(&self, wanted: Vec<Wanted>) -> Map<Upstream> {
        sync(&mut lock(&self.h2), wanted, &self.metrics, &self.workers)
    }

    /// The same for HTTP/1.1 origin pools.
    pub(crate) fn sync_h1(&self, wanted: Vec<Wanted>) -> Map<H1Upstream> {
        sync(&mut lock(&self.h1), wanted, &self.metrics, &self.workers)
    }

    /// Stop every upstream (shutdown): no new streams; open ones finish.
    pub fn retire_all(&self) {
        for (_, u) in lock(&self.h2).drain() {
            u.retire();
        }
        for (_, u) in lock(&self.h1).drain() {
            u.retire();
        }
    }

    pub fn status(&self) -> Vec<UpstreamStatus> {
        let mut all: Vec<_> = lock(&self.h2).values().map(|u| u.status()).collect();
        all.sort_by(|a, b| (&a.route, &a.origin).cmp(&(&b.route, &b.origin)));
        all
    }
}

fn sync<T: Standing>(map: &mut Map<T>, wanted: Vec<Wanted>, metrics: &Arc<Metrics>, workers: &Placement) -> Map<T> {
    let mut next = HashMap::new();
    for w in wanted {
        let key = w.dial.key.clone();
        if let Some(u) = map.get(&key).or_else(|| next.get(&key)) {
            u.update(w.settings, w.connect_timeout);
            next.insert(key, u.clone());
            continue;
        }
        if !key.verify {
            tracing::warn!(route = %w.route, origin = %key.origin, "origin_tls.verify is false: origin certificates are NOT verified");
        }
        let labels = PoolLabels { route: w.route.clone(), origin: key.origin.to_string(), alpn: key.alpn_label() };
        next.insert(key, T::start(w, labels, metrics.clone(), workers));
    }
    for (key, u) in map.drain() {
        if !next.contains_key(&key) {
            u.retire();
        }
    }
    map.clone_from(&next);
    next
}
