//! `prewarm` routes end to end: real TLS on both sides through edgewarm, origins on 127.0.0.1.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HITS: &str = "edgewarm_pool_hits_total";
const MISSES: &str = "edgewarm_pool_misses_total";

/// Certificates for the client-facing side (`b.test`, signed by the "edge" CA) and the origin
/// (`origin.test`, signed by the "origin" CA), written to a temporary directory.
fn fixture() -> Pki {
    pki("prewarm")
}

/// One request-response over a fresh client connection; returns the negotiated ALPN.
async fn ping(fx: &Pki, edge: &Edge, alpn: &[&str]) -> std::io::Result<Option<String>> {
    let (mut tls, negotiated) = tls_client(&fx.edge, edge.addr, "b.test", alpn).await?;
    tls.write_all(b"ping").await?;
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await?;
    assert_eq!(&buf, b"ping");
    tls.shutdown().await?;
    Ok(negotiated)
}

#[tokio::test]
async fn clients_get_warm_connections() {
    let fx = fixture();
    let (origin, stats) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 3}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 3.0).await;
    // The edge counts a connection ready when its side of the handshake completes; in TLS 1.3
    // the origin's side completes a moment later (on the client's Finished). Bounded wait.
    for _ in 0..500 {
        if stats.handshakes.load(Ordering::Relaxed) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let handshakes_before = stats.handshakes.load(Ordering::Relaxed);
    assert!(handshakes_before >= 3);
    for _ in 0..10 {
        // Each take starts a replacement; on a loaded test machine give it time to finish so the
        // assertion is about the pool, not about scheduling.
        wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
        ping(&fx, &edge, &[]).await.unwrap();
    }
    edge.settle().await;
    assert_eq!(edge.metric(HITS, &[("route", "b.test"), ("alpn", "none")]), 10.0);
    assert_eq!(edge.metric(MISSES, &[("route", "b.test")]), 0.0);
    assert_eq!(edge.metric("edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "done")]), 10.0);
    let (status, pools) = admin_get(edge.admin, "/pools").await;
    assert_eq!(status, 200);
    let pools: serde_json::Value = serde_json::from_str(&pools).unwrap();
    assert_eq!(pools["pools"][0]["sni"], "origin.test");
    edge.stop().await;
}

#[tokio::test]
async fn bytes_the_origin_sends_first_reach_the_client_first() {
    let fx = fixture();
    let opts = OriginOpts { greeting: Some(b"SETTINGS-like greeting".to_vec()), ..Default::default() };
    let (origin, _) = tls_origin(&fx.origin, opts).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 1}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
    // Let the greeting arrive while the connection is pooled.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &[]).await.unwrap();
    let mut buf = vec![0u8; 22];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, b"SETTINGS-like greeting");
    tls.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    tls.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");
    drop(tls);
    edge.settle().await;
    assert_eq!(edge.metric(HITS, &[("route", "b.test")]), 1.0);
    edge.stop().await;
}

