//! What can stop a lab run.

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// `known`: the scenarios' names (`scenarios::ALL`'s), listed by whoever raises it.
    #[error("unknown scenario {name:?}: {known}")]
    Scenario { name: String, known: String },
    #[error("scenario file {0}")]
    ScenarioFile(String),
    #[error(transparent)]
    Netns(#[from] crate::wan::netns::NetnsError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{what} did not become ready: {detail}")]
    NotReady { what: &'static str, detail: String },
    #[error("load run for {mode} failed: {detail}")]
    Load { mode: String, detail: String },
    #[error("certificates: {0}")]
    Certs(#[from] rcgen::Error),
    #[error("{0}")]
    NoProxy(String),
    /// A program the run needs is not installed: said once, before anything starts.
    #[error("{what} not found at {path}: {why}; scripts/deps.sh installs it")]
    Missing { what: &'static str, path: String, why: &'static str },
    /// `cache-tests`: no suite where it was looked for.
    #[error("the HTTP cache test suite is not at {0}: give --suite DIR or set CACHE_TESTS_DIR")]
    NoSuite(String),
    /// `cache-tests`: the suite could not be prepared or run.
    #[error("{0}")]
    Suite(String),
    /// `two-tier`: a setting the lab cannot run (a protocol between the tiers that edgewarm
    /// or the lab lacks), said before anything is built.
    #[error("two-tier: {0}")]
    Tiers(String),
    /// `fleet`: a setting the fleet lab cannot run, said before anything is built.
    #[error("fleet: {0}")]
    Fleet(String),
}

impl LabError {
    /// Bad input from the user (scenario name or file, suite folder), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Scenario { .. } | Self::ScenarioFile(_) | Self::NoSuite(_) | Self::Tiers(_) | Self::Fleet(_)
        )
    }
}
