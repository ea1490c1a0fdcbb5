//! The lab origin with the load generator against it: HTTP/1.1 and HTTP/2, TLS 1.2 and 1.3,
//! every request a new connection, and the origin's idle close.

use edgewarm_test_support as common;

use std::time::Duration;

use edgewarm_lab::tools::load::{self, LoadOpts};
use edgewarm_lab::tools::origin::{self, OriginOpts};
use tokio::io::AsyncReadExt;

async fn start(idle_close: Option<Duration>) -> (std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    common::certs(&["origin.test"]).write(dir.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = OriginOpts {
        listen: addr,
        cert: Some(dir.path().join("cert.pem")),
        key: Some(dir.path().join("key.pem")),
        cleartext: false,
        cache_control: None,
        access_log: None,
        body: 5000,
        think: Duration::ZERO,
        html_think: Duration::ZERO,
        fault_file: None,
        idle_close,
    };
    let tls = origin::tls_config(&opts).unwrap();
    tokio::spawn(async move { origin::serve(listener, tls, &opts, std::future::pending()).await });
    (addr, dir)
}

fn opts(addr: std::net::SocketAddr, dir: &std::path::Path, alpn: &str, tls: &str) -> LoadOpts {
    LoadOpts {
        url: "https://origin.test/".into(),
        connect_to: Some(addr),
        cacert: dir.join("ca.pem"),
        requests: 20,
        duration: Duration::from_secs(30),
        concurrency: 4,
        rate: None,
        ramp_to: None,
        tls: tls.into(),
        tfo: false,
        resume: false,
        timeout: Duration::from_secs(10),
        alpn: alpn.into(),
        zero_rtt: false,
        classic_kx: false,
        page: 0,
        json: true,
    }
}

#[tokio::test]
async fn load_generator_against_the_lab_origin() {
    let (addr, dir) = start(None).await;
    for (alpn, tls) in [("http/1.1", "1.3"), ("h2", "1.3"), ("http/1.1", "1.2"), ("h2", "both")] {
        let report = load::run(&opts(addr, dir.path(), alpn, tls)).await.unwrap();
        assert_eq!(report.ok, 20, "{alpn} {tls}: {:?}", report.errors);
        let t = &report;
        assert!(t.connect_ms.p50 <= t.tls_ms.p50 && t.tls_ms.p50 <= t.ttfb_ms.p50 && t.ttfb_ms.p50 <= t.total_ms.p50);
    }
    // Open loop: 30 arrivals at 100/s, all scheduled and finished.
    let mut o = opts(addr, dir.path(), "http/1.1", "1.3");
    o.rate = Some(100.0);
    o.requests = 30;
    let report = load::run(&o).await.unwrap();
    assert_eq!((report.requests, report.ok), (30, 30));
    // Resumption: after the first, connections resume.
    let mut o = opts(addr, dir.path(), "http/1.1", "1.3");
    (o.resume, o.concurrency) = (true, 1);
    assert!(load::run(&o).await.unwrap().resumed >= 19);
    // A page and 5 sub-resources per connection over HTTP/2; the page takes longer than its
    // first byte. Over HTTP/1.1 a page is refused as a usage error.
    let mut o = opts(addr, dir.path(), "h2", "1.3");
    o.page = 5;
    let report = load::run(&o).await.unwrap();
    assert_eq!(report.ok, 20, "{:?}", report.errors);
    assert!(report.total_ms.p50 > report.ttfb_ms.p50);
    let mut o = opts(addr, dir.path(), "http/1.1", "1.3");
    o.page = 5;
    assert!(load::run(&o).await.is_err());
    // Nothing listening: counted, not a panic.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let report = load::run(&opts(closed, dir.path(), "h2", "1.3")).await.unwrap();
    assert_eq!(report.errors.get("origin_refused"), Some(&20));
}

#[tokio::test]
async fn origin_closes_idle_connections() {
    let (addr, dir) = start(Some(Duration::from_millis(200))).await;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_file_iter(dir.path().join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("origin.test").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    let mut buf = [0u8; 16];
    // Say nothing: the origin closes (EOF or reset), well before the test's own bound.
    let r = tokio::time::timeout(Duration::from_secs(20), tls.read(&mut buf)).await.expect("origin never closed");
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
}

/// The load generator over HTTP/3 (quinn) through an edge with `http3` on 127.0.0.1: every
/// request a new QUIC connection; with `--zero-rtt`, after the first, connections resume and
/// their requests are taken as 0-RTT data.
#[tokio::test(flavor = "multi_thread")]
async fn load_generator_over_http3() {
    let fx = common::pki("http");
    let (origin, _) = common::h2_origin(&fx.origin, common::H2Opts::default()).await;
    let edge = common::edge(&fx.route(origin, "    early_data: safe\n"), "", "http3: true").await;
    let mut o = opts(edge.addr, &fx.path.join("edge"), "h3", "1.3");
    o.url = "https://b.test/".into();
    let report = load::run(&o).await.unwrap();
    assert_eq!(report.ok, 20, "{:?}", report.errors);
    assert!(report.ttfb_ms.p50 <= report.total_ms.p50);
    (o.zero_rtt, o.concurrency) = (true, 1);
    let report = load::run(&o).await.unwrap();
    assert_eq!(report.ok, 20, "{:?}", report.errors);
    // The first connection has no ticket. Each later one resumes with a ticket from those
    // before; the client closes as soon as its response is in, so on a loaded machine a
    // ticket's packet can still be on its way (or lost and not yet resent) then, and a
    // connection may find none left: most, not all, must go as 0-RTT.
    assert!(report.early_data >= 15, "0-RTT taken on {} of 20", report.early_data);
    edge.stop().await;
}

/// The two-tier lab's origin: cleartext HTTP/1.1 and HTTP/2 with prior knowledge (h2c), its
/// responses marked cacheable, every request logged before its response leaves.
#[tokio::test]
async fn a_cleartext_origin_logs_every_request_and_marks_it_cacheable() {
    use http_body_util::BodyExt;
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = OriginOpts {
        listen: addr,
        cert: None,
        key: None,
        cleartext: true,
        cache_control: Some("public, max-age=60".into()),
        access_log: Some(log.clone()),
        body: 10,
        think: Duration::ZERO,
        html_think: Duration::ZERO,
        fault_file: None,
        idle_close: None,
    };
    let tls = origin::tls_config(&opts).unwrap();
    assert!(tls.is_none());
    tokio::spawn(async move { origin::serve(listener, tls, &opts, std::future::pending()).await });

    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /obj/1 HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("cache-control: public, max-age=60"), "{answer}");

    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(tcp);
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("http://h.test/obj/2?sub=0").body(http_body_util::Empty::<bytes::Bytes>::new());
    let resp = send.send_request(req.unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "public, max-age=60");
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes().len(), 10);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "GET /obj/1\nGET /obj/2?sub=0\n");
}
