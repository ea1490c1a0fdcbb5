//! Session tickets across a fleet: edges given the same `tls.ticket_keys` file resume each
//! other's sessions; rotating the file on SIGHUP keeps old tickets valid while their key is
//! listed, and a removed key resumes nothing.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use common::*;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client that keeps its tickets (rustls's in-memory cache), like a browser.
fn client(certs: &Certs) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs.ca_der.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// One request on a new connection; whether the session was resumed.
async fn resumed(config: &Arc<rustls::ClientConfig>, edge: SocketAddr) -> bool {
    let tcp = TcpStream::connect(edge).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(ServerName::try_from("b.test").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nhost: b.test\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    assert!(response.starts_with(b"HTTP/1.1 200"));
    tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

fn key(b: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([b; 48])
}

#[tokio::test]
async fn a_fleet_sharing_a_key_file_resumes_each_others_sessions() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let file = fx.path.join("tickets.keys");
    std::fs::write(&file, format!("{}\n", key(1))).unwrap();
    let tls = format!("tls: {{ticket_keys: {}}}", file.display());
    let route = fx.route(origin, "");
    let (one, two) = (edge(&route, &tls, "").await, edge(&route, &tls, "").await);

    let c = client(&fx.edge);
    assert!(!resumed(&c, one.addr).await, "first visit: full handshake");
    assert!(resumed(&c, two.addr).await, "a ticket from one edge resumes on the other");
    let kept = client(&fx.edge);
    resumed(&kept, one.addr).await; // holds tickets under key 1 from here on

    // Rotation: a new key first (it encrypts), the old one kept (it still decrypts).
    std::fs::write(&file, format!("# rotated\n{}\n{}\n", key(2), key(1))).unwrap();
    let yaml = format!("listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\n{tls}\nroutes:\n{route}");
    let config = edgewarm::config::Config::parse(&yaml).unwrap();
    for e in [&one, &two] {
        e.server.reload(&config).unwrap();
    }
    assert!(resumed(&c, one.addr).await, "old tickets resume while their key is listed");
    // Key 1 retired: its tickets resume nothing; new ones (under key 2) still do.
    std::fs::write(&file, format!("{}\n", key(2))).unwrap();
    for e in [&one, &two] {
        e.server.reload(&config).unwrap();
    }
    assert!(!resumed(&kept, two.addr).await, "a ticket under a removed key is refused");
    assert!(resumed(&c, two.addr).await, "one issued under key 2 resumes on the other edge");
    // A bad file is refused on reload, naming the key; the running keys stay.
    std::fs::write(&file, "not a key\n").unwrap();
    let e = one.server.reload(&config).unwrap_err().to_string();
    assert!(e.starts_with("tls.ticket_keys: line 1"), "{e}");
    assert!(resumed(&c, one.addr).await);
    one.stop().await;
    two.stop().await;

    // Without the file every edge has keys of its own.
    let (one, two) = (edge(&route, "", "").await, edge(&route, "", "").await);
    let c = client(&fx.edge);
    resumed(&c, one.addr).await;
    assert!(!resumed(&c, two.addr).await, "random per-edge keys: no resumption elsewhere");
    one.stop().await;
    two.stop().await;
}
