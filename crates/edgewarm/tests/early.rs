//! TLS 1.3 0-RTT on terminating routes: a real rustls client (tokio-rustls with early data)
//! resumes with a ticket from its first connection and sends its request in its first flight.
//! The edge forwards safe requests at once marked `Early-Data: 1`, holds the rest until the
//! handshake completes, refuses a replayed flight, and retries a 425 itself.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use common::*;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

const EARLY: &str = "    early_data: safe\n";

/// A client that keeps its tickets (rustls's in-memory session cache) and offers 0-RTT.
fn zero_rtt_client(certs: &Certs) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs.ca_der.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.enable_early_data = true;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A socket that records what the client writes until it first reads something: its first
/// flight (ClientHello and early data), for replaying.
struct Recorder {
    inner: TcpStream,
    flight: Arc<Mutex<Vec<u8>>>,
    answered: bool,
}

impl AsyncRead for Recorder {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.answered = true;
        }
        r
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            if !self.answered {
                self.flight.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One HTTP/1.1 request (`Connection: close`) on a new connection, written as early data when
/// the client holds a ticket that allows it. Returns the response and whether the server
/// accepted the early data.
async fn request(
    config: &Arc<rustls::ClientConfig>,
    edge: SocketAddr,
    request: &str,
    flight: Option<Arc<Mutex<Vec<u8>>>>,
) -> (String, bool) {
    let tcp = TcpStream::connect(edge).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let io = Recorder { inner: tcp, flight: flight.unwrap_or_default(), answered: false };
    let connector = tokio_rustls::TlsConnector::from(config.clone()).early_data(true);
    let mut tls = connector.connect(ServerName::try_from("b.test").unwrap(), io).await.unwrap();
    tls.write_all(request.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let accepted = tls.get_ref().1.is_early_data_accepted();
    (String::from_utf8_lossy(&response).into_owned(), accepted)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: b.test\r\nconnection: close\r\n\r\n")
}

#[tokio::test]
async fn safe_requests_in_early_data_go_out_at_once_marked_early_data() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, EARLY), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    let (first, early) = request(&client, edge.addr, &get("/first"), None).await;
    assert!(first.starts_with("HTTP/1.1 200") && !early, "{first}");
    let (second, early) = request(&client, edge.addr, &get("/early"), None).await;
    assert!(second.starts_with("HTTP/1.1 200") && second.contains("\r\nhello /early\r\n"), "{second}");
    assert!(early, "the edge accepted the resumed client's early data");
    let seen = stats.seen.lock().unwrap().clone();
    assert!(!seen[0].contains_key("early-data"));
    assert_eq!(seen[1]["early-data"], "1", "forwarded before the handshake completed");
    let route = [("route", "b.test")];
    assert_eq!(edge.metric("edgewarm_tls_early_data_accepted_total", &route), 1.0);
    let forwarded = [("route", "b.test"), ("outcome", "forwarded")];
    assert_eq!(edge.metric("edgewarm_tls_early_requests_total", &forwarded), 1.0);
    edge.stop().await;

    // A route without `early_data` declines it; the client sends the request after the
    // handshake and is answered all the same.
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = common::edge(&fx.route(origin, ""), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    for path in ["/a", "/b"] {
        let (response, early) = request(&client, edge.addr, &get(path), None).await;
        assert!(response.starts_with("HTTP/1.1 200") && !early, "{response}");
    }
    assert!(stats.seen.lock().unwrap().iter().all(|h| !h.contains_key("early-data")));
    edge.stop().await;
}

/// A fresh hit for a safe request in early data is answered from the edge's cache at once:
/// nothing reaches the origin, so there is nothing to replay there.
#[tokio::test]
async fn a_fresh_hit_in_early_data_never_reaches_the_origin() {
    let fx = pki("http");
    let (origin, log) = cache_origin().await;
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    key: \
         {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false}}\n    cache: {{}}\n{EARLY}"
    );
    let edge = edge(&route, "", "").await;
    let client = zero_rtt_client(&fx.edge);
    let path = "/e?cc=max-age%3D60";
    let (first, early) = request(&client, edge.addr, &get(path), None).await;
    assert!(first.starts_with("HTTP/1.1 200") && !early, "{first}");
    let (second, early) = request(&client, edge.addr, &get(path), None).await;
    assert!(early, "the resumed client's request went as early data");
    assert!(second.contains("\r\ncache-status: edgewarm; hit; ttl="), "{second}");
    assert_eq!(log.count(path), 1, "the origin never saw the early request");
    edge.stop().await;
}

