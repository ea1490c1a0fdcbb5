//! Shared test fixtures: certificates, an in-process edgewarm, origins, and a real rustls
//! client. Everything listens on 127.0.0.1 port 0 and is torn down with the test's runtime.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgewarm::config::Config;
use edgewarm::server::{Bound, Server};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

/// A CA and a leaf certificate for some names, in PEM and DER.
pub struct Certs {
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    pub key_der: PrivatePkcs8KeyDer<'static>,
}

pub fn certs(names: &[&str]) -> Certs {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "edgewarm test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Certs {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
        key_der: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

impl Certs {
    pub fn write(&self, dir: &Path) {
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).unwrap();
        std::fs::write(dir.join("cert.pem"), &self.cert_pem).unwrap();
        std::fs::write(dir.join("key.pem"), &self.key_pem).unwrap();
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor_with_alpn(&[])
    }

    /// A TLS acceptor for this certificate offering `alpn`.
    pub fn acceptor_with_alpn(&self, alpn: &[&[u8]]) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], PrivateKeyDer::Pkcs8(self.key_der.clone_key()))
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }

    pub fn connector(&self) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// An edgewarm running in this test's runtime.
pub struct Edge {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub server: Arc<Server>,
    admin_stop: CancellationToken,
    pub run: tokio::task::JoinHandle<()>,
}

/// Start edgewarm with `routes` (YAML list items) and optional extra top-level YAML, e.g. a
/// `timeouts:` block. `listener_extra` goes into the listener entry (e.g. `proxy_protocol: true`).
pub async fn edge(routes: &str, extra: &str, listener_extra: &str) -> Edge {
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\n    {listener_extra}\n{extra}\nroutes:\n{routes}"
    );
    let config = Config::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    config.validate().unwrap();
    let server = Server::new(&config).unwrap();
    let bound = Bound::bind(&config).unwrap();
    let addr = bound.local_addrs()[0];
    let admin = bound.admin.local_addr().unwrap();
    let admin_stop = CancellationToken::new();
    tokio::spawn(edgewarm::admin::serve(bound.admin, server.admin_state(), admin_stop.clone().cancelled_owned()));
    let s = server.clone();
    let run = tokio::spawn(async move { s.run(bound.listeners).await });
    // `run` marks the server ready once its accept loops are spawned.
    while !server.is_ready() {
        tokio::task::yield_now().await;
    }
    Edge { addr, admin, server, admin_stop, run }
}

/// Wait (bounded: 10 s) until a metric reaches `want`.
pub async fn wait_for(edge: &Edge, name: &str, labels: &[(&str, &str)], want: f64) {
    for _ in 0..2000 {
        if edge.metric(name, labels) >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}{labels:?} never reached {want}: {}", edge.metric(name, labels));
}

/// Certificates for the client-facing side (`b.test`, signed by the "edge" CA) and the origin
/// (`origin.test`, signed by the "origin" CA), written to a temporary directory, for routes
/// that terminate TLS.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub edge: Arc<Certs>,
    pub origin: Certs,
    action: &'static str,
}

/// A [`Pki`] whose [`Pki::route`] makes routes of `action` (`prewarm`, `http`).
pub fn pki(action: &'static str) -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (edge, origin) = (certs(&["b.test"]), certs(&["origin.test"]));
    for (name, c) in [("edge", &edge), ("origin", &origin)] {
        std::fs::create_dir(path.join(name)).unwrap();
        c.write(&path.join(name));
    }
    Pki { _dir: dir, path, edge: Arc::new(edge), origin, action }
}

impl Pki {
    /// A route for b.test to `origin` (verified as origin.test); `extra` adds keys, indented
    /// like the route's keys.
    pub fn route(&self, origin: SocketAddr, extra: &str) -> String {
        let (p, action) = (self.path.display(), self.action);
        format!(
            "  - sni: b.test\n    action: {action}\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{extra}"
        )
    }
}

