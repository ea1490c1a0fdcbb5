//! Both sides of an upgrade run in this process: the new side's steps
//! ([`crate::upgrade::successor`]) while it takes over, the old side's
//! ([`crate::upgrade::handover`]) once it serves.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Server;
use crate::metrics::ResultLabel;
use crate::tls::sessions::Exported;
use crate::upgrade::handover::{self, OldProcess};
use crate::upgrade::successor::NewProcess;
use crate::upgrade::QuicKeys;

impl Server {
    /// `edgewarm_upgrades_total{result}`: both sides' results, in one family.
    fn count_upgrade(&self, result: &'static str) {
        self.metrics.upgrades.get_or_create(&ResultLabel { result }).inc();
    }
}

impl NewProcess for Server {
    async fn warm(&self, limit: Duration) -> bool {
        self.wait_warm(limit).await
    }

    async fn accepting(&self) -> bool {
        let mut ready = self.ready.subscribe();
        tokio::select! {
            // A stop between the listeners' start and here: ready may have been seen for a
            // moment, so the stop is checked again.
            accepting = ready.wait_for(|r| *r) => accepting.is_ok() && !self.is_stopping(),
            () = self.listeners.stop.cancelled() => false,
        }
    }

    fn adopt_sessions(&self, sessions: &[(String, Exported)]) -> usize {
        Server::adopt_sessions(self, sessions)
    }

    fn shutdown(&self) {
        Server::shutdown(self);
    }

    fn count(&self, result: &'static str) {
        self.count_upgrade(result);
    }
}

impl OldProcess for Server {
    fn ticket_keys(&self) -> String {
        self.resumption.process_keys().export()
    }

    fn quic_keys(&self) -> QuicKeys {
        self.listeners.quic.keys()
    }

    fn stop(&self) {
        // Before the shutdown: the UDP sockets are the new process's to read from now on, and
        // this one's QUIC connections drain on the datagrams it relays.
        self.listeners.quic.handed_over.store(true, Ordering::Relaxed);
        Server::shutdown(self);
        // `/ready` and `/metrics` are the new process's from now on: a probe that reached
        // this one would see 503 while it drains.
        self.stop_admin();
    }

    fn hand_over_sessions(&self) -> Vec<(String, Exported)> {
        self.resumption.hand_over_sessions()
    }

    fn kill_new(&self, pid: u32) {
        handover::kill(pid);
    }

    fn count(&self, result: &'static str) {
        self.count_upgrade(result);
    }
}
