//! A worker's QUIC loop: one task that receives a batch of datagrams (GRO and recvmmsg through
//! quinn-udp), hands each to quinn-proto, steps every connection the batch or a handle touched
//! in place, and sends what they produced (GSO). No task per connection, no channel per
//! datagram; a stream's handler is woken only by an event for its stream.

use std::future::Future;
use std::io::IoSliceMut;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use quinn_proto::{ConnectionHandle, DatagramEvent, EcnCodepoint, Incoming};

use super::state::{Shared, State};

/// Datagram buffers a receive call fills at most (each may hold a GRO batch).
const BATCH: usize = quinn::udp::BATCH_SIZE;
/// Receive calls in one turn before letting the worker's other tasks run.
const RECV_TURNS: usize = 16;

/// What the owner decides for a new connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    Accept,
    /// Over the listener's connection limit, or stopping.
    Refuse,
    /// Make the client prove its address first (a Retry packet).
    Retry,
}

/// What the loop asks of its owner for a new connection attempt.
pub(super) trait Accept: Send + Unpin + 'static {
    /// Whether to take the attempt (the listener's connection limit, floods of handshakes).
    fn admit(&mut self, incoming: &Incoming) -> Admit;
    /// A connection was accepted: start serving it.
    fn accepted(&mut self, shared: &Arc<Shared>, ch: ConnectionHandle, generation: u64);
    /// The attempt admitted failed at once (its first flight's handshake, say).
    fn failed(&mut self);
}

/// The loop, as a future that runs until its stop resolves and its connections are all gone.
pub(super) struct Driver<A> {
    shared: Arc<Shared>,
    socket: Arc<dyn AsyncUdpSocket>,
    poller: Pin<Box<dyn UdpPoller>>,
    timer: Pin<Box<tokio::time::Sleep>>,
    recv: Box<[u8]>,
    send: Vec<u8>,
    /// A datagram the socket would not take yet, sent before anything else.
    blocked: Option<(quinn_proto::Transmit, Vec<u8>)>,
    accept: A,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
}

impl<A: Accept> Driver<A> {
    pub(super) fn new(
        shared: Arc<Shared>,
        socket: Arc<dyn AsyncUdpSocket>,
        accept: A,
        stop: Pin<Box<dyn Future<Output = ()> + Send>>,
        max_datagram: usize,
    ) -> Self {
        // Room for a GRO batch of the largest datagrams we let peers send, as quinn sizes it.
        let chunk = max_datagram.min(64 * 1024) * socket.max_receive_segments().max(1);
        Self {
            poller: socket.clone().create_io_poller(),
            shared,
            socket,
            timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
            recv: vec![0; chunk * BATCH].into_boxed_slice(),
            send: Vec::with_capacity(64 * 1024),
            blocked: None,
            accept,
            stop,
            stopping: false,
        }
    }

    fn receive(&mut self, cx: &mut Context<'_>, st: &mut State, now: Instant) {
        let mut storage = std::mem::take(&mut self.recv);
        let socket = self.socket.clone();
        receive(&*socket, cx, &mut storage, |meta, datagram| self.datagram(st, now, meta, datagram));
        self.recv = storage;
    }

    fn datagram(&mut self, st: &mut State, now: Instant, meta: &RecvMeta, data: &[u8]) {
        let ecn = meta.ecn.map(|e| match e {
            quinn::udp::EcnCodepoint::Ect0 => EcnCodepoint::Ect0,
            quinn::udp::EcnCodepoint::Ect1 => EcnCodepoint::Ect1,
            quinn::udp::EcnCodepoint::Ce => EcnCodepoint::Ce,
        });
        let mut response = Vec::new();
        match st.endpoint.handle(now, meta.addr, meta.dst_ip, ecn, BytesMut::from(data), &mut response) {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(slot) = st.conns.get_mut(ch) {
                    slot.conn.handle_event(event);
                    st.mark(ch);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.incoming(st, now, incoming),
            Some(DatagramEvent::Response(transmit)) => {
                self.transmit(transmit, &response);
            }
            None => {}
        }
    }

    fn incoming(&mut self, st: &mut State, now: Instant, incoming: Incoming) {
        let mut response = Vec::new();
        let admit = if self.stopping { Admit::Refuse } else { self.accept.admit(&incoming) };
        match admit {
            Admit::Accept => {}
            Admit::Refuse => {
                let transmit = st.endpoint.refuse(incoming, &mut response);
                self.transmit(transmit, &response);
                return;
            }
            Admit::Retry => {
                // `admit` asks only for an attempt that may be retried; should it not be, the
                // attempt is dropped.
                match st.endpoint.retry(incoming, &mut response) {
                    Ok(transmit) => {
                        self.transmit(transmit, &response);
                    }
                    Err(e) => st.endpoint.ignore(e.into_incoming()),
                }
                return;
            }
        }
        match st.endpoint.accept(incoming, now, &mut response, None) {
            Ok((ch, conn)) => {
                let generation = st.insert(ch, conn);
                self.accept.accepted(&self.shared, ch, generation);
            }
            Err(e) => {
                self.accept.failed();
                if let Some(transmit) = e.response {
                    self.transmit(transmit, &response);
                }
            }
        }
    }

    /// Send one datagram (or GSO batch); one the socket will not take now waits for it.
    fn transmit(&mut self, t: quinn_proto::Transmit, contents: &[u8]) -> bool {
        if self.blocked.is_some() {
            return false;
        }
        let udp = Transmit {
            destination: t.destination,
            ecn: t.ecn.map(|e| match e {
                EcnCodepoint::Ect0 => quinn::udp::EcnCodepoint::Ect0,
                EcnCodepoint::Ect1 => quinn::udp::EcnCodepoint::Ect1,
                EcnCodepoint::Ce => quinn::udp::EcnCodepoint::Ce,
            }),
            contents: &contents[..t.size],
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        match self.socket.try_send(&udp) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let kept = contents[..t.size].to_vec();
                self.blocked = Some((t, kept));
                false
            }
            // Lost like any datagram: QUIC's recovery sends it again.
            Err(e) => {
                tracing::debug!(error = %e, "QUIC send failed");
                true
            }
        }
    }

