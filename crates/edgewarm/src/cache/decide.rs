//! Whether a response may be stored, and for how long it may be served: RFC 9111's rules
//! through `http-cache-semantics` (shared-cache view: `s-maxage`, `private`, `no-store`,
//! `Authorization`, `Expires`, heuristic freshness), the targeted `CDN-Cache-Control` of
//! RFC 9213 in place of `Cache-Control` where the origin sends it, and the edge's own
//! refusals, each named in `Cache-Status`'s `detail`.

use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, HeaderName, CACHE_CONTROL, CONTENT_LENGTH, RANGE, SET_COOKIE};
use http::{Request, Response, StatusCode};
use http_cache_semantics::{CacheOptions, CachePolicy};

use super::{directives, key};
use crate::config::CacheConfig;

/// How long past its freshness a response may be served: while one request revalidates it,
/// and when the origin fails.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Grace {
    pub(crate) while_revalidate: Duration,
    pub(crate) if_error: Duration,
}

/// Why a response was not stored (`Cache-Status: …; detail=<this>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Refusal {
    /// RFC 9111 forbids it: `no-store`, `private`, `Authorization`, a method or status that
    /// is not cacheable, no freshness and no way to revalidate.
    Policy,
    /// A 206: part of an object is never stored as if it were the whole.
    Partial,
    /// `Vary: *`.
    VaryStar,
    /// `Set-Cookie`, without `store_set_cookie`.
    SetCookie,
    /// Larger than `max_object_size`.
    TooLarge,
}

impl Refusal {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Policy => "uncacheable",
            Self::Partial => "partial",
            Self::VaryStar => "vary-star",
            Self::SetCookie => "set-cookie",
            Self::TooLarge => "too-large",
        }
    }
}

/// RFC 9111's policy for `head` answered with `status` and `headers` at `now`.
pub(crate) fn policy(head: &Request<()>, status: StatusCode, headers: &HeaderMap, now: SystemTime) -> CachePolicy {
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.headers_mut() = directives::read(headers);
    directives::must_understand(response.headers_mut(), status);
    let options = CacheOptions { shared: true, ..CacheOptions::default() };
    CachePolicy::new_options(head, &response, now, options)
}

/// The `Vary` names to store the response under, or why it is not stored.
pub(crate) fn storable(
    config: &CacheConfig,
    head: &Request<()>,
    status: StatusCode,
    headers: &HeaderMap,
    policy: &CachePolicy,
    now: SystemTime,
) -> Result<Vec<HeaderName>, Refusal> {
    if status == StatusCode::PARTIAL_CONTENT || (head.headers().contains_key(RANGE) && status != StatusCode::OK) {
        return Err(Refusal::Partial);
    }
    if !policy.is_storable() {
        return Err(Refusal::Policy);
    }
    let names = key::vary_names(headers).ok_or(Refusal::VaryStar)?;
    if headers.contains_key(SET_COOKIE) && !config.store_set_cookie {
        return Err(Refusal::SetCookie);
    }
    let length = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if length.is_some_and(|n| n > config.max_object_size) {
        return Err(Refusal::TooLarge);
    }
    let validators = headers.contains_key(http::header::ETAG) || headers.contains_key(http::header::LAST_MODIFIED);
    let g = grace(config, headers);
    if policy.time_to_live(now).is_zero() && !validators && g.while_revalidate.is_zero() && g.if_error.is_zero() {
        // Stale at once, nothing to revalidate it with, no grace: it could never be served.
        return Err(Refusal::Policy);
    }
    Ok(names)
}

/// Whether a refusal may come from this request rather than from the URL's response: then
/// the URL is not remembered as uncacheable for other requests (`Authorization`, or the
/// client's own `no-store`).
pub(crate) fn request_specific(head: &Request<()>) -> bool {
    head.headers().contains_key(http::header::AUTHORIZATION) || asks_no_store(head)
}

/// The client asked that nothing of this exchange be stored (`Cache-Control: no-store`).
pub(crate) fn asks_no_store(head: &Request<()>) -> bool {
    head.headers().get_all(CACHE_CONTROL).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("no-store")))
}