/// The origin closes idle connections after 300 ms; the pool retires its own after 100 ms, so
/// no client is ever handed one the origin is about to close.
#[tokio::test]
async fn origin_idle_timeout_causes_no_client_failure() {
    let fx = fixture();
    let opts = OriginOpts { idle_close: Some(Duration::from_millis(300)), ..Default::default() };
    let (origin, _) = tls_origin(&fx.origin, opts).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2, max_idle: 100ms, period: 50ms}\n"), "", "").await;
    let mut failures = 0;
    for i in 0..1000 {
        if ping(&fx, &edge, &[]).await.is_err() {
            failures += 1;
        }
        if i % 100 == 0 {
            // Idle gaps, so pooled connections age past max_idle and get replaced.
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    assert_eq!(failures, 0);
    edge.settle().await;
    assert!(edge.metric("edgewarm_pool_expired_total", &[("route", "b.test")]) > 0.0);
    assert_eq!(edge.metric("edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "done")]), 1000.0);
    edge.stop().await;
}

/// Connections the origin closes while pooled are noticed, discarded and replaced.
#[tokio::test]
async fn dead_pooled_connections_are_discarded() {
    let fx = fixture();
    let opts = OriginOpts { idle_close: Some(Duration::from_millis(50)), ..Default::default() };
    let (origin, _) = tls_origin(&fx.origin, opts).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_discarded_total", &[("reason", "dead")], 4.0).await;
    // Replacements keep coming: the pool is refilled after each death.
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test")], 6.0).await;
    edge.stop().await;
}

#[tokio::test]
async fn each_alpn_has_its_own_pool_and_clients_get_what_the_origin_speaks() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts { alpn: vec!["h2", "http/1.1"], ..Default::default() }).await;
    let edge = edge(&fx.route(origin, "    alpn: [h2, http/1.1]\n    pool: {min: 2}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "h2")], 2.0).await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "http/1.1")], 2.0).await;
    assert_eq!(ping(&fx, &edge, &["h2", "http/1.1"]).await.unwrap().as_deref(), Some("h2"));
    assert_eq!(ping(&fx, &edge, &["http/1.1"]).await.unwrap().as_deref(), Some("http/1.1"));
    assert_eq!(ping(&fx, &edge, &[]).await.unwrap(), None);
    edge.settle().await;
    assert_eq!(edge.metric(HITS, &[("alpn", "h2")]), 1.0);
    assert_eq!(edge.metric(HITS, &[("alpn", "http/1.1")]), 1.0);
    edge.stop().await;

    // An origin that only speaks HTTP/1.1: the h2 pool learns it, clients are not offered h2.
    let (origin, _) = tls_origin(&fx.origin, OriginOpts { alpn: vec!["http/1.1"], ..Default::default() }).await;
    let edge = common::edge(&fx.route(origin, "    alpn: [h2, http/1.1]\n    pool: {min: 1}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_connect_errors_total", &[("alpn", "h2"), ("reason", "alpn_mismatch")], 1.0).await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "http/1.1")], 1.0).await;
    assert_eq!(ping(&fx, &edge, &["h2", "http/1.1"]).await.unwrap().as_deref(), Some("http/1.1"));
    edge.stop().await;
}

#[tokio::test]
async fn origin_down_backs_off_and_clients_get_an_alert() {
    let fx = fixture();
    let down: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let edge = edge(&fx.route(down, "    pool: {min: 5}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_retries_total", &[("route", "b.test")], 1.0).await;
    // Backoff: 100 ms doubling, one probe at a time, so in ~1 s only a handful of attempts,
    // not 5 per refill tick.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = edge.metric("edgewarm_pool_connect_errors_total", &[("reason", "origin_refused")]);
    assert!((2.0..=8.0).contains(&attempts), "attempts {attempts}");
    // Every attempt in the one family too, as in the deprecated one: the same attempts. Read
    // from one exposition, again if it fell between the two counts of an attempt.
    let failures = [("route", "b.test"), ("kind", "prewarm"), ("reason", "refused")];
    let counts = || {
        let text = edge.server.metrics().encode();
        let new = edgewarm::metrics::sample(&text, "edgewarm_origin_connect_failures_total", &failures);
        (new, edgewarm::metrics::sample(&text, "edgewarm_pool_connect_errors_total", &[("reason", "origin_refused")]))
    };
    let (new, old) = (0..100).map(|_| counts()).find(|(new, old)| new == old).unwrap_or_else(counts);
    assert_eq!(new, old);
    // The origin is known down: the client is refused before its handshake, with an alert.
    let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("b.test")).await.unwrap();
    assert_eq!(read_all(&mut s).await, [0x15, 3, 3, 0, 2, 2, 80]);
    edge.settle().await;
    assert_eq!(
        edge.metric("edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "origin_backoff")]),
        1.0
    );
    edge.stop().await;
}

#[tokio::test]
async fn wrong_origin_certificate_is_refused_and_counted() {
    let fx = fixture();
    // The origin presents a certificate from a CA the route does not trust.
    let stranger = certs(&["origin.test"]);
    let (origin, _) = tls_origin(&stranger, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 1}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_connect_errors_total", &[("reason", "origin_certificate")], 2.0).await;
    assert_eq!(edge.metric("edgewarm_pool_opened_total", &[]), 0.0);
    assert!(ping(&fx, &edge, &[]).await.is_err(), "no client may reach an unverified origin");
    edge.stop().await;
}

#[tokio::test]
async fn burst_after_idle_all_served() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2, period: 100ms}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("route", "b.test")], 2.0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (client_certs, addr) = (fx.edge.clone(), edge.addr);
        clients.spawn(async move {
            let (mut tls, _) = tls_client(&client_certs, addr, "b.test", &[]).await?;
            tls.write_all(b"ping").await?;
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await?;
            std::io::Result::Ok(buf == *b"ping")
        });
    }
    let mut ok = 0;
    while let Some(r) = clients.join_next().await {
        if matches!(r, Ok(Ok(true))) {
            ok += 1;
        }
    }
    assert_eq!(ok, 200);
    edge.settle().await;
    let hits = edge.metric(HITS, &[("route", "b.test")]);
    let misses = edge.metric(MISSES, &[("route", "b.test")]);
    assert_eq!(hits + misses, 200.0);
    assert!(hits >= 2.0);
    edge.stop().await;
}