    /// Step the dirty connections: endpoint bookkeeping, application events, datagrams out.
    fn step(&mut self, st: &mut State, now: Instant) {
        let segments = self.socket.max_transmit_segments();
        let mut left = Vec::new();
        while !st.dirty.is_empty() {
            let dirty = std::mem::take(&mut st.dirty);
            for ch in dirty {
                let Some(mut slot) = st.conns.remove(ch) else { continue };
                slot.dirty = false;
                let mut drained = false;
                let mut sent_all = true;
                for round in 0..2 {
                    while let Some(event) = slot.conn.poll_endpoint_events() {
                        drained |= event.is_drained();
                        if let Some(back) = st.endpoint.handle_event(ch, event) {
                            slot.conn.handle_event(back);
                        }
                    }
                    slot.wake();
                    if round == 1 {
                        break;
                    }
                    while sent_all {
                        self.send.clear();
                        let Some(t) = slot.conn.poll_transmit(now, segments, &mut self.send) else { break };
                        let contents = std::mem::take(&mut self.send);
                        sent_all = self.transmit(t, &contents);
                        self.send = contents;
                    }
                }
                slot.timeout = slot.conn.poll_timeout();
                st.schedule(ch, &mut slot);
                if drained {
                    slot.wakers.wake_all();
                    continue;
                }
                if !sent_all {
                    slot.dirty = true;
                    left.push(ch);
                }
                st.conns.insert(ch, slot);
            }
        }
        // Stepped again once the socket takes the blocked datagram (its poller wakes us).
        st.dirty.extend(left);
    }

    /// Set the timer for the earliest connection timer.
    fn arm(&mut self, cx: &mut Context<'_>, st: &State) {
        let Some(next) = st.next_timer() else { return };
        self.timer.as_mut().reset(next.into());
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }
}

impl<A: Accept> Future for Driver<A> {
    type Output = Relaying;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Relaying> {
        let this = self.get_mut();
        let shared = this.shared.clone();
        let mut st = shared.lock();
        // Out while this turn runs: what it marks dirty it steps itself, without waking itself.
        let waker = match st.driver.take() {
            Some(w) if w.will_wake(cx.waker()) => w,
            _ => cx.waker().clone(),
        };
        if !this.stopping && this.stop.as_mut().poll(cx).is_ready() {
            // No new connections; those open finish on their own (GOAWAY) or at the cut.
            this.stopping = true;
        }
        // Until the socket takes it, or its poller is registered to wake us when it may.
        while let Some((t, contents)) = this.blocked.take() {
            if this.poller.as_mut().poll_writable(cx).is_pending() {
                this.blocked = Some((t, contents));
                break;
            }
            this.transmit(t, &contents);
        }
        let now = Instant::now();
        this.receive(cx, &mut st, now);
        st.expire(now);
        this.step(&mut st, now);
        // A datagram the socket refused in this turn: the poller wakes us once it may take it
        // (else the connection would wait for its next datagram or timer).
        if this.blocked.is_some() && this.poller.as_mut().poll_writable(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        this.arm(cx, &st);
        if this.stopping && st.conns.is_empty() {
            let recv = std::mem::take(&mut this.recv);
            return Poll::Ready(Relaying { socket: this.socket.clone(), recv });
        }
        st.driver = Some(waker);
        Poll::Pending
    }
}

/// A stopped loop's socket, still read for what a newer process relays to this one: that is
/// passed on to an older process draining beside it ([`crate::listener::quic::socket`] does
/// the passing). What is left for this process's own connections, all gone, is dropped. It
/// runs for as long as the process does.
pub(super) struct Relaying {
    socket: Arc<dyn AsyncUdpSocket>,
    recv: Box<[u8]>,
}

impl Future for Relaying {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        receive(&*this.socket, cx, &mut this.recv, |_, _| {});
        Poll::Pending
    }
}

/// Up to [`RECV_TURNS`] receive calls on `socket` into `storage` (cut into [`BATCH`] buffers),
/// each datagram read handed to `each` (a GRO batch cut into its datagrams). Returns once the
/// socket has nothing more; with calls left over, after waking the task for another turn once
/// the worker's other tasks have run.
fn receive(
    socket: &dyn AsyncUdpSocket,
    cx: &mut Context<'_>,
    storage: &mut [u8],
    mut each: impl FnMut(&RecvMeta, &[u8]),
) {
    let chunk = storage.len() / BATCH;
    for _ in 0..RECV_TURNS {
        let mut meta = [RecvMeta::default(); BATCH];
        let mut bufs: Vec<IoSliceMut<'_>> = storage.chunks_mut(chunk).map(IoSliceMut::new).collect();
        let n = match socket.poll_recv(cx, &mut bufs, &mut meta) {
            Poll::Ready(Ok(n)) => n,
            // ICMP errors and the like: nothing to receive from them.
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "QUIC receive failed");
                continue;
            }
            Poll::Pending => return,
        };
        for (meta, buf) in meta.iter().zip(bufs.iter()).take(n) {
            // A GRO batch: datagrams of `stride` bytes, the last one maybe shorter.
            for datagram in buf[..meta.len].chunks(meta.stride.max(1)) {
                each(meta, datagram);
            }
        }
    }
    cx.waker().wake_by_ref();
}