#[tokio::test]
async fn unsafe_requests_in_early_data_wait_for_the_handshake() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, EARLY), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    request(&client, edge.addr, &get("/first"), None).await;
    let post = "POST /echo HTTP/1.1\r\nhost: b.test\r\nconnection: close\r\ncontent-length: 5\r\n\r\nhello";
    let (response, early) = request(&client, edge.addr, post, None).await;
    assert!(early && response.starts_with("HTTP/1.1 200") && response.contains("\r\nhello\r\n"), "{response}");
    let seen = stats.seen.lock().unwrap().clone();
    assert!(!seen[1].contains_key("early-data"), "held until the handshake: no longer early when sent");
    let held = [("route", "b.test"), ("outcome", "held")];
    assert_eq!(edge.metric("edgewarm_tls_early_requests_total", &held), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn a_replayed_first_flight_is_refused_and_never_forwarded() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, EARLY), "timeouts: {client_hello: 1s}", "").await;
    let client = zero_rtt_client(&fx.edge);
    request(&client, edge.addr, &get("/first"), None).await;
    let flight = Arc::new(Mutex::new(Vec::new()));
    let (response, early) = request(&client, edge.addr, &get("/once"), Some(flight.clone())).await;
    assert!(early && response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(stats.requests.load(Ordering::Relaxed), 2);

    // An attacker replays the captured ClientHello and early data byte for byte.
    let flight = flight.lock().unwrap().clone();
    assert!(flight.len() > 300, "captured {} bytes", flight.len());
    let mut raw = TcpStream::connect(edge.addr).await.unwrap();
    raw.write_all(&flight).await.unwrap();
    let mut answer = Vec::new();
    // The edge answers with a full handshake (no early data), then gives up waiting for a
    // Finished the attacker cannot make.
    let _ = raw.read_to_end(&mut answer).await;
    assert_eq!(stats.requests.load(Ordering::Relaxed), 2, "the replayed request never reached the origin");
    assert_eq!(edge.metric("edgewarm_tls_ticket_replays_total", &[("route", "b.test")]), 1.0);
    assert_eq!(edge.metric("edgewarm_tls_early_data_accepted_total", &[("route", "b.test")]), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn too_early_from_the_origin_is_retried_after_the_handshake() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { too_early: true, ..Default::default() }).await;
    let edge = edge(&fx.route(origin, EARLY), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    request(&client, edge.addr, &get("/first"), None).await;
    let (response, early) = request(&client, edge.addr, &get("/again"), None).await;
    assert!(early && response.starts_with("HTTP/1.1 200") && response.contains("\r\nhello /again\r\n"), "{response}");
    let seen = stats.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1]["early-data"], "1");
    assert!(!seen[2].contains_key("early-data"), "sent again once the handshake was complete");
    let retried = [("route", "b.test"), ("outcome", "retried_after_425")];
    assert_eq!(edge.metric("edgewarm_tls_early_requests_total", &retried), 1.0);
    edge.stop().await;

    // The same through an HTTP/1.1 origin pool: the header reaches it too.
    let (origin, stats) = h1_origin(&fx.origin).await;
    let edge = common::edge(&fx.route(origin, &format!("{EARLY}    upstream: {{protocol: http/1.1}}\n")), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    request(&client, edge.addr, &get("/first"), None).await;
    let (response, early) = request(&client, edge.addr, &get("/h1"), None).await;
    assert!(early && response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(stats.seen.lock().unwrap()[1]["early-data"], "1");
    edge.stop().await;
}

/// A real client other than rustls: `openssl s_client` saves the session of a first
/// connection, then resumes with its request as early data (`-early_data`). The edge accepts
/// it, and the origin sees the request marked `Early-Data: 1`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (openssl): scripts/test.sh runs it")]
async fn openssl_s_client_sends_its_request_as_early_data() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, EARLY), "", "").await;
    let dir = tempfile::tempdir().unwrap();
    let (sess, first, early) = (dir.path().join("sess.pem"), dir.path().join("first"), dir.path().join("early"));
    std::fs::write(&first, get("/first")).unwrap();
    std::fs::write(&early, get("/zero-rtt")).unwrap();
    let s_client = |extra: Vec<String>| {
        let mut args: Vec<String> = [
            "s_client",
            "-connect",
            &edge.addr.to_string(),
            "-servername",
            "b.test",
            "-alpn",
            "http/1.1",
            "-CAfile",
            &format!("{}/edge/ca.pem", fx.path.display()),
            "-ign_eof",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra);
        args
    };
    let run = |args: Vec<String>, stdin: std::path::PathBuf| async move {
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("openssl")
                .args(&args)
                .stdin(std::fs::File::open(stdin).unwrap())
                .output()
                .expect("openssl");
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
        })
        .await
        .unwrap()
    };
    let (out, err) = run(s_client(vec!["-sess_out".into(), sess.display().to_string()]), first.clone()).await;
    assert!(out.contains("HTTP/1.1 200") && sess.exists(), "{out}\n{err}");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let args = s_client(vec![
        "-sess_in".into(),
        sess.display().to_string(),
        "-early_data".into(),
        early.display().to_string(),
    ]);
    let (out, err) = run(args, empty).await;
    assert!(out.contains("Early data was accepted"), "{out}\n{err}");
    assert!(out.contains("HTTP/1.1 200") && out.contains("hello /zero-rtt"), "{out}");
    let seen = stats.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1]["early-data"], "1");
    edge.stop().await;
}

