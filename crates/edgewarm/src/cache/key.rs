//! What a stored response is found by. The key is the request's absolute URL (scheme, host
//! in lower case, port, path and query exactly as sent) and, for a response with `Vary`, the
//! request's values of the headers it names (its variant). Nothing else a client sends
//! selects a stored response: a response that depends on anything else must say so in
//! `Vary`, or be `private` / `no-store` (see docs/config.md, "The edge cache").

use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, ACCEPT_ENCODING, ACCEPT_LANGUAGE, COOKIE, VARY};
use http::Request;

/// One stored response's place: its URL and its variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) url: Arc<str>,
    /// The request's values of the response's `Vary` headers ("" without `Vary`).
    pub(crate) variant: Arc<str>,
}

/// The absolute URL of an origin-bound request head (the service builds it absolute).
pub(crate) fn url(head: &Request<()>) -> Arc<str> {
    let uri = head.uri();
    let authority = uri.authority().map_or(String::new(), |a| a.as_str().to_ascii_lowercase());
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    format!("https://{authority}{path}").into()
}

/// The header names a response varies on; `None` for `Vary: *` (it varies on something no
/// request shows, so it is never stored).
pub(crate) fn vary_names(response: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for value in response.get_all(VARY) {
        for name in value.to_str().unwrap_or("*").split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "*" {
                return None;
            }
            let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).ok()?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Some(names)
}

/// A request's variant for `names`: each name with its values, in order. `Accept-Encoding`
/// is reduced to the codings it accepts (sorted, `q=0` dropped), so the many ways browsers
/// write the same preference share one stored copy.
pub(crate) fn variant(names: &[HeaderName], request: &HeaderMap) -> Arc<str> {
    let mut out = String::new();
    for name in names {
        out.push_str(name.as_str());
        out.push('=');
        if name == ACCEPT_ENCODING {
            out.push_str(&codings(request));
        } else {
            let values: Vec<&[u8]> = request.get_all(name).iter().map(|v| v.as_bytes()).collect();
            out.push_str(&String::from_utf8_lossy(&values.join(&b","[..])));
        }
        // A separator no header value can hold.
        out.push('\n');
    }
    out.into()
}

/// The request as the cache judges and keys it for the headers a response varies on (the
/// origin still gets the client's own): each one's lines combined and spaced alike (`a,b`
/// and two lines `a`, `b` are one variant), `Accept-Language` in lower case,
/// `Accept-Encoding` reduced to the codings it accepts, sorted. Only those headers: nothing
/// else of a request selects a stored response, and a hit should not pay for the rest.
pub(crate) fn normalise(head: &mut Request<()>, names: &[HeaderName]) {
    for name in names.iter().filter(|n| **n != COOKIE) {
        if !head.headers().contains_key(name) {
            continue;
        }
        let value = if *name == ACCEPT_ENCODING {
            codings(head.headers())
        } else {
            let Ok(lines) = head.headers().get_all(name).iter().map(|v| v.to_str()).collect::<Result<Vec<_>, _>>()
            else {
                continue;
            };
            let joined = lines.iter().flat_map(|l| l.split(',')).map(str::trim).collect::<Vec<_>>().join(", ");
            if *name == ACCEPT_LANGUAGE {
                joined.to_ascii_lowercase()
            } else {
                joined
            }
        };
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            head.headers_mut().insert(name.clone(), v);
        }
    }
}

fn codings(request: &HeaderMap) -> String {
    let mut accepted: Vec<String> = request
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next()?.to_ascii_lowercase();
            let refused = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0)));
            (!coding.is_empty() && !refused).then_some(coding)
        })
        .collect();
    accepted.sort();
    accepted.dedup();
    accepted.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    #[test]
    fn urls_lower_case_the_host_and_keep_the_query() {
        let head = Request::get("https://Example.COM:8443/a/B?x=1&y").body(()).unwrap();
        assert_eq!(&*url(&head), "https://example.com:8443/a/B?x=1&y");
    }

    #[test]
    fn accept_encoding_variants_are_normalised() {
        let names = vary_names(&headers(&[("vary", "Accept-Encoding")])).unwrap();
        let a = variant(&names, &headers(&[("accept-encoding", "gzip, deflate, br")]));
        let b = variant(&names, &headers(&[("accept-encoding", "br;q=1.0,GZIP , deflate;q=0.5")]));
        let c = variant(&names, &headers(&[("accept-encoding", "gzip, br;q=0, deflate")]));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn requests_are_judged_with_their_lists_spaced_alike() {
        let mut a = Request::get("https://x/").body(()).unwrap();
        a.headers_mut().append("foo", "1".parse().unwrap());
        a.headers_mut().append("foo", "2".parse().unwrap());
        a.headers_mut().insert("accept-language", "eN ,De".parse().unwrap());
        a.headers_mut().insert("cookie", "a=1, b".parse().unwrap());
        let names: Vec<HeaderName> = ["foo", "accept-language", "cookie"].map(HeaderName::from_static).into();
        normalise(&mut a, &names);
        assert_eq!(a.headers()["foo"], "1, 2");
        assert_eq!(a.headers()["accept-language"], "en, de");
        assert_eq!(a.headers()["cookie"], "a=1, b");
    }

    #[test]
    fn vary_star_is_never_keyed_and_names_are_sorted() {
        assert_eq!(vary_names(&headers(&[("vary", "accept, *")])), None);
        let names = vary_names(&headers(&[("vary", "Cookie, accept-language,cookie")])).unwrap();
        assert_eq!(names, vec![HeaderName::from_static("accept-language"), HeaderName::from_static("cookie")]);
        let v = variant(&names, &headers(&[("cookie", "a=1")]));
        assert_eq!(&*v, "accept-language=\ncookie=a=1\n");
    }
}
