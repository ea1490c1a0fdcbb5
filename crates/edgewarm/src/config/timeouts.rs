//! `timeouts:`: how long each wait of a connection's or a request's may last, for the whole
//! server (a rule may set its own `origin_response`: [`super::RuleTimeouts`]).

use std::time::Duration;

use serde::Deserialize;

use super::duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// The whole ClientHello (and PROXY header) must arrive within this.
    #[serde(default = "default_client_hello", with = "duration")]
    pub client_hello: Duration,
    /// Resolving and connecting to the origin, all addresses together.
    #[serde(default = "default_connect", with = "duration")]
    pub connect: Duration,
    /// A tunnel with no bytes in either direction for this long is closed.
    #[serde(default = "default_idle", with = "duration")]
    pub idle: Duration,
    /// On SIGTERM/SIGINT, open tunnels get this long to finish before they are cut.
    #[serde(default = "default_shutdown_grace", with = "duration")]
    pub shutdown_grace: Duration,
    /// `http` routes: from a request sent to the origin until its response headers (504).
    #[serde(default = "default_origin_response", with = "duration")]
    pub origin_response: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            client_hello: default_client_hello(),
            connect: default_connect(),
            idle: default_idle(),
            shutdown_grace: default_shutdown_grace(),
            origin_response: default_origin_response(),
        }
    }
}

fn default_client_hello() -> Duration {
    Duration::from_secs(10)
}
fn default_connect() -> Duration {
    Duration::from_secs(5)
}
fn default_idle() -> Duration {
    Duration::from_secs(300)
}
fn default_origin_response() -> Duration {
    Duration::from_secs(60)
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(30)
}
