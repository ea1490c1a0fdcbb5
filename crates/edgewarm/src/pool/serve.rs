//! One client on a `prewarm` route: terminate its TLS, give it a warm origin connection, relay
//! plaintext between the two sessions.
//!
//! Order matters for what the client waits for. The ALPN is chosen from the peeked hello before
//! the handshake (so the client can only agree to what the warm connection speaks). The pool is
//! asked only after the client's handshake succeeds, so a client that never finishes its
//! handshake (scanners, aborted connections) never costs a warm connection. A hit is then
//! immediate; on a miss the client waits for one on-demand origin connection.

use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::metrics::RouteMetrics;
use crate::peek::{self, Hello};
use crate::relay::{self, Direction, End, Side};
use crate::route::PrewarmRoute;
use crate::server::{Server, Snapshot};
use crate::tls::rewind::Rewind;

#[allow(clippy::too_many_arguments)]
pub async fn serve(
    mut client: TcpStream,
    hello: Hello,
    route_metrics: &RouteMetrics,
    route: &PrewarmRoute,
    server: &Server,
    snapshot: &Snapshot,
    accepted: Instant,
    log: &mut AccessLog,
) -> CloseReason {
    let pools = server.pools();
    let alpn = route
        .client
        .choose(&hello.alpn, |p| pools.get(&route.origin.key(Some(p))).is_none_or(|pool| pool.origin_speaks_alpn()));
    let Some(pool) = pools.get(&route.origin.key(alpn.as_deref())) else {
        // Pools are synced before the snapshot that names them is published.
        log.detail = Some("no pool for this route".into());
        return CloseReason::Internal;
    };
    log.origin = Some(pool.key().origin.to_string());
    if pool.failing() {
        // Still before the handshake: a plaintext alert is what the client understands.
        let _ = client.write_all(&peek::alert(peek::ALERT_INTERNAL_ERROR)).await;
        log.detail = Some("origin failing, in backoff".into());
        return CloseReason::Origin("origin_backoff");
    }

    let acceptor = TlsAcceptor::from(route.client.config(alpn.as_deref()));
    let handshake = acceptor.accept(Rewind::new(hello.bytes, client));
    let client_tls = match tokio::time::timeout(snapshot.timeouts.client_hello, handshake).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            log.detail = Some(e.to_string());
            return CloseReason::ClientTls;
        }
        Err(_) => return CloseReason::HelloTimeout,
    };
    log.alpn_selected = alpn.as_deref().map(|p| String::from_utf8_lossy(p).into_owned());
    log.tls_version = client_tls.get_ref().1.protocol_version().map(|v| format!("{v:?}"));

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
                    let mut client_tls = client_tls;
                    let _ = client_tls.shutdown().await;
                    log.detail = Some(e.to_string());
                    return CloseReason::Origin(e.reason());
                }
            }
        }
    };
    log.connect_time = Some(accepted.elapsed());
    log.origin_addr = warm.stream.get_ref().0.peer_addr().ok();

    let up = Direction::new(route_metrics.bytes_up.clone());
    let down = Direction::new(route_metrics.bytes_down.clone());
    let mut client_tls = client_tls;
    if !warm.early.is_empty() {
        // What the origin said while waiting (e.g. HTTP/2 SETTINGS) goes to the client first.
        if client_tls.write_all(&warm.early).await.is_err() {
            return CloseReason::ClientReset;
        }
        down.add(warm.early.len());
    }
    let relay = relay::Relay {
        mode: snapshot.relay,
        idle: snapshot.timeouts.idle,
        up: &up,
        down: &down,
        cancel: server.cut_token(),
    };
    let mut first_byte = None;
    let end = relay.run_streams(client_tls, warm.stream, || first_byte = Some(accepted.elapsed())).await;
    log.first_byte = first_byte;
    log.bytes_up = up.bytes();
    log.bytes_down = down.bytes();
    match end {
        End::Done => CloseReason::Done,
        End::Idle => CloseReason::IdleTimeout,
        End::Reset(Side::Client) => CloseReason::ClientReset,
        End::Reset(Side::Origin) => CloseReason::OriginReset,
        End::Shutdown => CloseReason::Shutdown,
    }
}
