//! edgewarm's lab: the WAN emulation, origin and load generator that measure the proxy
//! against its round-trip minimum. Kept out of the proxy crate so a production edge links none
//! of it (TUN devices, plots, progress bars, certificate generation).
//!
//! Imports run one way, down this list:
//!
//! - [`scenarios`]: `edgewarm-lab lab --scenario NAME`, one folder per scenario, all registered
//!   in [`scenarios::ALL`]: the "modes" presets ([`scenarios::modes`]: TTFB per mode on the
//!   three hosts, with [`scenarios::modes::peers`], other proxies measured in the same run),
//!   the browser lab ([`scenarios::pages`]), [`scenarios::upgrade`], [`scenarios::two_tier`]
//!   (edges whose origin is a caching shield), [`scenarios::fleet`] (the two-tier hosts
//!   purging as one through NATS) and [`scenarios::failover`] (a route's two origin servers
//!   failing, on loopback). What they share: [`scenarios::opts`], [`scenarios::spec`],
//!   [`scenarios::model`] (each mode's round-trip minimum), [`scenarios::client`]. No
//!   scenario imports another.
//! - [`tools`]: the subcommands that are not scenarios: the lab origin ([`tools::origin`]),
//!   the load generator ([`tools::load`]), headless Chromium ([`tools::browse`]) and the HTTP
//!   cache test suite against edgewarm ([`tools::cache_tests`]).
//! - [`harness`]: what every scenario does around the proxy: processes and the one readiness
//!   wait ([`harness::hosts`]), run folders and certificates ([`harness::files`]), the
//!   two-tier hosts' configurations and start ([`harness::tiers`]), and the [`harness::report::Report`]
//!   trait with its one save.
//! - [`wan`]: the emulated network: namespaces ([`wan::netns`], [`wan::tiers`]), the delay
//!   box ([`wan::delaybox`]) and its loss and jitter ([`wan::impair`]).
//! - [`error`]: what can stop a run.
//!
//! The proxy itself runs as a process (the `edgewarm` binary), exactly as deployed.

pub mod error;
pub mod harness;
pub mod scenarios;
pub mod tools;
pub mod wan;
