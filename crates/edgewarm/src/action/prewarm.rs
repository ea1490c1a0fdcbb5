//! `action: prewarm`: terminate the client's TLS, give it a warm origin connection, relay
//! plaintext between the two sessions.
//!
//! Order matters for what the client waits for. The ALPN is chosen from the peeked hello before
//! the handshake (so the client can only agree to what the warm connection speaks). The pool is
//! asked only after the client's handshake succeeds, so a client that never finishes its
//! handshake (scanners, aborted connections) never costs a warm connection. A hit is then
//! immediate; on a miss the client waits for one on-demand origin connection.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{relay_close_reason, terminate_tls, ConnCtx};
use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::peek::{self, Hello};
use crate::relay::{self, Direction};
use crate::route::PrewarmRoute;

pub(crate) async fn serve(
    mut client: TcpStream,
    hello: Hello,
    route: &PrewarmRoute,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> CloseReason {
    let alpn = route.client.choose(&hello.alpn, |p| route.pool(Some(p)).is_none_or(|pool| pool.origin_speaks_alpn()));
    let Some(pool) = route.pool(alpn.as_deref()) else {
        // The server attaches pools to a route before publishing the snapshot that names it.
        log.detail = Some("no pool for this route".into());
        return CloseReason::Internal;
    };
    log.origin = Some(pool.key().origin.to_string());
    if pool.failing() {
        // Still before the handshake: a plaintext alert is what the client understands.
        let _ = client.write_all(&peek::alert(peek::ALERT_INTERNAL_ERROR)).await;
        log.detail = Some("origin failing, in backoff".into());
        return CloseReason::OriginBackoff;
    }

    let mut client_tls = match terminate_tls(client, hello, &route.client, alpn.as_deref(), ctx, log).await {
        Ok(tls) => tls,
        Err(reason) => return reason,
    };

    let warm = match pool.take().await {
        Some(w) => {
            log.pool = Some("hit");
            w
        }
        None => {
            log.pool = Some("miss");
            match pool.connect_now().await {
                Ok(w) => w,
                Err(e) => {
                    let _ = client_tls.shutdown().await;
                    log.detail = Some(e.to_string());
                    return e.close_reason();
                }
            }
        }
    };
    log.connect_time = Some(ctx.accepted.elapsed());
    log.origin_addr = warm.stream.get_ref().0.peer_addr().ok();

    let m = ctx.route_metrics;
    let up = Direction::new(m.bytes_up.clone());
    let down = Direction::new(m.bytes_down.clone());
    if !warm.early.is_empty() {
        // What the origin said while waiting (e.g. HTTP/2 SETTINGS) goes to the client first.
        if client_tls.write_all(&warm.early).await.is_err() {
            return CloseReason::ClientReset;
        }
        down.add(warm.early.len());
    }
    let relay = relay::Relay {
        mode: ctx.snapshot.relay,
        idle: ctx.snapshot.timeouts.idle,
        up: &up,
        down: &down,
        cancel: ctx.cut,
    };
    let mut first_byte = None;
    let end = relay.run(client_tls, warm.stream, || first_byte = Some(ctx.accepted.elapsed())).await;
    log.first_byte = first_byte;
    log.bytes_up = up.bytes();
    log.bytes_down = down.bytes();
    relay_close_reason(end)
}
