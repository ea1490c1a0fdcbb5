//! Every route's learned hints, kept across reloads: a route whose `early_hints` settings did
//! not change keeps what it learned (a reload must not make every page cold again), one whose
//! settings changed starts afresh, one that lost the key drops them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::store::RouteHints;
use crate::config::EarlyHintsConfig;
use crate::metrics::RouteName;

/// The server's learned hints, by route.
#[derive(Default)]
pub(crate) struct Hints {
    routes: Mutex<HashMap<RouteName, Arc<RouteHints>>>,
}

impl Hints {
    fn routes(&self) -> MutexGuard<'_, HashMap<RouteName, Arc<RouteHints>>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `route`'s hints under `config`: the ones it had if the settings are the same.
    pub(crate) fn route(&self, route: &RouteName, config: &EarlyHintsConfig) -> Arc<RouteHints> {
        let mut routes = self.routes();
        if let Some(had) = routes.get(route).filter(|h| h.config == *config) {
            return had.clone();
        }
        let hints = Arc::new(RouteHints::new(config.clone()));
        routes.insert(route.clone(), hints.clone());
        hints
    }

    /// Drop the hints of routes not in `keep`.
    pub(crate) fn keep_only(&self, keep: &HashSet<RouteName>) {
        self.routes().retain(|name, _| keep.contains(name));
    }
}
