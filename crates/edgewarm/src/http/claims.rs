//! The request headers a client has no business setting, removed from its requests unless its
//! listener trusts its peers ([`CLIENT_CLAIMS`](crate::config::forward::CLIENT_CLAIMS); the list is `config::forward`'s, since no header
//! policy may write them either): headers that tell an application where a request came from or
//! what it really was (`X-Forwarded-Host`, `X-Original-URL`,
//! `X-HTTP-Method-Override`, the client's address as other proxies name it, …). The cache keys
//! on the target, not on them, so a client's value reflected in a page would be served to
//! everyone who asks for that target: web cache poisoning. Their `_` spellings go too (CGI and
//! PHP read `X_Forwarded_Host` as `X-Forwarded-Host`).

use http::header::{HeaderMap, HeaderName};

use crate::config::forward::is_client_claim;

/// Remove every [`CLIENT_CLAIMS`](crate::config::forward::CLIENT_CLAIMS) header, in either spelling.
pub(super) fn strip_client_claims(headers: &mut HeaderMap) {
    let found: Vec<HeaderName> = headers.keys().filter(|k| is_client_claim(k.as_str())).cloned().collect();
    for name in found {
        headers.remove(name);
    }
}
