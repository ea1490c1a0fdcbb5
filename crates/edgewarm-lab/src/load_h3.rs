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
    /// sub-resources at once on the same connection (`total` is then the page time).
    pub(crate) async fn get(
        &self,
        addr: SocketAddr,
        host: &str,
        path: &str,
        zero_rtt: bool,
        page: usize,
        t0: Instant,
    ) -> Result<H3Sample, &'static str> {
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
        let handshake = t0.elapsed();
        let (mut driver, mut send) =
            h3::client::new(h3_quinn::Connection::new(conn.clone())).await.map_err(|_| "h3")?;
        let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
        let result = async {
            let ttfb = fetch(&mut send, format!("https://{host}{path}"), t0).await?;
            let subs = (0..page).map(|i| {
                let mut send = send.clone();
                let uri = format!("https://{host}{path}?sub={i}");
                async move { fetch(&mut send, uri, t0).await }
            });
            for done in futures_util::future::join_all(subs).await {
                done?;
            }
            Ok::<_, &'static str>((ttfb, t0.elapsed()))
        }
        .await;
        let early = match accepted {
            Some(accepted) => accepted.await,
            None => false,
        };
        conn.close(0u32.into(), b"");
        drive.abort();
        let (ttfb, total) = result?;
        Ok(H3Sample { handshake, ttfb, total, early })
    }
}

type Send = h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>;

/// One GET on the connection: when its response headers came (from `t0`), once its body ended.
async fn fetch(send: &mut Send, uri: String, t0: Instant) -> Result<Duration, &'static str> {
    let req = http::Request::get(uri).body(()).map_err(|_| "bad_request")?;
    let mut stream = send.send_request(req).await.map_err(|_| "h3")?;
    // A server may answer and stop reading before our end of stream reaches it (RFC 9114
    // §4.1.2); the response then still counts, so a failed finish is not the request's failure.
    let _ = stream.finish().await;
    let response = stream.recv_response().await.map_err(|_| "h3")?;
    let ttfb = t0.elapsed();
    if !response.status().is_success() {
        return Err("http_status");
    }
    while stream.recv_data().await.map_err(|_| "h3")?.is_some() {}
    Ok(ttfb)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The load generator's QUIC client, against a quinn server on 127.0.0.1: once a stream has
    /// gone there and back (a round trip after the handshake), the client is still at Chromium's 1250 bytes and has sent no probe
    /// (quinn's own client would have started probing right after the handshake).
    #[tokio::test]
    async fn the_client_sends_datagrams_the_size_of_chromiums_and_no_path_probes() {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cert = rcgen::generate_simple_self_signed(vec!["b.test".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
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
        let addr = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let conn = server.accept().await.unwrap().await.unwrap();
            let (mut send, mut recv) = conn.accept_bi().await.unwrap();
            let got = recv.read_to_end(1 << 16).await.unwrap();
            send.write_all(&got).await.unwrap();
            send.finish().unwrap();
            conn.closed().await;
        });

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
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
}
