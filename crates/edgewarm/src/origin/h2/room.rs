//! "A stream place was freed": how a request waiting for room on full connections is woken.
//!
//! Every response's end frees a place, so the signal is hot: a `Notify` alone would lock its
//! waiter list at each end of a stream (and at each request, to register), across both worker
//! threads. [`Room`] counts the requests actually waiting and rings only when there are some.
//!
//! The race: a request that found no room registers, counts itself, then looks again; a
//! stream's end frees its place, then reads the count. With both sides' steps in one total order
//! (SeqCst), either the end sees the waiter counted (and rings; the waiter was registered
//! before it counted itself), or it freed the place before the waiter counted itself, and
//! then the waiter's second look sees the place free. No wake-up is lost.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{futures::Notified, Notify};

use crate::origin::multiplexed::Freed;

#[derive(Default)]
pub(crate) struct Room {
    notify: Notify,
    waiting: AtomicUsize,
}

/// A place was freed (its count already lowered, SeqCst): wake the waiters, if any.
impl Freed for Room {
    fn freed(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }
}

impl Room {
    /// Something else changed (a connection opened or closed, a setting moved): wake all.
    pub(crate) fn changed(&self) {
        self.notify.notify_waiters();
    }

    /// Register as a waiter. Look for room again after this and before awaiting the returned
    /// wait; dropping it unregisters.
    pub(crate) fn wait(&self) -> Waiter<'_> {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiter { room: self, notified }
    }
}

pub(crate) struct Waiter<'a> {
    room: &'a Room,
    pub(crate) notified: std::pin::Pin<Box<Notified<'a>>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.room.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_freed_place_wakes_a_registered_waiter_and_nobody_else_is_rung() {
        let room = Arc::new(Room::default());
        // No waiter: nothing registered, nothing to wake (and no lock taken).
        room.freed();
        assert_eq!(room.waiting.load(Ordering::SeqCst), 0);

        let r = room.clone();
        let waiter = tokio::spawn(async move {
            let mut w = r.wait();
            w.notified.as_mut().await;
        });
        tokio::task::yield_now().await;
        assert_eq!(room.waiting.load(Ordering::SeqCst), 1);
        room.freed();
        tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("woken").unwrap();
        assert_eq!(room.waiting.load(Ordering::SeqCst), 0, "the waiter unregistered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_freed_after_registering_but_before_awaiting_is_not_lost() {
        let room = Room::default();
        let mut w = room.wait();
        room.freed();
        tokio::time::timeout(Duration::from_secs(1), w.notified.as_mut()).await.expect("the ring was kept");
    }
}
