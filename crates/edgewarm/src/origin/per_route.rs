//! State a layer keeps for each route across reloads while the route's settings are equal:
//! a reload must not throw away what a route built up (a cache's entries, learned hints, a
//! rate's tokens) when nothing about that route changed, but a route whose settings changed
//! starts afresh, and a route the reload left without them lets them go. Written once here for
//! every layer ([`super::layer`]) and for an origin group's servers.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::metrics::RouteName;

/// Each key's state `S`, with the settings `C` it was made under. Keyed by route unless told.
pub(crate) struct PerRoute<C, S, K = RouteName> {
    routes: Mutex<HashMap<K, (C, Arc<S>)>>,
}

impl<C, S, K> Default for PerRoute<C, S, K> {
    fn default() -> Self {
        Self { routes: Mutex::new(HashMap::new()) }
    }
}

impl<C: PartialEq + Clone, S, K: Eq + Hash + Clone> PerRoute<C, S, K> {
    fn routes(&self) -> MutexGuard<'_, HashMap<K, (C, Arc<S>)>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key`'s state under `config`: the one it had if the settings are equal, else `make`'s
    /// (kept from now on). `make` runs under the store's lock, so two callers asking at once
    /// share one state.
    pub(crate) fn get_or_make(&self, key: &K, config: &C, make: impl FnOnce() -> S) -> Arc<S> {
        let mut routes = self.routes();
        if let Some((_, had)) = routes.get(key).filter(|(was, _)| was == config) {
            return had.clone();
        }
        let made = Arc::new(make());
        routes.insert(key.clone(), (config.clone(), made.clone()));
        made
    }

    /// Drop the state of every key not in `keep` (a reload no longer configures it).
    pub(crate) fn retain(&self, keep: &HashSet<K>) {
        self.retain_where(|key| keep.contains(key));
    }

    /// Drop the state of every key `keep` says no to (it may clean up after each as it goes).
    pub(crate) fn retain_where(&self, mut keep: impl FnMut(&K) -> bool) {
        self.routes().retain(|key, _| keep(key));
    }

    /// `f` of each key's settings and state, in no order. Runs under the store's lock: clone
    /// the states out to do anything slow with them.
    pub(crate) fn each<T>(&self, mut f: impl FnMut(&K, &C, &Arc<S>) -> T) -> Vec<T> {
        self.routes().iter().map(|(key, (config, state))| f(key, config, state)).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn route(name: &str) -> RouteName {
        RouteName::new(name)
    }

    #[test]
    fn state_is_kept_while_the_settings_are_equal_and_remade_when_they_change() {
        let store: PerRoute<u32, AtomicUsize> = PerRoute::default();
        let a = store.get_or_make(&route("a"), &1, || AtomicUsize::new(0));
        a.fetch_add(5, Ordering::Relaxed);
        let again = store.get_or_make(&route("a"), &1, || panic!("equal settings make nothing"));
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(again.load(Ordering::Relaxed), 5, "what the route built up is kept");

        let changed = store.get_or_make(&route("a"), &2, || AtomicUsize::new(0));
        assert!(!Arc::ptr_eq(&a, &changed));
        assert_eq!(changed.load(Ordering::Relaxed), 0, "new settings start afresh");
        let back = store.get_or_make(&route("a"), &1, || AtomicUsize::new(7));
        assert_eq!(back.load(Ordering::Relaxed), 7, "only the latest settings' state is kept");
    }

    #[test]
    fn routes_are_apart() {
        let store: PerRoute<u32, AtomicUsize> = PerRoute::default();
        let a = store.get_or_make(&route("a"), &1, || AtomicUsize::new(1));
        let b = store.get_or_make(&route("b"), &1, || AtomicUsize::new(2));
        assert!(!Arc::ptr_eq(&a, &b));
        let mut seen = store.each(|name, config, state| (name.to_string(), *config, state.load(Ordering::Relaxed)));
        seen.sort();
        assert_eq!(seen, [("a".to_string(), 1, 1), ("b".to_string(), 1, 2)]);
    }

    #[test]
    fn retain_drops_the_routes_that_went() {
        let store: PerRoute<u32, AtomicUsize> = PerRoute::default();
        let a = store.get_or_make(&route("a"), &1, || AtomicUsize::new(1));
        store.get_or_make(&route("b"), &1, || AtomicUsize::new(2));
        store.retain(&[route("a")].into_iter().collect());
        let names = store.each(|name, _, _| name.to_string());
        assert_eq!(names, ["a"]);
        assert!(Arc::ptr_eq(&a, &store.get_or_make(&route("a"), &1, || AtomicUsize::new(0))), "a is kept");
        let b = store.get_or_make(&route("b"), &1, || AtomicUsize::new(0));
        assert_eq!(b.load(Ordering::Relaxed), 0, "b came back afresh");

        let mut dropped = Vec::new();
        store.retain_where(|name| {
            let keep = name.to_string() == "b";
            if !keep {
                dropped.push(name.to_string());
            }
            keep
        });
        assert_eq!(dropped, ["a"]);
        assert_eq!(store.each(|name, _, _| name.to_string()), ["b"]);
    }

    #[test]
    fn callers_at_once_share_one_state() {
        let store: PerRoute<u32, AtomicUsize, (RouteName, String)> = PerRoute::default();
        let made = AtomicUsize::new(0);
        let key = (route("a"), "server".to_string());
        let all: Vec<Arc<AtomicUsize>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        store.get_or_make(&key, &1, || {
                            made.fetch_add(1, Ordering::Relaxed);
                            AtomicUsize::new(0)
                        })
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(made.load(Ordering::Relaxed), 1, "made once");
        assert!(all.iter().all(|s| Arc::ptr_eq(s, &all[0])));
    }
}
