//! What every scenario does around the proxy: [`hosts`], the processes on the lab's hosts, and
//! the one readiness wait; [`files`], run folders, certificates and the three-host edge's
//! configuration; [`tiers`], the two-tier hosts' configurations and start, shared by `two-tier`
//! and `fleet`; [`report`], what every report is and its one save.

pub(crate) mod files;
pub(crate) mod hosts;
pub mod report;
pub mod tiers;
