//! The disk tier on its own, on a temporary directory: what is written is indexed again by
//! the next `open` and read back whole; the budget holds; and (ignored, run by hand) how fast
//! it writes and how long an `open` of many files takes.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::{Disk, Tier};
use crate::cache::decide::{self, Grace};
use crate::cache::key::Key;
use crate::cache::store::{Entry, Lower};
use crate::config::DiskConfig;
use crate::metrics::RouteName;

fn metrics() -> super::DiskMetrics {
    super::DiskMetrics {
        hit: Counter::default(),
        miss: Counter::default(),
        corrupt: Counter::default(),
        bytes: Gauge::default(),
        written: Counter::default(),
    }
}

fn open(dir: &std::path::Path, max_size: u64) -> Tier {
    let config = DiskConfig { path: dir.to_path_buf(), max_size };
    Tier(Arc::new(Disk::open(&config, RouteName::new("t"), metrics()).unwrap()))
}

/// Write at once, on this thread (as the blocking task of `put` does).
fn write_now(tier: &Tier, n: usize, entry: &Entry) {
    let writing = super::Writing { url: key(n).url, tags: entry.tags.clone().into(), cancelled: false };
    tier.0.lock().writing.insert(n as u64, writing);
    tier.0.write(n as u64, &key(n), &[], entry);
}

fn key(n: usize) -> Key {
    Key { url: format!("https://a.test/{n}").into(), variant: "".into() }
}

fn entry(n: usize, size: usize) -> Entry {
    let now = SystemTime::now();
    let head = Request::get(format!("https://a.test/{n}")).body(()).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("cache-control", HeaderValue::from_static("max-age=600"));
    headers.insert("cache-tag", HeaderValue::from_static("t1"));
    Entry {
        policy: decide::policy(&head, StatusCode::OK, &headers, now),
        status: StatusCode::OK,
        headers,
        body: vec![Bytes::from(vec![b'x'; size])],
        trailers: None,
        size: size as u64,
        tags: vec!["t1".into()],
        grace: Grace::default(),
        stale_at: now + Duration::from_secs(600),
        request_bytes: 0,
    }
}

#[tokio::test]
async fn what_is_written_is_indexed_again_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    // No runtime thread of its own here: written inline.
    tokio::task::spawn_blocking({
        let tier = Tier(tier.0.clone());
        move || {
            for n in 0..20 {
                tier.put(key(n), vec![], Arc::new(entry(n, 1000 + n)));
            }
        }
    })
    .await
    .unwrap();
    while tier.occupancy().0 < 20 {
        tokio::task::yield_now().await;
    }
    let again = open(dir.path(), 1 << 30);
    assert_eq!(again.occupancy().0, 20);
    let got = again.get(&key(7)).await.unwrap();
    assert_eq!(got.size, 1007);
    assert_eq!(got.body.concat().len(), 1007);
    assert_eq!(&*got.tags, &["t1".into()] as &[Box<str>]);
    assert!(got.policy.time_to_live(SystemTime::now()) > Duration::from_secs(500));
    assert!(again.get(&key(99)).await.is_none());
    assert_eq!(again.purge(&|u| u.ends_with("/7"), &|_| false, &[]), 1);
    assert_eq!(again.purge(&|_| false, &|t| t.iter().any(|t| &**t == "t1"), &[Arc::new(key(3))]), 18);
    assert_eq!(again.occupancy(), (0, 0));
}

#[tokio::test]
async fn the_budget_holds_and_the_least_recently_used_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 100_000);
    for n in 0..12 {
        if n == 10 {
            // Used just before the tier overflows: it outlives those written after it.
            assert!(tier.get(&key(0)).await.is_some());
        }
        write_now(&tier, n, &entry(n, 9_000));
    }
    let (files, bytes) = tier.occupancy();
    assert!(bytes <= 100_000 && files < 12, "{files} files, {bytes} bytes");
    assert!(tier.get(&key(0)).await.is_some(), "recently used");
    assert!(tier.get(&key(1)).await.is_none(), "least recently used");
    assert!(tier.get(&key(11)).await.is_some(), "the newest");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count() as u64, tier.occupancy().0);
}

/// `EW_DISK_N=20000 cargo test -p edgewarm --lib disk::tests::measure -- --ignored --nocapture`:
/// entries of 4 KiB written per second, and how long an `open` of them takes.
#[test]
#[ignore]
fn measure() {
    let n: usize = std::env::var("EW_DISK_N").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 40);
    let one = entry(0, 4096);
    let start = Instant::now();
    for i in 0..n {
        write_now(&tier, i, &one);
    }
    let wrote = start.elapsed();
    let start = Instant::now();
    let again = open(dir.path(), 1 << 40);
    let opened = start.elapsed();
    assert_eq!(again.occupancy().0, n as u64);
    println!(
        "{n} entries of 4 KiB: written at {:.0}/s ({wrote:?}), open (index load) {opened:?}",
        n as f64 / wrote.as_secs_f64()
    );
}
