//! Web cache poisoning, tried as an attacker would: a cached route in front of an origin that
//! writes what it is told into its page (`reflect=1`: every `x-…` and `forwarded` header, and
//! the request body's length). Whatever a client sends outside the cache key, the next client
//! asking for the same target must be served what the origin says to everyone (issue 45;
//! docs/config.md, "Headers a client cannot set" and "The edge cache").

use std::sync::Arc;

use super::cache::{get, header};
use super::*;

/// The headers a client has no business setting (docs/config.md): written out here rather
/// than taken from the crate, so the test is also the list's specification.
const CLAIMS: [&str; 25] = [
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
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-forwarded-ssl",
    "front-end-https",
    "x-original-uri",
    "x-forwarded-uri",
];

/// A cached `http` route (HTTP/3 too) to the reflecting cache origin.
async fn reflecting_edge() -> (Pki, Edge, Arc<OriginLog>) {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    cache: {{}}\n"
    );
    let edge = edge(&route, "", "http3: true").await;
    (fx, edge, log)
}

/// A cacheable page that reflects what it is told, one per `name`.
fn page(name: &str) -> String {
    format!("/p/{name}?cc=max-age%3D60&reflect=1")
}

/// Each claim's spellings: with `-`, and with `_` where it has a `-`.
fn spellings(claim: &str) -> Vec<String> {
    let underscored = claim.replace('-', "_");
    if underscored == claim {
        vec![claim.to_string()]
    } else {
        vec![claim.to_string(), underscored]
    }
}

/// Nothing a client's claim said reached the origin.
fn assert_origin_never_told(log: &OriginLog) {
    for (_, url, headers) in log.seen.lock().unwrap().iter() {
        for (name, value) in headers {
            assert!(!value.as_bytes().starts_with(b"evil"), "{name}: {value:?} reached the origin for {url}");
        }
    }
}

/// Each claim, spelled with `-` and with `_`, sent by an attacker over HTTP/1.1 and HTTP/2
/// on a page nobody has asked for yet: the origin never sees it, so the page stored for that
/// target is the one everyone gets, and the next ordinary client is served exactly that.
#[tokio::test]
async fn unkeyed_forwarding_headers_cannot_poison_the_cache() {
    let (fx, edge, log) = reflecting_edge().await;
    for h2 in [false, true] {
        for claim in CLAIMS {
            for name in spellings(claim) {
                let path = page(&format!("{name}-{h2}"));
                let mut attacker = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
                let value = format!("evil-{name}");
                let (head, body) = attacker.send("GET", "b.test", &path, &[(&name, &value)], vec![]).await.unwrap();
                let body = String::from_utf8(body).unwrap();
                assert_eq!(head.status, 200);
                assert!(header(&head, "cache-status").ends_with("stored"), "{path}: {head:?}");
                assert!(!body.contains("evil"), "{name} reached the origin: {body}");
                let (head, served) = get(&fx, &edge, &path, &[]).await;
                assert!(header(&head, "cache-status").starts_with("edgewarm; hit"), "{path}: {head:?}");
                assert_eq!(served, body, "the stored page is the one everyone gets");
                assert_eq!(log.count(&path), 1);
            }
        }
    }
    assert_origin_never_told(&log);
    edge.stop().await;
}

/// The same over HTTP/3 (aioquic), one connection whose requests each add one more claim:
/// none reaches the origin or the next client.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn unkeyed_forwarding_headers_cannot_poison_the_cache_over_http3() {
    let (fx, edge, log) = reflecting_edge().await;
    let mut args = Vec::new();
    let mut paths = Vec::new();
    for claim in CLAIMS {
        for name in spellings(claim) {
            let path = page(&format!("{name}-h3"));
            args.push("--header".to_string());
            args.push(format!("{name}=evil-{name}"));
            args.push(format!("GET:{path}"));
            paths.push(path);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = h3_client(edge.addr, "b.test", &fx.path.join("edge/ca.pem"), &args).await;
    for (i, path) in paths.iter().enumerate() {
        let r = &out["responses"][i];
        assert_eq!(r["status"], 200, "{path}: {out}");
        let body = r["text"].as_str().unwrap();
        assert!(!body.contains("evil"), "{path}: {body}");
        let (head, served) = get(&fx, &edge, path, &[]).await;
        assert!(header(&head, "cache-status").starts_with("edgewarm; hit"), "{path}: {head:?}");
        assert_eq!(served, body);
        assert_eq!(log.count(path), 1);
    }
    assert_origin_never_told(&log);
    edge.stop().await;
}

/// A GET with a body (a "fat GET"), over each client protocol: the origin may answer by the
/// body, which the key does not hold, so the request is neither served from the cache nor
/// stored; what is stored stays, and the next ordinary client gets it.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_get_with_a_body_is_neither_served_from_nor_stored_in_the_cache() {
    let (fx, edge, log) = reflecting_edge().await;
    let path = page("fat");
    let (head, stored) = get(&fx, &edge, &path, &[]).await;
    assert!(header(&head, "cache-status").ends_with("stored"), "{head:?}");
    for h2 in [false, true] {
        let mut attacker = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        let (head, body) = attacker.send("GET", "b.test", &path, &[], b"evil".to_vec()).await.unwrap();
        let body = String::from_utf8(body).unwrap();
        assert_eq!(header(&head, "cache-status"), "edgewarm; fwd=bypass; fwd-status=200; detail=request-body");
        assert!(body.ends_with(" body=4"), "the origin read the body: {body}");
    }
    let out = h3_client(edge.addr, "b.test", &fx.path.join("edge/ca.pem"), &[&format!("GET:{path}:4")]).await;
    let r = &out["responses"][0];
    assert_eq!(r["headers"]["cache-status"], "edgewarm; fwd=bypass; fwd-status=200; detail=request-body", "{out}");
    assert!(r["text"].as_str().unwrap().ends_with(" body=4"), "{out}");
    assert_eq!(log.count(&path), 4, "one fill and three fat GETs");
    let (head, served) = get(&fx, &edge, &path, &[]).await;
    assert!(header(&head, "cache-status").starts_with("edgewarm; hit"), "{head:?}");
    assert_eq!(served, stored, "the stored page was not replaced");
    // On a URL nobody has stored, a fat GET's answer is not kept either.
    let fresh = page("fat-first");
    let mut attacker = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    attacker.send("GET", "b.test", &fresh, &[], b"evil".to_vec()).await.unwrap();
    let (head, body) = get(&fx, &edge, &fresh, &[]).await;
    assert!(header(&head, "cache-status").ends_with("stored"), "a miss: {head:?}");
    assert!(!body.contains("body="), "{body}");
    edge.stop().await;
}

