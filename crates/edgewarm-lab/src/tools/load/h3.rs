//! HTTP/3 for the load generator (`--alpn h3`): every request on a new QUIC connection (quinn,
//! rustls on aws-lc-rs), one GET, timed like the TCP path. With `--zero-rtt` a connection
//! resumes with the ticket of an earlier one and its request leaves in the first flight, as
//! 0-RTT data.
//!
//! TTFB is the arrival of the response headers. QUIC has no separate connect: `connect` and
//! `tls` are both the handshake (with 0-RTT, the moment the request could be sent: at once).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// QUIC as Chromium's client speaks it, where quinn's default differs and the server pays for
/// the difference: datagrams of up to 1250 bytes and no path-MTU probes of its own (a capture of
/// Chromium against the edge shows neither). quinn's client probes the path four times a
/// connection with datagrams of up to 1452 bytes, nearly all PADDING, which the server decrypts
/// and parses frame by frame.
fn browser_transport() -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport.initial_mtu(1250).mtu_discovery_config(None);
    transport
}

/// What one HTTP/3 request measured.
pub(crate) struct H3Sample {
    pub(crate) handshake: Duration,
    pub(crate) ttfb: Duration,
    pub(crate) total: Duration,
    /// The request went in 0-RTT data and the server took it.
    pub(crate) early: bool,
    /// Requests the server refused unprocessed, sent again on a new connection.
    pub(crate) retried: usize,
}

/// The client configuration for the whole run (its session cache is where tickets wait for the
/// next connection), and the address each connection's own UDP socket binds.
///
/// One socket a connection, as browsers do: a server spreads QUIC connections over its cores by
/// the client's address and port, so connections sharing one socket would all land on one core
/// and measure a server no browser sees.
pub(crate) struct H3Client {
    bind: SocketAddr,
    config: quinn::ClientConfig,
}

impl H3Client {
    /// `tls` as the TCP path builds it (roots, key exchange, resumption, early data); ALPN
    /// becomes `h3`.
    pub(crate) fn new(mut tls: rustls::ClientConfig, target: SocketAddr) -> Result<Self, String> {
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(browser_transport()));
        let bind: SocketAddr = if target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        // Checked once here, so that a run that cannot open a socket fails before it starts.
        drop(quinn::Endpoint::client(bind).map_err(|e| e.to_string())?);
        Ok(Self { bind, config })
    }

    /// GET `path` from `host` at `addr` on a new connection, timed from `t0`; then `page`
    /// sub-resources at once on the same connection (`total` is then the page time). Requests
    /// the server refused unprocessed (after its GOAWAY, H3_REQUEST_REJECTED) are sent again
    /// once, on a new connection, as a browser does (RFC 9114 §4.1.1).
    pub(crate) async fn get(
        &self,
        addr: SocketAddr,
        host: &str,
        path: &str,
        zero_rtt: bool,
        page: usize,
        t0: Instant,
    ) -> Result<H3Sample, &'static str> {
        let first = self.open(addr, host, zero_rtt).await?;
        let handshake = t0.elapsed();
        let document = format!("https://{host}{path}");
        let subs = (0..page).map(|i| format!("https://{host}{path}?sub={i}")).collect();
        let loaded = load(&first.send, Some(document), subs, t0).await;
        let mut early = first.close().await;
        let Loaded { mut ttfb, again, refused: retried } = loaded?;
        if !again.is_empty() {
            let second = self.open(addr, host, zero_rtt).await?;
            let document = ttfb.is_none().then(|| again[0].clone());
            let subs = again[usize::from(document.is_some())..].to_vec();
            let loaded = load(&second.send, document, subs, t0).await;
            let second_early = second.close().await;
            let loaded = loaded?;
            if loaded.refused > 0 {
                return Err("refused");
            }
            if ttfb.is_none() {
                // The document came on the second connection: its 0-RTT is the one that counts.
                (ttfb, early) = (loaded.ttfb, second_early);
            }
        }
        let ttfb = ttfb.ok_or("refused")?;
        Ok(H3Sample { handshake, ttfb, total: t0.elapsed(), early, retried })
    }

    /// A new connection, its handshake complete (or, with `zero_rtt` and a ticket, under way).
    async fn open(&self, addr: SocketAddr, host: &str, zero_rtt: bool) -> Result<Opened, &'static str> {
        let endpoint = quinn::Endpoint::client(self.bind).map_err(|_| "socket")?;
        let connecting = endpoint.connect_with(self.config.clone(), addr, host).map_err(|_| "connect")?;
        let (conn, accepted) = if zero_rtt {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => (conn, Some(accepted)),
                // No ticket yet (the first connection): a full handshake.
                Err(connecting) => (connecting.await.map_err(|_| "quic")?, None),
            }
        } else {
            (connecting.await.map_err(|_| "quic")?, None)
        };
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await.map_err(|_| "h3")?;
        let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
        Ok(Opened { conn, accepted, send, drive })
    }
}

