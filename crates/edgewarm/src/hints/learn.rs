//! Which requests get learned hints, and what a response teaches about its URL.
//!
//! **Sent** on a navigation only: a GET whose `Sec-Fetch-Dest` is `document` or, from a client
//! that sends no `Sec-Fetch-Dest`, whose `Accept` names `text/html`. Browsers act on a 103 for
//! a top-level document only; anything else would be bytes for nothing.
//!
//! **Learned** only from what another user could be shown without harm. Hints say which
//! sub-resources a page uses; on a page made for one user (an account page preloading that
//! user's avatar or data) they are that user's, and sending them to the next visitor would leak
//! them. So a response teaches only when the request was anonymous (no `Authorization`, no
//! `Cookie`: nothing could have personalised it) *and* the response is one the edge's shared
//! cache would be allowed to store under RFC 9111 (not `private`, not `no-store`, through
//! `CDN-Cache-Control` too; not `Vary: *`) and it sets no cookie. The second half catches an
//! origin that personalises by other means and says so. Requests with credentials still get
//! the hints learned from anonymous ones (the same URL's public page), but never change them.

use std::time::SystemTime;

use http::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_TYPE, COOKIE, SET_COOKIE};
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};

use super::link;
use crate::cache::{decide, key};

static SEC_FETCH_DEST: HeaderName = HeaderName::from_static("sec-fetch-dest");

/// What a response says about the hints of its URL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lesson {
    /// These are its hints now.
    Keep(HeaderValue),
    /// It has none (any more), or is no longer one to learn from.
    Forget,
    /// It says nothing (a request with credentials, another status, not HTML).
    Nothing,
}

/// A browser's navigation to a document.
pub(crate) fn is_navigation(head: &Request<()>) -> bool {
    if head.method() != Method::GET {
        return false;
    }
    let h = head.headers();
    match h.get(&SEC_FETCH_DEST) {
        Some(dest) => dest.as_bytes().eq_ignore_ascii_case(b"document"),
        None => h.get_all(ACCEPT).iter().any(|v| v.to_str().is_ok_and(contains_html)),
    }
}

fn contains_html(accept: &str) -> bool {
    accept.split(',').any(|range| range.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("text/html")))
}

/// What the response to `head` (`status`, `headers`) teaches; `max` bytes of `Link` are kept.
pub(crate) fn lesson(head: &Request<()>, status: StatusCode, headers: &HeaderMap, max: usize) -> Lesson {
    let h = head.headers();
    if head.method() != Method::GET || h.contains_key(AUTHORIZATION) || h.contains_key(COOKIE) {
        return Lesson::Nothing;
    }
    if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
        return Lesson::Forget;
    }
    // Only the page's own 200: the same URL may answer a script's fetch with JSON.
    if status != StatusCode::OK || !is_html(headers) {
        return Lesson::Nothing;
    }
    if !shareable(head, status, headers) {
        return Lesson::Forget;
    }
    match link::hints(headers, max) {
        Some(links) => Lesson::Keep(links),
        None => Lesson::Forget,
    }
}

fn is_html(headers: &HeaderMap) -> bool {
    let essence = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).and_then(|v| v.split(';').next());
    essence.is_some_and(|t| t.trim().eq_ignore_ascii_case("text/html"))
}

/// The shared cache's rules would let this response go to another user. Judged for the bare
/// request (method and URL): a client's own `Cache-Control: no-store` keeps its response out of
/// a cache, but says nothing about whether the page is personal, and must not let one client
/// erase what others taught.
fn shareable(head: &Request<()>, status: StatusCode, headers: &HeaderMap) -> bool {
    if headers.contains_key(SET_COOKIE) || key::vary_names(headers).is_none() {
        return false;
    }
    let mut bare = Request::new(());
    *bare.uri_mut() = head.uri().clone();
    decide::policy(&bare, status, headers, SystemTime::now()).is_storable()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&'static str, &'static str)]) -> Request<()> {
        let mut r = Request::new(());
        *r.uri_mut() = "https://b.test/page".parse().unwrap();
        for (k, v) in headers {
            r.headers_mut().append(*k, HeaderValue::from_static(v));
        }
        r
    }

    fn page(extra: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
        h.insert("link", HeaderValue::from_static("</a.css>; rel=preload; as=style"));
        for (k, v) in extra {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn navigations() {
        assert!(is_navigation(&request(&[("sec-fetch-dest", "document")])));
        assert!(is_navigation(&request(&[("accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8")])));
        // A browser's sub-resource or iframe says so, whatever it accepts.
        assert!(!is_navigation(&request(&[("sec-fetch-dest", "iframe"), ("accept", "text/html")])));
        assert!(!is_navigation(&request(&[("sec-fetch-dest", "script"), ("accept", "*/*")])));
        assert!(!is_navigation(&request(&[("accept", "application/json")])));
        assert!(!is_navigation(&request(&[])));
        let mut head = request(&[("sec-fetch-dest", "document")]);
        *head.method_mut() = Method::HEAD;
        assert!(!is_navigation(&head));
    }

    #[test]
    fn learned_from_anonymous_shareable_html_only() {
        let ok = StatusCode::OK;
        let keep = Lesson::Keep(HeaderValue::from_static("</a.css>; rel=preload; as=style"));
        assert_eq!(lesson(&request(&[]), ok, &page(&[]), 2048), keep);
        assert_eq!(lesson(&request(&[]), ok, &page(&[("cache-control", "no-cache")]), 2048), keep);
        // A client's own no-store does not make the page personal.
        assert_eq!(lesson(&request(&[("cache-control", "no-store")]), ok, &page(&[]), 2048), keep);
        for credentials in [("cookie", "session=1"), ("authorization", "Bearer x")] {
            let public = page(&[("cache-control", "public, max-age=60")]);
            assert_eq!(lesson(&request(&[credentials]), ok, &public, 2048), Lesson::Nothing, "{credentials:?}");
        }
        for personal in [
            ("cache-control", "private"),
            ("cache-control", "no-store"),
            ("cdn-cache-control", "no-store"),
            ("set-cookie", "session=2"),
            ("vary", "*"),
        ] {
            assert_eq!(lesson(&request(&[]), ok, &page(&[personal]), 2048), Lesson::Forget, "{personal:?}");
        }
        let mut plain = page(&[]);
        plain.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert_eq!(lesson(&request(&[]), ok, &plain, 2048), Lesson::Nothing);
        assert_eq!(lesson(&request(&[]), StatusCode::NOT_MODIFIED, &page(&[]), 2048), Lesson::Nothing);
        assert_eq!(lesson(&request(&[]), StatusCode::NOT_FOUND, &page(&[]), 2048), Lesson::Forget);
        let mut bare = page(&[]);
        bare.remove("link");
        assert_eq!(lesson(&request(&[]), ok, &bare, 2048), Lesson::Forget);
    }
}