impl Edge {
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.server.metrics().sample(name, labels).unwrap_or(0.0)
    }

    /// Wait until every accepted connection has been closed and logged, so metrics are final.
    /// Counted, not just "none open": a connection is served on a worker thread, and one just
    /// accepted may not have begun there yet.
    pub async fn settle(&self) {
        let total = |text: &str, name: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        for _ in 0..2000 {
            let text = self.server.metrics().encode();
            let (accepted, closed) = (
                total(&text, "edgewarm_connections_accepted_total"),
                total(&text, "edgewarm_connections_closed_total"),
            );
            if self.server.open_connections() == 0 && accepted == closed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("connections still open: {}", self.server.open_connections());
    }

    pub async fn stop(self) {
        self.server.shutdown();
        self.run.await.unwrap();
        self.admin_stop.cancel();
    }
}

/// A TLS origin that answers each line it reads with `origin says: <line>` and echoes
/// everything after a line `ECHO`; used by the rustls-client tests.
pub async fn tls_echo_origin(certs: &Certs) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = certs.acceptor();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

/// Bytes a raw-TCP origin received, shared with the test.
pub type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// A plain TCP origin that records everything each connection sends (until EOF), then replies
/// with `reply` and closes. Edgewarm is blind, so a TCP origin is enough to test the relay.
pub async fn recording_origin(reply: Vec<u8>) -> (SocketAddr, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received: Received = Arc::default();
    let rec = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else { return };
            let (rec, reply) = (rec.clone(), reply.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = tcp.read_to_end(&mut got).await;
                rec.lock().unwrap().push(got);
                let _ = tcp.write_all(&reply).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    (addr, received)
}

/// A real ClientHello from rustls (default provider, so a post-quantum key share) for `sni`.
pub fn client_hello(sni: &str) -> Vec<u8> {
    let config =
        rustls::ClientConfig::builder().with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth();
    let mut config = config;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

pub use edgewarm::peek::clienthello::split_into_records as refragment;

/// Read until EOF (or error), with a bound so a hung proxy fails the test instead of hanging it.
pub async fn read_all(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out))
        .await
        .expect("peer did not close within 20 s");
    out
}

/// A routes block tunnelling `sni` to `origin`, refusing everything else.
pub fn route_to(sni: &str, origin: SocketAddr) -> String {
    format!("  - {{sni: {sni}, action: tunnel, origin: \"{origin}\"}}\n")
}

/// GET a path on the admin listener; returns (status, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let text = String::from_utf8(read_all(&mut s).await).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Behaviour of [`tls_origin`].
#[derive(Clone, Default)]
pub struct OriginOpts {
    /// ALPN protocols the origin accepts.
    pub alpn: Vec<&'static str>,
    /// Sent right after the handshake, before any request (like HTTP/2 SETTINGS).
    pub greeting: Option<Vec<u8>>,
    /// Close a connection that has received nothing for this long.
    pub idle_close: Option<Duration>,
    /// Instead of echoing: read to end of stream, then send this and close.
    pub reply_at_eof: Option<Vec<u8>>,
}

/// Counters of a [`tls_origin`].
#[derive(Default)]
pub struct OriginStats {
    pub handshakes: std::sync::atomic::AtomicUsize,
}

/// A TLS echo origin: optional greeting, then echoes; prefixes nothing. Counts handshakes.
pub async fn tls_origin(certs: &Certs, opts: OriginOpts) -> (SocketAddr, Arc<OriginStats>) {
    use std::sync::atomic::Ordering;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![certs.cert_der.clone()], PrivateKeyDer::Pkcs8(certs.key_der.clone_key()))
        .unwrap();
    config.alpn_protocols = opts.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let stats = Arc::new(OriginStats::default());
    let st = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, opts, st) = (acceptor.clone(), opts.clone(), st.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                st.handshakes.fetch_add(1, Ordering::Relaxed);
                if let Some(g) = &opts.greeting {
                    if tls.write_all(g).await.is_err() {
                        return;
                    }
                }
                if let Some(reply) = &opts.reply_at_eof {
                    let mut got = Vec::new();
                    let _ = tls.read_to_end(&mut got).await;
                    let _ = tls.write_all(reply).await;
                    let _ = tls.shutdown().await;
                    return;
                }
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let read = match opts.idle_close {
                        Some(idle) => match tokio::time::timeout(idle, tls.read(&mut buf)).await {
                            Ok(r) => r,
                            Err(_) => break,
                        },
                        None => tls.read(&mut buf).await,
                    };
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, stats)
}

