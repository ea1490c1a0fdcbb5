//! HTTP/1.1 origins: a pool of keep-alive connections, for origins without HTTP/2.
//!
//! HTTP/1.1 carries one request at a time per connection, so the origin side becomes a pool:
//! `connections` are opened when the configuration is loaded (before any client), a request
//! takes an idle one (or opens one when none is idle), and gives it back once the response
//! body has ended, for the next request. A connection the origin closed is dropped when next
//! taken, never used. At most `max_connections` idle connections are kept; beyond that a
//! finished connection is closed. A reload starts a fresh pool (the old one's idle connections
//! close with it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use super::BoxedBody;
use crate::config::UpstreamConfig;
use crate::metrics::{Metrics, PoolLabels};
use crate::pool::dial::{Dial, TlsDial, WarmError};

/// Why a request could not be sent to an HTTP/1.1 origin.
#[derive(Debug, thiserror::Error)]
pub(crate) enum H1Error {
    #[error("no origin connection: {0}")]
    Connect(#[from] WarmError),
    #[error("origin HTTP/1.1: {0}")]
    Http(#[from] hyper::Error),
}

struct Idle {
    send: SendRequest<BoxedBody>,
    since: Instant,
}

pub(crate) struct H1Upstream {
    dial: TlsDial,
    labels: PoolLabels,
    idle: Mutex<Vec<Idle>>,
    settings: UpstreamConfig,
    connect_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for H1Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Upstream").field("labels", &self.labels).finish_non_exhaustive()
    }
}

/// A connection lent to one request; back to the pool when dropped after its response.
pub(crate) struct Lease {
    send: Option<SendRequest<BoxedBody>>,
    upstream: Arc<H1Upstream>,
    /// The connection had carried requests before this one.
    pub(crate) reused: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(send) = self.send.take() {
            self.upstream.give_back(send);
        }
    }
}

impl H1Upstream {
    /// Create the pool and open its first connections in the background.
    pub(crate) fn start(
        dial: TlsDial,
        labels: PoolLabels,
        settings: UpstreamConfig,
        connect_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let upstream = Arc::new(Self { dial, labels, idle: Mutex::default(), settings, connect_timeout, metrics });
        for _ in 0..upstream.settings.connections {
            let me = upstream.clone();
            tokio::spawn(async move {
                match me.open().await {
                    Ok(send) => me.give_back(send),
                    Err(e) => {
                        tracing::warn!(route = %me.labels.route, origin = %me.labels.origin, error = %e, "opening an HTTP/1.1 origin connection failed")
                    }
                }
            });
        }
        upstream
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn open(&self) -> Result<SendRequest<BoxedBody>, H1Error> {
        let started = Instant::now();
        let tls = self.dial.dial(self.connect_timeout).await?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let m = &self.metrics.pool;
        m.opened.get_or_create(&self.labels).inc();
        m.handshake_seconds.get_or_create(&self.labels).observe(started.elapsed().as_secs_f64());
        Ok(send)
    }

    fn give_back(&self, send: SendRequest<BoxedBody>) {
        if send.is_closed() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < self.settings.max_connections {
            idle.push(Idle { send, since: Instant::now() });
        }
    }

    /// A connection for one request: the most recently used idle one that is still open and
    /// younger than `max_age` idle, else a new one.
    async fn take(self: &Arc<Self>) -> Result<Lease, H1Error> {
        loop {
            let next = self.idle().pop();
            let Some(Idle { mut send, since }) = next else { break };
            if send.is_closed() || since.elapsed() >= self.settings.max_age {
                continue;
            }
            // Ready at once unless the origin is closing it.
            if send.ready().await.is_ok() {
                return Ok(Lease { send: Some(send), upstream: self.clone(), reused: true });
            }
        }
        let send = self.open().await?;
        Ok(Lease { send: Some(send), upstream: self.clone(), reused: false })
    }

    /// Send one request; the lease must live until the response body has ended.
    pub(crate) async fn send(
        self: &Arc<Self>,
        request: http::Request<BoxedBody>,
    ) -> Result<(http::Response<Incoming>, Lease), H1Error> {
        let mut lease = self.take().await?;
        let send = lease.send.as_mut().expect("a lease holds its connection until dropped");
        match send.send_request(request).await {
            Ok(response) => Ok((response, lease)),
            Err(e) => {
                // Broken: do not give it back.
                lease.send = None;
                Err(e.into())
            }
        }
    }
}
