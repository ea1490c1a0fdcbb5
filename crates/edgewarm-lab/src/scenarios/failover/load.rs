//! The failover lab's clients: an open loop per proxy (a request every 20 ms whatever the
//! answers, three GETs to one POST, each path once) over a few HTTP/2 connections, each
//! replaced when it fails and after `VISIT` requests (clients come and go: a proxy that keeps
//! a client on one server meets new clients all the time). Every request's outcome is kept.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use rustls::pki_types::ServerName;

/// Connections per proxy.
const LANES: usize = 4;
/// One request each this often, per proxy: 50 a second.
const EVERY: Duration = Duration::from_millis(20);
/// No answer within this is a failure (and ends the request).
const PATIENCE: Duration = Duration::from_secs(10);
/// Requests a connection carries before its client goes (a short visit).
const VISIT: u32 = 20;
/// At most this many requests per proxy: the loop is bounded whatever the phases' length.
const MOST: u64 = 20_000;

/// One request's fate.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Outcome {
    pub(crate) proxy: &'static str,
    /// Sent this long after the load began (s).
    pub(crate) at_s: f64,
    pub(crate) post: bool,
    pub(crate) path: String,
    pub(crate) status: Option<u16>,
    pub(crate) error: Option<String>,
    pub(crate) ms: f64,
}

/// A lane's connection and the requests it has carried.
type Lane = tokio::sync::Mutex<Option<(SendRequest<Full<Bytes>>, u32)>>;

/// Requests to `proxy` at `addr` (route h.test, trusting `ca`) until `stop`.
pub(crate) async fn open_loop(
    proxy: &'static str,
    addr: SocketAddr,
    ca: PathBuf,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Outcome> {
    let tls = match client_tls(&ca) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "failover load: no TLS client");
            return Vec::new();
        }
    };
    let lanes: Arc<Vec<Lane>> = Arc::new((0..LANES).map(|_| tokio::sync::Mutex::new(None)).collect());
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let mut tick = tokio::time::interval(EVERY);
    let mut tasks = Vec::new();
    for n in 0..MOST {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (lanes, outcomes, tls) = (lanes.clone(), outcomes.clone(), tls.clone());
        tasks.push(tokio::spawn(async move {
            let post = n % 4 == 3;
            let path = format!("/{}/{proxy}-{n}", if post { "post" } else { "get" });
            let at = Instant::now();
            let answer =
                tokio::time::timeout(PATIENCE, send(&lanes[n as usize % LANES], addr, &tls, post, &path)).await;
            let (status, error) = match answer {
                Ok(Ok(status)) => (Some(status), None),
                Ok(Err(e)) => (None, Some(e)),
                Err(_) => (None, Some("no answer".to_string())),
            };
            let outcome = Outcome {
                proxy,
                at_s: at.duration_since(start).as_secs_f64(),
                post,
                path,
                status,
                error,
                ms: at.elapsed().as_secs_f64() * 1e3,
            };
            outcomes.lock().unwrap_or_else(|p| p.into_inner()).push(outcome);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut all = std::mem::take(&mut *outcomes.lock().unwrap_or_else(|p| p.into_inner()));
    all.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    all
}

/// One request on `lane`'s connection (made, or made again, as needed): its status.
async fn send(
    lane: &Lane,
    addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    post: bool,
    path: &str,
) -> Result<u16, String> {
    let mut sender = {
        let mut held = lane.lock().await;
        match held.as_mut().filter(|(s, uses)| !s.is_closed() && *uses < VISIT) {
            Some((s, uses)) => {
                *uses += 1;
                s.clone()
            }
            None => {
                let s = connect(addr, tls).await?;
                *held = Some((s.clone(), 1));
                s
            }
        }
    };
    let body = if post { Bytes::from_static(b"order=1") } else { Bytes::new() };
    let req = hyper::Request::builder()
        .method(if post { "POST" } else { "GET" })
        .uri(format!("https://h.test{path}"))
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    response.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok(status)
}

async fn connect(addr: SocketAddr, tls: &tokio_rustls::TlsConnector) -> Result<SendRequest<Full<Bytes>>, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from("h.test").map_err(|e| e.to_string())?;
    let stream = tls.connect(name, tcp).await.map_err(|e| e.to_string())?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

fn client_tls(ca: &std::path::Path) -> Result<tokio_rustls::TlsConnector, String> {
    let file = edgewarm::tls::pem::read(ca)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in edgewarm::tls::pem::certs(&file, ca)? {
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(edgewarm::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}
