//! What can stop a lab run.

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("unknown scenario {0:?}: default, ats-poc, far-origin, ramp, tfo, floor, lossy, pages or upgrade")]
    Scenario(String),
    #[error("scenario file {0}")]
    ScenarioFile(String),
    #[error(transparent)]
    Netns(#[from] crate::netns::NetnsError),
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
}

impl LabError {
    /// Bad input from the user (scenario name or file), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Scenario(_) | Self::ScenarioFile(_))
    }
}
