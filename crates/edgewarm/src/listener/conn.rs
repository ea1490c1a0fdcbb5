//! One accepted connection, start to end: peek → route → action, then one access-log line.
//!
//! Every way a connection can end passes through [`handle`]'s single exit, which records the
//! close reason in the metrics and writes the access log, so no path can forget either. What
//! happens after routing is the action's ([`crate::action`]); this module does not know which
//! actions exist.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::{Context, Listening};
use crate::accesslog::AccessLog;
use crate::action;
use crate::error::CloseReason;
use crate::limits::admission::route_refuses;
use crate::limits::clients::client_key;
use crate::metrics::LimitReason;
use crate::peek::clienthello::HelloError;
use crate::peek::{self, PeekError};
use crate::transport::sockopt;

/// `log` is the connection's record, opened by the listener with the peer's and its own
/// address ([`AccessLog::new`]): carried once, not as separate addresses beside it.
///
/// Spawned as it is, with everything it needs owned (the listener's limit permit included),
/// and written as a function returning an `async` block rather than an `async fn`: an async
/// fn's arguments are copied into locals and both copies live in the task for the
/// connection's whole life (a wrapping block would add a third). The task's size decides its
/// allocator bin, and an idle tunnel is little more than this task.
// Not an `async fn` on purpose: see above (its arguments would be stored twice).
#[expect(clippy::manual_async_fn)]
pub(crate) fn handle(
    mut client: TcpStream,
    mut log: AccessLog,
    listening: Arc<Listening>,
    cx: Arc<Context>,
    permit: OwnedSemaphorePermit,
) -> impl Future<Output = ()> + Send {
    async move {
        let (config, admission, cx) = (&listening.config, &listening.admission, &*cx);
        // The connection's place in its client's count, held to its end.
        let mut place = None;
        let accepted = Instant::now();
        let metrics = &*cx.metrics;
        metrics.active.inc();
        let snapshot = cx.snapshot.borrow().clone();
        // Without NODELAY the TLS flights we relay can wait on Nagle for an ACK: a lost round trip.
        let _ = sockopt::set_nodelay(&client);

        let mut route_metrics = None;
        let reason = 'conn: {
            // Without a PROXY header the peer is the client: refused before anything is read.
            if !config.proxy_protocol {
                match admission.check(log.client.ip()) {
                    Ok(p) => place = p,
                    Err(reason) => break 'conn refused(reason),
                }
            }
            let read = peek::read_hello(&mut client, config.proxy_protocol);
            let hello = match tokio::time::timeout(snapshot.timeouts.client_hello, read).await {
                // The socket is closed here, before the permit at the end: a connection that
                // ends early must not hold its place in `max_connections` past its socket, nor
                // its socket past its place.
                Err(_) => {
                    drop(client);
                    break 'conn CloseReason::HelloTimeout;
                }
                Ok(Err(e)) => {
                    refuse_bad_hello(&mut client, &e).await;
                    log.detail = Some(e.to_string());
                    drop(client);
                    break 'conn CloseReason::from(&e);
                }
                Ok(Ok(h)) => h,
            };
            metrics.hello_parsed.inc();
            log.hello_time = Some(accepted.elapsed());
            if let Some(src) = hello.proxied_source {
                log.client = src;
            }
            if config.proxy_protocol {
                match admission.check(log.client.ip()) {
                    Ok(p) => place = p,
                    Err(reason) => break 'conn refused(reason),
                }
            }
            log.sni = hello.sni.clone();
            log.alpn = hello.alpn.clone();

            let Some(route) = snapshot.routes.lookup(hello.sni.as_deref()) else {
                let _ = client.write_all(&peek::alert(peek::ALERT_UNRECOGNIZED_NAME)).await;
                drop(client);
                break 'conn CloseReason::UnknownSni;
            };
            log.route = Some(route.name.clone());
            // An http route answers its lists per request (403); the others refuse here.
            let http = matches!(route.action, crate::route::RouteAction::Http(_));
            // An ACME validation (TLS-ALPN-01) comes from the CA, wherever the lists allow.
            let acme = hello.alpn.iter().any(|p| p == crate::acme::challenge::ACME_TLS_ALPN);
            if !http && !acme && route_refuses(&route.name, &route.access, log.client.ip(), &metrics.limited) {
                let _ = client.write_all(&peek::alert(peek::ALERT_ACCESS_DENIED)).await;
                break 'conn CloseReason::Denied;
            }
            let mut ctx = cx.conn_ctx(&snapshot, route, config, log.listener.port(), accepted);
            ctx.idle = Some((&listening.idle, client_key(log.client.ip(), config.ipv6_prefix)));
            route_metrics = Some(ctx.route_metrics);
            action::serve(client, hello, &ctx, &mut log).await
        };
        cx.finish(log, reason, route_metrics, accepted, permit);
        drop(place);
    }
}

/// How a connection the listener's admission refused ends (counted there).
fn refused(reason: LimitReason) -> CloseReason {
    match reason {
        LimitReason::Denied => CloseReason::Denied,
        LimitReason::ClientConnections | LimitReason::Rate => CloseReason::ClientLimit,
    }
}

/// Tell the client why, in the protocol it spoke: an HTTP 400 to plain HTTP, a TLS alert to a
/// broken TLS hello, nothing to bytes that are neither (no point answering a port scanner).
async fn refuse_bad_hello(client: &mut TcpStream, e: &PeekError) {
    let alert = peek::alert(peek::ALERT_DECODE_ERROR);
    let answer: &[u8] = match e {
        PeekError::Hello(HelloError::PlainHttp) => peek::PLAIN_HTTP_RESPONSE,
        PeekError::Hello(HelloError::NotTls) => return,
        PeekError::Hello(_) => &alert,
        _ => return,
    };
    let _ = client.write_all(answer).await;
    let _ = client.shutdown().await;
}
