//! A plain TCP forwarder made of edgewarm's own connect and relay code (splice), without
//! reading a ClientHello or routing: the baseline that prices the peek (`benches/tunnel.rs`,
//! and `edgewarm-lab forward` for measurements against other proxies). Not used by the proxy.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

/// Forward every connection on `listener` to `origin` for as long as this runs; a connection
/// whose origin cannot be reached is closed.
pub async fn plain_forward(listener: TcpListener, origin: SocketAddr) {
    let origin = Arc::new(crate::config::OriginAddr { host: origin.ip().to_string(), port: origin.port() });
    let metrics = Arc::new(crate::metrics::Metrics::new().route(&crate::metrics::RouteName::new("plain")));
    let cancel = tokio_util::sync::CancellationToken::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or the like: wait a little rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let (origin, cancel, metrics) = (origin.clone(), cancel.clone(), metrics.clone());
        tokio::spawn(async move {
            let _ = crate::transport::sockopt::set_nodelay(&client);
            let timeout = std::time::Duration::from_secs(5);
            let Ok((upstream, _)) =
                crate::transport::dial::connect(&Default::default(), &origin, false, timeout, &[]).await
            else {
                return;
            };
            let (up, down) =
                (crate::relay::Direction::new(Default::default()), crate::relay::Direction::new(Default::default()));
            let relay = crate::relay::Relay {
                metrics: &metrics,
                mode: crate::relay::Mode::Splice,
                idle: std::time::Duration::from_secs(60),
                up: &up,
                down: &down,
                cancel: &cancel,
            };
            relay.run(client, upstream, || {}).await;
        });
    }
}