/// How long past freshness a response may be served: the origin's `stale-while-revalidate`
/// and `stale-if-error` (RFC 5861), else the route's defaults; never where the origin
/// forbids serving it stale (`must-revalidate`, `proxy-revalidate`, `no-cache`; `s-maxage`
/// implies `proxy-revalidate`, so with it only the origin's own grace counts).
pub(crate) fn grace(config: &CacheConfig, headers: &HeaderMap) -> Grace {
    let headers = directives::read(headers);
    let directives: Vec<(String, Option<String>)> = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| {
            let mut kv = d.splitn(2, '=');
            let name = kv.next().unwrap_or_default().trim().to_ascii_lowercase();
            (name, kv.next().map(|v| v.trim().trim_matches('"').to_string()))
        })
        .collect();
    let has = |name: &str| directives.iter().any(|(n, _)| n == name);
    let seconds = |name: &str| {
        directives
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref()?.parse().ok())
            .map(Duration::from_secs)
    };
    if has("must-revalidate") || has("proxy-revalidate") || has("no-cache") {
        return Grace::default();
    }
    let defaults = !has("s-maxage");
    let or_default =
        |own: Option<Duration>, default: Duration| own.unwrap_or(if defaults { default } else { Duration::ZERO });
    Grace {
        while_revalidate: or_default(seconds("stale-while-revalidate"), config.stale_while_revalidate),
        if_error: or_default(seconds("stale-if-error"), config.stale_if_error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderValue;

    fn decide(
        response: &[(&'static str, &'static str)],
        request: &[(&'static str, &'static str)],
    ) -> Result<(), Refusal> {
        let mut head = Request::get("https://example.com/a").body(()).unwrap();
        for (k, v) in request {
            head.headers_mut().append(*k, v.parse().unwrap());
        }
        let headers: HeaderMap =
            response.iter().map(|(k, v)| (HeaderName::from_static(k), v.parse().unwrap())).collect();
        let now = SystemTime::now();
        let policy = policy(&head, StatusCode::OK, &headers, now);
        storable(&CacheConfig::default(), &head, StatusCode::OK, &headers, &policy, now).map(|_| ())
    }

    #[test]
    fn what_is_never_stored() {
        assert_eq!(decide(&[("cache-control", "max-age=60")], &[]), Ok(()));
        assert_eq!(decide(&[("cache-control", "private, max-age=60")], &[]), Err(Refusal::Policy));
        assert_eq!(decide(&[("cache-control", "no-store")], &[]), Err(Refusal::Policy));
        assert_eq!(decide(&[("cache-control", "max-age=60")], &[("authorization", "Basic x")]), Err(Refusal::Policy));
        assert_eq!(decide(&[("cache-control", "s-maxage=60")], &[("authorization", "Basic x")]), Ok(()));
        assert_eq!(decide(&[("cache-control", "max-age=60"), ("set-cookie", "s=1")], &[]), Err(Refusal::SetCookie));
        assert_eq!(decide(&[("cache-control", "max-age=60"), ("vary", "*")], &[]), Err(Refusal::VaryStar));
        let big = [("cache-control", "max-age=60"), ("content-length", "9999999999")];
        assert_eq!(decide(&big, &[]), Err(Refusal::TooLarge));
        // No freshness and no validator: could never be served.
        assert_eq!(decide(&[("cache-control", "no-cache")], &[]), Err(Refusal::Policy));
        assert_eq!(decide(&[("cache-control", "no-cache"), ("etag", "\"1\"")], &[]), Ok(()));
    }

    #[test]
    fn cdn_cache_control_stands_in_for_cache_control() {
        let cdn = [("cache-control", "no-store"), ("cdn-cache-control", "max-age=60")];
        assert_eq!(decide(&cdn, &[]), Ok(()));
        let cdn = [("cache-control", "max-age=60"), ("cdn-cache-control", "no-store")];
        assert_eq!(decide(&cdn, &[]), Err(Refusal::Policy));
    }

    #[test]
    fn grace_follows_the_origin_then_the_route() {
        let config = CacheConfig { stale_if_error: Duration::from_secs(30), ..CacheConfig::default() };
        let headers =
            |cc: &'static str| -> HeaderMap { [(CACHE_CONTROL, HeaderValue::from_static(cc))].into_iter().collect() };
        let g = grace(&config, &headers("max-age=1, stale-while-revalidate=10"));
        assert_eq!((g.while_revalidate, g.if_error), (Duration::from_secs(10), Duration::from_secs(30)));
        let g = grace(&config, &headers("max-age=1, must-revalidate, stale-if-error=99"));
        assert_eq!((g.while_revalidate, g.if_error), (Duration::ZERO, Duration::ZERO));
        let g = grace(&config, &headers("s-maxage=1"));
        assert_eq!(g.if_error, Duration::ZERO);
    }
}
