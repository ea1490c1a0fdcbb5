//! Every route's learned hints, kept across reloads: a route whose `early_hints` settings did
//! not change keeps what it learned (a reload must not make every page cold again), one whose
//! settings changed starts afresh, one that lost the key drops them.

use std::collections::HashSet;
use std::sync::Arc;

use super::store::RouteHints;
use crate::config::EarlyHintsConfig;
use crate::metrics::RouteName;
use crate::origin::per_route::PerRoute;

/// The server's learned hints, by route.
#[derive(Default)]
pub(crate) struct Hints {
    routes: PerRoute<EarlyHintsConfig, RouteHints>,
}

impl Hints {
    /// `route`'s hints under `config`: the ones it had if the settings are the same.
    pub(crate) fn route(&self, route: &RouteName, config: &EarlyHintsConfig) -> Arc<RouteHints> {
        self.routes.get_or_make(route, config, || RouteHints::new(config.clone()))
    }

    /// Drop the hints of routes not in `keep`.
    pub(crate) fn keep_only(&self, keep: &HashSet<RouteName>) {
        self.routes.retain(keep);
    }
}
