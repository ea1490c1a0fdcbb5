//! The edge cache (`routes[].cache`) end to end: real TLS clients through edgewarm to a real
//! cleartext origin on 127.0.0.1 that counts what it is asked (`cache_origin`).

use std::sync::Arc;

use super::*;

/// An `http` route to the cache test origin, with `cache` settings.
async fn cached_edge(cache: &str) -> (Pki, Edge, Arc<OriginLog>) {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let edge = edge(&cached_route(&fx, origin, cache), "", "").await;
    (fx, edge, log)
}

/// The route `cached_edge` serves.
fn cached_route(fx: &Pki, origin: SocketAddr, cache: &str) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    cache: {cache}\n"
    )
}

/// One request on a new connection: (status, header lookup, body).
pub(super) async fn get(
    fx: &Pki,
    edge: &Edge,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, String) {
    request(fx, edge, "GET", path, headers, true).await
}

async fn request(
    fx: &Pki,
    edge: &Edge,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    h2: bool,
) -> (http::response::Parts, String) {
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
    let (head, body) = client.send(method, "b.test", path, headers, vec![]).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

pub(super) fn header<'a>(head: &'a http::response::Parts, name: &str) -> &'a str {
    head.headers.get(name).map_or("", |v| v.to_str().unwrap())
}