/// A TLS client connection to `edge` for `name`, offering `alpn`; returns the stream and the
/// negotiated protocol.
pub async fn tls_client(
    certs: &Certs,
    edge: SocketAddr,
    name: &str,
    alpn: &[&str],
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Option<String>)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs.ca_der.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let tcp = TcpStream::connect(edge).await?;
    tcp.set_nodelay(true)?;
    let tls =
        TlsConnector::from(Arc::new(config)).connect(ServerName::try_from(name.to_string()).unwrap(), tcp).await?;
    let alpn = tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned());
    Ok((tls, alpn))
}

/// A child process killed (and reaped) on drop, so a failing test leaves nothing running.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port that was free a moment ago (for binaries that take an address, not a listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Block until something listens on 127.0.0.1:`port` (at most 20 s).
pub fn wait_for_port(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "nothing listening on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What an HTTP/2 test origin saw.
#[derive(Default)]
pub struct H2Stats {
    /// TLS connections accepted.
    pub connections: std::sync::atomic::AtomicUsize,
    pub requests: std::sync::atomic::AtomicUsize,
    /// Every request's headers, in arrival order.
    pub seen: Mutex<Vec<http::HeaderMap>>,
    /// Connections closed for idleness (`close_idle_after`).
    pub idle_closes: std::sync::atomic::AtomicUsize,
}

/// How an HTTP/2 test origin misbehaves.
#[derive(Default, Clone)]
pub struct H2Opts {
    /// Send GOAWAY (graceful) after this many streams on a connection.
    pub goaway_after: Option<usize>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: Option<u32>,
    /// Connection number `freeze_conn` (0: the first) stops reading (no more PONGs, no
    /// answers) this long after it opened, keeping its socket open: a black-holed link.
    pub freeze_after: Option<Duration>,
    pub freeze_conn: usize,
    /// Close a connection (TCP FIN, no GOAWAY) after this long without a new stream, as
    /// origins with short keep-alive timeouts do.
    pub close_idle_after: Option<Duration>,
    /// Connections number 0..n die (dropped, no answer) on their first request: the request
    /// reached the origin, which never answered.
    pub drop_first_request_on: usize,
    /// Announce RFC 8441 extended CONNECT: a `CONNECT` with `:protocol websocket` is
    /// answered `200` (with `x-seen-for`: the `x-forwarded-for` it carried, and
    /// `sec-websocket-protocol: chat` when the client offered `chat`) and its DATA echoed back.
    pub websocket: bool,
    /// Answer `425 Too Early` to every request carrying `Early-Data: 1` (RFC 8470).
    pub too_early: bool,
    /// The first connection is closed with GOAWAY ENHANCE_YOUR_CALM this long after it opened
    /// (what gRPC servers send as `too_many_pings`).
    pub calm_first_after: Option<Duration>,
}

/// An HTTP/2 origin over TLS (ALPN h2), driven with the `h2` crate so tests control GOAWAY and
/// stream limits. Paths: `/echo` answers with the request body; `/slow` never answers;
/// `/delay` answers after 500 ms; `/sink` answers the SHA-256 of the request body and
/// `/source/N` sends N pattern bytes (both streamed, for transfers of any size); any other path
/// answers `hello <path>`. Each response carries `x-origin-conn` (which connection).
pub async fn h2_origin(certs: &Certs, opts: H2Opts) -> (SocketAddr, Arc<H2Stats>) {
    use std::sync::atomic::Ordering;
    tls_origin_loop(certs.acceptor_with_alpn(&[b"h2"]), move |tls, n, st| {
        let opts = opts.clone();
        async move {
            let mut builder = h2::server::Builder::new();
            builder.initial_window_size(4 << 20).initial_connection_window_size(16 << 20);
            if let Some(m) = opts.max_streams {
                builder.max_concurrent_streams(m);
            }
            if opts.websocket {
                builder.enable_connect_protocol();
            }
            let Ok(mut conn) = builder.handshake::<_, bytes::Bytes>(tls).await else { return };
            let mut streams = 0;
            let freeze = opts.freeze_after.filter(|_| n == opts.freeze_conn);
            let freeze_at = tokio::time::Instant::now() + freeze.unwrap_or(Duration::from_secs(3600));
            let mut calm = opts.calm_first_after.filter(|_| n == 0);
            let calm_at = tokio::time::Instant::now() + calm.unwrap_or(Duration::from_secs(3600));
            loop {
                let idle = opts.close_idle_after.unwrap_or(Duration::from_secs(3600));
                let next = tokio::select! {
                    next = conn.accept() => next,
                    () = tokio::time::sleep_until(freeze_at), if freeze.is_some() => {
                        // Hold the connection without polling it: nothing is read or sent.
                        let _held = conn;
                        std::future::pending::<()>().await;
                        return;
                    }
                    () = tokio::time::sleep(idle), if opts.close_idle_after.is_some() => {
                        st.idle_closes.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    () = tokio::time::sleep_until(calm_at), if calm.is_some() => {
                        calm = None;
                        conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                        continue;
                    }
                };
                let Some(next) = next else { return };
                let Ok((req, respond)) = next else { return };
                if streams == 0 && n < opts.drop_first_request_on {
                    st.requests.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                streams += 1;
                st.requests.fetch_add(1, Ordering::Relaxed);
                st.seen.lock().unwrap().push(req.headers().clone());
                if opts.too_early && req.headers().contains_key("early-data") {
                    let mut respond = respond;
                    let _ = respond.send_response(http::Response::builder().status(425).body(()).unwrap(), true);
                    continue;
                }
                tokio::spawn(h2_answer(req, respond, n));
                if opts.goaway_after == Some(streams) {
                    conn.graceful_shutdown();
                }
            }
        }
    })
    .await
}

async fn h2_answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    conn: usize,
) {
    if req.method() == http::Method::CONNECT {
        return h2_websocket_echo(req, respond).await;
    }
    let path = req.uri().path().to_string();
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return;
    }
    if path == "/delay" {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if path == "/sink" || path.starts_with("/source/") {
        return h2_stream(req, respond, &path).await;
    }
    let mut recv = req.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let reply = if path == "/echo" { body } else { format!("hello {path}").into_bytes() };
    let response = http::Response::builder().status(200).header("x-origin-conn", conn.to_string()).body(()).unwrap();
    let Ok(mut tx) = respond.send_response(response, reply.is_empty()) else { return };
    let mut reply = bytes::Bytes::from(reply);
    while !reply.is_empty() {
        tx.reserve_capacity(reply.len());
        let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
        let chunk = reply.split_to(n.min(reply.len()));
        if tx.send_data(chunk, reply.is_empty()).is_err() {
            return;
        }
    }
}

/// An RFC 8441 WebSocket stream: `200`, then every DATA frame echoed until the client ends
/// the stream.
async fn h2_websocket_echo(req: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<bytes::Bytes>) {
    let protocol = req.extensions().get::<h2::ext::Protocol>().map(|p| p.as_str().to_string());
    if protocol.as_deref() != Some("websocket") {
        let _ = respond.send_response(http::Response::builder().status(400).body(()).unwrap(), true);
        return;
    }
    let seen = req.headers().get("x-forwarded-for").cloned().unwrap_or(http::HeaderValue::from_static(""));
    let mut response = http::Response::builder().status(200).header("x-seen-for", seen);
    if req.headers().get("sec-websocket-protocol").is_some_and(|p| p.to_str().unwrap_or("").contains("chat")) {
        response = response.header("sec-websocket-protocol", "chat");
    }
    let Ok(mut tx) = respond.send_response(response.body(()).unwrap(), false) else { return };
    let mut recv = req.into_body();
    while let Some(Ok(mut chunk)) = recv.data().await {
        let _ = recv.flow_control().release_capacity(chunk.len());
        while !chunk.is_empty() {
            tx.reserve_capacity(chunk.len());
            let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
            if tx.send_data(chunk.split_to(n.min(chunk.len())), false).is_err() {
                return;
            }
        }
    }
    let _ = tx.send_data(bytes::Bytes::new(), true);
}

/// `len` bytes of a fixed pattern from `offset` (byte `i` is `i % 251`), for transfers checked
/// by hash. Copied from one precomputed block: tests run unoptimised, and a byte loop over a
/// gibibyte would dominate the test.
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    const BLOCK: usize = 1 << 20;
    static CYCLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let cycle = CYCLE.get_or_init(|| (0..BLOCK + 251).map(|i| (i % 251) as u8).collect());
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    while out.len() < len {
        let n = (len - out.len()).min(BLOCK);
        let start = (at % 251) as usize;
        out.extend_from_slice(&cycle[start..start + n]);
        at += n as u64;
    }
    out
}

/// SHA-256 of [`pattern`]`(0, total)`, computed in chunks.
pub fn pattern_sha256(total: u64) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut at = 0;
    while at < total {
        let n = (total - at).min(1 << 20) as usize;
        h.update(pattern(at, n));
        at += n as u64;
    }
    hex(&h.finalize())
}

