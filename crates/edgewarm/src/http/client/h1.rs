//! HTTP/1.1 clients (and HTTP/2 with prior knowledge, which hyper detects), served on hyper's
//! server: it is the one that can hand a connection over for a protocol upgrade.
//!
//! Limits that answer abuse instead of absorbing it: slow headers close the connection
//! (`timeouts.client_hello`), a head over [`MAX_HEADER_BYTES`] gets 431. The connection is
//! closed lingering: hyper may answer (413, 408, an error) and close before the client has sent
//! all of its request, and the answer must still reach it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::alt_svc::{self, AltSvc};
use super::{Ended, FIRST_REQUEST_GRACE, MAX_CLIENT_STREAMS, MAX_HEADER_BYTES};
use crate::http::service::Service;
use crate::http::upgrade::is_upgrade;
use crate::transport::linger::Linger;
use crate::transport::Batched;

/// Whether a connection's first request has come, and a wake-up when it does.
#[derive(Default)]
struct FirstRequest {
    seen: AtomicBool,
    arrived: Notify,
}

impl FirstRequest {
    fn mark(&self) {
        // One load on every later request: the wake-up is for the first alone.
        if !self.seen.load(Ordering::Relaxed) && !self.seen.swap(true, Ordering::Relaxed) {
            // A stored permit if nobody waits yet: the waiter's `notified` then returns at once.
            self.arrived.notify_one();
        }
    }
}

/// Serve one client connection until it ends. `stop` (shutdown) or `retired` (a reload
/// retired the route's origin connections) ask it to finish after the response in progress, so
/// the client's next request comes in afresh; `cut` ends it. A connection asked to finish before
/// its first request gets [`FIRST_REQUEST_GRACE`] to send it, and that one request is served
/// (with `Connection: close`). An upgraded connection lives on in its relay: the connection is
/// over when that is.
pub(crate) async fn serve<T>(
    io: T,
    service: Arc<Service>,
    alt_svc: AltSvc,
    header_timeout: Duration,
    stop: &CancellationToken,
    retired: &CancellationToken,
    cut: &CancellationToken,
) -> Ended
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let first = Arc::new(FirstRequest::default());
    let handler = {
        let (service, first) = (service.clone(), first.clone());
        service_fn(move |req| {
            first.mark();
            let (service, alt_svc) = (service.clone(), alt_svc.clone());
            // Boxed: the request's future is large, and hyper spawns a task per request
            // around it; a small task allocates from the allocator's fast path. The upgrade's
            // is boxed again inside, so only upgrades pay its size.
            Box::pin(async move {
                let response = if is_upgrade(&req) {
                    Box::pin(service.handle_upgrade(req)).await
                } else {
                    let alt = alt_svc.for_request(&req);
                    // No 103 over HTTP/1.1: browsers ignore it there.
                    let mut response = service.handle(req, None).await;
                    alt_svc::add(response.headers_mut(), alt);
                    response
                };
                Ok::<_, Infallible>(response)
            })
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CLIENT_STREAMS)
        .max_header_list_size(u32::try_from(MAX_HEADER_BYTES).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256));
    // One response at a time and nothing to gather: writes pass straight through.
    let io = Batched::pass_through(Linger::new(io));
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), handler);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = super::stopping(stop, retired) => {
            // hyper closes a connection with no request in flight at once: one that has not
            // yet sent its first is given a moment to (not one reclaimed: idle a while already).
            let ended = if first.seen.load(Ordering::Relaxed) || service.conn.reclaimed() {
                None
            } else {
                tokio::select! {
                    r = conn.as_mut() => Some(r),
                    () = first.arrived.notified() => None,
                    () = tokio::time::sleep(FIRST_REQUEST_GRACE) => None,
                    () = cut.cancelled() => return Ended::Cut,
                }
            };
            match ended {
                Some(r) => r,
                None => {
                    conn.as_mut().graceful_shutdown();
                    tokio::select! {
                        r = conn.as_mut() => r,
                        () = cut.cancelled() => return Ended::Cut,
                    }
                }
            }
        }
    };
    service.conn.upgrades.close();
    service.conn.upgrades.wait().await;
    match result {
        Ok(()) => Ended::Done,
        Err(e) => Ended::Failed(e.to_string()),
    }
}
