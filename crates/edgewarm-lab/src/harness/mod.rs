//! What every scenario does around the proxy: [`hosts`], the processes on the lab's hosts, and
//! the one readiness wait; [`files`], run folders, certificates and the three-host edge's
//! configuration; [`edge_yaml`], what every edgewarm configuration it writes shares; [`tiers`], the two-tier hosts' configurations and start, shared by `two-tier`
//! and `fleet`; [`report`], what every report is and its one save.

pub(crate) mod edge_yaml;
pub(crate) mod files;
pub(crate) mod hosts;
pub mod report;
pub mod tiers;