/// SHA-256 of everything read from `r`.
pub fn sha256_of(mut r: impl std::io::Read) -> std::io::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf)? {
            0 => return Ok(hex(&h.finalize())),
            n => h.update(&buf[..n]),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `/sink`: read the body as it comes and answer its SHA-256 (nothing is held);
/// `/source/N`: send N bytes of [`pattern`], as the client's window allows.
async fn h2_stream(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    path: &str,
) {
    use sha2::Digest;
    let mut recv = req.into_body();
    let mut h = sha2::Sha256::new();
    while let Some(chunk) = recv.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = recv.flow_control().release_capacity(chunk.len());
        h.update(&chunk);
    }
    let total: u64 = path.strip_prefix("/source/").and_then(|n| n.parse().ok()).unwrap_or(0);
    let response = http::Response::builder().status(200).body(()).unwrap();
    let Ok(mut tx) = respond.send_response(response, false) else { return };
    if path == "/sink" {
        let _ = tx.send_data(bytes::Bytes::from(hex(&h.finalize())), true);
        return;
    }
    let mut at = 0u64;
    while at < total {
        tx.reserve_capacity(((total - at).min(1 << 20)) as usize);
        let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else { return };
        let n = n.min((total - at) as usize);
        let last = at + n as u64 == total;
        if tx.send_data(bytes::Bytes::from(pattern(at, n)), last).is_err() {
            return;
        }
        at += n as u64;
    }
}

