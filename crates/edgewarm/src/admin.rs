//! The admin listener: `/metrics` (OpenMetrics text), `/pools` (JSON, per warm pool),
//! `/origins` (JSON, every standing set of every kind: an `http` route's HTTP/2 connections with age, streams and PING RTT, its HTTP/1.1 pool, a `prewarm` route's pools), `/ready` (200 while accepting, 503 while
//! starting or draining, so a load balancer stops sending first), `/live` (200 while the
//! process runs). Plain HTTP/1.1 on loopback by default; hyper does the HTTP.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::origin::prewarm::TlsPool;
use crate::origin::registry::Origins;

/// What the admin listener reads: the server's metrics, its readiness, its pools.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// True while the server accepts connections (not starting, not draining).
    pub ready: Arc<AtomicBool>,
    pub origins: Arc<Origins>,
}

/// Serve until `shutdown` resolves. Each admin connection gets its own task.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: impl Future<Output = ()>) {
    let state = Arc::new(state);
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(ok) => ok,
                Err(e) => {
                    tracing::debug!(error = %e, "admin accept failed");
                    // Same reasoning as the proxy's accept loop: never spin on EMFILE.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state)) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn respond(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(state.metrics.encode())));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            );
            r
        }
        "/pools" => {
            let mut pools: Vec<_> = state.origins.of::<TlsPool>().iter().map(|p| p.status()).collect();
            pools.sort_by(|a, b| (&a.route, &a.alpn).cmp(&(&b.route, &b.alpn)));
            let body = serde_json::json!({ "pools": pools });
            let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
            r.headers_mut()
                .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
            r
        }
        "/origins" => {
            let body = serde_json::json!({ "origins": state.origins.statuses() });
            let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
            r.headers_mut()
                .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
            r
        }
        "/ready" if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n"),
        "/ready" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/live" => text(StatusCode::OK, "live\n"),
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics /pools /origins /ready /live\n"),
    }
}
