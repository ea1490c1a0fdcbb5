//! What an upgrade's steps ([`super::steps`]) leave for the process's end to read: the process
//! this one took over from, and whether an upgrade's last step runs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Written before the listeners stop, so final when read after the drain.
#[derive(Debug, Default)]
pub struct Lineage {
    /// The process this one took over from, once it agreed; 0 before (no process has pid 0).
    older: AtomicU32,
    /// An upgrade's last step runs: the sessions on their way to the new process, or a failed
    /// takeover's verdict.
    last_step: AtomicBool,
}

impl Lineage {
    /// The process `pid` agreed to stop: this one serves in its place.
    pub fn took_over_from(&self, pid: u32) {
        self.older.store(pid, Ordering::Release);
    }

    /// The process this one took over from, if it did.
    pub fn older(&self) -> Option<u32> {
        Some(self.older.load(Ordering::Acquire)).filter(|&pid| pid != 0)
    }

    /// The upgrade's last step begins: called before the process stops accepting, so that its
    /// end waits for the step instead of dropping it.
    pub fn begin_last_step(&self) {
        self.last_step.store(true, Ordering::Release);
    }

    pub fn in_last_step(&self) -> bool {
        self.last_step.load(Ordering::Acquire)
    }
}
