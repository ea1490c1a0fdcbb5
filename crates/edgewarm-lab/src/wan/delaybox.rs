//! The user-space delay box: a packet read from one TUN device is written to its peer TUN
//! device one configured one-way delay later.
//!
//! ```text
//!   namespace A          delay box (this process, root namespace)          namespace B
//!   tun_a  ──read──▶ [reader thread] ─▶ FIFO ─▶ [writer thread: wait d] ──write──▶ tun_b
//!   tun_a  ◀─write── [writer thread: wait d] ◀─ FIFO ◀─ [reader thread] ◀──read── tun_b
//! ```
//!
//! Why TUN and not netem: this kernel has no netem qdisc. A TUN pair carries whole IP packets,
//! so the kernels on both sides run real TCP — SYN, SYN-ACK, Fast Open cookies, retransmits —
//! and every round trip, including the TCP handshake's, pays the delay exactly once each way.
//!
//! Timing: each packet is stamped when read and released at `stamp + delay` (plus jitter, if
//! configured: see [`crate::wan::impair`], which also decides losses). A FIFO per direction keeps
//! order (release times are monotonic: the same delay for all, and jitter never reorders). The
//! writer sleeps with `thread::sleep` until 200 µs before the release time, then yields in a
//! loop until it: the OS sleep is accurate to tens of µs but can overshoot under load, the
//! final spin is not, and tokio's 1 ms timer would be far too coarse. Lateness (release to
//! actual write) is measured and reported as `max_late`.
//!
//! Cut: [`Link::cut`] drops every packet either way until it is restored (counted as `lost`):
//! a link gone dark, as a partition is, with no error for either side to see.
//!
//! Queue: bounded (like a router's buffer); packets arriving to a full queue are dropped and
//! counted (`drops`), and TCP reacts as it would to a real loss. Packets the loss model takes
//! are counted apart (`lost`), so an impaired link's queue overflows still show.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tun_rs::SyncDevice;

use edgewarm::transport::sockopt;

use crate::wan::impair::{stream_seed, Impairer, LinkImpair};

/// Packets queued per direction before drops: at 1500 bytes, 8 MB in flight, enough for a
/// 2 Gbit/s link with 30 ms one-way delay.
const QUEUE_PACKETS: usize = 8192;
/// Largest packet: the TUN MTU we configure plus headroom.
const MAX_PACKET: usize = 65536;
const SPIN: Duration = Duration::from_micros(200);
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub struct Counters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Packets dropped because the queue was full.
    pub drops: AtomicU64,
    /// Packets dropped by the loss model ([`crate::wan::impair`]).
    pub lost: AtomicU64,
    /// Worst lateness of a write after its release time, in µs.
    pub max_late_us: AtomicU64,
}

struct Queue {
    packets: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    ready: Condvar,
}

/// One link: two TUN devices and four threads. Dropping it stops and joins the threads.
pub struct Link {
    stop: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub forward: Arc<Counters>,
    pub backward: Arc<Counters>,
}

impl Link {
    /// Start relaying between `a` and `b` with `one_way` delay in each direction, impaired by
    /// `impair` (each direction with its own random stream, derived from `seed`).
    pub fn start(a: SyncDevice, b: SyncDevice, one_way: Duration, impair: LinkImpair, seed: u64) -> io::Result<Self> {
        let (a, b) = (Arc::new(a), Arc::new(b));
        let stop = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let (forward, backward) = (Arc::new(Counters::default()), Arc::new(Counters::default()));
        let mut threads = Vec::new();
        for (dir, (from, to, counters, name)) in
            [(&a, &b, &forward, "a→b"), (&b, &a, &backward, "b→a")].into_iter().enumerate()
        {
            let queue = Arc::new(Queue { packets: Mutex::new(VecDeque::new()), ready: Condvar::new() });
            let impairer = Impairer::new(one_way, impair, stream_seed(seed, dir as u64));
            let (from, q, st, c) = (from.clone(), queue.clone(), stop.clone(), counters.clone());
            let cut = cut.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("delay-read {name}"))
                    .spawn(move || read_loop(&from, &q, (impairer, &cut), &st, &c))?,
            );
            let (to, st, c) = (to.clone(), stop.clone(), counters.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("delay-write {name}"))
                    .spawn(move || write_loop(&to, &queue, &st, &c))?,
            );
        }
        Ok(Self { stop, cut, threads, forward, backward })
    }

    /// Cut the link (`true`: every packet either way is dropped from now on) or restore it.
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
    }
}

impl Link {
    /// Worst lateness of a write after its release time so far, either direction, µs.
    pub fn max_late_us(&self) -> u64 {
        [&self.forward, &self.backward].iter().map(|c| c.max_late_us.load(Ordering::Relaxed)).max().unwrap_or(0)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn read_loop(
    dev: &SyncDevice,
    queue: &Queue,
    (mut impairer, cut): (Impairer, &AtomicBool),
    stop: &AtomicBool,
    c: &Counters,
) {
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        match sockopt::wait_readable(dev, POLL) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return,
        }
        let n = match dev.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let admitted = impairer.admit(Instant::now()).filter(|_| !cut.load(Ordering::Relaxed));
        let Some(release) = admitted else {
            c.lost.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut q = queue.packets.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= QUEUE_PACKETS {
            c.drops.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        q.push_back((release, buf[..n].to_vec()));
        drop(q);
        queue.ready.notify_one();
    }
}

fn write_loop(dev: &SyncDevice, queue: &Queue, stop: &AtomicBool, c: &Counters) {
    while !stop.load(Ordering::Relaxed) {
        let next = {
            let q = queue.packets.lock().unwrap_or_else(|p| p.into_inner());
            let (mut q, _) =
                queue.ready.wait_timeout_while(q, POLL, |q| q.is_empty()).unwrap_or_else(|p| p.into_inner());
            q.pop_front()
        };
        let Some((release, packet)) = next else { continue };
        wait_until(release);
        let late = Instant::now().saturating_duration_since(release);
        c.max_late_us.fetch_max(u64::try_from(late.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        // A write can fail while a namespace is being torn down; the packet is then lost,
        // which is what a link going down does.
        if dev.send(&packet).is_ok() {
            c.packets.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(packet.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Sleep most of the way, then yield until the deadline (see the module doc).
fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::thread::yield_now();
        }
    }
}

/// Create a TUN device (no packet-information header) named `name` in this namespace.
pub fn tun(name: &str) -> io::Result<SyncDevice> {
    tun_rs::DeviceBuilder::new().name(name).mtu(1500).build_sync()
}
