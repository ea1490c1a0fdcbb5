//! Origins on 127.0.0.1: TLS echo and recording origins, HTTP/2 and HTTP/1.1 origins that
//! count what they see, an upgrade (WebSocket) echo origin.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::*;
use rustls::pki_types::PrivateKeyDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

mod cacheable;
mod h2;
pub use cacheable::*;
pub use h2::*;

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
    tls_origin_loop(certs.acceptor_with_alpn(&[b"http/1.1"]), serve_h1).await
}

/// The same origin in cleartext, for `upstream.tls: false`.
pub async fn h1_plain_origin() -> (SocketAddr, Arc<H2Stats>) {
    plain_origin_loop(serve_h1).await
}

/// One connection of [`h1_origin`] or [`h1_plain_origin`].
async fn serve_h1<IO>(io: IO, _: usize, st: Arc<H2Stats>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    use std::sync::atomic::Ordering;
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
    let _ =
        hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(io), service).await;
}

/// Accept plain TCP connections on 127.0.0.1 (TCP_NODELAY), count them, and run
/// `serve(tcp, connection number, stats)` for each.
pub(crate) async fn plain_origin_loop<F, Fut>(serve: F) -> (SocketAddr, Arc<H2Stats>)
where
    F: Fn(TcpStream, usize, Arc<H2Stats>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(H2Stats::default());
    let st = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let _ = tcp.set_nodelay(true);
            let n = st.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(serve(tcp, n, st.clone()));
        }
    });
    (addr, stats)
}

/// Accept TLS connections on 127.0.0.1 (TCP_NODELAY, as real origins set: without it small
/// frames wait on Nagle), count them, and run `serve(tls, connection number, stats)` for each.
pub(crate) async fn tls_origin_loop<F, Fut>(acceptor: TlsAcceptor, serve: F) -> (SocketAddr, Arc<H2Stats>)
where
    F: Fn(tokio_rustls::server::TlsStream<TcpStream>, usize, Arc<H2Stats>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    plain_origin_loop(move |tcp, n, st| {
        let (acceptor, serve) = (acceptor.clone(), serve.clone());
        async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                serve(tls, n, st).await;
            }
        }
    })
    .await
}
