//! Which forwarding headers an `http` route adds to its requests (`routes[].forward_headers`).

use serde::Deserialize;

/// One forwarding header an `http` route can add (`routes[].forward_headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardHeader {
    XForwardedFor,
    XForwardedProto,
    Forwarded,
    Via,
    XForwardedHost,
    XForwardedPort,
}

/// The forwarding headers an `http` route adds. Whatever is left out, a client's own
/// forwarding headers (`crate::http::claims`) are still removed unless its listener is
/// trusted (`trust_forwarded`): leaving ours out never lets a client's through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardHeaders {
    pub x_forwarded_for: bool,
    pub x_forwarded_proto: bool,
    pub forwarded: bool,
    /// `Via` on requests and responses (RFC 9110 §7.6.3).
    pub via: bool,
    /// `X-Forwarded-Host`: the authority the client asked for. Not by default: `Forwarded`
    /// already carries it, and the origin gets the same `:authority` anyway.
    pub x_forwarded_host: bool,
    /// `X-Forwarded-Port`: the edge's port the client connected to. Not by default.
    pub x_forwarded_port: bool,
}

impl Default for ForwardHeaders {
    fn default() -> Self {
        Self {
            x_forwarded_for: true,
            x_forwarded_proto: true,
            forwarded: true,
            via: true,
            x_forwarded_host: false,
            x_forwarded_port: false,
        }
    }
}

impl From<&[ForwardHeader]> for ForwardHeaders {
    fn from(list: &[ForwardHeader]) -> Self {
        let has = |h| list.contains(&h);
        Self {
            x_forwarded_for: has(ForwardHeader::XForwardedFor),
            x_forwarded_proto: has(ForwardHeader::XForwardedProto),
            forwarded: has(ForwardHeader::Forwarded),
            via: has(ForwardHeader::Via),
            x_forwarded_host: has(ForwardHeader::XForwardedHost),
            x_forwarded_port: has(ForwardHeader::XForwardedPort),
        }
    }
}