/// An HTTP/3 GET whose stream ends in a packet after its head (h3's client, and so an edge
/// whose origin is another edge over HTTP/3, may send it so) has no body: served from the cache
/// and stored like any other, not passed by as a GET with a body.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn an_http3_get_whose_end_comes_late_is_cached() {
    let (fx, edge, log) = reflecting_edge().await;
    let path = page("late-fin");
    let ca = fx.path.join("edge/ca.pem");
    let out =
        h3_client(edge.addr, "b.test", &ca, &["--late-fin", &format!("GET:{path}"), &format!("GET:{path}")]).await;
    let status = |i: usize| out["responses"][i]["headers"]["cache-status"].as_str().unwrap_or_default().to_string();
    assert!(status(0).ends_with("stored"), "{out}");
    assert!(status(1).starts_with("edgewarm; hit"), "{out}");
    assert_eq!(log.count(&path), 1);
    edge.stop().await;
}

/// The key is the target exactly as received: parameters an origin might join or ignore
/// (`;` as a separator, a repeated parameter, `utm_*`) make another key, so an attacker's
/// variant of a URL is stored where only that variant finds it (no parameter cloaking).
#[tokio::test]
async fn the_key_is_the_target_as_received() {
    let (fx, edge, log) = reflecting_edge().await;
    let plain = "/q?cc=max-age%3D60&reflect=1&a=1";
    let variants = [
        "/q?cc=max-age%3D60&reflect=1&a=1;a=evil",
        "/q?cc=max-age%3D60&reflect=1&a=1&a=evil",
        "/q?cc=max-age%3D60&reflect=1&a=1&utm_content=evil",
        "/q?cc=max-age%3D60&reflect=1&a=1&",
        "/q?cc=max-age%3D60&reflect=1&A=1",
        "/Q?cc=max-age%3D60&reflect=1&a=1",
    ];
    for v in variants {
        let (head, body) = get(&fx, &edge, v, &[]).await;
        assert!(header(&head, "cache-status").ends_with("stored"), "{v}: {head:?}");
        assert!(body.starts_with(v), "{body}");
    }
    let (head, body) = get(&fx, &edge, plain, &[]).await;
    assert!(header(&head, "cache-status").ends_with("stored"), "a miss of its own: {head:?}");
    assert!(body.starts_with(&format!("{plain} #1 ")), "{body}");
    for v in variants.iter().chain([&plain]) {
        assert_eq!(log.count(v), 1, "{v}");
    }
    edge.stop().await;
}

/// Cache deception: a private page reached through a path that looks static
/// (`/account/settings/x.css`, which many frameworks route to `/account/settings`) is not
/// stored unless the response itself says it may be: the edge caches by what responses say,
/// never by a path's suffix.
#[tokio::test]
async fn a_static_looking_path_is_not_stored_by_its_suffix() {
    let (fx, edge, log) = reflecting_edge().await;
    for path in ["/account/settings/x.css", "/account/settings/x.js?v=1", "/account/settings;x.png"] {
        for n in 1..=2 {
            let (head, body) = get(&fx, &edge, path, &[]).await;
            assert_eq!(head.status, 200);
            // The second is passed straight on: the URL was just found uncacheable.
            assert!(header(&head, "cache-status").ends_with("fwd-status=200; detail=uncacheable"), "{head:?}");
            assert_eq!(body, format!("{path} #{n}"), "asked again, not served from the cache");
        }
        assert_eq!(log.count(path), 2);
    }
    edge.stop().await;
}
