//! The lab's HTTPS origin: rustls (TLS 1.2 and 1.3) with hyper serving HTTP/1.1 and HTTP/2,
//! a configurable response size and think time. Also `edgewarm-lab origin` for the lab's
//! origin namespace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, Clone, clap::Args)]
pub struct OriginOpts {
    /// Address to listen on.
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// Certificate chain (PEM).
    #[arg(long)]
    pub cert: std::path::PathBuf,
    /// Private key (PEM).
    #[arg(long)]
    pub key: std::path::PathBuf,
    /// Response body size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub body: usize,
    /// Time spent "thinking" before each response.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub think: Duration,
    /// Close a connection after this long without a byte either way (like an origin's
    /// keep-alive timeout; pre-warmed pools must retire connections before it).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_close: Option<Duration>,
}

/// The rustls config: the given certificate, ALPN h2 and http/1.1, TLS 1.2 and 1.3.
pub fn tls_config(opts: &OriginOpts) -> Result<Arc<rustls::ServerConfig>, String> {
    let cf = edgewarm::tls::pem::read(&opts.cert)?;
    let kf = edgewarm::tls::pem::read(&opts.key)?;
    let mut c = rustls::ServerConfig::builder_with_provider(edgewarm::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(edgewarm::tls::pem::certs(&cf, &opts.cert)?, edgewarm::tls::pem::key(&kf, &opts.key)?)
        .map_err(|e| e.to_string())?;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// Serve until `shutdown`. Each connection in its own task.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    opts: &OriginOpts,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let body = Bytes::from(vec![b'x'; opts.body]);
    let think = opts.think;
    tokio::pin!(shutdown);
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r { Ok(ok) => ok, Err(_) => continue },
            () = &mut shutdown => return,
        };
        let _ = edgewarm::transport::sockopt::set_nodelay(&tcp);
        let (acceptor, body, idle_close) = (acceptor.clone(), body.clone(), opts.idle_close);
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let activity = Arc::new(Activity::default());
            let tls = Tracked { inner: tls, activity: activity.clone() };
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let body = body.clone();
                async move {
                    if !think.is_zero() {
                        tokio::time::sleep(think).await;
                    }
                    Ok::<_, std::convert::Infallible>(respond(&req, body))
                }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            match idle_close {
                // Dropping the connection future closes the socket.
                Some(idle) => {
                    tokio::select! {
                        _ = conn => {}
                        () = activity.idle_for(idle) => {}
                    }
                }
                None => {
                    let _ = conn.await;
                }
            }
        });
    }
}

/// A page of the browser lab's ([`crate::pages`]) if the path names one, else the fixed body.
fn respond<B>(req: &hyper::Request<B>, body: Bytes) -> hyper::Response<Full<Bytes>> {
    let authority = req.uri().authority().map(|a| a.as_str());
    let host = authority
        .or_else(|| req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()))
        .filter(|h| h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b)))
        .unwrap_or("localhost");
    let Some(page) = crate::pages::lookup(req.uri().path(), host) else {
        return hyper::Response::new(Full::new(body));
    };
    let mut response = hyper::Response::new(Full::new(page.body));
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(page.content_type));
    headers.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    headers.insert("timing-allow-origin", hyper::header::HeaderValue::from_static("*"));
    // Fonts and API calls from the second host name are cross-origin.
    headers.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, hyper::header::HeaderValue::from_static("*"));
    response
}

/// Last time a byte moved on a connection, ms since `start`.
struct Activity {
    start: std::time::Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Self { start: std::time::Instant::now(), last_ms: std::sync::atomic::AtomicU64::new(0) }
    }
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
            let deadline = last + idle;
            if std::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// A stream that records activity on every read and write.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
