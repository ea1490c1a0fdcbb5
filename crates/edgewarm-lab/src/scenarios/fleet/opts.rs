//! The fleet lab's options (`lab --scenario fleet`): how many purges, how often, and how long
//! one edge is cut off. A file of their own so that the lab's options
//! ([`crate::scenarios::opts::LabOpts`]) can hold them without importing the run.

use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct FleetOpts {
    /// `fleet` only: purges by URL issued on edge 0, each with `&wait=fleet`.
    #[arg(long, default_value_t = 60)]
    pub purges: usize,
    /// `fleet` only: one purge started this often (the next waits for the previous' answer).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "250ms")]
    pub purge_every: Duration,
    /// `fleet` only: how long the last edge's link to the shield (and NATS) is cut, from the
    /// fifth of the purges on.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub cut: Duration,
}
