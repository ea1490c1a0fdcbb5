//! The edge cache (`routes[].cache` on `http` routes): a decorator on the origin seam, so the
//! request service does not know it is there. A request's path through it:
//!
//! - [`layer`]: [`layer::Cached`], an `Origin` wrapping the route's origin: fresh hit, stale
//!   ([`stale`]: revalidate, serve while revalidating, serve on error), miss (one fetch per
//!   key, [`fill`]), or pass through (other methods; a successful unsafe one invalidates).
//! - [`key`]: what a stored response is found by (URL, and the `Vary` variant).
//! - [`decide`]: whether a response may be stored and how long it may be served (RFC 9111 via
//!   `http-cache-semantics`, the edge's own refusals), reading the headers as [`directives`]
//!   says (RFC 9213's `CDN-Cache-Control`, case, `Age`, `Expires`).
//! - [`keep`]: a fetched response read into the store while it goes out.
//! - [`store`]: the memory tier (`moka`, weighed in bytes), hit-for-miss memory.
//! - [`disk`]: the optional disk tier under it, kept across restarts; [`record`]: its file
//!   format.
//! - [`serve`]: a client's response from a stored one (Age, 304, HEAD, one byte range).
//! - [`status`]: `Cache-Status` (RFC 9211).
//! - [`routes`]: every route's cache, kept across reloads; purge and occupancy for the admin
//!   API.

pub(crate) mod decide;
pub(crate) mod directives;
pub(crate) mod disk;
pub(crate) mod fill;
pub(crate) mod keep;
pub(crate) mod key;
pub(crate) mod layer;
pub(crate) mod record;
pub(crate) mod routes;
pub(crate) mod serve;
pub(crate) mod stale;
pub(crate) mod status;
pub(crate) mod store;

pub use routes::{Caches, Occupancy, Purge};
