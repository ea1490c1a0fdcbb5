//! The top-level `fleet:` section: the NATS servers a node shares purges through.

use std::time::Duration;

use serde::Deserialize;

use super::{duration, ConfigError};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// NATS servers (`nats://host:4222`, `tls://host:4222`), any of which will do.
    pub nats: Vec<String>,
    /// This node's name in the fleet: its durable place in the purge stream, and how the others
    /// see it. Unique per node.
    pub name: String,
    /// The JetStream stream purges are kept in.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// How long a purge is kept for a node that was away (a node away longer drops its cache).
    #[serde(default = "default_keep", with = "duration")]
    pub keep: Duration,
    /// At start, how long cache hits wait for the node to catch up with the stream (past this,
    /// NATS unreachable: the node serves its local state and catches up when it can).
    #[serde(default = "default_catch_up", with = "duration")]
    pub catch_up: Duration,
    /// A node that loses NATS while running: how long its caches serve no hit (every request
    /// to the origin, so no purge it cannot hear of is missed) before it serves them again.
    #[serde(default = "default_fence_for", with = "duration")]
    pub fence_for: Duration,
    /// How long one attempt on one NATS server may take, whole: TCP, TLS, NATS's own greeting
    /// and the first JetStream answer; then the next server listed. Short, so a node whose
    /// link comes back is connected again soon after, and a silent server holds no node.
    #[serde(default = "default_connect_timeout", with = "duration")]
    pub connect_timeout: Duration,
}

fn default_stream() -> String {
    "EDGEWARM_PURGES".into()
}
fn default_keep() -> Duration {
    Duration::from_secs(7 * 86_400)
}
fn default_catch_up() -> Duration {
    Duration::from_secs(5)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(1)
}

fn default_fence_for() -> Duration {
    Duration::from_secs(60)
}

fn token(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl FleetConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.nats.is_empty() {
            return Err(ConfigError::invalid("fleet.nats", "at least one server: nats://host:4222"));
        }
        for (i, url) in self.nats.iter().enumerate() {
            let ok = ["nats://", "tls://"].iter().any(|s| url.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
            if !ok {
                return Err(ConfigError::invalid(
                    format!("fleet.nats[{i}]"),
                    format!("{url:?}: write nats://host:port"),
                ));
            }
        }
        if !token(&self.name) {
            return Err(ConfigError::invalid("fleet.name", "1 to 64 letters, digits, '-' or '_', unique per node"));
        }
        if !token(&self.stream) {
            return Err(ConfigError::invalid("fleet.stream", "1 to 64 letters, digits, '-' or '_'"));
        }
        if self.connect_timeout < Duration::from_millis(100) {
            return Err(ConfigError::invalid("fleet.connect_timeout", "at least 100ms"));
        }
        if self.keep < Duration::from_secs(60) {
            return Err(ConfigError::invalid("fleet.keep", "at least 1m"));
        }
        Ok(())
    }
}
