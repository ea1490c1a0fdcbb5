//! Clients: a real ClientHello, a rustls TLS client, a hyper HTTP client, HTTP/3 clients
//! (aioquic's, and a quinn endpoint for h3 in Rust).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::*;
use rustls::pki_types::ServerName;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

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

/// A quinn client endpoint on 127.0.0.1 for HTTP/3 (TLS 1.3, ALPN h3, aws-lc-rs as the edge
/// has it) that trusts `ca`, with `transport` as its QUIC settings.
pub fn h3_endpoint(
    ca: &rustls::pki_types::CertificateDer<'static>,
    transport: quinn::TransportConfig,
) -> quinn::Endpoint {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).expect("the CA certificate");
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("a QUIC TLS config");
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(Arc::new(transport));
    let mut endpoint = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).expect("a UDP socket on 127.0.0.1");
    endpoint.set_default_client_config(client);
    endpoint
}

/// aioquic's HTTP/3 client (`h3client.py`, run with `python3`; scripts/deps.sh installs
/// aioquic) against `addr`, verifying the edge against `ca`; `args` are the script's options and
/// requests. Its JSON report, or a panic with what it printed.
pub async fn h3_client(addr: SocketAddr, sni: &str, ca: &std::path::Path, args: &[&str]) -> serde_json::Value {
    h3_client_result(addr, sni, ca, args).await.unwrap_or_else(|e| panic!("h3client.py {args:?}: {e}"))
}

/// [`h3_client`], with a client that fails (refused, timed out) as an error holding its output.
pub async fn h3_client_result(
    addr: SocketAddr,
    sni: &str,
    ca: &std::path::Path,
    args: &[&str],
) -> Result<serde_json::Value, String> {
    static SCRIPT: &str = include_str!("h3client.py");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("h3client.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(&script).arg(addr.ip().to_string()).arg(addr.port().to_string()).arg(sni).arg(ca).args(args);
    cmd.kill_on_drop(true);
    // A guard against a hang, not a speed bound: the gibibyte test's client alone took 276 s
    // on a quiet machine (aioquic moves 7-10 MB/s here), and more beside other tests.
    let out = tokio::time::timeout(Duration::from_secs(900), cmd.output())
        .await
        .map_err(|_| "ran over 900 s".to_string())?
        .map_err(|e| format!("python3: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str(stdout.trim()) {
        Ok(v) if out.status.success() => Ok(v),
        _ => Err(format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr))),
    }
}
