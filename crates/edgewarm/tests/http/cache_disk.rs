//! The edge cache's disk tier (`routes[].cache.disk`) end to end: what one edgewarm stored is
//! served by the next one started with the same config (its memory empty), purges reach the
//! files, and a damaged file is a miss. Each test's directory is a `TempDir`: removed when the
//! test ends, also when it fails (unwinding drops it).

use std::path::Path;
use std::sync::Arc;

use super::cache::{admin_post, get, header};
use super::*;

const ROUTE: &[(&str, &str)] = &[("route", "b.test")];

/// An edge whose `http` route caches in memory and in `dir`, to `origin`.
async fn disk_edge(fx: &Pki, origin: SocketAddr, dir: &Path) -> Edge {
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    \
         cache: {{disk: {{path: \"{}\", max_size: 64MiB}}}}\n",
        dir.display()
    );
    edge(&route, "", "").await
}

fn result(edge: &Edge, result: &str) -> f64 {
    edge.metric("edgewarm_cache_requests_total", &[("route", "b.test"), ("result", result)])
}

fn disk_reads(edge: &Edge, result: &str) -> f64 {
    edge.metric("edgewarm_cache_disk_reads_total", &[("route", "b.test"), ("result", result)])
}

/// The cache files in `dir`.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ewc"))
        .collect();
    out.sort();
    out
}

/// Fetch `paths` through a new edge on `dir` (each stored), wait until each is on disk, stop
/// it; returns the bodies.
async fn fill(fx: &Pki, dir: &Path, paths: &[&str]) -> Vec<String> {
    let (origin, log) = cache_origin().await;
    let edge = disk_edge(fx, origin, dir).await;
    let mut bodies = Vec::new();
    for path in paths {
        let (head, body) = get(fx, &edge, path, &[]).await;
        assert!(header(&head, "cache-status").ends_with("stored"), "{path}: {head:?}");
        bodies.push(body);
    }
    for path in paths {
        assert_eq!(log.count(path), 1, "{path}");
    }
    // Written off the request path: wait until every entry's file is there.
    for _ in 0..2000 {
        if files(dir).len() == paths.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(files(dir).len(), paths.len());
    assert!(edge.metric("edgewarm_cache_disk_bytes", ROUTE) > 0.0);
    edge.stop().await;
    bodies
}

/// `s` as a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

const FRESH: &str = "/d?cc=max-age%3D600";
const VARIED: &str = "/v?cc=max-age%3D600&vary=accept-language";

/// Stored, restarted, served: the new edgewarm's first request for each object is a hit read
/// from disk (0 new origin requests), its second a hit from memory.
#[tokio::test]
async fn what_was_stored_is_served_after_a_restart() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let first = fill(&fx, dir.path(), &[FRESH]).await.remove(0);
    let (origin, log) = cache_origin().await;
    let edge = disk_edge(&fx, origin, dir.path()).await;
    let (head, body) = get(&fx, &edge, FRESH, &[]).await;
    assert_eq!(body, first, "the stored answer");
    assert!(header(&head, "cache-status").starts_with("edgewarm; hit; ttl="), "{head:?}");
    assert!(head.headers.contains_key("age"));
    let (_, again) = get(&fx, &edge, FRESH, &[]).await;
    assert_eq!(again, first);
    assert_eq!(log.count(FRESH), 0, "no new origin request");
    assert_eq!((result(&edge, "hit_disk"), result(&edge, "hit")), (1.0, 1.0));
    assert_eq!(disk_reads(&edge, "hit"), 1.0);
    edge.stop().await;

    // With Vary: the variants are found on disk too.

    let dir = tempfile::tempdir().unwrap();
    let (origin, log) = cache_origin().await;
    let edge = disk_edge(&fx, origin, dir.path()).await;
    let (_, fr) = get(&fx, &edge, VARIED, &[("accept-language", "fr")]).await;
    let (_, de) = get(&fx, &edge, VARIED, &[("accept-language", "de")]).await;
    assert_eq!(log.count(VARIED), 2);
    for _ in 0..2000 {
        if files(dir.path()).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    edge.stop().await;
    let edge = disk_edge(&fx, origin, dir.path()).await;
    assert_eq!(get(&fx, &edge, VARIED, &[("accept-language", "de")]).await.1, de);
    assert_eq!(get(&fx, &edge, VARIED, &[("accept-language", "fr")]).await.1, fr);
    assert_eq!(log.count(VARIED), 2, "both variants from disk");
    let (_, other) = get(&fx, &edge, VARIED, &[("accept-language", "it")]).await;
    assert_ne!(other, fr, "another variant is a miss");
    assert_eq!(log.count(VARIED), 3);
    edge.stop().await;
}

/// A purge by URL, prefix or tag reaches entries that are only on disk (after a restart):
/// their files go, and the next request is a miss.
#[tokio::test]
async fn purges_reach_the_disk_copies() {
    let fx = Arc::new(fixture());
    let dir = tempfile::tempdir().unwrap();
    let (url, prefixed, tagged) = ("/u?cc=max-age%3D600", "/p/1?cc=max-age%3D600", "/t?cc=max-age%3D600&tag=shoes");
    fill(&fx, dir.path(), &[url, prefixed, tagged]).await;
    let (origin, log) = cache_origin().await;
    let edge = disk_edge(&fx, origin, dir.path()).await;
    let admin = edge.admin;
    let purged = |q: String| async move { admin_post(admin, &format!("/cache/purge?{q}")).await };
    let full = encode(&format!("https://b.test{url}"));
    assert_eq!(purged(format!("url={full}")).await, (200, "{\"purged\":1}".into()));
    assert_eq!(purged(format!("prefix={}", encode("https://b.test/p/"))).await.1, "{\"purged\":1}");
    assert_eq!(purged("tag=shoes".into()).await.1, "{\"purged\":1}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    for path in [url, prefixed, tagged] {
        let (head, _) = get(&fx, &edge, path, &[]).await;
        assert!(header(&head, "cache-status").contains("fwd=uri-miss"), "{path}: {head:?}");
        assert_eq!(log.count(path), 1, "{path}");
    }
    assert_eq!(disk_reads(&edge, "miss"), 3.0);
    edge.stop().await;
}

/// A damaged file is a miss (counted, the file removed), never a crash: one found at start,
/// one damaged while the edge runs, and a stray file of another format.
#[tokio::test]
async fn a_damaged_file_is_a_miss() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (early, late) = ("/e?cc=max-age%3D600", "/l?cc=max-age%3D600");
    fill(&fx, dir.path(), &[early, late]).await;
    let [a, b] = <[_; 2]>::try_from(files(dir.path())).unwrap();
    // One truncated before the start, a foreign file under one of our names.
    let len = std::fs::metadata(&a).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&a).unwrap().set_len(len - 3).unwrap();
    std::fs::write(dir.path().join(format!("{}.ewc", "0".repeat(32))), b"not a cache file").unwrap();
    let (origin, log) = cache_origin().await;
    let edge = disk_edge(&fx, origin, dir.path()).await;
    assert_eq!(disk_reads(&edge, "corrupt"), 2.0, "both found at start");
    assert_eq!(files(dir.path()), vec![b.clone()]);
    // The other damaged while the edge runs: its head overwritten.
    std::fs::write(&b, b"EWCACHE\0\x01\0\0\0\x05\0\0\0{{{{{").unwrap();
    for path in [early, late] {
        let (head, body) = get(&fx, &edge, path, &[]).await;
        assert_eq!(head.status, 200);
        assert!(body.starts_with(path), "{body}");
        assert_eq!(log.count(path), 1, "{path}: a miss, fetched again");
    }
    assert_eq!(disk_reads(&edge, "corrupt"), 3.0);
    // Fetched again and stored again: served from memory now.
    let (head, _) = get(&fx, &edge, late, &[]).await;
    assert!(header(&head, "cache-status").starts_with("edgewarm; hit"), "{head:?}");
    edge.stop().await;
}