#[tokio::test]
async fn reload_resizes_pools_without_dropping_or_leaking() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("route", "b.test")], 2.0).await;
    // A client attached before the reload keeps working after it.
    let (mut open, _) = tls_client(&fx.edge, edge.addr, "b.test", &[]).await.unwrap();
    open.write_all(b"1").await.unwrap();
    let mut b = [0u8; 1];
    open.read_exact(&mut b).await.unwrap();

    let yaml = format!(
        "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}",
        fx.route(origin, "    pool: {min: 6}\n")
    );
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    wait_for(&edge, "edgewarm_pool_ready", &[("route", "b.test")], 6.0).await;
    open.write_all(b"2").await.unwrap();
    open.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"2");
    drop(open);
    edge.settle().await;
    // Every connection opened is accounted for: handed out, or still ready.
    let opened = edge.metric("edgewarm_pool_opened_total", &[("route", "b.test")]);
    let hits = edge.metric(HITS, &[("route", "b.test")]);
    let ready = edge.metric("edgewarm_pool_ready", &[("route", "b.test")]);
    assert_eq!(opened, hits + ready, "opened {opened} = hits {hits} + ready {ready}");
    let (_, pools) = admin_get(edge.admin, "/pools").await;
    assert!(pools.contains("\"min\":6"), "{pools}");
    edge.stop().await;
}

/// Clients resume their TLS session with edgewarm (tickets), and are still pool hits.
#[tokio::test]
async fn clients_resume_sessions() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2}\n"), "", "").await;
    let config = browser(&fx);
    let mut kinds = Vec::new();
    for _ in 0..3 {
        wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
        kinds.push(round_trip(&edge, &config).await);
    }
    assert_eq!(kinds[0], Some(rustls::HandshakeKind::Full));
    assert_eq!(kinds[1], Some(rustls::HandshakeKind::Resumed), "{kinds:?}");
    assert_eq!(kinds[2], Some(rustls::HandshakeKind::Resumed), "{kinds:?}");
    edge.settle().await;
    assert_eq!(edge.metric(HITS, &[("route", "b.test")]), 3.0);
    edge.stop().await;
}

/// The client's close_notify reaches the origin as a close_notify, and the origin's answer
/// sent after it still reaches the client: half-close through two TLS sessions.
#[tokio::test]
async fn close_notify_half_close_both_ways() {
    let fx = fixture();
    let opts = OriginOpts { reply_at_eof: Some(b"answer after your close".to_vec()), ..Default::default() };
    let (origin, _) = tls_origin(&fx.origin, opts).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 1}\n"), "", "").await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &[]).await.unwrap();
    tls.write_all(b"request").await.unwrap();
    tls.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"answer after your close");
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "done")]), 1.0);
    edge.stop().await;
}

/// A reload (SIGHUP) keeps ticket keys: a client resumes across it instead of paying a full
/// handshake, as it would if every reload made new keys.
#[tokio::test]
async fn sessions_survive_a_reload() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts::default()).await;
    let edge = edge(&fx.route(origin, "    pool: {min: 2}\n"), "", "").await;
    let config = browser(&fx);
    let yaml = format!(
        "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}",
        fx.route(origin, "    pool: {min: 3}\n")
    );
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
    let first = round_trip(&edge, &config).await;
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
    let second = round_trip(&edge, &config).await;
    assert_eq!([first, second], [Some(rustls::HandshakeKind::Full), Some(rustls::HandshakeKind::Resumed)]);
    edge.stop().await;
}

/// One client config (one session cache) across connections, as a browser has.
fn browser(fx: &Pki) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fx.edge.ca_der.clone()).unwrap();
    std::sync::Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
}

