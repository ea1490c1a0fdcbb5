//! Which forwarding headers an `http` route adds to its requests (`routes[].forward_headers`), and
//! the request headers a client may not set ([`CLIENT_CLAIMS`]: the edge owns them, so no header
//! policy may write them either).

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

/// Request headers a client has no business setting, removed unless the listener trusts its
/// peers: each tells many applications where the request came from, or what it really was,
/// and none is in the cache key (docs/config.md, "Headers a client cannot set"). The first
/// three are replaced by ours where the route adds them.
pub(crate) const CLIENT_CLAIMS: [&str; 25] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "x-forwarded-prefix",
    "x-host",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    // The client's address as other proxies and CDNs name it (nginx's realip, Akamai,
    // Cloudflare, Fastly): access rules and logs behind the edge read them.
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    // "The client used TLS" (Rails, Django, IIS), and the path it "really" asked for.
    "x-forwarded-ssl",
    "front-end-https",
    "x-original-uri",
    "x-forwarded-uri",
];

/// Whether `name` is one of [`CLIENT_CLAIMS`], spelled with `-` or `_`.
pub(crate) fn is_client_claim(name: &str) -> bool {
    // Every claim starts with one of four letters: one byte test spares most names the
    // comparison.
    if !matches!(name.as_bytes().first(), Some(b'x' | b'f' | b't' | b'c')) {
        return false;
    }
    CLIENT_CLAIMS.iter().any(|claim| {
        claim.len() == name.len() && claim.bytes().zip(name.bytes()).all(|(c, n)| c == n || (c == b'-' && n == b'_'))
    })
}
