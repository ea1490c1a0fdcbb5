//! The new side of an upgrade once it holds the old process's sockets: warm the origin
//! connections, wait for its own listeners to accept, ask the old process to stop, acknowledge,
//! and adopt its 0-RTT sessions; or abandon, leaving the old process serving. Each step waits on
//! an event (the warm-up's end, the listeners' start, the old process's word), never a poll.
//!
//! ```text
//!  warm ──(warm, or the warm-up's limit: counted "cold")──▶ accepting ──▶ ask ──▶ acknowledged
//!                                                             │            │         │
//!                                    stopped first: Stopped ◀─┘            │         └▶ sessions
//!                  the old one abandoned, died or timed out: that error ◀──┘            (or none)
//! ```
//!
//! After an error this process stops accepting: never two processes serving side by side.

use std::future::Future;
use std::time::{Duration, Instant};

use super::takeover::Takeover;
use super::UpgradeError;
use crate::tls::sessions::Exported;

/// How much sooner than the old process's deadline the new one stops warming.
pub const WARM_MARGIN: Duration = Duration::from_secs(10);

/// What the new side needs of the process it runs in ([`crate::server::Server`]).
pub trait NewProcess: Send + Sync {
    /// Whether every origin connection it wants became ready within `limit`.
    fn warm(&self, limit: Duration) -> impl Future<Output = bool> + Send;
    /// Resolves once its listeners accept (`true`), or once it began to stop first (`false`).
    fn accepting(&self) -> impl Future<Output = bool> + Send;
    /// The old process's 0-RTT sessions adopted: how many.
    fn adopt_sessions(&self, sessions: &[(String, Exported)]) -> usize;
    /// Stop accepting and drain.
    fn shutdown(&self);
    /// `edgewarm_upgrades_total{result}` (the new side's results).
    fn count(&self, result: &'static str);
}

/// How long to warm: `warm_timeout`, but less than the old process waits (`wait`, 0 for no
/// limit), so that it is still there to hand over.
pub fn warm_limit(wait: Duration, warm_timeout: Duration) -> Duration {
    match wait.checked_sub(WARM_MARGIN) {
        Some(w) if !wait.is_zero() => warm_timeout.min(w),
        _ => warm_timeout,
    }
}

/// Warm for at most [`warm_limit`]; accepting then goes ahead either way (a cold start is
/// counted and logged, not fatal: the old process will not wait longer).
pub async fn warm<P: NewProcess>(process: &P, wait: Duration, warm_timeout: Duration) -> bool {
    let started = Instant::now();
    let warm = process.warm(warm_limit(wait, warm_timeout)).await;
    if warm {
        tracing::info!(after = ?started.elapsed(), "upgrade: origin connections ready, accepting");
    } else {
        process.count("cold");
        tracing::warn!(after = ?started.elapsed(), "upgrade: origin connections not all ready within the warm-up; accepting anyway");
    }
    warm
}

/// Once the listeners accept: ask the old process to stop, acknowledge, adopt its sessions.
/// The old process's pid once it has agreed; from then on this one serves. An error: the old
/// process serves on, and this one has stopped accepting.
pub async fn take_over<P: NewProcess>(takeover: Takeover, process: &P) -> Result<u32, UpgradeError> {
    if !process.accepting().await {
        // Stopped before serving: the old process serves on once the stream closes.
        return Err(UpgradeError::Stopped);
    }
    let old = match takeover.serving().await {
        Ok(old) => old,
        Err(e) => {
            process.shutdown();
            return Err(e);
        }
    };
    process.count("took_over");
    tracing::info!(old_pid = old, "upgrade: took over; the old process drains");
    match takeover.sessions().await {
        Ok(sessions) => {
            let adopted = process.adopt_sessions(&sessions);
            tracing::info!(sessions = adopted, "upgrade: the old process's 0-RTT sessions adopted");
        }
        Err(e) => tracing::warn!(error = %e, "upgrade: no 0-RTT sessions from the old process"),
    }
    Ok(old)
}

#[cfg(test)]
mod tests;