/// A new connection and one round trip (so the client has read the tickets sent after the
/// handshake); how its handshake went.
async fn round_trip(edge: &Edge, config: &std::sync::Arc<rustls::ClientConfig>) -> Option<rustls::HandshakeKind> {
    let tcp = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.unwrap();
    let kind = tls.get_ref().1.handshake_kind();
    tls.shutdown().await.unwrap();
    kind
}

/// A warm origin connection reset mid-transfer: the client's session ends at once, the close is
/// counted as `origin_reset`, and the next client is served.
#[tokio::test]
async fn an_origin_reset_mid_transfer_ends_only_that_client() {
    let fx = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let acceptor = fx.origin.acceptor();
    let resets = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let r = resets.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, r) = (acceptor.clone(), r.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut buf = [0u8; 4];
                if tls.read_exact(&mut buf).await.is_err() {
                    return;
                }
                let _ = tls.write_all(&[b'x'; 50_000]).await;
                if r.swap(false, Ordering::Relaxed) {
                    tls.get_ref().0.set_zero_linger().unwrap();
                    drop(tls);
                } else {
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    let edge = edge(&fx.route(origin, "    pool: {min: 2}\n"), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("route", "b.test")], 2.0).await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &[]).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut got = Vec::new();
    // Ends, one way or another, without hanging.
    let _ = tls.read_to_end(&mut got).await;
    assert!(got.len() <= 50_000);
    edge.settle().await;
    assert_eq!(
        edge.metric("edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "origin_reset")]),
        1.0
    );
    let (mut next, _) = tls_client(&fx.edge, edge.addr, "b.test", &[]).await.unwrap();
    next.write_all(b"ping").await.unwrap();
    let mut all = Vec::new();
    next.read_to_end(&mut all).await.unwrap();
    assert_eq!(all.len(), 50_000, "the next client gets its whole answer");
    drop(next);
    edge.settle().await;
    edge.stop().await;
}

/// A route offering several protocols has a pool per protocol, each holding `min`; when every
/// client speaks h2, the http/1.1 and no-ALPN pools would keep `min` warm for nobody. After
/// `max_idle` without a client they shrink to one connection; a client of that protocol
/// brings the floor back. A route's only pool keeps `min` (checked by `clients_get_warm_connections`).
#[tokio::test]
async fn alpn_pools_without_clients_shrink_to_one() {
    let fx = fixture();
    let (origin, _) = tls_origin(&fx.origin, OriginOpts { alpn: vec!["h2", "http/1.1"], ..Default::default() }).await;
    let pool = "    alpn: [h2, http/1.1]\n    pool: {min: 3, max_idle: 1s, period: 100ms}\n";
    let edge = edge(&fx.route(origin, pool), "", "").await;
    let ready = |alpn: &str| edge.metric("edgewarm_pool_ready", &[("route", "b.test"), ("alpn", alpn)]);
    for alpn in ["h2", "http/1.1", "none"] {
        wait_for(&edge, "edgewarm_pool_ready", &[("route", "b.test"), ("alpn", alpn)], 3.0).await;
    }
    // h2 clients keep coming; the other protocols get none. Bounded: 15 s.
    let mut shrunk = false;
    for _ in 0..75 {
        assert_eq!(ping(&fx, &edge, &["h2"]).await.unwrap().as_deref(), Some("h2"));
        if ready("http/1.1") == 1.0 && ready("none") == 1.0 {
            shrunk = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(shrunk, "idle ALPN pools: http/1.1 {} none {}", ready("http/1.1"), ready("none"));
    let target = |alpn: &str| edge.metric("edgewarm_pool_target", &[("route", "b.test"), ("alpn", alpn)]);
    assert!(target("h2") >= 3.0, "the pool with clients keeps its min: {}", target("h2"));
    assert_eq!(target("http/1.1"), 1.0);
    // An http/1.1 client arrives (served warm by the one kept): its pool's floor is min again.
    assert_eq!(ping(&fx, &edge, &["http/1.1"]).await.unwrap().as_deref(), Some("http/1.1"));
    wait_for(&edge, "edgewarm_pool_target", &[("route", "b.test"), ("alpn", "http/1.1")], 3.0).await;
    assert_eq!(edge.metric(MISSES, &[("route", "b.test")]), 0.0);
    edge.stop().await;
}
