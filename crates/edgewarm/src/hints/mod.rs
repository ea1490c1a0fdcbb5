//! `103 Early Hints` (RFC 8297) learned at the edge (`routes[].early_hints`): a decorator on the
//! origin seam, as the cache is. A page's `Link: …; rel=preload` and `rel=preconnect` entries
//! are remembered per URL from its shareable HTML response and sent to the client as a 103 the
//! moment its next navigation to that URL arrives: the browser starts fetching the page's
//! sub-resources while the edge waits on the far origin for the page itself. How the 103
//! reaches the client is the HTTP core's ([`crate::http::interim`]); the origin's own 103s pass
//! through the origin kinds to the same place.
//!
//! - [`layer`]: [`layer::Hinted`], the `Origin` that sends what was learned and learns.
//! - [`learn`]: which requests are navigations, and which responses may teach (only what could
//!   be shown to another user: personal pages' preloads are that person's).
//! - [`link`]: the `Link` entries a 103 carries, within the per-URL byte budget.
//! - [`store`]: one route's learned hints, bounded in bytes.
//! - [`routes`]: every route's, kept across reloads.

pub(crate) mod layer;
pub(crate) mod learn;
pub(crate) mod link;
pub(crate) mod routes;
pub(crate) mod store;

pub(crate) use routes::Hints;
