//! edgewarm: an edge TLS proxy that takes round trips off the long link.
//!
//! The data path, in the order a connection meets it:
//!
//! - [`listener`]: accept loop (connection limit, EMFILE back-off, optional PROXY header);
//!   [`listener::quic`]: HTTP/3 on a UDP socket beside it (QUIC handshake, Retry, 0-RTT), whose
//!   connections go straight to the `http` action's HTTP/3 driver.
//!   [`limits`]: per-client connection caps and address lists checked there, before any TLS
//!   work; request rates and a route's lists as a decorator on the origin seam (403, 429).
//! - [`peek`]: read the TLS ClientHello without decrypting it; [`peek::clienthello`] is the
//!   pure parser (complete / need more / error).
//! - [`route`]: SNI → route (exact, wildcard, no-SNI, default); never an open proxy.
//! - [`action`]: what the route says to do, one module each, all with one signature:
//!   [`action::reject`]; [`action::tunnel`] (blind: connect the origin, replay the hello);
//!   [`action::prewarm`] (terminate the client's TLS ([`tls`]) and attach it to a connection
//!   handshaked before the client arrived); [`action::http`] (terminate TLS, then the
//!   protocol-neutral HTTP core, [`http`]: one client driver per protocol, one request service,
//!   one seam to the origin, one retry policy, one error table); [`h2_stream`]: an h2 stream's
//!   body under flow control, for the HTTP/2 client driver and the HTTP/2 origin kind alike.
//! - [`origin`]: the origin side, behind one seam the HTTP core calls (`origin::seam`), and
//!   the standing origin connections every action but the tunnel uses, under one supervisor:
//!   pre-warmed TLS, multiplexed HTTP/2, keep-alive HTTP/1.1, over TLS or cleartext, and
//!   HTTP/3 over QUIC; one registry.
//! - [`cache`]: the edge cache, a decorator on that seam (`routes[].cache`): what a far
//!   origin already sent is served from the edge.
//! - [`hints`]: `103 Early Hints` learned per page (`routes[].early_hints`), another decorator
//!   on the seam: a page's preloads reach the browser while the page is fetched.
//! - [`relay`]: move bytes both ways (splice(2), userspace fallback, or between TLS sessions),
//!   half-close, idle timeout. With `ktls`, both TLS sessions move to the kernel
//!   ([`tls::ktls`]) and are spliced like plain sockets.
//! - [`transport`]: below all of them: socket options (the only `unsafe`), name resolution,
//!   dialing origins, Fast Open streams, replaying peeked bytes.
//!
//! Around it:
//!
//! - [`config`]: YAML config, validated before any port is bound.
//! - [`fleet`]: purges shared by a fleet of edges through NATS JetStream (`fleet:`).
//! - [`acme`]: certificates from an ACME server for `cert: acme` routes: ordered, answered
//!   (TLS-ALPN-01, by the listener), stored and renewed without a reload.
//! - [`snapshot`]: what a connection sees of the config, fixed at accept.
//! - [`server`]: ties the path together: bound listeners in, reload and drain.
//! - [`upgrade`]: a new binary takes the listening sockets over a Unix socket, warms its
//!   origin connections, then the old process drains: upgrades that drop nothing.
//! - [`workers`]: one single-threaded runtime per core; each accepted connection is served on
//!   one of them, with origin connections of its own.
//! - [`metrics`], [`admin`], [`accesslog`], [`error`]: what operators see.
//! - [`fuzzing`]: the entry points the fuzz targets (`fuzz/`) reach the crate's parsers by.
//!
//! The WAN lab and the load generator are the `edgewarm-lab` crate; the proxy links none of it.

pub(crate) mod accesslog;
pub mod acme;
pub(crate) mod action;
pub mod admin;
pub mod cache;
pub mod config;
pub mod error;
pub mod fleet;
pub mod fuzzing;
pub(crate) mod h2_stream;
pub(crate) mod hints;
pub(crate) mod http;
pub(crate) mod limits;
pub(crate) mod listener;
pub mod metrics;
pub mod origin;
pub mod peek;
pub mod relay;
pub mod route;
pub mod server;
pub(crate) mod snapshot;
pub mod tls;
pub mod transport;
pub mod upgrade;
pub mod workers;
