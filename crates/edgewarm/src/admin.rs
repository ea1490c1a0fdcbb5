//! The admin listener: `/metrics` (OpenMetrics text), `/pools` (JSON, per warm pool),
//! `/origins` (JSON, every standing set of every kind: an `http` route's HTTP/2 connections with age, streams and PING RTT, its HTTP/1.1 pool, a `prewarm` route's pools;
//! each server group's servers and their states, and each named upstream with the routes naming it), `/certificates` (JSON, each terminating route's certificate: names, issuer,
//! validity, days left), `/routes` (JSON, each `http` route's upstream and its rules in the order they are tried, with hit counts), `/cache` (JSON, each cache's occupancy), `POST /cache/purge?url=…|prefix=…|tag=…`, `/ready` (200 while accepting, 503 while
//! starting or draining, so a load balancer stops sending first), `/live` (200 while the
//! process runs). Plain HTTP/1.1 on loopback by default; hyper does the HTTP.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::cache::{Caches, Purge};
use crate::metrics::Metrics;
use crate::origin::prewarm::TlsPool;
use crate::origin::registry::Origins;

/// What the admin listener reads: the server's metrics, its readiness, its pools.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// True while the server accepts connections (not starting, not draining).
    pub ready: tokio::sync::watch::Receiver<bool>,
    pub origins: Arc<Origins>,
    pub caches: Arc<Caches>,
    pub groups: Arc<crate::origin::group::Groups>,
    /// The routes' certificates: names, issuer, validity, days left (each load's).
    pub certificates: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    /// ACME certificates: shown live (they change between loads), renewed on request.
    pub acme: Arc<crate::acme::Acme>,
    /// `/routes`: each http route's rules in the order they are tried, with their hits.
    pub routes: Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
    /// `/limits`: each listener's clients with the most connections, each route's rate state.
    pub limits: Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
    /// The fleet purges go through (`fleet:`), if any.
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `admin.allow` and `admin.deny`.
    pub access: crate::config::limits::AccessList,
}

/// Serve until `shutdown` resolves. Each admin connection gets its own task.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: impl Future<Output = ()>) {
    let state = Arc::new(state);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        if !state.access.admits(peer.ip()) {
            // Closed unread: an address the operator excluded learns nothing, not even a 403.
            tracing::info!(client = %peer, "admin connection refused by admin.allow/deny");
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn respond(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    let json = |body: serde_json::Value| {
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        r.headers_mut()
            .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
        r
    };
    if req.uri().path() == "/cache/purge" {
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
        }
        let query = req.uri().query().unwrap_or("");
        let Some(what) = purge_target(query) else {
            return text(StatusCode::BAD_REQUEST, "give one of url=, prefix=, tag=\n");
        };
        let Some(fleet) = &state.fleet else {
            let purged = state.caches.purge(&what);
            tracing::info!(?what, purged, "cache purge");
            return json(serde_json::json!({ "purged": purged }));
        };
        // Through the fleet's stream: this node applies it at once, and from there, as every
        // other does.
        return match fleet.purge(&what).await {
            Ok((seq, purged)) if query.split('&').any(|p| p == "wait=fleet") => {
                let stored = std::time::Instant::now();
                let (applied, missing, silent) = fleet.wait_fleet(seq).await;
                let waited_ms = stored.elapsed().as_secs_f64() * 1000.0;
                tracing::info!(?what, seq, purged, ?applied, ?missing, ?silent, waited_ms, "fleet purge");
                let body = serde_json::json!({
                    "sequence": seq, "purged": purged, "applied": applied, "missing": missing, "silent": silent,
                    "waited_ms": waited_ms
                });
                let mut r = json(body);
                if !missing.is_empty() {
                    *r.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                }
                r
            }
            Ok((seq, purged)) => {
                tracing::info!(?what, seq, purged, "fleet purge stored and applied here");
                json(serde_json::json!({ "sequence": seq, "purged": purged }))
            }
            Err(e) => {
                tracing::warn!(?what, error = %e, "fleet purge not stored");
                let mut r = json(serde_json::json!({ "error": e.to_string() }));
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                r
            }
        };
    }
    if req.uri().path() == "/certificates/renew" {
        if req.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
        }
        let query = req.uri().query().unwrap_or("");
        let name = query.split('&').filter_map(|p| p.split_once('=')).find(|(k, _)| *k == "name").map(|(_, v)| v);
        return match name {
            Some(name) if state.acme.renew_now(name) => {
                tracing::info!(name, "ACME renewal asked for on the admin listener");
                json(serde_json::json!({ "renewing": name }))
            }
            Some(_) => text(StatusCode::NOT_FOUND, "no cert: acme route has that name\n"),
            None => text(StatusCode::BAD_REQUEST, "give name=\n"),
        };
    }
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
            let body = serde_json::json!({
                "origins": state.origins.statuses(),
                "groups": state.groups.statuses(),
                "upstreams": state.origins.upstreams(),
            });
            let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
            r.headers_mut()
                .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
            r
        }
        "/cache" => json(serde_json::json!({ "caches": state.caches.occupancy() })),
        "/limits" => json((state.limits)()),
        "/routes" => json((state.routes)()),
        "/fleet" => match &state.fleet {
            Some(fleet) => json(fleet.status()),
            None => json(serde_json::json!({ "fleet": null })),
        },
        "/certificates" => {
            let mut list = state.certificates.lock().unwrap_or_else(|p| p.into_inner()).clone();
            state.acme.overlay(&mut list);
            json(serde_json::json!({ "certificates": list }))
        }
        "/ready" if *state.ready.borrow() => text(StatusCode::OK, "ready\n"),
        "/ready" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/live" => text(StatusCode::OK, "live\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics /pools /origins /routes /cache /certificates /limits /fleet /ready /live\n",
        ),
    }
}

/// `url=`, `prefix=` or `tag=` from a purge's query (percent-decoded).
fn purge_target(query: &str) -> Option<Purge> {
    let (name, value) = query.split('&').filter_map(|p| p.split_once('=')).next()?;
    let value = percent_decode(value)?;
    if value.is_empty() {
        return None;
    }
    match name {
        "url" => Some(Purge::Url(value)),
        "prefix" => Some(Purge::Prefix(value)),
        "tag" => Some(Purge::Tag(value)),
        _ => None,
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_queries() {
        let url = purge_target("url=https%3A%2F%2Fa.example%2Fx%3Fy%3D1");
        assert!(matches!(url, Some(Purge::Url(u)) if u == "https://a.example/x?y=1"));
        assert!(matches!(purge_target("tag=product-7"), Some(Purge::Tag(t)) if t == "product-7"));
        assert!(purge_target("colour=red").is_none());
        assert!(purge_target("url=%zz").is_none());
        assert!(purge_target("").is_none());
    }
}
