//! A client's request as the origin should see it, and the origin's response as the client
//! should see it: what a reverse proxy changes in between.
//!
//! - The request goes out as HTTP/2 with `:scheme https` and `:authority` from the client's
//!   `:authority` or `Host` (an HTTP/1.1 origin-form target forwarded as is would be a
//!   malformed HTTP/2 request).
//! - Hop-by-hop headers are the client connection's, not the request's: `Connection` and every
//!   header it names, `Keep-Alive`, `Proxy-Connection`, `TE` (except `trailers`),
//!   `Transfer-Encoding`, `Upgrade`, and `Host` (carried as `:authority`). The same go from
//!   responses.
//! - `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` from the client are dropped, never
//!   trusted, and set from what edgewarm saw; `Via` gets edgewarm's hop appended.
//! - So are the rest of that family ([`super::claims`]), unless the peer is a trusted load
//!   balancer.
//! - Several `Cookie` lines (HTTP/2 and HTTP/3 clients split the header to compress it better)
//!   become one, joined with "; " (RFC 9113 §8.2.3, RFC 9114 §4.2.1): HTTP/1.1 allows one line,
//!   and an origin reading only the first would lose the rest of a session's cookies.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::sync::OnceLock;

use http::uri::{self, Authority, PathAndQuery, Scheme};
use http::{Request, Uri, Version};

use super::claims::strip_client_claims;
use crate::config::ForwardHeaders;

/// Why a request cannot be forwarded: the client gets a 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum BadRequest {
    #[error("no Host or :authority")]
    NoAuthority,
    #[error("invalid request target")]
    Target,
    #[error("Host differs from the request target's authority")]
    HostMismatch,
    /// RFC 9112 §3.2: a request with more than one `Host` line gets a 400 (which to believe
    /// is exactly what request smuggling exploits).
    #[error("more than one Host header")]
    DuplicateHost,
}

static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");

/// Remove hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none (HTTP/2 forbids them): one pass over the few names present
    // finds that out for less than a hashed lookup per hop-by-hop name.
    if !headers.keys().any(|k| HOP_BY_HOP.contains(k)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let te_trailers = headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers")));
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

fn via(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0 edgewarm",
        Version::HTTP_2 => "2 edgewarm",
        Version::HTTP_3 => "3 edgewarm",
        _ => "1.1 edgewarm",
    }
}

/// What edgewarm says about one client connection, computed once per connection rather than
/// per request.
#[derive(Debug, Clone)]
pub(crate) struct ClientFacts {
    /// The peer is a load balancer the operator trusts (`listeners[].trust_forwarded`): its
    /// forwarding headers are kept and ours appended.
    trusted: bool,
    /// Which of ours to add (`routes[].forward_headers`).
    add: ForwardHeaders,
    x_forwarded_for: HeaderValue,
    /// The port the client connected to (`X-Forwarded-Port`).
    port: HeaderValue,
    /// `for=…;proto=https;host=` (the host is the request's).
    forwarded_prefix: String,
    /// The `Forwarded` value for the first host asked for: a connection's requests nearly
    /// always name one host, and this spares each of them a format and an allocation.
    forwarded_first: OnceLock<(String, HeaderValue)>,
}

impl ClientFacts {
    #[cfg(test)]
    pub(crate) fn new(client: SocketAddr) -> Self {
        Self::with_trust(client, 443, false, ForwardHeaders::default())
    }

    /// `port`: the edge's port the client connected to.
    pub(crate) fn with_trust(client: SocketAddr, port: u16, trusted: bool, add: ForwardHeaders) -> Self {
        let ip = client.ip().to_canonical();
        let node = if ip.is_ipv6() { format!("\"[{ip}]\"") } else { ip.to_string() };
        Self {
            trusted,
            add,
            // An IP address is always a valid header value.
            x_forwarded_for: HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("unknown")),
            port: HeaderValue::from(port),
            forwarded_prefix: format!("for={node};proto=https;host="),
            forwarded_first: OnceLock::new(),
        }
    }

    fn forwarded_text(&self, authority: &str) -> String {
        format!("{}\"{authority}\"", self.forwarded_prefix)
    }

    /// Whether responses get our `Via`.
    pub(crate) fn via(&self) -> bool {
        self.add.via
    }

    /// Our `Forwarded` element for a request to `authority`.
    fn forwarded(&self, authority: &str) -> Option<HeaderValue> {
        if let Some((host, value)) = self.forwarded_first.get() {
            if host == authority {
                return Some(value.clone());
            }
        }
        let value = HeaderValue::from_str(&self.forwarded_text(authority)).ok()?;
        let _ = self.forwarded_first.set((authority.to_string(), value.clone()));
        Some(value)
    }
}

/// The origin-bound request (without body) for a client's request head.
#[cfg(test)]
fn request<B>(client_req: &Request<B>, client: &ClientFacts) -> Result<Request<()>, BadRequest> {
    Ok(head(client_req, target(client_req)?, client))
}

