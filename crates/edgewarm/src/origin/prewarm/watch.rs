//! The watcher: one task per idle warm connection, owning it until a client takes it.
//!
//! While idle, a connection can die (the origin closes it, sends close_notify, resets it) or
//! receive bytes (HTTP/2 servers send SETTINGS as soon as the connection is up). The watcher
//! keeps reading so it sees both: death removes the entry (never handed out); bytes are kept,
//! up to [`MAX_EARLY`], and given to the client before anything else. Reading is cancel-safe,
//! so a handoff request interrupting a read loses nothing.
//!
//! After `max_idle` the watcher closes the connection itself (close_notify), before the origin's
//! own idle timeout would, so a client is never given a connection the origin is about to drop.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Pool, Warm};
use crate::metrics::{Discard, PoolDiscard};
use crate::origin::dial::Dial;

/// Most bytes buffered from an idle connection. An origin that sends more before any request
/// is not one we want to hand to a client.
const MAX_EARLY: usize = 64 * 1024;

enum End {
    Dead,
    Overflow,
    Expired,
}

pub(super) async fn watch<D: Dial>(
    pool: Arc<Pool<D>>,
    id: u64,
    mut stream: D::Conn,
    mut requests: oneshot::Receiver<oneshot::Sender<Warm<D::Conn>>>,
    max_idle: Duration,
) {
    let born = Instant::now();
    let mut early = Vec::new();
    let mut buf = [0u8; 4096];
    let expiry = tokio::time::sleep(max_idle);
    tokio::pin!(expiry);
    let end = loop {
        tokio::select! {
            // Prefer a waiting client over reading: it is the reason the connection exists.
            biased;
            request = &mut requests => {
                // Err: the pool dropped the entry (retired); just close.
                if let Ok(reply) = request {
                    let _ = reply.send(Warm { stream, early, age: born.elapsed() });
                } else {
                    let _ = stream.shutdown().await;
                }
                return;
            }
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break End::Dead,
                Ok(n) if early.len() + n > MAX_EARLY => break End::Overflow,
                Ok(n) => early.extend_from_slice(&buf[..n]),
            },
            () = &mut expiry => break End::Expired,
        }
    };
    let labels = pool.labels();
    let m = &pool.core.metrics.pool;
    let discard = |reason| PoolDiscard {
        route: labels.route.clone(),
        alpn: labels.alpn.clone(),
        reason,
        server: labels.server.clone(),
    };
    let reason = match end {
        End::Dead | End::Expired => Discard::Dead,
        End::Overflow => Discard::Overflow,
    };
    if pool.remove_idle(id) {
        match end {
            End::Expired => m.expired.get_or_create(labels).inc(),
            _ => m.discarded.get_or_create(&discard(reason)).inc(),
        };
        let _ = stream.shutdown().await;
        pool.core.wake.notify_one();
        return;
    }
    // A client popped the entry in the same instant. A live connection is still good: hand it
    // over. A dead one is dropped, which fails the handoff and the client tries the next entry.
    match end {
        End::Expired => {
            if let Ok(reply) = requests.await {
                let _ = reply.send(Warm { stream, early, age: born.elapsed() });
            }
        }
        _ => {
            m.discarded.get_or_create(&discard(reason)).inc();
        }
    }
}