/// `n` requests for `path` at once, each on its own connection.
async fn get_many(
    fx: &Arc<Pki>,
    edge: &Arc<Edge>,
    path: &'static str,
    n: usize,
) -> Vec<(http::response::Parts, String)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (fx, edge) = (fx.clone(), edge.clone());
            tokio::spawn(async move { get(&fx, &edge, path, &[]).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// POST to the admin listener; returns (status, body).
pub(super) async fn admin_post(admin: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await.unwrap();
    let req = format!("POST {path} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

const FRESH: &str = "/a?cc=max-age%3D60";

/// A fresh response is served from the edge to every client protocol, with `Age` and
/// `Cache-Status`; the origin is asked once.
#[tokio::test]
async fn fresh_responses_are_served_from_the_edge() {
    let (fx, edge, log) = cached_edge("{}").await;
    let (head, first) = get(&fx, &edge, FRESH, &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(header(&head, "cache-status"), "edgewarm; fwd=uri-miss; fwd-status=200; ttl=60; stored");
    for h2 in [true, false] {
        let (head, body) = request(&fx, &edge, "GET", FRESH, &[], h2).await;
        assert_eq!(body, first, "the stored answer");
        assert!(header(&head, "cache-status").starts_with("edgewarm; hit; ttl="), "{head:?}");
        assert!(head.headers.contains_key("age"));
    }
    assert_eq!(log.count(FRESH), 1);
    assert_eq!(edge.metric("edgewarm_cache_requests_total", &[("route", "b.test"), ("result", "hit")]), 2.0);
    let (_, json) = admin_get(edge.admin, "/cache").await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["caches"][0]["entries"], 1, "{json}");
    edge.stop().await;
}

/// What a shared cache must not store reaches the origin every time, and says why.
#[tokio::test]
async fn responses_for_one_user_are_never_stored() {
    let (fx, edge, log) = cached_edge("{}").await;
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        ("/p?cc=private%2C%20max-age%3D60", &[], "uncacheable"),
        ("/n?cc=no-store", &[], "uncacheable"),
        ("/c?cc=max-age%3D60&cookie=session%3D1", &[], "set-cookie"),
        ("/z?cc=max-age%3D60", &[("authorization", "Basic dTpw")], "uncacheable"),
    ];
    for (path, headers, why) in cases {
        for _ in 0..2 {
            let (head, body) = get(&fx, &edge, path, headers).await;
            assert_eq!(head.status, 200);
            assert!(body.starts_with(path), "{body}");
            assert!(header(&head, "cache-status").ends_with(&format!("detail={why}")), "{path}: {head:?}");
        }
        assert_eq!(log.count(path), 2, "{path}");
    }
    // The client that caused the fetch gets its cookie; nothing is stored for anyone else.
    let (head, _) = get(&fx, &edge, "/c?cc=max-age%3D60&cookie=session%3D1", &[]).await;
    assert_eq!(header(&head, "set-cookie"), "session=1");
    edge.stop().await;
}

/// `store_set_cookie`: stored without the cookie, which only the fetching client gets.
#[tokio::test]
async fn set_cookie_is_stripped_from_the_stored_copy_when_the_operator_opts_in() {
    let (fx, edge, log) = cached_edge("{store_set_cookie: true}").await;
    let path = "/c?cc=max-age%3D60&cookie=session%3D1";
    let (head, _) = get(&fx, &edge, path, &[]).await;
    assert_eq!(header(&head, "set-cookie"), "session=1");
    let (head, _) = get(&fx, &edge, path, &[]).await;
    assert!(header(&head, "cache-status").contains("hit"), "{head:?}");
    assert!(!head.headers.contains_key("set-cookie"), "another client never gets it: {head:?}");
    assert_eq!(log.count(path), 1);
    edge.stop().await;
}

/// `Vary` keeps variants apart under one URL; `Accept-Encoding` spelled differently is one.
#[tokio::test]
async fn vary_keeps_variants_apart() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/v?cc=max-age%3D60&vary=accept-language%2C%20accept-encoding";
    let (_, en) = get(&fx, &edge, path, &[("accept-language", "en"), ("accept-encoding", "gzip, br")]).await;
    let (_, fr) = get(&fx, &edge, path, &[("accept-language", "fr"), ("accept-encoding", "gzip, br")]).await;
    assert_ne!(en, fr);
    let (head, again) = get(&fx, &edge, path, &[("accept-language", "en"), ("accept-encoding", "br,GZIP")]).await;
    assert_eq!(again, en, "{head:?}");
    assert_eq!(log.count(path), 2);
    edge.stop().await;
}

/// A stale response with a validator is revalidated: the origin's 304 refreshes it and the
/// stored body is served.
#[tokio::test]
async fn stale_responses_are_revalidated() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/s?cc=max-age%3D0&etag=%22v1%22";
    let (_, first) = get(&fx, &edge, path, &[]).await;
    let (head, second) = get(&fx, &edge, path, &[]).await;
    assert_eq!(second, first);
    assert_eq!(header(&head, "cache-status"), "edgewarm; fwd=stale; fwd-status=304; ttl=0");
    let validator = log.seen.lock().unwrap()[1].2["if-none-match"].clone();
    assert_eq!(validator, "\"v1\"", "the revalidation carried the stored validator");
    // The client's own conditional request is answered by the edge.
    let (head, body) = get(&fx, &edge, "/f?cc=max-age%3D60&etag=%22v2%22", &[]).await;
    assert_eq!(head.status, 200, "{body}");
    let (head, body) = get(&fx, &edge, "/f?cc=max-age%3D60&etag=%22v2%22", &[("if-none-match", "\"v2\"")]).await;
    assert_eq!((head.status.as_u16(), body.as_str()), (304, ""));
    assert_eq!(log.count(path), 2);
    edge.stop().await;
}

/// A miss with the client's own validators fetches the whole object (stored for everyone)
/// and answers the client's conditional itself.
#[tokio::test]
async fn a_conditional_miss_fills_the_cache() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/m?cc=max-age%3D60&etag=%22m1%22";
    let (head, body) = get(&fx, &edge, path, &[("if-none-match", "\"m1\"")]).await;
    assert_eq!((head.status.as_u16(), body.as_str()), (304, ""));
    assert!(!log.seen.lock().unwrap()[0].2.contains_key("if-none-match"), "the origin was asked for the object");
    // The client had its answer before the body was in; the store gets it right after.
    for _ in 0..2000 {
        if admin_get(edge.admin, "/cache").await.1.contains("\"entries\":1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (head, body) = get(&fx, &edge, path, &[]).await;
    assert!(header(&head, "cache-status").contains("hit"), "{head:?}");
    assert_eq!(body, format!("{path} #1"));
    assert_eq!(log.count(path), 1);
    edge.stop().await;
}

/// `stale-if-error`: an origin 500 serves the stale copy. `stale-while-revalidate`: the
/// stale copy at once, and one revalidation in the background.
#[tokio::test]
async fn stale_copies_cover_errors_and_revalidation() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/e?cc=max-age%3D0%2C%20stale-if-error%3D60&etag=%22e%22&fail_after=1";
    let (_, first) = get(&fx, &edge, path, &[]).await;
    let (head, second) = get(&fx, &edge, path, &[]).await;
    assert_eq!((head.status.as_u16(), second), (200, first));
    assert!(header(&head, "cache-status").contains("fwd-status=500"), "{head:?}");
    assert!(header(&head, "cache-status").ends_with("detail=stale-if-error"), "{head:?}");
    let path = "/w?cc=max-age%3D0%2C%20stale-while-revalidate%3D60";
    let (_, first) = get(&fx, &edge, path, &[]).await;
    let (head, second) = get(&fx, &edge, path, &[]).await;
    assert_eq!(second, first, "served stale at once");
    assert!(header(&head, "cache-status").ends_with("detail=stale-while-revalidate"), "{head:?}");
    for _ in 0..2000 {
        if log.count(path) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(log.count(path), 2, "one background revalidation");
    edge.stop().await;
}

/// Concurrent misses for one object send one request to the origin; the others read it as
/// it arrives. Misses for an uncacheable object are all released to the origin.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_misses_are_collapsed() {
    let (fx, edge, log) = cached_edge("{}").await;
    let fx = Arc::new(fx);
    let edge = Arc::new(edge);
    for (path, origin_requests) in [("/k?cc=max-age%3D60&delay=300&drip=20", 1), ("/u?cc=private&delay=300", 20)] {
        let mut bodies = std::collections::HashSet::new();
        for (head, body) in get_many(&fx, &edge, path, 20).await {
            assert_eq!(head.status, 200);
            bodies.insert(body);
        }
        assert_eq!(log.count(path), origin_requests, "{path}");
        if origin_requests == 1 {
            assert_eq!(bodies.len(), 1, "{bodies:?}");
        }
    }
    let collapsed = edge.metric("edgewarm_cache_requests_total", &[("result", "collapsed")]);
    let hits = edge.metric("edgewarm_cache_requests_total", &[("result", "hit")]);
    assert_eq!(collapsed + hits, 19.0, "collapsed {collapsed}, hits {hits}");
    Arc::into_inner(edge).unwrap().stop().await;
}

/// Concurrent requests for a stale object send one revalidation; every one is served.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_stale_requests_revalidate_once() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/sr?cc=max-age%3D0&etag=%22x%22&delay=300";
    let (_, first) = get(&fx, &edge, path, &[]).await;
    let (fx, edge) = (Arc::new(fx), Arc::new(edge));
    for (head, body) in get_many(&fx, &edge, path, 20).await {
        assert_eq!((head.status.as_u16(), &body), (200, &first));
    }
    assert_eq!(log.count(path), 2, "the first fetch and one revalidation");
    Arc::into_inner(edge).unwrap().stop().await;
}

