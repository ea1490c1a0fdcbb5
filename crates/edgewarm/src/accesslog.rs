//! One line per connection, written when it closes: who, what they asked for, where it went,
//! how much moved, how long each step took, and why it ended. With `--log-format json` every
//! field is a JSON key. The line's level is the close reason's level, so origin trouble stands
//! out from ordinary client noise.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use tracing::Level;

use crate::error::CloseReason;
use crate::metrics::RouteName;

/// Log target of the access log, for filtering (`RUST_LOG=edgewarm::access=off`).
pub(crate) const TARGET: &str = "edgewarm::access";

#[derive(Debug)]
pub(crate) struct AccessLog {
    pub client: SocketAddr,
    pub listener: SocketAddr,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    pub route: Option<RouteName>,
    /// prewarm: the ALPN protocol negotiated with the client.
    pub alpn_selected: Option<String>,
    /// prewarm: the client's TLS version.
    pub tls_version: Option<String>,
    /// prewarm: `hit` (warm connection) or `miss` (connected on demand).
    pub pool: Option<&'static str>,
    pub origin: Option<String>,
    pub origin_addr: Option<SocketAddr>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub hello_time: Option<Duration>,
    pub connect_time: Option<Duration>,
    pub first_byte: Option<Duration>,
    pub duration: Duration,
    pub reason: CloseReason,
    /// The error behind the reason, if any.
    pub detail: Option<String>,
}

/// Optional values render as `-`, like common log format.
struct Opt<'a, T>(&'a Option<T>);

impl<T: fmt::Display> fmt::Display for Opt<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

struct Ms(Option<Duration>);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{:.3}", d.as_secs_f64() * 1e3),
            None => f.write_str("-"),
        }
    }
}

macro_rules! access_event {
    ($level:expr, $log:expr) => {{
        let l = $log;
        tracing::event!(
            target: TARGET,
            $level,
            client = %l.client,
            listener = %l.listener,
            sni = %Opt(&l.sni),
            alpn = %l.alpn.join(","),
            route = %Opt(&l.route),
            alpn_selected = %Opt(&l.alpn_selected),
            tls = %Opt(&l.tls_version),
            pool = %Opt(&l.pool),
            origin = %Opt(&l.origin),
            origin_addr = %Opt(&l.origin_addr),
            bytes_up = l.bytes_up,
            bytes_down = l.bytes_down,
            hello_ms = %Ms(l.hello_time),
            connect_ms = %Ms(l.connect_time),
            first_byte_ms = %Ms(l.first_byte),
            duration_ms = %Ms(Some(l.duration)),
            reason = l.reason.label(),
            detail = %Opt(&l.detail),
            "connection closed"
        )
    }};
}

impl AccessLog {
    pub(crate) fn emit(&self) {
        // `event!` needs its level at compile time; one arm per level.
        match self.reason.level() {
            Level::ERROR => access_event!(Level::ERROR, self),
            Level::WARN => access_event!(Level::WARN, self),
            Level::INFO => access_event!(Level::INFO, self),
            Level::DEBUG => access_event!(Level::DEBUG, self),
            Level::TRACE => access_event!(Level::TRACE, self),
        }
    }
}