type Send = h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>;

/// An HTTP/3 connection of the load generator's.
struct Opened {
    conn: quinn::Connection,
    /// With 0-RTT: whether the server took the early data, once the handshake is done.
    accepted: Option<quinn::ZeroRttAccepted>,
    send: Send,
    drive: tokio::task::JoinHandle<h3::error::ConnectionError>,
}

impl Opened {
    /// Close it; whether its 0-RTT data was taken.
    async fn close(self) -> bool {
        let early = match self.accepted {
            Some(accepted) => accepted.await,
            None => false,
        };
        self.conn.close(0u32.into(), b"");
        self.drive.abort();
        early
    }
}

/// What one connection loaded: the document's TTFB (none if it was refused or not asked for),
/// the URIs to ask for on a new connection (those refused unprocessed, and the sub-resources of
/// a refused document, never asked for) and how many were refused.
struct Loaded {
    ttfb: Option<Duration>,
    again: Vec<String>,
    refused: usize,
}

/// GET `document` (if any), then `subs` at once, on `send`'s connection.
async fn load(send: &Send, document: Option<String>, subs: Vec<String>, t0: Instant) -> Result<Loaded, &'static str> {
    let mut loaded = Loaded { ttfb: None, again: Vec::new(), refused: 0 };
    if let Some(uri) = document {
        match fetch(&mut send.clone(), uri.clone(), t0).await {
            Ok(ttfb) => loaded.ttfb = Some(ttfb),
            Err(Fetch::Refused) => {
                // A browser asks for the sub-resources only once it has the document.
                loaded.refused = 1;
                loaded.again.push(uri);
                loaded.again.extend(subs);
                return Ok(loaded);
            }
            Err(Fetch::Failed(e)) => return Err(e),
        }
    }
    let fetches = subs.into_iter().map(|uri| {
        let mut send = send.clone();
        async move { (fetch(&mut send, uri.clone(), t0).await, uri) }
    });
    for (done, uri) in futures_util::future::join_all(fetches).await {
        match done {
            Ok(_) => {}
            Err(Fetch::Refused) => {
                loaded.refused += 1;
                loaded.again.push(uri);
            }
            Err(Fetch::Failed(e)) => return Err(e),
        }
    }
    Ok(loaded)
}

