//! `action: tunnel`: the blind tunnel. Connect the origin, replay the ClientHello, relay until
//! done.
//!
//! Nothing is decrypted: the client's handshake continues with the origin as if edgewarm were
//! not there, so certificates, session tickets and 0-RTT stay between those two.

use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{relay_close_reason, ConnCtx};
use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::metrics::RouteReason;
use crate::peek::{self, proxy, Hello};
use crate::relay::{self, Direction};
use crate::route::TunnelRoute;
use crate::transport::dial;

pub(crate) async fn serve(
    mut client: TcpStream,
    hello: Box<Hello>,
    route: &TunnelRoute,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> CloseReason {
    log.origin = Some(route.origin.to_string());
    let timeouts = &ctx.snapshot.timeouts;
    let started = Instant::now();
    // With a PROXY header, it goes first and the hello right behind it, in one write (in the
    // SYN with Fast Open, when both fit).
    let header = route.config.origin_proxy_protocol.map(|v| proxy::encode(v, log.client, log.listener));
    let first = match &header {
        Some(h) => std::borrow::Cow::Owned([h.as_slice(), &hello.bytes].concat()),
        None => std::borrow::Cow::Borrowed(hello.bytes.as_slice()),
    };
    let (origin, addr) = match dial::connect(
        &ctx.snapshot.resolver,
        &route.origin,
        route.config.origin_tcp_fastopen,
        timeouts.connect,
        &first,
    )
    .await
    {
        Ok(ok) => ok,
        Err(e) => {
            let reason = e.close_reason();
            ctx.metrics.origin_connect_failed(&ctx.route.name, &route.origin.to_string(), "tunnel", e.failure());
            // The deprecated alias, counted as before for one release.
            let label = RouteReason { route: ctx.route.name.clone(), reason };
            ctx.metrics.origin_connect_errors.get_or_create(&label).inc();
            // The client is mid-handshake and expects a TLS record: say it in TLS.
            let _ = client.write_all(&peek::alert(peek::ALERT_INTERNAL_ERROR)).await;
            log.detail = Some(e.to_string());
            return reason;
        }
    };
    let connect_time = started.elapsed();
    let m = ctx.route_metrics;
    m.connect.observe(connect_time.as_secs_f64());
    log.origin_addr = Some(addr);
    log.connect_time = Some(connect_time);

    let up = Direction::new(m.bytes_up.clone());
    let down = Direction::new(m.bytes_down.clone());
    up.add(hello.bytes.len());
    // The replayed hello is with the origin now; the tunnel may live for hours without it.
    drop(first);
    drop(hello);
    let mut first_byte = None;
    let relay = relay::Relay {
        metrics: m,
        mode: ctx.snapshot.relay,
        idle: timeouts.idle,
        up: &up,
        down: &down,
        cancel: ctx.cut,
    };
    let end = relay.run(client, origin, || first_byte = Some(ctx.accepted.elapsed())).await;
    if let Some(t) = first_byte {
        m.first_byte.observe(t.as_secs_f64());
    }
    log.first_byte = first_byte;
    log.bytes_up = up.bytes();
    log.bytes_down = down.bytes();
    relay_close_reason(end)
}
