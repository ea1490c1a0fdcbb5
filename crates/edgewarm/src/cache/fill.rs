//! A response on its way from the origin, read by every request that wants it while it
//! arrives: the request that fetched it and any that came for the same key meanwhile
//! (collapsed misses). One task reads the origin ([`Fill::push`] and friends); each reader
//! is a [`FillBody`] that is woken as data lands — event-driven, no polling — so a waiter's
//! first byte follows the fetcher's at once, and nobody waits for the whole body.
//!
//! [`Fills`] is the lock table: one fill per key in flight. The fetcher that finds the
//! response unstorable releases the fill at once ([`Fill::release`]): its waiters go to the
//! origin on their own.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use tokio::sync::Notify;

use super::key::Key;

/// The response head the waiters get, and which requests it answers.
pub(crate) struct FillHead {
    pub(crate) status: StatusCode,
    /// As stored (what any client may see).
    pub(crate) headers: HeaderMap,
    /// The response's `Vary` names and the fetching request's variant for them: a waiter
    /// whose variant differs is not answered with it.
    pub(crate) vary: Vec<http::HeaderName>,
    pub(crate) variant: Arc<str>,
}

pub(crate) type Head = Arc<FillHead>;

/// How a broken fetch reaches its readers.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Default)]
enum HeadState {
    #[default]
    Pending,
    Ready(Head),
    Released,
}

#[derive(Default)]
struct State {
    head: HeadState,
    chunks: Vec<Bytes>,
    trailers: Option<HeaderMap>,
    /// `Some` once the origin's body has ended: `Err` with why it broke.
    end: Option<Result<(), String>>,
    wakers: Vec<Waker>,
}

/// One response in flight.
#[derive(Default)]
pub(crate) struct Fill {
    state: Mutex<State>,
    head_set: Notify,
}

impl Fill {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A reader or the fetcher that panicked holding the lock left whole values behind.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The head is known and will be shared: waiters start reading.
    pub(crate) fn ready(&self, head: Head) {
        self.lock().head = HeadState::Ready(head);
        self.head_set.notify_waiters();
    }

    /// Not shared after all (unstorable, or the fetch failed): waiters go to the origin.
    pub(crate) fn release(&self) {
        let mut state = self.lock();
        if matches!(state.head, HeadState::Pending) {
            state.head = HeadState::Released;
        }
        drop(state);
        self.head_set.notify_waiters();
    }

    /// Wait for the head; `None` when released.
    pub(crate) async fn head(&self) -> Option<Head> {
        loop {
            let notified = self.head_set.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match &self.lock().head {
                HeadState::Ready(head) => return Some(head.clone()),
                HeadState::Released => return None,
                HeadState::Pending => {}
            }
            notified.await;
        }
    }

    fn wake(state: &mut State) {
        for w in state.wakers.drain(..) {
            w.wake();
        }
    }

    pub(crate) fn push(&self, data: Bytes) {
        let mut state = self.lock();
        state.chunks.push(data);
        Self::wake(&mut state);
    }

    pub(crate) fn trailers(&self, trailers: HeaderMap) {
        let mut state = self.lock();
        state.trailers = Some(trailers);
        Self::wake(&mut state);
    }

    /// The origin's body ended (`Err`: broke off; readers see the same error).
    pub(crate) fn finish(&self, end: Result<(), String>) {
        let mut state = self.lock();
        state.end = Some(end);
        Self::wake(&mut state);
    }

    /// What arrived, for storing: the chunks and trailers.
    pub(crate) fn contents(&self) -> (Vec<Bytes>, Option<HeaderMap>) {
        let state = self.lock();
        (state.chunks.clone(), state.trailers.clone())
    }
}

/// One reader's view of a [`Fill`]: the body a client gets.
pub(crate) struct FillBody {
    fill: Arc<Fill>,
    next: usize,
    trailers_sent: bool,
}

impl FillBody {
    pub(crate) fn new(fill: Arc<Fill>) -> Self {
        Self { fill, next: 0, trailers_sent: false }
    }
}

impl Body for FillBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let mut state = this.fill.lock();
        if let Some(chunk) = state.chunks.get(this.next) {
            this.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        match &state.end {
            Some(Ok(())) => {
                if !this.trailers_sent {
                    this.trailers_sent = true;
                    if let Some(t) = &state.trailers {
                        return Poll::Ready(Some(Ok(Frame::trailers(t.clone()))));
                    }
                }
                Poll::Ready(None)
            }
            Some(Err(why)) => Poll::Ready(Some(Err(why.clone().into()))),
            None => {
                if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    state.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// The lock table: which keys are being fetched now.
#[derive(Default)]
pub(crate) struct Fills {
    inflight: Mutex<HashMap<Key, Weak<Fill>>>,
}

/// What a miss does: fetch, or read another request's fetch.
pub(crate) enum Turn {
    Lead(Leading),
    Join(Arc<Fill>),
}

impl Fills {
    /// The fill for `key` if one is in flight, else a new one this request leads.
    pub(crate) fn join_or_lead(self: &Arc<Self>, key: &Key) -> Turn {
        let mut map = self.inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(fill) = map.get(key).and_then(Weak::upgrade) {
            return Turn::Join(fill);
        }
        let fill = Arc::new(Fill::default());
        map.insert(key.clone(), Arc::downgrade(&fill));
        Turn::Lead(Leading { fill, table: Some((self.clone(), key.clone())) })
    }

    fn remove(&self, key: &Key, fill: &Arc<Fill>) {
        let mut map = self.inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.get(key).is_some_and(|w| w.as_ptr() == Arc::as_ptr(fill)) {
            map.remove(key);
        }
    }
}

/// The fetcher's hold on a key: released (waiters sent to the origin) if dropped before the
/// head was shared, and out of the table when done, so later requests find the stored copy.
pub(crate) struct Leading {
    pub(crate) fill: Arc<Fill>,
    table: Option<(Arc<Fills>, Key)>,
}

impl Leading {
    /// A fetch no other request can join (a revalidation's new response, a waiter's own).
    pub(crate) fn alone() -> Self {
        Self { fill: Arc::default(), table: None }
    }

    /// Take the key out of the table now: no later request joins (the object turned out too
    /// large to store); those reading go on.
    pub(crate) fn detach(&mut self) {
        if let Some((fills, key)) = self.table.take() {
            fills.remove(&key, &self.fill);
        }
    }

    /// Requests reading the fill besides its fetcher.
    pub(crate) fn readers(&self) -> usize {
        Arc::strong_count(&self.fill) - 1
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.fill.release();
        self.detach();
    }
}
