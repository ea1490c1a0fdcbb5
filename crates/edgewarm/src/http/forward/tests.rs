//! The origin-bound request and the client-bound response, case by case.

use super::*;

fn client() -> ClientFacts {
    ClientFacts::new("192.0.2.7:50000".parse().unwrap())
}

#[test]
fn http1_request_becomes_a_valid_h2_request() {
    let req = Request::builder()
        .uri("/a/b?c=1")
        .header("host", "www.example.com")
        .header("connection", "keep-alive, x-secret")
        .header("x-secret", "hop")
        .header("keep-alive", "timeout=5")
        .header("te", "trailers, deflate")
        .header("x-forwarded-for", "6.6.6.6")
        .header("forwarded", "for=6.6.6.6")
        .header("accept", "*/*")
        .body(())
        .unwrap();
    let out = request(&req, &client()).unwrap();
    assert_eq!(out.uri().to_string(), "https://www.example.com/a/b?c=1");
    assert_eq!(out.version(), Version::HTTP_2);
    let h = out.headers();
    for gone in ["host", "connection", "x-secret", "keep-alive"] {
        assert!(!h.contains_key(gone), "{gone} forwarded");
    }
    assert_eq!(h["te"], "trailers");
    assert_eq!(h["x-forwarded-for"], "192.0.2.7");
    assert_eq!(h["x-forwarded-proto"], "https");
    assert_eq!(h["forwarded"], "for=192.0.2.7;proto=https;host=\"www.example.com\"");
    assert_eq!(h["via"], "1.1 edgewarm");
    assert_eq!(h["accept"], "*/*");
}

#[test]
fn h2_authority_is_kept_and_missing_host_is_refused() {
    let req = Request::builder().uri("https://b.test/x").version(Version::HTTP_2).body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap().uri().to_string(), "https://b.test/x");
    let req = Request::builder().uri("/x").body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap_err(), BadRequest::NoAuthority);
}

#[test]
fn a_trusted_load_balancer_s_headers_are_kept_and_extended() {
    let req = Request::builder()
        .uri("/")
        .header("host", "b.test")
        .header("x-forwarded-for", "198.51.100.9")
        .header("x-forwarded-proto", "http")
        .header("forwarded", "for=198.51.100.9")
        .body(())
        .unwrap();
    let out =
        request(&req, &ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 443, true, ForwardHeaders::default()))
            .unwrap();
    let h = out.headers();
    assert_eq!(h["x-forwarded-for"], "198.51.100.9, 192.0.2.7");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["forwarded"], "for=198.51.100.9, for=192.0.2.7;proto=https;host=\"b.test\"");
    // Untrusted, the same headers are replaced.
    let out = request(&req, &client()).unwrap();
    assert_eq!(out.headers()["x-forwarded-for"], "192.0.2.7");
    assert_eq!(out.headers()["x-forwarded-proto"], "https");
}

#[test]
fn userinfo_is_dropped_and_a_conflicting_host_refused() {
    let req = Request::builder().uri("https://user:pw@b.test:8443/x").body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap().uri().to_string(), "https://b.test:8443/x");
    let req = Request::builder().uri("https://b.test/x").header("host", "evil.test").body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap_err(), BadRequest::HostMismatch);
}

#[test]
fn forwarding_headers_left_out_are_not_added_and_a_client_s_never_pass() {
    let req = Request::builder()
        .uri("/")
        .header("host", "b.test")
        .header("x-forwarded-for", "6.6.6.6")
        .header("x-forwarded-proto", "http")
        .header("forwarded", "for=6.6.6.6")
        .header("via", "1.1 elsewhere")
        .body(())
        .unwrap();
    let none = ForwardHeaders::from(&[][..]);
    let client = ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 443, false, none);
    let out = request(&req, &client).unwrap();
    for gone in ["x-forwarded-for", "x-forwarded-proto", "forwarded"] {
        assert!(!out.headers().contains_key(gone), "{gone} passed");
    }
    assert_eq!(out.headers().get_all("via").iter().count(), 1, "only the hop before ours");
    let mut response = HeaderMap::new();
    response_headers(&mut response, client.via());
    assert!(response.is_empty());
    // Only X-Forwarded-For: the others still go.
    let only = ForwardHeaders { x_forwarded_for: true, ..none };
    let out = request(&req, &ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 443, false, only)).unwrap();
    assert_eq!(out.headers()["x-forwarded-for"], "192.0.2.7");
    assert!(!out.headers().contains_key("forwarded") && !out.headers().contains_key("x-forwarded-proto"));
    // Trusted, a header of ours left out passes the balancer's as it came.
    let out = request(&req, &ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 443, true, only)).unwrap();
    assert_eq!(out.headers()["x-forwarded-for"], "6.6.6.6, 192.0.2.7");
    assert_eq!(out.headers()["forwarded"], "for=6.6.6.6");
    assert_eq!(out.headers()["x-forwarded-proto"], "http");
}

