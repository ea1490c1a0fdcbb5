//! The lab's HTTPS origin: rustls (TLS 1.2 and 1.3) with hyper serving HTTP/1.1 and HTTP/2,
//! a configurable response size and think time. Also `edgewarm-lab origin` for the lab's
//! origin namespace. For the two-tier lab it can also serve cleartext (HTTP/1.1 and h2c), mark
//! its responses cacheable (`--cache-control`) and log every request it answers
//! (`--access-log`): the count of what reached the origin. The browser lab's released pages
//! carry the cache headers [`crate::tools::origin::pages_cache`] gives them, and their HTML is answered 304
//! for its own `ETag`. Every other response carries `x-lab-generation`: its request's place
//! among those the origin answered (1, 2, …; the access log's line number, when there is one),
//! so a cache's copy tells when it was made (the fleet lab's stale check).

pub mod pages;
pub mod pages_cache;

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
    #[arg(long, required_unless_present = "cleartext")]
    pub cert: Option<std::path::PathBuf>,
    /// Private key (PEM).
    #[arg(long, required_unless_present = "cleartext")]
    pub key: Option<std::path::PathBuf>,
    /// Serve without TLS: HTTP/1.1, and HTTP/2 with prior knowledge (h2c), as an app server
    /// behind a proxy on the same network does.
    #[arg(long, conflicts_with_all = ["cert", "key"])]
    pub cleartext: bool,
    /// `Cache-Control` on every response that is not one of the browser lab's pages, e.g.
    /// `public, max-age=600` (the two-tier lab's objects); none by default.
    #[arg(long)]
    pub cache_control: Option<String>,
    /// Append a line per request (`METHOD PATH`) to this file, before the response is sent.
    #[arg(long)]
    pub access_log: Option<std::path::PathBuf>,
    /// Response body size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub body: usize,
    /// Time spent "thinking" before each response.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub think: Duration,
    /// More thinking before a browser-lab page's HTML only (a path ending in `/`), as a page
    /// built per request takes while its static assets do not: the time a 103 can use.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub html_think: Duration,
    /// Read before each answer (the failover lab's faults): `slow DURATION` answers that much
    /// later (a brown-out), `status N` answers N with an empty body and is not logged (nothing
    /// was done); absent or empty, answers as usual.
    #[arg(long)]
    pub fault_file: Option<std::path::PathBuf>,
    /// Close a connection after this long without a byte either way (like an origin's
    /// keep-alive timeout; pre-warmed pools must retire connections before it).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_close: Option<Duration>,
}

/// The rustls config: the given certificate, ALPN h2 and http/1.1, TLS 1.2 and 1.3; `None`
/// with `--cleartext`.
pub fn tls_config(opts: &OriginOpts) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    let (Some(cert), Some(key)) = (&opts.cert, &opts.key) else {
        return if opts.cleartext { Ok(None) } else { Err("--cert and --key are needed without --cleartext".into()) };
    };
    let cf = edgewarm::tls::pem::read(cert)?;
    let kf = edgewarm::tls::pem::read(key)?;
    let mut c = rustls::ServerConfig::builder_with_provider(edgewarm::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(edgewarm::tls::pem::certs(&cf, cert)?, edgewarm::tls::pem::key(&kf, key)?)
        .map_err(|e| e.to_string())?;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(c)))
}

/// What every connection's requests are answered with.
struct Answers {
    fault_file: Option<std::path::PathBuf>,
    body: Bytes,
    think: Duration,
    html_think: Duration,
    cache_control: Option<hyper::header::HeaderValue>,
    log: Option<std::sync::Mutex<std::fs::File>>,
    /// Requests answered so far (the generation of the last response).
    answered: std::sync::atomic::AtomicU64,
}

/// Serve until `shutdown` (TLS with `tls`, else cleartext). Each connection in its own task.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    opts: &OriginOpts,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let cache_control = match &opts.cache_control {
        Some(v) => Some(hyper::header::HeaderValue::from_str(v).map_err(std::io::Error::other)?),
        None => None,
    };
    let log = match &opts.access_log {
        Some(path) => Some(std::sync::Mutex::new(std::fs::File::options().create(true).append(true).open(path)?)),
        None => None,
    };
    let answers = Arc::new(Answers {
        fault_file: opts.fault_file.clone(),
        body: Bytes::from(vec![b'x'; opts.body]),
        think: opts.think,
        html_think: opts.html_think,
        cache_control,
        log,
        answered: std::sync::atomic::AtomicU64::new(0),
    });
    tokio::pin!(shutdown);
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r { Ok(ok) => ok, Err(_) => continue },
            () = &mut shutdown => return Ok(()),
        };
        let _ = edgewarm::transport::sockopt::set_nodelay(&tcp);
        let (acceptor, answers, idle_close) = (acceptor.clone(), answers.clone(), opts.idle_close);
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    serve_conn(tls, answers, idle_close).await;
                }
                None => serve_conn(tcp, answers, idle_close).await,
            }
        });
    }
}