/// A real HTTPS client (hyper) on one connection to the edge, speaking HTTP/2 or HTTP/1.1.
pub enum HttpClient {
    H2(hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>),
    H1(hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>),
}

impl HttpClient {
    pub async fn connect(certs: &Certs, addr: SocketAddr, sni: &str, h2: bool) -> std::io::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certs.ca_der.clone()).unwrap();
        let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        config.alpn_protocols = vec![if h2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
        let io = hyper_util::rt::TokioIo::new(tls);
        let err = |e: hyper::Error| std::io::Error::other(e);
        Ok(if h2 {
            let (send, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.map_err(err)?;
            tokio::spawn(conn);
            Self::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.map_err(err)?;
            tokio::spawn(conn);
            Self::H1(send)
        })
    }

    /// Send one request (`uri` is a path; the authority is `b.test`-style `host`).
    pub async fn send(
        &mut self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(http::response::Parts, Vec<u8>), hyper::Error> {
        use http_body_util::BodyExt;
        let mut b = http::Request::builder().method(method);
        b = match self {
            Self::H2(_) => b.uri(format!("https://{host}{path}")),
            Self::H1(_) => b.uri(path).header("host", host),
        };
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(http_body_util::Full::new(bytes::Bytes::from(body))).unwrap();
        let resp = match self {
            Self::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Self::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes().to_vec();
        Ok((parts, bytes))
    }
}

/// An HTTP/1.1 origin over TLS that accepts WebSocket-style upgrades: it answers a request
/// with `Upgrade` by `101 Switching Protocols` (echoing the upgrade token and reporting the
/// `x-forwarded-for` it saw in `x-seen-for`), then echoes every byte back until EOF. Other
/// requests get `426`.
pub async fn upgrade_echo_origin(certs: &Certs) -> SocketAddr {
    let acceptor = certs.acceptor_with_alpn(&[b"http/1.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read_exact(&mut byte).await.is_err() || head.len() > 16 * 1024 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let header = |name: &str| {
                    text.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(|v| v.trim().to_string()))
                };
                let Some(token) = header("upgrade") else {
                    let _ = tls.write_all(b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 0\r\n\r\n").await;
                    return;
                };
                let seen = header("x-forwarded-for").unwrap_or_default();
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {token}\r\nx-seen-for: {seen}\r\n\r\n"
                );
                if tls.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let (mut r, mut w) = tokio::io::split(tls);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// An HTTP/1.1-only origin over TLS (hyper, keep-alive; no ALPN h2), counting connections and
/// requests in the same [`H2Stats`]: `/echo` answers with the request body, `/delay` answers
/// after 300 ms, any other path `hello <path>`.
pub async fn h1_origin(certs: &Certs) -> (SocketAddr, Arc<H2Stats>) {
    use http_body_util::BodyExt;
    use std::sync::atomic::Ordering;
    tls_origin_loop(certs.acceptor_with_alpn(&[b"http/1.1"]), |tls, _, st| async move {
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let st = st.clone();
            async move {
                st.requests.fetch_add(1, Ordering::Relaxed);
                st.seen.lock().unwrap().push(req.headers().clone());
                let path = req.uri().path().to_string();
                let body = req.into_body().collect().await?.to_bytes();
                if path == "/delay" {
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                let reply = if path == "/echo" { body } else { bytes::Bytes::from(format!("hello {path}")) };
                Ok::<_, hyper::Error>(http::Response::new(http_body_util::Full::new(reply)))
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
            .await;
    })
    .await
}

/// Accept TLS connections on 127.0.0.1 (TCP_NODELAY, as real origins set: without it small
/// frames wait on Nagle), count them, and run `serve(tls, connection number, stats)` for each.
async fn tls_origin_loop<F, Fut>(acceptor: TlsAcceptor, serve: F) -> (SocketAddr, Arc<H2Stats>)
where
    F: Fn(tokio_rustls::server::TlsStream<TcpStream>, usize, Arc<H2Stats>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(H2Stats::default());
    let st = stats.clone();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let _ = tcp.set_nodelay(true);
            let n = st.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (acceptor, st, serve) = (acceptor.clone(), st.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls, n, st).await;
                }
            });
        }
    });
    (addr, stats)
}

