//! One accepted connection, start to end: peek → route → tunnel, then one access-log line.
//!
//! Every way a connection can end passes through [`handle`]'s single exit, which records the
//! close reason in the metrics and writes the access log, so no path can forget either.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::accesslog::AccessLog;
use crate::config::ListenerConfig;
use crate::error::CloseReason;
use crate::metrics::{ReasonLabel, RouteReason};
use crate::peek::{self, PeekError};
use crate::route::RouteAction;
use crate::server::Server;
use crate::sockopt;
use crate::tunnel::{Tunnel, TunnelReport};

pub async fn handle(
    mut client: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    config: &ListenerConfig,
    server: &Arc<Server>,
) {
    let accepted = Instant::now();
    let metrics = server.metrics();
    metrics.active.inc();
    let snapshot = server.snapshot();
    let mut log = AccessLog {
        client: peer,
        listener: local,
        sni: None,
        alpn: Vec::new(),
        route: None,
        alpn_selected: None,
        tls_version: None,
        pool: None,
        origin: None,
        origin_addr: None,
        bytes_up: 0,
        bytes_down: 0,
        hello_time: None,
        connect_time: None,
        first_byte: None,
        duration: Default::default(),
        reason: CloseReason::Done,
        detail: None,
    };
    // Without NODELAY the TLS flights we relay can wait on Nagle for an ACK: a lost round trip.
    let _ = sockopt::set_nodelay(&client);

    let mut routed = None;
    let reason = 'conn: {
        let read = peek::read_hello(&mut client, config.proxy_protocol);
        let hello = match tokio::time::timeout(snapshot.timeouts.client_hello, read).await {
            Err(_) => break 'conn CloseReason::HelloTimeout,
            Ok(Err(e)) => {
                refuse_bad_hello(&mut client, &e).await;
                log.detail = Some(e.to_string());
                break 'conn e.close_reason();
            }
            Ok(Ok(h)) => h,
        };
        metrics.hello_parsed.inc();
        log.hello_time = Some(accepted.elapsed());
        if let Some(src) = hello.proxied_source {
            log.client = src;
        }
        log.sni = hello.sni.clone();
        log.alpn = hello.alpn.clone();

        let Some(route) = snapshot.routes.lookup(hello.sni.as_deref()) else {
            let _ = client.write_all(&peek::alert(peek::ALERT_UNRECOGNIZED_NAME)).await;
            break 'conn CloseReason::UnknownSni;
        };
        log.route = Some(route.name.clone());
        routed = Some(route.clone());
        match &route.action {
            RouteAction::Reject => {
                let _ = client.write_all(&peek::alert(peek::ALERT_UNRECOGNIZED_NAME)).await;
                CloseReason::RouteReject
            }
            RouteAction::Prewarm(prewarm) => {
                let route_metrics = route.metrics(metrics);
                crate::pool::serve::serve(client, hello, route_metrics, prewarm, server, &snapshot, accepted, &mut log)
                    .await
            }
            RouteAction::Tunnel { origin, fastopen } => {
                log.origin = Some(origin.to_string());
                let tunnel = Tunnel {
                    route: &route.name,
                    origin,
                    fastopen: *fastopen,
                    connect_timeout: snapshot.timeouts.connect,
                    idle_timeout: snapshot.timeouts.idle,
                    mode: snapshot.relay,
                    accepted,
                    metrics,
                    route_metrics: route.metrics(metrics),
                    cancel: server.cut_token(),
                };
                let mut report = TunnelReport::default();
                let result = tunnel.run(&client, &hello.bytes, &mut report).await;
                log.origin_addr = report.origin_addr;
                log.connect_time = report.connect_time;
                log.first_byte = report.first_byte;
                log.bytes_up = report.bytes_up;
                log.bytes_down = report.bytes_down;
                match result {
                    Ok(reason) => reason,
                    Err(e) => {
                        // The client is mid-handshake and expects a TLS record: say it in TLS.
                        let _ = client.write_all(&peek::alert(peek::ALERT_INTERNAL_ERROR)).await;
                        log.detail = Some(e.to_string());
                        e.close_reason()
                    }
                }
            }
        }
    };

    log.reason = reason;
    log.duration = accepted.elapsed();
    if reason.is_hello_rejection() {
        metrics.hello_rejected.get_or_create(&ReasonLabel { reason: reason.label().to_string() }).inc();
    }
    match (&routed, reason) {
        (Some(route), CloseReason::Done) => route.metrics(metrics).done.inc(),
        _ => {
            let route = log.route.clone().unwrap_or_else(|| "<none>".to_string());
            metrics.closed.get_or_create(&RouteReason { route, reason: reason.label().to_string() }).inc()
        }
    };
    metrics.active.dec();
    log.emit();
}

/// Tell the client why, in the protocol it spoke: an HTTP 400 to plain HTTP, a TLS alert to a
/// broken TLS hello, nothing to bytes that are neither (no point answering a port scanner).
async fn refuse_bad_hello(client: &mut TcpStream, e: &PeekError) {
    let alert = peek::alert(peek::ALERT_DECODE_ERROR);
    let answer: &[u8] = match e {
        PeekError::Hello(h) if h.reason() == "http" => peek::PLAIN_HTTP_RESPONSE,
        PeekError::Hello(h) if h.reason() != "not_tls" => &alert,
        _ => return,
    };
    let _ = client.write_all(answer).await;
    let _ = client.shutdown().await;
}