/// One connection's requests (HTTP/1.1 or HTTP/2, whichever the client speaks), until it ends
/// or, with `idle_close`, until it has been idle that long.
async fn serve_conn<S>(io: S, answers: Arc<Answers>, idle_close: Option<Duration>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let io = Tracked { inner: io, activity: activity.clone() };
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let answers = answers.clone();
        async move {
            let path = req.uri().path();
            let think =
                answers.think + if path.len() > 1 && path.ends_with('/') { answers.html_think } else { Duration::ZERO };
            let (slower, status) = answers.fault();
            let think = think + slower;
            if !think.is_zero() {
                tokio::time::sleep(think).await;
            }
            if let Some(status) = status {
                let mut response = hyper::Response::new(Full::new(Bytes::new()));
                *response.status_mut() = status;
                return Ok(response);
            }
            let generation = answers.record(&req);
            Ok::<_, std::convert::Infallible>(respond(&req, &answers, generation))
        }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(io), service);
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
}

impl Answers {
    /// The fault to play now (`--fault-file`): extra time, and a status to answer instead.
    fn fault(&self) -> (Duration, Option<hyper::StatusCode>) {
        let Some(text) = self.fault_file.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) else {
            return (Duration::ZERO, None);
        };
        match text.trim().split_once(' ') {
            Some(("slow", d)) => (humantime::parse_duration(d).unwrap_or_default(), None),
            Some(("status", n)) => (Duration::ZERO, n.parse().ok().and_then(|n| hyper::StatusCode::from_u16(n).ok())),
            _ => (Duration::ZERO, None),
        }
    }

    /// One access-log line. Written (a blocking write of one short line: a lab origin answers a
    /// few requests a second) before the response leaves, so whoever has the response finds
    /// its request counted in the file. Returns the request's place (its response's
    /// generation), counted under the file's lock so that it is the line's number.
    fn record<B>(&self, req: &hyper::Request<B>) -> u64 {
        use std::io::Write as _;
        let next = || self.answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let Some(log) = &self.log else { return next() };
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let line = format!("{} {target}\n", req.method());
        let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
        let generation = next();
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "cannot write the access log");
        }
        generation
    }
}

/// A page of the browser lab's ([`crate::tools::origin::pages`]) if the path names one, else the fixed body
/// (with `--cache-control`'s header and its `generation`).
fn respond<B>(req: &hyper::Request<B>, answers: &Answers, generation: u64) -> hyper::Response<Full<Bytes>> {
    let authority = req.uri().authority().map(|a| a.as_str());
    let host = authority
        .or_else(|| req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()))
        .filter(|h| h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b)))
        .unwrap_or("localhost");
    let Some(page) = crate::tools::origin::pages::lookup(req.uri().path(), host) else {
        let mut response = hyper::Response::new(Full::new(answers.body.clone()));
        if let Some(v) = &answers.cache_control {
            response.headers_mut().insert(hyper::header::CACHE_CONTROL, v.clone());
        }
        response.headers_mut().insert("x-lab-generation", hyper::header::HeaderValue::from(generation));
        return response;
    };
    use hyper::header::{HeaderValue, CACHE_CONTROL, ETAG, IF_NONE_MATCH, LINK};
    let marks = crate::tools::origin::pages_cache::marks(req.uri().path(), page.content_type, &page.body);
    let etag = marks.as_ref().and_then(|m| m.etag.clone()).and_then(|e| HeaderValue::try_from(e).ok());
    // A cache revalidating the HTML it holds: unchanged, so headers only.
    let unchanged = etag.as_ref().is_some_and(|e| req.headers().get_all(IF_NONE_MATCH).iter().any(|v| v == e));
    let mut response = hyper::Response::new(Full::new(if unchanged { Bytes::new() } else { page.body }));
    if unchanged {
        *response.status_mut() = hyper::StatusCode::NOT_MODIFIED;
    }
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(page.content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(marks.as_ref().map_or("no-store", |m| m.cache_control)));
    if let Some(etag) = etag {
        headers.insert(ETAG, etag);
    }
    if let Some(link) = marks.and_then(|m| m.link).and_then(|l| HeaderValue::try_from(l).ok()) {
        headers.insert(LINK, link);
    }
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
