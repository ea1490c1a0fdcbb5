//! Kernel TLS on `prewarm` routes, end to end: a rustls client, edgewarm, a rustls origin, real
//! sockets on 127.0.0.1.
//!
//! Most of these need a kernel with TLS (`TCP_ULP "tls"`). This machine's kernel has none, so
//! `scripts/test-ktls.sh` runs this test binary inside a QEMU VM booted with Debian's kernel,
//! with `EDGEWARM_REQUIRE_KTLS=1`: there a missing kernel TLS is a failure. Run directly on a
//! kernel without TLS, those tests say so on stderr and pass without checking anything; the
//! first test below is the one that checks the fallback there.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::{CipherSuite, SupportedCipherSuite};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const KTLS: &str = "edgewarm_ktls_connections_total";
const CLOSED: &str = "edgewarm_connections_closed_total";

/// Whether the kernel has TLS (else the test is skipped, saying so); where `EDGEWARM_REQUIRE_KTLS` is set (the VM), it must.
fn kernel_tls(test: &str) -> bool {
    let support = edgewarm::tls::ktls::support();
    if support.ulp {
        return true;
    }
    let why = support.reason.clone().unwrap_or_default();
    assert!(std::env::var_os("EDGEWARM_REQUIRE_KTLS").is_none(), "kernel TLS required here but unavailable: {why}");
    eprintln!("SKIP {test}: kernel TLS unavailable ({why}); scripts/test-ktls.sh runs it in a VM");
    false
}

/// The one suite and version a peer will negotiate (both ends restricted, so the edge's sessions
/// on both sides use it).
fn provider(suite: CipherSuite) -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites.retain(|s: &SupportedCipherSuite| s.suite() == suite);
    assert_eq!(p.cipher_suites.len(), 1, "{suite:?}");
    Arc::new(p)
}

static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
static TLS12: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];

fn versions(suite: CipherSuite) -> &'static [&'static rustls::SupportedProtocolVersion] {
    if format!("{suite:?}").starts_with("TLS13") {
        &TLS13
    } else {
        &TLS12
    }
}

/// An origin that echoes everything until the client's close_notify, then closes with its own.
/// `suite` restricts what it negotiates.
async fn echo_origin(certs: &Certs, suite: Option<CipherSuite>) -> SocketAddr {
    let config = match suite {
        Some(s) => {
            rustls::ServerConfig::builder_with_provider(provider(s)).with_protocol_versions(versions(s)).unwrap()
        }
        None => rustls::ServerConfig::builder(),
    }
    .with_no_client_auth()
    .with_single_cert(vec![certs.cert_der.clone()], PrivateKeyDer::Pkcs8(certs.key_der.clone_key()))
    .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let (mut r, mut w) = tokio::io::split(tls);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// A client connection whose relay is running: one byte has been echoed through it, so with
/// `ktls: on` the hand-off has been made (or refused) by the time this returns. (A client that
/// sends its FIN before the hand-off stays in user space: the kernel takes only established
/// sockets.)
async fn client(fx: &Pki, edge: &Edge, suite: Option<CipherSuite>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut tls = connect(fx, edge, suite).await;
    tls.write_all(b"!").await.unwrap();
    let mut one = [0u8; 1];
    tls.read_exact(&mut one).await.unwrap();
    tls
}

async fn connect(fx: &Pki, edge: &Edge, suite: Option<CipherSuite>) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fx.edge.ca_der.clone()).unwrap();
    let config = match suite {
        Some(s) => {
            rustls::ClientConfig::builder_with_provider(provider(s)).with_protocol_versions(versions(s)).unwrap()
        }
        None => rustls::ClientConfig::builder(),
    }
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(edge.addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    TlsConnector::from(Arc::new(config)).connect(ServerName::try_from("b.test").unwrap(), tcp).await.unwrap()
}

/// Send `len` bytes of the test pattern while reading the echo; returns the SHA-256 of what came
/// back (end of stream included: the client's close_notify is answered by the origin's).
async fn echo<S: AsyncRead + AsyncWrite>(tls: S, len: u64) -> String {
    let (mut r, mut w) = tokio::io::split(tls);
    let send = async move {
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(64 * 1024) as usize;
            w.write_all(&pattern(off, n)).await.unwrap();
            off += n as u64;
        }
        w.shutdown().await.unwrap();
    };
    let receive = async move {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(send, receive);
    assert_eq!(got.len() as u64, len);
    sha256_of(&got[..]).unwrap()
}