/// How a request failed.
enum Fetch {
    /// Refused by the server unprocessed: it may be sent again elsewhere.
    Refused,
    Failed(&'static str),
}

impl From<h3::error::StreamError> for Fetch {
    fn from(e: h3::error::StreamError) -> Self {
        use h3::error::{Code, StreamError};
        match e {
            // After the server's GOAWAY no request is sent; one it names as not processed, or
            // refuses, it did not process.
            StreamError::RemoteClosing { .. } => Fetch::Refused,
            StreamError::RemoteTerminate { code, .. } if code == Code::H3_REQUEST_REJECTED => Fetch::Refused,
            _ => Fetch::Failed("h3"),
        }
    }
}

/// One GET on the connection: when its response headers came (from `t0`), once its body ended.
async fn fetch(send: &mut Send, uri: String, t0: Instant) -> Result<Duration, Fetch> {
    let req = http::Request::get(uri).body(()).map_err(|_| Fetch::Failed("bad_request"))?;
    let mut stream = send.send_request(req).await?;
    // A server may answer and stop reading before our end of stream reaches it (RFC 9114
    // §4.1.2); the response then still counts, so a failed finish is not the request's failure.
    let _ = stream.finish().await;
    let response = stream.recv_response().await?;
    let ttfb = t0.elapsed();
    if !response.status().is_success() {
        return Err(Fetch::Failed("http_status"));
    }
    while stream.recv_data().await.map_err(|_| Fetch::Failed("h3"))?.is_some() {}
    Ok(ttfb)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The load generator's QUIC client, against a quinn server on 127.0.0.1: once a stream has
    /// gone there and back (a round trip after the handshake), the client is still at Chromium's 1250 bytes and has sent no probe
    /// (quinn's own client would have started probing right after the handshake).
    /// A quinn server for `b.test` on 127.0.0.1, and a client configuration that trusts it.
    fn server() -> (quinn::Endpoint, rustls::ClientConfig) {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cert = rcgen::generate_simple_self_signed(vec!["b.test".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
        let server_config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        let server = quinn::Endpoint::server(server_config, ([127, 0, 0, 1], 0).into()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (server, tls)
    }

    #[tokio::test]
    async fn the_client_sends_datagrams_the_size_of_chromiums_and_no_path_probes() {
        let (server, tls) = server();
        let addr = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let conn = server.accept().await.unwrap().await.unwrap();
            let (mut send, mut recv) = conn.accept_bi().await.unwrap();
            let got = recv.read_to_end(1 << 16).await.unwrap();
            send.write_all(&got).await.unwrap();
            send.finish().unwrap();
            conn.closed().await;
        });

        let client = H3Client::new(tls, addr).unwrap();
        let endpoint = quinn::Endpoint::client(client.bind).unwrap();
        let conn = endpoint.connect_with(client.config.clone(), addr, "b.test").unwrap().await.unwrap();
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&[7; 3000]).await.unwrap();
        send.finish().unwrap();
        assert_eq!(recv.read_to_end(1 << 16).await.unwrap(), vec![7; 3000]);
        let path = conn.stats().path;
        assert_eq!(path.current_mtu, 1250);
        assert_eq!(path.sent_plpmtud_probes, 0);
        conn.close(0u32.into(), b"");
        tokio::time::timeout(Duration::from_secs(10), echo).await.unwrap().unwrap();
    }

    /// Which requests a test server resets, and with what: by connection, and whether the
    /// request is for a sub-resource.
    type Refuse = fn(usize, bool) -> Option<h3::error::Code>;

    /// An h3 server on `server` for `connections` connections, each served until the client
    /// closes it: a request for which `refuse(connection, is_sub_resource)` gives a code is
    /// reset with it, the others answered `200`. Gives back the requests reset and those
    /// answered on the last connection.
    fn h3_server(
        server: quinn::Endpoint,
        connections: usize,
        refuse: Refuse,
    ) -> tokio::task::JoinHandle<(usize, usize)> {
        tokio::spawn(async move {
            let (mut reset, mut answered) = (0, 0);
            for connection in 0..connections {
                answered = 0;
                let conn = server.accept().await.unwrap().await.unwrap();
                let mut h3 =
                    h3::server::Connection::<_, bytes::Bytes>::new(h3_quinn::Connection::new(conn)).await.unwrap();
                while let Ok(Some(resolver)) = h3.accept().await {
                    let (req, mut stream) = resolver.resolve_request().await.unwrap();
                    if let Some(code) = refuse(connection, req.uri().query().is_some()) {
                        stream.stop_sending(code);
                        stream.stop_stream(code);
                        reset += 1;
                        continue;
                    }
                    answered += 1;
                    stream.send_response(http::Response::new(())).await.unwrap();
                    stream.finish().await.unwrap();
                }
            }
            (reset, answered)
        })
    }

    /// Requests an HTTP/3 server refuses unprocessed (H3_REQUEST_REJECTED, as after its GOAWAY)
    /// go again on a new connection, as a browser sends them; the page then loads, counted as
    /// retried. A refused document's sub-resources, never asked for, go on the new connection
    /// too, not counted. A request reset with any other code is a failure, not sent again.
    #[tokio::test]
    async fn refused_requests_are_sent_again_on_a_new_connection() {
        use h3::error::Code;
        // Which requests the server resets, on how many connections; then the retried count
        // (or the error) the client reports, and what the server saw: requests reset, and
        // answered on the last connection.
        type Case = (Refuse, usize, Result<usize, &'static str>);
        let cases: [(Case, (usize, usize)); 3] = [
            // The sub-resources refused: all three again on the second connection.
            ((|c, sub| if c == 0 && sub { Some(Code::H3_REQUEST_REJECTED) } else { None }, 2, Ok(3)), (3, 3)),
            // The document refused: it and the three sub-resources on the second.
            ((|c, sub| if c == 0 && !sub { Some(Code::H3_REQUEST_REJECTED) } else { None }, 2, Ok(1)), (1, 4)),
            // Failed, not refused.
            ((|_, sub| if sub { Some(Code::H3_INTERNAL_ERROR) } else { None }, 1, Err("h3")), (3, 1)),
        ];
        for (i, ((refuse, connections, retried), served)) in cases.into_iter().enumerate() {
            let (server, tls) = server();
            let addr = server.local_addr().unwrap();
            let serve = h3_server(server, connections, refuse);
            let client = H3Client::new(tls, addr).unwrap();
            let sample = client.get(addr, "b.test", "/", false, 3, Instant::now()).await;
            assert_eq!(sample.as_ref().map(|s| s.retried).map_err(|e| *e), retried, "case {i}");
            let got = tokio::time::timeout(Duration::from_secs(30), serve).await.expect("a connection never came");
            assert_eq!(got.unwrap(), served, "case {i}: reset, and answered on the last connection");
        }
    }
}
