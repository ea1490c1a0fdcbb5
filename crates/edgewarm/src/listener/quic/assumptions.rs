//! What the listener's patches to quinn-proto's behaviour rely on, checked against quinn-proto
//! itself (the exact version the workspace pins): a client and a server endpoint in memory, the
//! server's crypto wrapped as the listener wraps it ([`super::zero_rtt::Counting`]), datagrams
//! carried between them by hand. An upgrade of quinn-proto that changes what a patch assumes
//! fails here, with the file to reopen named.
//!
//! Not checked here: that quinn-proto reads PADDING a frame at a time and weighs CRYPTO data by
//! its packet's size. Those make the patches pay (instructions, memory) rather than work, and
//! `scripts/bench-h3-ins.sh` is where a change shows.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use prometheus_client::metrics::counter::Counter;
use quinn_proto::{ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, ServerConfig};

use super::zero_rtt::Counting;

/// One end: its endpoint, its connections, and the bytes of the datagrams it was handed.
struct End {
    endpoint: Endpoint,
    conns: HashMap<ConnectionHandle, Connection>,
    addr: SocketAddr,
    /// Bytes of the datagrams it was handed after its first.
    received: u64,
    first: bool,
}

impl End {
    fn new(server: Option<Arc<ServerConfig>>, port: u16) -> Self {
        let endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), server, true, None);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        Self { endpoint, conns: HashMap::new(), addr, received: 0, first: true }
    }

    /// What its connections have to send, a datagram each.
    fn transmit(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (&ch, conn) in &mut self.conns {
            while let Some(event) = conn.poll_endpoint_events() {
                if let Some(event) = self.endpoint.handle_event(ch, event) {
                    conn.handle_event(event);
                }
            }
            while conn.poll().is_some() {}
            let mut buf = Vec::new();
            while let Some(t) = conn.poll_transmit(now, 1, &mut buf) {
                out.push(buf[..t.size].to_vec());
                buf.clear();
            }
        }
        out
    }

    /// A datagram from `from`, to the endpoint and on to its connection.
    fn receive(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if !std::mem::replace(&mut self.first, false) {
            self.received += datagram.len() as u64;
        }
        let mut buf = Vec::new();
        match self.endpoint.handle(now, from, None, None, BytesMut::from(datagram), &mut buf) {
            Some(DatagramEvent::NewConnection(incoming)) => {
                let (ch, conn) = self.endpoint.accept(incoming, now, &mut buf, None).expect("accepted");
                self.conns.insert(ch, conn);
            }
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(conn) = self.conns.get_mut(&ch) {
                    conn.handle_event(event);
                }
            }
            Some(DatagramEvent::Response(_)) | None => {}
        }
    }
}

/// A TLS 1.3 server for `b.test` with a self-signed certificate, on the edge's crypto provider,
/// as the listener's are made (also for [`super::initial`]'s tests), and that certificate.
pub(super) fn server_tls() -> (rustls::ServerConfig, rustls::pki_types::CertificateDer<'static>) {
    let cert = rcgen::generate_simple_self_signed(vec!["b.test".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let der = cert.cert.der().clone();
    let server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .unwrap();
    (server, der)
}

/// rustls's QUIC configurations for `b.test`, as the listener's are made, wrapped as it wraps them.
fn configs() -> (Arc<ServerConfig>, ClientConfig) {
    let (mut server, cert) = server_tls();
    server.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(server).unwrap();
    let server = ServerConfig::with_crypto(Arc::new(Counting::new(Arc::new(crypto), Counter::default())));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h3".to_vec()];
    let client = quinn_proto::crypto::rustls::QuicClientConfig::try_from(client).unwrap();
    (Arc::new(server), ClientConfig::new(Arc::new(client)))
}

/// A handshake to its end (both sides quiet), on this thread: the server end after it.
fn handshake() -> End {
    let (server_config, client_config) = configs();
    let (mut client, mut server) = (End::new(None, 50000), End::new(Some(server_config), 443));
    let mut now = Instant::now();
    let (ch, conn) = client.endpoint.connect(now, client_config, server.addr, "b.test").unwrap();
    client.conns.insert(ch, conn);
    for _ in 0..50 {
        let (to_server, to_client) = (client.transmit(now), server.transmit(now));
        if to_server.is_empty() && to_client.is_empty() {
            break;
        }
        for d in &to_server {
            server.receive(now, client.addr, d);
        }
        for d in &to_client {
            client.receive(now, server.addr, d);
        }
        now += Duration::from_millis(1);
    }
    let done = |end: &End| end.conns.values().all(|c| !c.is_handshaking()) && end.conns.len() == 1;
    assert!(done(&client) && done(&server), "the handshake completed");
    server
}

/// initial.rs: quinn-proto derives a connection's Initial keys twice (to read its first packet,
/// then as it makes the connection), from the same connection ID, on the thread that read the
/// packet; the second derivation takes the first's keys.
#[test]
fn quinn_proto_derives_a_connection_s_initial_keys_a_second_time_and_the_first_keys_serve() {
    let before = super::initial::TAKEN.with(std::cell::Cell::get);
    handshake();
    let taken = super::initial::TAKEN.with(std::cell::Cell::get) - before;
    assert_eq!(taken, 1, "quinn-proto no longer asks the session for the Initial keys it read the first packet with: reopen listener/quic/initial.rs");
}

/// padding.rs: a client's padded packets (after its first) reach quinn-proto with their
/// padding cut, and quinn-proto takes them (the handshake completes), while it counts what the
/// client sent from the datagrams as they came (the first packet's size it takes from the
/// packet, which is why padding.rs leaves that one whole). The count read is the connection's
/// `udp_rx`, kept where quinn-proto adds to the anti-amplification total, which it does not show.
#[test]
fn quinn_proto_reads_cut_packets_and_counts_the_datagrams_whole() {
    let before = super::padding::CUT.with(std::cell::Cell::get);
    let server = handshake();
    let cut = super::padding::CUT.with(std::cell::Cell::get) - before;
    assert!(cut >= 1, "the client's padded packets were cut ({cut})");
    let conn = server.conns.values().next().unwrap();
    assert_eq!(
        conn.stats().udp_rx.bytes,
        server.received,
        "quinn-proto counts what it received from the packets it read: reopen listener/quic/padding.rs"
    );
}