/// The origin-bound target (`https://authority/path`) for a client's request, or why it cannot
/// be forwarded. Checked once per request; [`head`] then builds the request from it as often as
/// it is sent.
pub(crate) fn target<B>(client_req: &Request<B>) -> Result<Uri, BadRequest> {
    let mut hosts = client_req.headers().get_all(header::HOST).iter();
    if hosts.next().is_some() && hosts.next().is_some() {
        return Err(BadRequest::DuplicateHost);
    }
    let host_header = client_req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).filter(|h| !h.is_empty());
    // The client's own authority and path are reused as they are (shared bytes, no parse)
    // whenever they can be.
    let authority = match client_req.uri().authority() {
        // Never userinfo (RFC 9113 §8.3.1): host and port only.
        Some(a) if a.as_str().contains('@') => {
            let bare = match a.port() {
                Some(port) => format!("{}:{port}", a.host()),
                None => a.host().to_string(),
            };
            Authority::try_from(bare).map_err(|_| BadRequest::Target)?
        }
        Some(a) => a.clone(),
        None => Authority::try_from(host_header.ok_or(BadRequest::NoAuthority)?).map_err(|_| BadRequest::Target)?,
    };
    if let (Some(_), Some(host)) = (client_req.uri().authority(), host_header) {
        if !host.eq_ignore_ascii_case(authority.as_str()) {
            return Err(BadRequest::HostMismatch);
        }
    }
    let mut target = uri::Parts::default();
    target.scheme = Some(Scheme::HTTPS);
    target.path_and_query =
        Some(client_req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/")));
    target.authority = Some(authority);
    Uri::from_parts(target).map_err(|_| BadRequest::Target)
}

/// The origin-bound request for a client's request head and its checked [`target`]: the
/// client's headers (one copy) less the hop-by-hop ones, with the forwarding headers set.
pub(crate) fn head<B>(client_req: &Request<B>, target: Uri, client: &ClientFacts) -> Request<()> {
    let mut headers = client_req.headers().clone();
    strip_hop_by_hop(&mut headers);
    join_cookies(&mut headers);
    let authority = target.authority().map_or("", |a| a.as_str());
    let add = client.add;
    if client.trusted {
        // Behind a trusted load balancer: its view of the client comes first, ours after
        // (RFC 7239 §4: a list, one element per hop). A header of ours left out passes theirs
        // on as it came.
        let joined = |headers: &HeaderMap, name: &HeaderName, ours: &str| {
            let theirs: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
            let all = theirs.into_iter().chain([ours]).collect::<Vec<_>>().join(", ");
            HeaderValue::from_str(&all).ok()
        };
        if add.x_forwarded_for {
            let xff = client.x_forwarded_for.to_str().unwrap_or_default().to_string();
            if let Some(v) = joined(&headers, &X_FORWARDED_FOR, &xff) {
                headers.insert(&X_FORWARDED_FOR, v);
            }
        }
        if add.forwarded {
            if let Some(v) = joined(&headers, &header::FORWARDED, &client.forwarded_text(authority)) {
                headers.insert(header::FORWARDED, v);
            }
        }
        if add.x_forwarded_proto && !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        }
        // Theirs describe the client; ours only fill in what they left out.
        if add.x_forwarded_host && !headers.contains_key(&X_FORWARDED_HOST) {
            if let Ok(v) = HeaderValue::from_str(authority) {
                headers.insert(&X_FORWARDED_HOST, v);
            }
        }
        if add.x_forwarded_port && !headers.contains_key(&X_FORWARDED_PORT) {
            headers.insert(&X_FORWARDED_PORT, client.port.clone());
        }
    } else {
        // A client's own claims go whether or not ours replace them.
        strip_client_claims(&mut headers);
        if add.x_forwarded_for {
            headers.insert(&X_FORWARDED_FOR, client.x_forwarded_for.clone());
        }
        if add.x_forwarded_proto {
            headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        }
        if add.forwarded {
            if let Some(v) = client.forwarded(authority) {
                headers.insert(header::FORWARDED, v);
            }
        }
        if add.x_forwarded_host {
            if let Ok(v) = HeaderValue::from_str(authority) {
                headers.insert(&X_FORWARDED_HOST, v);
            }
        }
        if add.x_forwarded_port {
            headers.insert(&X_FORWARDED_PORT, client.port.clone());
        }
    }
    if add.via {
        headers.append(header::VIA, HeaderValue::from_static(via(client_req.version())));
    }
    let mut out = Request::new(());
    *out.method_mut() = client_req.method().clone();
    *out.uri_mut() = target;
    *out.version_mut() = Version::HTTP_2;
    *out.headers_mut() = headers;
    out
}

/// Several `Cookie` lines as one, in order, joined with "; " (empty lines left out); marked
/// sensitive if any line was.
fn join_cookies(headers: &mut HeaderMap) {
    let mut lines = headers.get_all(header::COOKIE).iter();
    if lines.next().is_none() || lines.next().is_none() {
        return;
    }
    let mut joined = Vec::new();
    let mut sensitive = false;
    for line in headers.get_all(header::COOKIE).iter().filter(|l| !l.is_empty()) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(line.as_bytes());
        sensitive |= line.is_sensitive();
    }
    // Valid: each line was, and so is "; ".
    if let Ok(mut one) = HeaderValue::from_maybe_shared(bytes::Bytes::from(joined)) {
        one.set_sensitive(sensitive);
        headers.insert(header::COOKIE, one);
    }
}

/// The client-bound response headers for an origin's response (`via`: add our hop).
pub(crate) fn response_headers(headers: &mut HeaderMap, via: bool) {
    strip_hop_by_hop(headers);
    // The origin's alternative services are the origin's, not the edge's: a client told of
    // them would go around the edge (ours, if any, is the listener's: `listeners[].http3`).
    headers.remove(header::ALT_SVC);
    if via {
        headers.append(header::VIA, HeaderValue::from_static("2 edgewarm"));
    }
}

#[cfg(test)]
mod tests;
