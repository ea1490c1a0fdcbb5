//! A worker's QUIC state, shared by its driver loop ([`super::endpoint`]) and the handles its
//! connection tasks hold ([`super::conn`], [`super::stream`]): quinn-proto's endpoint, every
//! connection on it, and who is waiting for what.
//!
//! One lock for all of a worker's connections: the worker is a single-threaded runtime, so the
//! lock is never contended; it is there because tasks must be `Send`. A handle's operation steps
//! its connection's state in place and marks the connection dirty, and the driver sends what
//! that produced on its next turn: one wake-up of the driver for everything the handlers did
//! in between, not one task hop per stream operation.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use quinn_proto::{ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

/// What a worker's driver and its connections' handles share.
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub(super) fn new(endpoint: quinn_proto::Endpoint) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                endpoint,
                conns: Conns::default(),
                dirty: Vec::new(),
                driver: None,
                generation: 0,
                timers: BinaryHeap::new(),
            }),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves quinn-proto's state as it was mid-step; the
        // worker's other connections are better served from it than all dropped.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub(crate) struct State {
    pub(super) endpoint: quinn_proto::Endpoint,
    pub(super) conns: Conns,
    /// Connections touched by a handle since the driver last stepped them.
    pub(super) dirty: Vec<ConnectionHandle>,
    /// The driver's task, woken when `dirty` gains its first entry.
    pub(super) driver: Option<Waker>,
    /// Tells a connection from a later one that reuses its handle (quinn-proto reuses them).
    generation: u64,
    /// Connection timers, earliest first: at most one entry per connection is live (the one
    /// its `scheduled` names); an entry found stale when it comes due is dropped or moved to
    /// the connection's current timer. (It replaces a scan of every connection each turn.)
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

impl State {
    pub(super) fn insert(&mut self, ch: ConnectionHandle, conn: quinn_proto::Connection) -> u64 {
        self.generation += 1;
        let slot = Box::new(Slot {
            conn,
            generation: self.generation,
            dirty: false,
            timeout: None,
            scheduled: None,
            lost: None,
            handshake_data: false,
            connected: false,
            wakers: Wakers::default(),
        });
        self.conns.insert(ch, slot);
        self.mark(ch);
        self.generation
    }

    /// The connection `ch` of `generation`, if it is still there, marked dirty for the driver
    /// (whatever a handle does to it may have something to send).
    pub(super) fn slot(&mut self, ch: ConnectionHandle, generation: u64) -> Option<&mut Slot> {
        self.peek(ch, generation)?;
        self.mark(ch);
        self.conns.get_mut(ch)
    }

    /// The same, not marked: for what only reads the connection, or registers a waiter, and so
    /// gives the driver nothing to send.
    pub(super) fn peek(&mut self, ch: ConnectionHandle, generation: u64) -> Option<&mut Slot> {
        self.conns.get_mut(ch).filter(|s| s.generation == generation)
    }

    /// Record `slot`'s timer (from `poll_timeout`, just taken): queued if it is earlier than
    /// the one queued for it.
    pub(super) fn schedule(&mut self, ch: ConnectionHandle, slot: &mut Slot) {
        let Some(at) = slot.timeout else { return };
        if slot.scheduled.is_none_or(|s| at < s) {
            slot.scheduled = Some(at);
            self.timers.push(Reverse((at, ch.0, slot.generation)));
        }
    }

    /// The connections whose timers are due at `now`: their timeouts handled, each marked for
    /// stepping.
    pub(super) fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((at, ch, generation))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let ch = ConnectionHandle(ch);
            let Some(slot) = self.conns.get_mut(ch) else { continue };
            if slot.generation != generation || slot.scheduled != Some(at) {
                continue;
            }
            slot.scheduled = None;
            match slot.timeout {
                Some(t) if t <= now => {
                    slot.conn.handle_timeout(now);
                    self.mark(ch);
                }
                // Moved later since it was queued: queued again at its new time.
                Some(t) => {
                    slot.scheduled = Some(t);
                    self.timers.push(Reverse((t, ch.0, generation)));
                }
                None => {}
            }
        }
    }

    /// When the earliest timer is due.
    pub(super) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    pub(super) fn mark(&mut self, ch: ConnectionHandle) {
        let Some(slot) = self.conns.get_mut(ch) else { return };
        if slot.dirty {
            return;
        }
        slot.dirty = true;
        if self.dirty.is_empty() {
            if let Some(driver) = &self.driver {
                driver.wake_by_ref();
            }
        }
        self.dirty.push(ch);
    }
}

/// A worker's connections by handle. quinn-proto hands out handles as slab indices (small, and
/// reused), so a vector indexed by them serves where a hash map hashed the handle on every
/// stream operation. Boxed: the driver takes a connection out to step it beside the endpoint,
/// and quinn-proto's connection is kilobytes to move.
#[derive(Default)]
pub(crate) struct Conns {
    slots: Vec<Option<Box<Slot>>>,
    len: usize,
}

