//! edgewarm: an edge TLS proxy that takes round trips off the long link.
//!
//! The data path, in the order a connection meets it:
//!
//! - [`listener`]: accept loop (connection limit, EMFILE back-off, optional PROXY header).
//! - [`peek`]: read the TLS ClientHello without decrypting it; [`peek::clienthello`] is the
//!   pure parser (complete / need more / error).
//! - [`route`]: SNI → route (exact, wildcard, no-SNI, default); never an open proxy.
//! - [`tunnel`]: blind tunnel: connect the origin, replay the hello.
//! - [`pool`]: `prewarm` routes: origin TLS connections handshaked before clients arrive;
//!   [`pool::serve`] terminates the client's TLS ([`tls`]) and attaches it to one.
//! - [`relay`]: move bytes both ways (splice(2), userspace fallback, or between TLS sessions),
//!   half-close, idle timeout.
//!
//! Around it:
//!
//! - [`config`]: YAML config, validated before any port is bound.
//! - [`server`]: ties the path together; `run(listeners, config, shutdown)`; reload and drain.
//! - [`metrics`], [`admin`], [`accesslog`], [`error`]: what operators see.
//! - [`sockopt`]: every setsockopt and raw syscall; the only module allowed `unsafe`.
//!
//! The WAN lab and the load generator are the `edgewarm-lab` crate; the proxy links none of it.

pub mod accesslog;
pub mod admin;
pub mod config;
pub mod error;
pub mod listener;
pub mod metrics;
pub mod peek;
pub mod pool;
pub mod relay;
pub mod route;
pub mod server;
pub mod sockopt;
pub mod tls;
pub mod tunnel;