/// A plain TCP forwarder made of edgewarm's own connect and relay code (splice), without
/// reading a ClientHello or routing: the baseline that prices the peek (`benches/tunnel.rs`,
/// and `edgewarm-lab forward` for measurements against other proxies). Serves `listener` for
/// as long as it runs; a connection whose origin cannot be reached is closed.
pub async fn plain_forward(listener: TcpListener, origin: SocketAddr) {
    let origin = Arc::new(edgewarm::config::OriginAddr { host: origin.ip().to_string(), port: origin.port() });
    let metrics = Arc::new(edgewarm::metrics::Metrics::new().route(&edgewarm::metrics::RouteName::new("plain")));
    let cancel = tokio_util::sync::CancellationToken::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or the like: wait a little rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let (origin, cancel, metrics) = (origin.clone(), cancel.clone(), metrics.clone());
        tokio::spawn(async move {
            let _ = edgewarm::transport::sockopt::set_nodelay(&client);
            let timeout = std::time::Duration::from_secs(5);
            let Ok((upstream, _)) =
                edgewarm::transport::dial::connect(&Default::default(), &origin, false, timeout, &[]).await
            else {
                return;
            };
            let (up, down) = (
                edgewarm::relay::Direction::new(Default::default()),
                edgewarm::relay::Direction::new(Default::default()),
            );
            let relay = edgewarm::relay::Relay {
                metrics: &metrics,
                mode: edgewarm::relay::Mode::Splice,
                idle: std::time::Duration::from_secs(60),
                up: &up,
                down: &down,
                cancel: &cancel,
            };
            relay.run(client, upstream, || {}).await;
        });
    }
}
