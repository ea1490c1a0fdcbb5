//! This process's place in a chain of upgrades, beside its listeners: once they accept, take
//! over from the process before it (when started with `--upgrade`), then listen for the next
//! one and hand over ([`handover::serve`]); and, once the process has drained, what its end
//! still waits for.
//!
//! ```text
//!  taking over? ─agreed─▶ older: its pid ─┬─▶ MAINPID, READY ─▶ serve upgrades ─▶ handed over
//!       │                                 │                                       (last step:
//!       ├─ no (started cold) ─────────────┘                                        the sessions)
//!       └─ failed ─▶ last step: the verdict (this process has stopped accepting)
//! ```
//!
//! The process's end: relay for the older process until it has gone (HTTP/3 connections of
//! its drain), then wait for the last step if one runs; else the steps are just dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::handover::{self, OldProcess};
use super::lineage::Lineage;
use super::successor::{self, NewProcess};
use super::takeover::Takeover;
use super::{Sockets, UpgradeError};
use crate::config::UpgradeConfig;

/// How long a process that has handed over (or failed to take over) waits for the last step.
const LAST_STEP: Duration = Duration::from_secs(65);
/// Beyond the grace period: how long a drained process waits for an older one it relays to.
const OLDER_SLACK: Duration = Duration::from_secs(10);

/// This process's upgrade steps, running beside its listeners.
pub struct Upgrades {
    lineage: Arc<Lineage>,
    steps: JoinHandle<Result<(), UpgradeError>>,
}

impl Upgrades {
    /// Start the steps in `process`: take over (with `takeover`, from `edgewarm run --upgrade`),
    /// then serve upgrades on `config.socket`, handing `sockets` over.
    pub fn start<P>(process: Arc<P>, takeover: Option<Takeover>, config: UpgradeConfig, sockets: Sockets) -> Self
    where
        P: NewProcess + OldProcess + 'static,
    {
        let lineage = Arc::new(Lineage::default());
        let shared = lineage.clone();
        let steps = tokio::spawn(async move { steps(&*process, takeover, config, sockets, &shared).await });
        Self { lineage, steps }
    }

    /// The process has drained: wait for what the steps still hold. `relaying`: its HTTP/3
    /// endpoints relay for an older process (they may, once it has handed over), which then
    /// keeps this one for at most `grace` (the older one's drain) and a little more. An error:
    /// the takeover failed, the old process serves on.
    pub async fn end(self, relaying: bool, grace: Duration) -> Result<(), UpgradeError> {
        // The older process's QUIC connections get their datagrams from the newer process
        // through this one: it stays until the older one has gone.
        if let Some(older) = self.lineage.older().filter(|_| relaying) {
            if !super::outlive(older, grace + OLDER_SLACK).await {
                tracing::warn!(older_pid = older, "the older process still runs; its HTTP/3 clients lose their relay");
            }
        }
        if self.lineage.in_last_step() {
            tokio::time::timeout(LAST_STEP, self.steps).await.ok().and_then(Result::ok).unwrap_or(Ok(()))
        } else {
            self.steps.abort();
            Ok(())
        }
    }
}

/// Once the listeners accept: take over from the old process (if upgrading), tell systemd, and
/// listen for the next upgrade. An error: the old process did not hand over, so this one has
/// stopped accepting and drains.
async fn steps<P: NewProcess + OldProcess>(
    process: &P,
    takeover: Option<Takeover>,
    config: UpgradeConfig,
    sockets: Sockets,
    lineage: &Lineage,
) -> Result<(), UpgradeError> {
    let took_over = takeover.is_some();
    match takeover {
        // MAINPID moves when the old process commits (it tells systemd itself) and again below:
        // never before, or a new process the old one kills as too late would leave systemd with
        // a dead main process.
        Some(takeover) => match successor::take_over(takeover, process).await {
            Ok(old) => lineage.took_over_from(old),
            Err(e) => {
                // The old process serves on; this one has stopped accepting, and its verdict
                // is the process's last step.
                lineage.begin_last_step();
                return Err(e);
            }
        },
        None => {
            if !process.accepting().await {
                return Ok(());
            }
        }
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(std::process::id()), sd_notify::NotifyState::Ready]);
    handover::serve(config, sockets, process, took_over, lineage).await;
    Ok(())
}

#[cfg(test)]
mod tests;