fn results(edge: &Edge, side: &str, result: &str) -> f64 {
    edge.metric(KTLS, &[("route", "b.test"), ("side", side), ("result", result)])
}

async fn ktls_edge(fx: &Pki, origin: SocketAddr, policy: &str) -> Edge {
    let edge = edge(&fx.route(origin, &format!("    pool: {{min: 1}}\n{policy}")), "", "").await;
    wait_for(&edge, "edgewarm_pool_ready", &[("alpn", "none")], 1.0).await;
    edge
}

#[tokio::test]
async fn ktls_on_relays_identical_bytes_in_the_kernel_or_in_user_space_without_it() {
    let fx = pki("prewarm");
    let origin = echo_origin(&fx.origin, None).await;
    let edge = ktls_edge(&fx, origin, "    ktls: on\n").await;
    let got = echo(client(&fx, &edge, None).await, 1 << 20).await;
    assert_eq!(got, pattern_sha256(1 << 20));
    edge.settle().await;
    let expect = if edgewarm::tls::ktls::support().ulp { "kernel" } else { "unsupported" };
    assert_eq!(results(&edge, "client", expect), 1.0);
    assert_eq!(results(&edge, "origin", expect), 1.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "b.test"), ("reason", "done")]), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn bytes_are_identical_both_ways_from_1_kib_to_32_mib() {
    if !kernel_tls("bytes_are_identical_both_ways_from_1_kib_to_32_mib") {
        return;
    }
    let fx = pki("prewarm");
    let origin = echo_origin(&fx.origin, None).await;
    let edge = ktls_edge(&fx, origin, "    ktls: on\n").await;
    let sizes = [1 << 10, 16 << 10, 64 << 10, 1 << 20, 32 << 20];
    for len in sizes {
        let got = echo(client(&fx, &edge, None).await, len).await;
        assert_eq!(got, pattern_sha256(len), "{len} bytes");
    }
    edge.settle().await;
    assert_eq!(results(&edge, "client", "kernel"), sizes.len() as f64);
    assert_eq!(results(&edge, "origin", "kernel"), sizes.len() as f64);
    edge.stop().await;
}

