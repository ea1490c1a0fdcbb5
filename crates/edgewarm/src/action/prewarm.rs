//! `action: prewarm`: terminate the client's TLS, give it a warm origin connection, relay
//! plaintext between the two sessions.
//!
//! Order matters for what the client waits for. The ALPN is chosen from the peeked hello before
//! the handshake (so the client can only agree to what the warm connection speaks). The pool is
//! asked only after the client's handshake succeeds, so a client that never finishes its
//! handshake (scanners, aborted connections) never costs a warm connection. A hit is then
//! immediate; on a miss the client waits for one on-demand origin connection.

use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::{relay_close_reason, terminate_tls, ClientIo, ConnCtx};
use crate::accesslog::AccessLog;
use crate::config::Ktls;
use crate::error::CloseReason;
use crate::metrics::{KtlsLabels, KtlsResult, TlsSide};
use crate::peek::{self, Hello};
use crate::relay::{self, Direction, Phase};
use crate::route::PrewarmRoute;
use crate::tls::ktls::{self, Aligned, Handoff, Offloaded};

pub(crate) async fn serve(
    mut client: TcpStream,
    hello: Box<Hello>,
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
    log.origin_addr = warm.stream.get_ref().0.get_ref().peer_addr().ok();

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
        metrics: m,
        mode: ctx.snapshot.relay,
        idle: ctx.snapshot.timeouts.idle,
        up: &up,
        down: &down,
        cancel: ctx.cut,
    };
    let mut first_byte = None;
    let mut on_first = || {
        if first_byte.is_none() {
            first_byte = Some(ctx.accepted.elapsed());
        }
    };
    // The kTLS arms are boxed: their hand-off futures are large, and inline they would size
    // every connection's task for them, routes without `ktls` included (3 KiB each).
    let end = match route.client.ktls {
        Ktls::Off => relay.run(client_tls, warm.stream, on_first).await,
        Ktls::On => {
            let to = Box::pin(to_kernel(client_tls, warm.stream, (&up, &down), ctx, log)).await;
            match to {
                Ok((client, origin)) => Box::pin(relay.run(client, origin, on_first)).await,
                Err(reason) => return reason,
            }
        }
        Ktls::Auto => {
            let until = Box::pin(relay.run_until(client_tls, warm.stream, route.client.ktls_after, &mut on_first));
            match until.await {
                Phase::Ended(end) => {
                    for side in [TlsSide::Client, TlsSide::Origin] {
                        count(ctx, side, KtlsResult::Short);
                    }
                    end
                }
                Phase::Spent(client, origin) => {
                    match Box::pin(to_kernel(client, origin, (&up, &down), ctx, log)).await {
                        Ok((client, origin)) => Box::pin(relay.run(client, origin, on_first)).await,
                        Err(reason) => return reason,
                    }
                }
            }
        }
    };
    log.first_byte = first_byte;
    log.bytes_up = up.bytes();
    log.bytes_down = down.bytes();
    relay_close_reason(end)
}

/// Longest wait for a session's quiet record boundary at the hand-off: a record already begun
/// arrives within a round trip; a peer that stalls mid-record keeps its session in user space.
const SETTLE: Duration = Duration::from_secs(1);

type OriginStream = TlsStream<Aligned<TcpStream>>;

/// Hand both sessions to the kernel (each that can go: one that cannot stays in user space and
/// the relay copies for it), then pass on the plaintext each had decrypted before the hand-off,
/// so that what remains for the relay are two sockets it can splice.
async fn to_kernel(
    client: ClientIo,
    origin: OriginStream,
    (up, down): (&Direction, &Direction),
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> Result<(Offloaded<ClientIo>, Offloaded<OriginStream>), CloseReason> {
    let client = match client {
        ClientIo::Rustls(s) => match handed(ktls::offload(*s, SETTLE).await, ctx, TlsSide::Client, log)? {
            Offloaded::User(s) => Offloaded::User(ClientIo::Rustls(Box::new(s))),
            Offloaded::Kernel(k) => Offloaded::Kernel(k),
        },
        early @ ClientIo::Early(_) => {
            // Validation keeps ktls and early_data apart; a session driven by the 0-RTT
            // driver has no tokio-rustls stream to hand over.
            count(ctx, TlsSide::Client, KtlsResult::Unsupported);
            Offloaded::User(early)
        }
    };
    let mut origin = handed(ktls::offload(origin, SETTLE).await, ctx, TlsSide::Origin, log)?;
    let mut client = client;
    carry(&mut client, &mut origin, up).await.map_err(|_| CloseReason::OriginReset)?;
    carry(&mut origin, &mut client, down).await.map_err(|_| CloseReason::ClientReset)?;
    Ok((client, origin))
}

/// What one session had decrypted before its hand-off goes to the other side first.
async fn carry<A, B: AsyncWrite + Unpin>(
    from: &mut Offloaded<A>,
    to: &mut Offloaded<B>,
    dir: &Direction,
) -> std::io::Result<()> {
    if let Offloaded::Kernel(k) = from {
        let carried = k.take_pending();
        if !carried.is_empty() {
            to.write_all(&carried).await?;
            to.flush().await?;
            dir.add(carried.len());
        }
    }
    Ok(())
}

/// Count a hand-off's result; a lost session ends the connection.
fn handed<S>(
    h: Handoff<S>,
    ctx: &ConnCtx<'_>,
    side: TlsSide,
    log: &mut AccessLog,
) -> Result<Offloaded<S>, CloseReason> {
    let (offloaded, result) = match h {
        Handoff::Kernel(k) => (Offloaded::Kernel(k), KtlsResult::Kernel),
        Handoff::User(s, result) => (Offloaded::User(s), result),
        Handoff::Lost(e) => {
            count(ctx, side, KtlsResult::Failed);
            log.detail = Some(format!("kernel TLS hand-off ({}) failed: {e}", side.label()));
            return Err(CloseReason::KtlsFailed);
        }
    };
    count(ctx, side, result);
    Ok(offloaded)
}

fn count(ctx: &ConnCtx<'_>, side: TlsSide, result: KtlsResult) {
    ctx.metrics.ktls.get_or_create(&KtlsLabels { route: ctx.route.name.clone(), side, result }).inc();
}