impl Conns {
    pub(super) fn get_mut(&mut self, ch: ConnectionHandle) -> Option<&mut Slot> {
        self.slots.get_mut(ch.0)?.as_deref_mut()
    }

    pub(super) fn insert(&mut self, ch: ConnectionHandle, slot: Box<Slot>) {
        if self.slots.len() <= ch.0 {
            self.slots.resize_with(ch.0 + 1, || None);
        }
        if self.slots[ch.0].replace(slot).is_none() {
            self.len += 1;
        }
    }

    pub(super) fn remove(&mut self, ch: ConnectionHandle) -> Option<Box<Slot>> {
        let slot = self.slots.get_mut(ch.0)?.take()?;
        self.len -= 1;
        Some(slot)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Tasks waiting on streams of one connection, by stream: a handful at a time, so a short
/// vector searched in place rather than a hash map.
#[derive(Default)]
pub(crate) struct Waiters(Vec<(StreamId, Waker)>);

impl Waiters {
    /// `waker` waits for stream `id` (in place of whoever waited for it before).
    pub(super) fn insert(&mut self, id: StreamId, waker: &Waker) {
        match self.0.iter_mut().find(|(s, _)| *s == id) {
            Some((_, w)) => w.clone_from(waker),
            None => self.0.push((id, waker.clone())),
        }
    }

    fn wake(&mut self, id: StreamId) {
        if let Some(i) = self.0.iter().position(|(s, _)| *s == id) {
            self.0.swap_remove(i).1.wake();
        }
    }

    fn wake_all(&mut self) {
        self.0.drain(..).for_each(|(_, w)| w.wake());
    }
}

/// One connection and its waiters.
pub(crate) struct Slot {
    pub(super) conn: quinn_proto::Connection,
    generation: u64,
    pub(super) dirty: bool,
    /// When quinn-proto wants its timers handled next.
    pub(super) timeout: Option<Instant>,
    /// The time of this connection's live entry in the timer queue.
    scheduled: Option<Instant>,
    /// Why the connection ended, once it has.
    pub(super) lost: Option<ConnectionError>,
    /// The ClientHello is read: the server name is known.
    pub(super) handshake_data: bool,
    pub(super) connected: bool,
    pub(super) wakers: Wakers,
}

/// Who waits for what on a connection; each woken by the event that can end its wait.
#[derive(Default)]
pub(crate) struct Wakers {
    pub(super) read: Waiters,
    pub(super) write: Waiters,
    /// Accepting a stream the peer opened, by direction (`Dir as usize`).
    pub(super) accept: [Option<Waker>; 2],
    /// Opening a stream of ours, by direction.
    pub(super) open: [Option<Waker>; 2],
    /// The handshake's progress and the connection's end.
    pub(super) conn: Vec<Waker>,
}

impl Wakers {
    pub(super) fn wake_all(&mut self) {
        self.read.wake_all();
        self.write.wake_all();
        self.accept.iter_mut().chain(self.open.iter_mut()).filter_map(Option::take).for_each(Waker::wake);
        self.conn.drain(..).for_each(Waker::wake);
    }

    pub(super) fn wait_conn(&mut self, waker: &Waker) {
        if !self.conn.iter().any(|w| w.will_wake(waker)) {
            self.conn.push(waker.clone());
        }
    }
}

pub(super) fn dir_index(dir: Dir) -> usize {
    match dir {
        Dir::Bi => 0,
        Dir::Uni => 1,
    }
}

impl Slot {
    /// Hand the connection's application events to whoever waits for them.
    pub(super) fn wake(&mut self) {
        while let Some(event) = self.conn.poll() {
            let w = &mut self.wakers;
            match event {
                Event::HandshakeDataReady => {
                    self.handshake_data = true;
                    w.conn.drain(..).for_each(Waker::wake);
                }
                Event::Connected => {
                    self.connected = true;
                    w.conn.drain(..).for_each(Waker::wake);
                }
                Event::ConnectionLost { reason } => {
                    self.lost.get_or_insert(reason);
                    w.wake_all();
                }
                Event::Stream(StreamEvent::Opened { dir }) => {
                    if let Some(waker) = w.accept[dir_index(dir)].take() {
                        waker.wake();
                    }
                }
                Event::Stream(StreamEvent::Available { dir }) => {
                    if let Some(waker) = w.open[dir_index(dir)].take() {
                        waker.wake();
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    w.read.wake(id);
                }
                Event::Stream(
                    StreamEvent::Writable { id } | StreamEvent::Finished { id } | StreamEvent::Stopped { id, .. },
                ) => {
                    w.write.wake(id);
                }
                Event::DatagramReceived | Event::DatagramsUnblocked => {}
            }
        }
    }
}