#[tokio::test]
async fn every_cipher_of_tls_1_2_and_1_3_goes_to_the_kernel() {
    if !kernel_tls("every_cipher_of_tls_1_2_and_1_3_goes_to_the_kernel") {
        return;
    }
    let suites = [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    for suite in suites {
        let fx = pki("prewarm");
        let origin = echo_origin(&fx.origin, Some(suite)).await;
        let edge = ktls_edge(&fx, origin, "    ktls: on\n    min_tls: \"1.2\"\n").await;
        let got = echo(client(&fx, &edge, Some(suite)).await, 256 << 10).await;
        assert_eq!(got, pattern_sha256(256 << 10), "{suite:?}");
        edge.settle().await;
        assert_eq!(results(&edge, "client", "kernel"), 1.0, "{suite:?}");
        assert_eq!(results(&edge, "origin", "kernel"), 1.0, "{suite:?}");
        edge.stop().await;
    }
}

#[tokio::test]
async fn close_notify_half_closes_each_way() {
    if !kernel_tls("close_notify_half_closes_each_way") {
        return;
    }
    let fx = pki("prewarm");
    // The origin answers only once the client has finished sending (its close_notify came
    // through the kernel as an end of stream), then closes with its own close_notify.
    let opts = OriginOpts { reply_at_eof: Some(b"after your close_notify".to_vec()), ..Default::default() };
    let (origin, _) = tls_origin(&fx.origin, opts).await;
    let edge = ktls_edge(&fx, origin, "    ktls: on\n").await;
    let mut tls = connect(&fx, &edge, None).await;
    tls.write_all(b"request").await.unwrap();
    tls.flush().await.unwrap();
    // The hand-off first, then the close_notify, so that the kernel is what reads it.
    wait_for(&edge, KTLS, &[("route", "b.test"), ("side", "origin"), ("result", "kernel")], 1.0).await;
    tls.shutdown().await.unwrap();
    let mut got = Vec::new();
    // read_to_end succeeds only on a close_notify: a bare FIN would be UnexpectedEof.
    tls.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"after your close_notify");
    edge.settle().await;
    assert_eq!(results(&edge, "client", "kernel"), 1.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "b.test"), ("reason", "done")]), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn a_key_update_from_the_client_closes_the_connection_and_is_counted() {
    if !kernel_tls("a_key_update_from_the_client_closes_the_connection_and_is_counted") {
        return;
    }
    let fx = pki("prewarm");
    let origin = echo_origin(&fx.origin, None).await;
    let edge = ktls_edge(&fx, origin, "    ktls: on\n").await;
    let mut tls = client(&fx, &edge, None).await;
    tls.write_all(b"before").await.unwrap();
    let mut buf = [0u8; 6];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"before");
    tls.get_mut().1.refresh_traffic_keys().unwrap();
    tls.write_all(b"after").await.unwrap();
    tls.flush().await.unwrap();
    // Never the echo of bytes the kernel could not decrypt: the connection ends.
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "{rest:?}");
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "b.test"), ("reason", "ktls_key_update")]), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn auto_hands_over_exactly_when_ktls_after_bytes_have_moved() {
    // Without kernel TLS the pause at the budget, the attempt and the resumption in user space
    // still run: only the result differs.
    let handed = if edgewarm::tls::ktls::support().ulp { "kernel" } else { "unsupported" };
    let fx = pki("prewarm");
    let origin = echo_origin(&fx.origin, None).await;
    // 64 KiB both ways together: an echo of 32 KiB spends it exactly, one byte less does not.
    let edge = ktls_edge(&fx, origin, "    ktls: auto\n    ktls_after: 64KiB\n").await;
    let short = 32 * 1024 - 1;
    assert_eq!(echo(connect(&fx, &edge, None).await, short).await, pattern_sha256(short));
    edge.settle().await;
    assert_eq!(results(&edge, "client", "short"), 1.0);
    assert_eq!(results(&edge, "client", handed), 0.0);

    let mut tls = connect(&fx, &edge, None).await;
    let exact = pattern(0, 32 * 1024);
    tls.write_all(&exact).await.unwrap();
    let mut back = vec![0u8; exact.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(back, exact);
    // Spent: the hand-off happens now, and what follows rides the kernel.
    wait_for(&edge, KTLS, &[("route", "b.test"), ("side", "origin"), ("result", handed)], 1.0).await;
    assert_eq!(results(&edge, "client", handed), 1.0);
    let tail = pattern(32 * 1024, 1 << 20);
    tls.write_all(&tail).await.unwrap();
    let mut back = vec![0u8; tail.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert!(back == tail, "bytes after the hand-off differ");
    tls.shutdown().await.unwrap();
    let mut end = Vec::new();
    tls.read_to_end(&mut end).await.unwrap();
    assert!(end.is_empty());
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "b.test"), ("reason", "done")]), 2.0);
    edge.stop().await;
}

#[tokio::test]
async fn a_client_that_closes_before_the_hand_off_loses_nothing() {
    if !kernel_tls("a_client_that_closes_before_the_hand_off_loses_nothing") {
        return;
    }
    let fx = pki("prewarm");
    let origin = echo_origin(&fx.origin, None).await;
    let edge = ktls_edge(&fx, origin, "    ktls: on\n").await;
    // Request and close_notify + FIN right behind the handshake: usually there before the edge
    // hands over, and the kernel refuses a socket whose peer has sent its FIN (ENOTCONN). That
    // must leave the session in user space, not lose it (found by this test).
    for _ in 0..5 {
        let got = echo(connect(&fx, &edge, None).await, 1 << 10).await;
        assert_eq!(got, pattern_sha256(1 << 10));
    }
    edge.settle().await;
    assert_eq!(results(&edge, "client", "busy") + results(&edge, "client", "kernel"), 5.0);
    assert_eq!(results(&edge, "client", "failed"), 0.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "b.test"), ("reason", "done")]), 5.0);
    edge.stop().await;
}
