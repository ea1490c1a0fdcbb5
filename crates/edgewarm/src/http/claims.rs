//! The request headers a client has no business setting, removed from its requests unless its
//! listener trusts its peers ([`CLIENT_CLAIMS`]): headers that tell an application where a
//! request came from or what it really was (`X-Forwarded-Host`, `X-Original-URL`,
//! `X-HTTP-Method-Override`, the client's address as other proxies name it, …). The cache keys
//! on the target, not on them, so a client's value reflected in a page would be served to
//! everyone who asks for that target: web cache poisoning. Their `_` spellings go too (CGI and
//! PHP read `X_Forwarded_Host` as `X-Forwarded-Host`).

use http::header::{HeaderMap, HeaderName};

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
fn is_client_claim(name: &str) -> bool {
    // Every claim starts with one of four letters: one byte test spares most names the
    // comparison.
    if !matches!(name.as_bytes().first(), Some(b'x' | b'f' | b't' | b'c')) {
        return false;
    }
    CLIENT_CLAIMS.iter().any(|claim| {
        claim.len() == name.len() && claim.bytes().zip(name.bytes()).all(|(c, n)| c == n || (c == b'-' && n == b'_'))
    })
}

/// Remove every [`CLIENT_CLAIMS`] header, in either spelling.
pub(super) fn strip_client_claims(headers: &mut HeaderMap) {
    let found: Vec<HeaderName> = headers.keys().filter(|k| is_client_claim(k.as_str())).cloned().collect();
    for name in found {
        headers.remove(name);
    }
}
