//! edgewarm's lab: the WAN emulation, origin and load generator that measure the proxy
//! against its round-trip minimum. Kept out of the proxy crate so a production edge links none
//! of it (TUN devices, plots, progress bars, certificate generation).
//!
//! - [`netns`]: the three hosts (client, edge, origin) as network namespaces.
//! - [`delaybox`]: the emulated links: TUN pairs with a user-space delay per direction;
//!   [`impair`]: their optional loss (random or bursty) and jitter.
//! - [`origin`]: the lab's HTTPS origin (`edgewarm-lab origin`); [`pages`]: the synthetic
//!   pages it serves to the browser lab, [`pages_cache`]: their cacheable releases.
//! - [`load`]: the load generator (`edgewarm-lab load`): every request a new connection;
//!   [`load_h2`] and [`load_h3`] its HTTP/2 (hyper) and HTTP/3 (quinn) requests,
//!   [`load_report`] what it reports, [`load_target`] what they share (where requests go, what
//!   one measured).
//! - [`browse`]: headless Chromium loading a page over the DevTools protocol
//!   (`edgewarm-lab browse`).
//! - [`model`]: the round-trip minimum of each mode.
//! - [`scenario`]: what a run measures (named scenarios, files, command-line narrowing).
//! - [`run`]: `edgewarm-lab lab`: topology, processes, measurement ([`hosts`]: the processes
//!   and their readiness); [`files`]: the certificates and edge configuration it writes first.
//! - [`report`]: a run's results, JSON and Markdown ([`report_impair`]: its parts about
//!   lossy links); [`error`]: what can stop a run.
//! - [`peers`]: other proxies (nginx, HAProxy) measured in the same run.
//! - [`plot`]: SVG plots of a run.
//! - [`pages_lab`]: `lab --scenario pages`, the browser lab: Chromium loads [`pages`] through
//!   every mode ([`browse`]); [`pages_report`] and [`plot_pages`] report it.
//! - [`failover`]: `lab --scenario failover`, a route's two origin servers killed, slowed and
//!   failing under an open-loop GET/POST mix, through edgewarm and (`--peers`) HAProxy and
//!   nginx side by side, on loopback.
//! - [`upgrade_lab`]: `lab --scenario upgrade`, the first clients' TTFB before and after an
//!   upgrade and after a restart.
//! - [`two_tier`]: `lab --scenario two-tier`, edges whose origin is a shield (a second
//!   edgewarm near the origin, both caching): what reaches the origin, and each visit's cost by
//!   what the caches hold.
//! - [`fleet`]: `lab --scenario fleet`, the two-tier hosts as one fleet purging through NATS:
//!   purge → applied time on every node, stale reads after an acknowledged purge, and a cut
//!   edge's catch-up.
//! - [`cache_tests`]: `edgewarm-lab cache-tests`, the HTTP cache test suite (http-tests'
//!   cache-tests) run against edgewarm: [`cache_suite`] prepares the suite, [`cache_edge`]
//!   starts edgewarm in front of its origin, [`cache_report`] tallies the results against the
//!   published ones of other caches.
//!
//! The proxy itself runs as a process (the `edgewarm` binary), exactly as deployed.

pub mod browse;
pub(crate) mod cache_edge;
pub mod cache_report;
pub mod cache_suite;
pub mod cache_tests;
pub mod delaybox;
pub mod error;
pub mod failover;
pub(crate) mod files;
pub mod fleet;
pub(crate) mod hosts;
pub mod impair;
pub mod load;
pub(crate) mod load_h2;
pub mod load_h3;
pub(crate) mod load_report;
pub(crate) mod load_target;
pub mod model;
pub mod netns;
pub mod origin;
pub mod pages;
pub mod pages_cache;
pub mod pages_lab;
pub mod pages_report;
pub mod peers;
pub mod plot;
pub mod plot_pages;
pub mod report;
pub(crate) mod report_impair;
pub mod run;
pub mod scenario;
pub mod two_tier;
pub mod upgrade_lab;
