//! The one shape of a decorator on a route's origin (its cache, its learned early hints, its
//! address lists and rate): it wraps the route's seam where the route's configuration
//! asks for it, and keeps per-route state across reloads, forgetting the routes a reload left
//! without it. The snapshot wraps every route's seam in the server's layers, innermost first,
//! in one loop: a new layer is its own module plus one entry in that list.

use std::collections::HashSet;
use std::sync::Arc;

use super::seam::Origin;
use crate::config::HttpConfig;
use crate::metrics::RouteName;

/// A decorator on routes' origins, with the state it keeps for each.
pub(crate) trait Layer: Send + Sync {
    /// `inner` wrapped for `route`, or `None` where `config` has none of this layer.
    fn wrap(&self, route: &RouteName, config: &HttpConfig, inner: &Arc<dyn Origin>) -> Option<Arc<dyn Origin>>;
    /// A load or reload wrapped exactly `routes`: the state kept for every other route goes.
    fn retain(&self, routes: &HashSet<RouteName>);
}