/// `early_data: opaque` on a prewarm route: the edge cannot see requests, so early bytes go to
/// the warm origin connection at once, unseen (the replay risk is the operator's to take; see
/// docs/config.md). The bytes arrive intact and in order with what follows the handshake.
#[tokio::test]
async fn prewarm_routes_relay_opaque_early_data_to_the_warm_connection() {
    let fx = pki("prewarm");
    let origin = tls_echo_origin(&fx.origin).await;
    let edge = edge(&fx.route(origin, "    early_data: opaque\n"), "", "").await;
    let client = zero_rtt_client(&fx.edge);
    for (i, expect_early) in [(0, false), (1, true)] {
        let tcp = TcpStream::connect(edge.addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let connector = tokio_rustls::TlsConnector::from(client.clone()).early_data(true);
        let mut tls = connector.connect(ServerName::try_from("b.test").unwrap(), tcp).await.unwrap();
        let early = format!("early bytes of connection {i}\n");
        tls.write_all(early.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        let mut back = vec![0u8; early.len()];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(back, early.as_bytes());
        assert_eq!(tls.get_ref().1.is_early_data_accepted(), expect_early, "connection {i}");
        // After the handshake, the same stream carries on.
        tls.write_all(b"and then some\n").await.unwrap();
        let mut back = vec![0u8; 14];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"and then some\n");
    }
    assert_eq!(edge.metric("edgewarm_tls_early_data_accepted_total", &[("route", "b.test")]), 1.0);
    edge.stop().await;
}

/// Browsers speak HTTP/2: the connection preface, SETTINGS and a GET all ride as early data,
/// and hyper's HTTP/2 server on the edge reads them before the handshake completes.
#[tokio::test]
async fn http2_clients_send_their_first_request_as_early_data() {
    use http_body_util::BodyExt;
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, EARLY), "", "").await;
    let mut config = (*zero_rtt_client(&fx.edge)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let config = Arc::new(config);
    // The first connection fetches a ticket; each later one resumes and sends its GET as early
    // data. Whether the edge reads that GET before the client's Finished arrives is a race
    // between two threads (the edge serves on its own workers): a GET read after it is simply
    // not marked. So: every resumed connection's early data is accepted, and within a few
    // tries one GET is forwarded while the handshake is still running.
    let mut accepted = Vec::new();
    let mut early = false;
    for (i, path) in ["/first", "/e1", "/e2", "/e3", "/e4", "/e5", "/e6", "/e7", "/e8"].into_iter().enumerate() {
        let tcp = TcpStream::connect(edge.addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let tls = tokio_rustls::TlsConnector::from(config.clone())
            .early_data(true)
            .connect(ServerName::try_from("b.test").unwrap(), tcp)
            .await
            .unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        let driver = tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let _ = (&mut conn).await;
        });
        let req = http::Request::get(format!("https://b.test{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = send.send_request(req).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("hello {path}").as_bytes());
        drop(send);
        driver.abort();
        accepted.push(edge.metric("edgewarm_tls_early_data_accepted_total", &[("route", "b.test")]));
        let seen = stats.seen.lock().unwrap().clone();
        if seen[i].get("early-data").is_some_and(|v| v == "1") {
            early = true;
            break;
        }
    }
    let tries = accepted.len();
    assert_eq!(
        accepted,
        (0..tries).map(|n| n as f64).collect::<Vec<_>>(),
        "each resumed connection's early data was accepted"
    );
    assert!(early, "no GET of {} resumed connections was forwarded before its handshake completed", tries - 1);
    assert!(stats.seen.lock().unwrap()[0].get("early-data").is_none(), "the first connection had no early data");
    edge.stop().await;
}

/// A client the 0-RTT driver refuses (TLS 1.2 on a route with `min_tls: "1.3"`) is told why
/// with an alert, as tokio-rustls's acceptor tells it on other routes, and the refusal is
/// counted as a client TLS failure.
#[tokio::test]
async fn refused_handshakes_get_an_alert_from_the_early_data_driver() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, &format!("{EARLY}    min_tls: \"1.3\"\n")), "", "").await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fx.edge.ca_der.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS12])
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(edge.addr).await.unwrap();
    let err = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("b.test").unwrap(), tcp)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("alert") && err.contains("ProtocolVersion"), "{err}");
    edge.settle().await;
    let refused = [("route", "b.test"), ("reason", "client_tls")];
    assert_eq!(edge.metric("edgewarm_connections_closed_total", &refused), 1.0);
    assert_eq!(stats.requests.load(Ordering::Relaxed), 0);
    edge.stop().await;
}