#[test]
fn cookie_lines_become_one_in_order() {
    let mut req = Request::builder().uri("https://b.test/").header("cookie", "a=1").header("x", "y");
    req = req.header("cookie", "b=2").header("cookie", "").header("cookie", "c=3");
    let req = req.body(()).unwrap();
    let out = request(&req, &client()).unwrap();
    let lines: Vec<_> = out.headers().get_all("cookie").iter().collect();
    assert_eq!(lines, ["a=1; b=2; c=3"]);
    let one = Request::builder().uri("https://b.test/").header("cookie", "a=1").body(()).unwrap();
    assert_eq!(request(&one, &client()).unwrap().headers()["cookie"], "a=1");
}

#[test]
fn two_host_lines_are_refused() {
    let req = Request::builder().uri("/").header("host", "b.test").header("host", "evil.test").body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap_err(), BadRequest::DuplicateHost);
    // The same name twice is no better: a front end may have seen only one of them.
    let req = Request::builder().uri("/").header("host", "b.test").header("host", "b.test").body(()).unwrap();
    assert_eq!(request(&req, &client()).unwrap_err(), BadRequest::DuplicateHost);
}

#[test]
fn ipv6_clients_are_quoted_in_forwarded() {
    let req = Request::builder().uri("/").header("host", "h").body(()).unwrap();
    let out = request(&req, &ClientFacts::new("[2001:db8::1]:443".parse().unwrap())).unwrap();
    assert_eq!(out.headers()["forwarded"], "for=\"[2001:db8::1]\";proto=https;host=\"h\"");
    assert_eq!(out.headers()["x-forwarded-for"], "2001:db8::1");
}

/// Every claim in the family, in both spellings, from an untrusted client: none reaches
/// the origin, whatever the route adds; a trusted balancer's pass.
#[test]
fn a_client_s_forwarding_claims_never_pass() {
    let mut req = Request::builder().uri("/").header("host", "b.test").header("accept", "*/*");
    for claim in crate::config::forward::CLIENT_CLAIMS {
        req = req.header(claim, "evil.test").header(claim.replace('-', "_"), "evil.test");
    }
    let req = req.header("x-forwarded-hostx", "kept").body(()).unwrap();
    for add in [ForwardHeaders::from(&[][..]), ForwardHeaders::default()] {
        let out = request(&req, &ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 8443, false, add)).unwrap();
        for (name, value) in out.headers() {
            assert_ne!(value, "evil.test", "{name} passed");
        }
        assert_eq!(out.headers()["x-forwarded-hostx"], "kept", "only the listed names go");
        assert_eq!(out.headers()["accept"], "*/*");
    }
    let trusted = ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 8443, true, ForwardHeaders::default());
    let out = request(&req, &trusted).unwrap();
    assert_eq!(out.headers()["x-original-url"], "evil.test", "a trusted balancer's claims are its own");
}

#[test]
fn x_forwarded_host_and_port_are_ours_when_asked_for() {
    use crate::config::ForwardHeader::{XForwardedHost, XForwardedPort};
    let req = Request::builder()
        .uri("/")
        .header("host", "b.test:8443")
        .header("x-forwarded-host", "evil.test")
        .header("x-forwarded-port", "1")
        .body(())
        .unwrap();
    let add = ForwardHeaders::from(&[XForwardedHost, XForwardedPort][..]);
    let out = request(&req, &ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 8443, false, add)).unwrap();
    assert_eq!(out.headers()["x-forwarded-host"], "b.test:8443");
    assert_eq!(out.headers()["x-forwarded-port"], "8443");
    assert_eq!(out.headers().get_all("x-forwarded-host").iter().count(), 1);
    // A trusted balancer's values stand; ours fill in only what it left out.
    let trusted = ClientFacts::with_trust("192.0.2.7:1".parse().unwrap(), 8443, true, add);
    let out = request(&req, &trusted).unwrap();
    assert_eq!(out.headers()["x-forwarded-host"], "evil.test");
    assert_eq!(out.headers()["x-forwarded-port"], "1");
    let bare = Request::builder().uri("/").header("host", "b.test").body(()).unwrap();
    let out = request(&bare, &trusted).unwrap();
    assert_eq!(out.headers()["x-forwarded-host"], "b.test");
    assert_eq!(out.headers()["x-forwarded-port"], "8443");
}