/// HEAD and a byte range are answered from a stored GET.
#[tokio::test]
async fn head_and_ranges_come_from_the_stored_object() {
    let (fx, edge, log) = cached_edge("{}").await;
    let path = "/r?cc=max-age%3D60&size=1000";
    let (_, full) = get(&fx, &edge, path, &[]).await;
    let (head, body) = request(&fx, &edge, "HEAD", path, &[], true).await;
    assert_eq!((head.status.as_u16(), body.as_str(), header(&head, "content-length")), (200, "", "1000"));
    let (head, body) = get(&fx, &edge, path, &[("range", "bytes=10-19")]).await;
    assert_eq!(head.status, 206);
    assert_eq!(header(&head, "content-range"), "bytes 10-19/1000");
    assert_eq!(body, full[10..20]);
    let (head, _) = get(&fx, &edge, path, &[("range", "bytes=5000-")]).await;
    assert_eq!((head.status.as_u16(), header(&head, "content-range")), (416, "bytes */1000"));
    assert_eq!(log.count(path), 1);
    edge.stop().await;
}

/// Purge by URL and by tag through the admin API, and a successful POST, each make the next
/// request a miss.
#[tokio::test]
async fn purges_and_unsafe_methods_invalidate() {
    let (fx, edge, log) = cached_edge("{}").await;
    get(&fx, &edge, FRESH, &[]).await;
    let url = "https%3A%2F%2Fb.test%2Fa%3Fcc%3Dmax-age%253D60";
    assert_eq!(admin_post(edge.admin, &format!("/cache/purge?url={url}")).await, (200, "{\"purged\":1}".into()));
    get(&fx, &edge, FRESH, &[]).await;
    assert_eq!(log.count(FRESH), 2, "purged: a miss");
    let tagged = "/t?cc=max-age%3D60&tag=product-7%20catalogue";
    get(&fx, &edge, tagged, &[]).await;
    assert_eq!(admin_post(edge.admin, "/cache/purge?tag=catalogue").await.1, "{\"purged\":1}");
    get(&fx, &edge, tagged, &[]).await;
    assert_eq!(log.count(tagged), 2);
    request(&fx, &edge, "POST", FRESH, &[], true).await;
    get(&fx, &edge, FRESH, &[]).await;
    assert_eq!(log.count(FRESH), 4, "a POST's success invalidates the URL");
    assert_eq!(admin_post(edge.admin, "/cache/purge?colour=red").await.0, 400);
    edge.stop().await;
}

/// A reload keeps a route's stored responses while its `cache` settings are equal (a reload must
/// not empty the edge), starts it empty when they change, and drops it with the `cache` key.
#[tokio::test]
async fn a_reload_keeps_the_cache_while_its_settings_are_equal() {
    let fx = fixture();
    let (origin, log) = cache_origin().await;
    let edge = edge(&cached_route(&fx, origin, "{}"), "", "").await;
    let reload = |cache: &str| {
        let route = cached_route(&fx, origin, cache);
        let yaml = format!("admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\nroutes:\n{route}");
        edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    };
    let status = |head: &http::response::Parts| header(head, "cache-status").to_string();
    assert!(status(&get(&fx, &edge, FRESH, &[]).await.0).contains("stored"));

    reload("{}");
    assert!(status(&get(&fx, &edge, FRESH, &[]).await.0).starts_with("edgewarm; hit;"), "kept across the reload");
    assert_eq!(log.count(FRESH), 1);

    reload("{stale_if_error: 5s}");
    assert!(status(&get(&fx, &edge, FRESH, &[]).await.0).contains("stored"), "new settings, a new store");
    assert_eq!(log.count(FRESH), 2);

    let (_, json) = admin_get(edge.admin, "/cache").await;
    assert!(json.contains("\"route\":\"b.test\""), "{json}");
    reload("null");
    let (_, json) = admin_get(edge.admin, "/cache").await;
    assert!(!json.contains("b.test"), "dropped with the cache key: {json}");
    edge.stop().await;
}
