//! How much of the edge one client may take, and who may reach it at all: [`admission`] (a
//! listener's lists and per-client cap, one check for TCP and QUIC), [`clients`] (the
//! per-client connection counts, checked before any TLS work), [`reclaim`] (the idle connections a
//! full listener takes back), [`rate`] (request rates in a fixed memory budget) and [`layer`] (a route's `allow`/`deny` and rate, a decorator on its origin
//! seam: 403 and 429 on every client protocol).

pub(crate) mod admission;
pub(crate) mod clients;
pub(crate) mod layer;
pub(crate) mod rate;
pub(crate) mod reclaim;
