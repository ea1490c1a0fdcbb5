//! The standing origin connections of the running configuration, every kind in one registry
//! keyed by (pool key, kind, transport).
//!
//! A kind is two traits: a [`Spec`] is what a route asks for (its connector and settings),
//! a [`Standing`] is the running set. [`Origins::sync`] runs at start and on every reload: it
//! starts a set for each key the new route table wants, passes new settings to sets that stay
//! (their connections are untouched), and retires the sets no route wants any more (they stop
//! opening connections; idle ones close; connections in use finish their work first). So a
//! reload never drops a connection in use and never leaks one. Connections never look a set
//! up here: each route holds its own (attached before its snapshot is published); the map
//! serves reloads, shutdown and the admin listener only.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::connect::Transport;
use super::seam::Origin;
use crate::metrics::{Metrics, PoolLabels, RouteName, Server};
use crate::tls::origin::PoolKey;
use crate::workers::Placement;

/// What every set is started with, besides its own settings.
pub(crate) struct Shared {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) workers: Placement,
}

/// What a route asks the registry for: one kind of set under one key.
pub(crate) trait Spec: Send {
    /// Everything that decides which clients may share the set.
    fn key(&self) -> &PoolKey;
    /// The kind's name: part of the set's identity, and its `kind` in `/origins`.
    fn kind(&self) -> &'static str;
    /// What carries the set's bytes: part of its identity too.
    fn transport(&self) -> Transport;
    /// Start a new set (inside the runtime); `labels` name it in every metric.
    fn start(self: Box<Self>, labels: PoolLabels, shared: &Shared) -> Arc<dyn Standing>;
    /// New settings for the running set of this key and kind (a reload).
    fn update(self: Box<Self>, set: &dyn Standing);
}

/// A set as its own type again: for a kind's own [`Spec::update`], and the `prewarm`
/// action's pools.
pub(crate) trait AsAny: Any + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: Any + Send + Sync> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// One running set, whatever it holds.
pub(crate) trait Standing: AsAny {
    /// No route wants it any more: stop opening connections; idle ones close, those in use
    /// finish first.
    fn retire(&self);
    /// Holds what an upgrading process waits for before it accepts.
    fn warm(&self) -> bool;
    /// Its numbers for `/origins` (a JSON object with at least `route`, `origin`, `kind`).
    fn status(&self) -> serde_json::Value;
    /// Whether its server can take a request now: false once every standing connection is
    /// gone and a reconnect failed (a server group sends elsewhere at once). A set that has
    /// not failed yet, still opening its first connections, is up.
    fn up(&self) -> bool {
        true
    }
    /// The route's seam, for the kinds that carry requests ([`Origin`]).
    fn origin(self: Arc<Self>) -> Option<Arc<dyn Origin>> {
        None
    }
}

/// A set the new configuration wants, and the route that first asked for it.
pub(crate) struct Wanted {
    pub(crate) route: RouteName,
    pub(crate) spec: Box<dyn Spec>,
}

/// A set's identity: routes whose wants have equal ones share it.
pub(crate) type Id = (PoolKey, &'static str, Transport);

pub(crate) fn id(spec: &dyn Spec) -> Id {
    (spec.key().clone(), spec.kind(), spec.transport())
}

type Map = HashMap<Id, Arc<dyn Standing>>;

/// Every standing set of the running configuration.
pub struct Origins {
    map: Mutex<Map>,
    shared: Shared,
    /// The named upstreams of the running configuration and the routes naming each (their
    /// sets are labelled with the upstream's name), for `/origins`.
    upstreams: Mutex<BTreeMap<String, Vec<String>>>,
}

impl Origins {
    pub fn new(metrics: Arc<Metrics>, workers: Placement) -> Self {
        Self { map: Mutex::default(), shared: Shared { metrics, workers }, upstreams: Mutex::default() }
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make the running sets exactly `wanted` (the first entry for an id wins, as routes with
    /// equal ids share a set). Returns every wanted set. Must run inside the runtime.
    pub(crate) fn sync(&self, wanted: Vec<Wanted>) -> Map {
        let mut map = self.map();
        let mut next = HashMap::new();
        for w in wanted {
            let id = id(&*w.spec);
            if let Some(set) = map.get(&id) {
                w.spec.update(&**set);
                next.insert(id, set.clone());
                continue;
            }
            if next.contains_key(&id) {
                continue;
            }
            let key = &id.0;
            if key.tls.as_ref().is_some_and(|t| !t.verify) {
                tracing::warn!(route = %w.route, origin = %key.origin, "origin_tls.verify is false: origin certificates are NOT verified");
            }
            let labels = PoolLabels { route: w.route, alpn: key.alpn_label(), server: Server(key.origin.to_string()) };
            next.insert(id.clone(), w.spec.start(labels, &self.shared));
        }
        for (id, set) in map.drain() {
            if !next.contains_key(&id) {
                set.retire();
            }
        }
        map.clone_from(&next);
        next
    }

    /// Stop every set of the kinds `which` picks (shutdown): nothing new is opened;
    /// connections in use finish.
    pub(crate) fn retire(&self, which: impl Fn(&str) -> bool) {
        self.map().retain(|(_, kind, _), set| {
            let retire = which(kind);
            if retire {
                set.retire();
            }
            !retire
        });
    }

    /// Every set holds what it must before a new process accepts ([`crate::upgrade`]).
    pub fn warm(&self) -> bool {
        self.map().values().all(|s| s.warm())
    }

    /// The sets of one kind, as their own type (the `prewarm` action's `/pools`).
    pub(crate) fn of<T: Standing>(&self) -> Vec<Arc<T>> {
        self.map().values().filter_map(|s| s.clone().into_any().downcast::<T>().ok()).collect()
    }

    /// The named upstreams a load or reload configured, each with the routes naming it.
    pub(crate) fn name_upstreams(&self, users: BTreeMap<String, Vec<String>>) {
        *self.upstreams.lock().unwrap_or_else(|p| p.into_inner()) = users;
    }

    /// The named upstreams for `/origins`: each one's name and the routes that name it.
    pub fn upstreams(&self) -> Vec<serde_json::Value> {
        let users = self.upstreams.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = Vec::new();
        for (name, routes) in users.iter() {
            let mut routes = routes.clone();
            routes.sort();
            all.push(serde_json::json!({ "upstream": name, "routes": routes }));
        }
        all
    }

    /// Every set's numbers for `/origins`, in a stable order (route, origin, kind); a named
    /// upstream's sets (their `route` its name) say so in `upstream`.
    pub fn statuses(&self) -> Vec<serde_json::Value> {
        let mut all: Vec<_> = self.map().values().map(|s| s.status()).collect();
        let users = self.upstreams.lock().unwrap_or_else(|p| p.into_inner());
        for status in &mut all {
            let named = status.get("route").and_then(|r| r.as_str()).filter(|r| users.contains_key(*r));
            if let Some(name) = named.map(str::to_owned) {
                status["upstream"] = name.into();
            }
        }
        let order = |v: &serde_json::Value| {
            ["route", "origin", "kind"].map(|k| v.get(k).and_then(|s| s.as_str()).unwrap_or_default().to_string())
        };
        all.sort_by_key(order);
        all
    }
}
