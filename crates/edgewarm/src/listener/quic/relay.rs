//! QUIC connections across an upgrade ([`crate::upgrade`]).
//!
//! Both processes hold the same UDP sockets, and a datagram goes to whichever process reads it
//! first. So once the old process has handed over, it stops reading them; the new one reads
//! everything and passes each datagram addressed to one of the old process's connection IDs on
//! to it, over a Unix datagram pair made for each socket (the old process keeps the receiving
//! end, and hands the sending end over with the socket). The old process serves its
//! connections until they drain, sending on its own descriptors of the same sockets.
//!
//! The old process's IDs are told apart by its connection-ID key, which goes with the sockets
//! ([`QuicKeys`]): a client's own random first ID passes for one with a chance of 2^-32. The
//! stateless-reset key goes too, and the new process keeps it: once the old process has gone,
//! the new one answers its clients' packets with resets they believe, and they reconnect at
//! once instead of waiting out their idle timeout.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use prometheus_client::metrics::counter::Counter;
use quinn::udp::{EcnCodepoint, RecvMeta};

use super::cid::PreviousCids;
use crate::upgrade::QuicKeys;

/// The process's QUIC keys and whether it has handed its sockets over, shared by every
/// HTTP/3 endpoint it runs.
#[derive(Debug)]
pub(crate) struct QuicProcess {
    /// Its own keys, with the ID keys of the processes it took over from.
    keys: Mutex<QuicKeys>,
    /// Set once this process has handed over: its endpoints stop reading the sockets.
    pub handed_over: Arc<AtomicBool>,
    /// The endpoints, once they accept no more: kept for as long as the process lives, since
    /// one that has handed over may still relay for an older process draining beside it.
    /// (quinn's endpoints.)
    kept: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl QuicProcess {
    /// `secret`: from `tls.ticket_keys`, if there is the file ([`QuicKeys::from_secret`]).
    pub(crate) fn new(secret: Option<&[u8; 32]>) -> io::Result<Self> {
        let keys = match secret {
            Some(secret) => QuicKeys::from_secret(secret, &crate::upgrade::host_identity()),
            None => QuicKeys::random()?,
        };
        tracing::debug!(
            derived = secret.is_some(),
            "QUIC reset and connection-ID keys {}",
            if secret.is_some() {
                "derived from tls.ticket_keys: a successor resets a crashed process's connections"
            } else {
                "random: after a crash, peers find their connections dead by silence"
            }
        );
        Ok(Self { keys: Mutex::new(keys), handed_over: Arc::default(), kept: Mutex::default() })
    }

    /// Whether this process has handed over and has HTTP/3 endpoints: it may be relaying.
    pub(crate) fn relaying(&self) -> bool {
        self.handed_over.load(Ordering::Relaxed) && !self.kept.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Keep `endpoint` (and so its relay) until the process ends.
    pub(crate) fn keep(&self, endpoint: impl Send + 'static) {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(Box::new(endpoint));
    }

    /// This process's keys, with the earlier processes' ID keys.
    pub(crate) fn keys(&self) -> QuicKeys {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Take over from a process whose keys were `old` (before any endpoint starts).
    pub(crate) fn adopt(&self, old: &QuicKeys) -> io::Result<()> {
        *self.keys.lock().unwrap_or_else(|p| p.into_inner()) = QuicKeys::after(old)?;
        Ok(())
    }
}

/// Before each relayed datagram: version, ECN bits, the client's address (family, 16 address
/// bytes, port) and the address it was sent to (family or 0, 16 bytes).
pub(crate) const HEADER: usize = 38;
const VERSION: u8 = 1;

fn put_ip(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&v6.octets());
        }
    }
}

fn get_ip(b: &[u8]) -> Option<Option<IpAddr>> {
    let mut v6 = [0; 16];
    v6.copy_from_slice(&b[1..17]);
    match b[0] {
        0 => Some(None),
        4 => Some(Some(IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4])))),
        6 => Some(Some(IpAddr::V6(Ipv6Addr::from(v6)))),
        _ => None,
    }
}

/// The header for a datagram received with `meta`.
pub(crate) fn header(meta: &RecvMeta) -> [u8; HEADER] {
    let mut h = [0; HEADER];
    h[0] = VERSION;
    h[1] = meta.ecn.map_or(0, |e| e as u8);
    put_ip(&mut h[2..19], meta.addr.ip());
    h[19..21].copy_from_slice(&meta.addr.port().to_be_bytes());
    if let Some(ip) = meta.dst_ip {
        put_ip(&mut h[21..38], ip);
    }
    h
}

/// A relayed message, read into `buf`: the datagram moved to the front, and its metadata. None
/// for anything else (never sent by us).
pub(crate) fn unwrap_in_place(buf: &mut [u8]) -> Option<RecvMeta> {
    if buf.len() <= HEADER || buf[0] != VERSION {
        return None;
    }
    let ecn = EcnCodepoint::from_bits(buf[1]);
    let ip = get_ip(&buf[2..19])??;
    let port = u16::from_be_bytes([buf[19], buf[20]]);
    let dst_ip = get_ip(&buf[21..38])?;
    let len = buf.len() - HEADER;
    buf.copy_within(HEADER.., 0);
    Some(RecvMeta { addr: SocketAddr::new(ip, port), len, stride: len, ecn, dst_ip })
}

/// Bytes of relayed datagrams waiting for room in the relay's socket, per UDP socket. The
/// kernel's own queue holds fewer than a hundred datagrams (its default send buffer), and the
/// old process may be busy for a moment while the new one reads a burst for it; past this,
/// datagrams are dropped, as at any full queue on a path.
const QUEUE_BYTES: usize = 1 << 20;

/// The new side: datagrams for the old process's connections, sent on to it.
pub(crate) struct ToOld {
    socket: tokio::net::UnixDatagram,
    ids: PreviousCids,
    /// The old process has exited: its connections' packets go to quinn, which resets them.
    gone: AtomicBool,
    /// Messages (header and datagram) the socket had no room for yet, oldest first.
    waiting: Mutex<Waiting>,
    pub sent: Counter,
    pub dropped: Counter,
}

#[derive(Default)]
struct Waiting {
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Where a message is put together: it is copied out only when it has to wait.
    scratch: Vec<u8>,
}

impl ToOld {
    /// In the runtime that will poll it.
    pub(crate) fn new(send: OwnedFd, ids: PreviousCids, sent: Counter, dropped: Counter) -> io::Result<Self> {
        let socket = UnixDatagram::from(send);
        socket.set_nonblocking(true)?;
        let socket = tokio::net::UnixDatagram::from_std(socket)?;
        Ok(Self { socket, ids, gone: AtomicBool::new(false), waiting: Mutex::default(), sent, dropped })
    }

    /// Whether `datagram` (received with `meta`) was the old process's, and so taken here: sent
    /// on, queued until the old process reads ([`Self::poll_flush`] sends it), or dropped when
    /// the queue is full.
    pub(crate) fn take(&self, datagram: &[u8], meta: &RecvMeta) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return false;
        }
        let Some(id) = super::cid::destination_id(datagram) else { return false };
        if !self.ids.issued(id) {
            return false;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let waiting = &mut *waiting;
        waiting.scratch.clear();
        waiting.scratch.extend_from_slice(&header(meta));
        waiting.scratch.extend_from_slice(datagram);
        let message = &waiting.scratch;
        // Behind others waiting, it waits too: a connection's packets keep their order.
        if waiting.queue.is_empty() {
            match self.socket.try_send(message) {
                Ok(_) => {
                    self.sent.inc();
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    self.gone(&e, waiting);
                    return false;
                }
            }
        }
        if waiting.bytes + message.len() > QUEUE_BYTES {
            self.dropped.inc();
        } else {
            waiting.bytes += message.len();
            let message = message.clone();
            waiting.queue.push_back(message);
        }
        true
    }

    /// Send what waits, as far as the socket has room; while some still waits, `cx` is woken
    /// when it has more.
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(message) = waiting.queue.front() {
            let sent = match self.socket.poll_send_ready(cx) {
                Poll::Pending => return,
                Poll::Ready(Ok(())) => self.socket.try_send(message),
                Poll::Ready(Err(e)) => Err(e),
            };
            match sent {
                Ok(_) => {
                    self.sent.inc();
                    let len = message.len();
                    waiting.bytes -= len;
                    waiting.queue.pop_front();
                }
                // Readiness was stale: the next poll registers `cx`.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return self.gone(&e, &mut waiting),
            }
        }
    }

    /// Datagrams waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).queue.len()
    }

    fn gone(&self, e: &io::Error, waiting: &mut Waiting) {
        self.gone.store(true, Ordering::Relaxed);
        self.dropped.inc_by(waiting.queue.len() as u64);
        *waiting = Waiting::default();
        tracing::info!(error = %e, "the previous process has gone: its HTTP/3 clients are reset");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_datagram_comes_out_as_it_went_in() {
        for (addr, dst) in [
            ("192.0.2.7:4433", Some("198.51.100.1")),
            ("[2001:db8::5]:65535", Some("2001:db8::1")),
            ("127.0.0.1:1", None),
        ] {
            let meta = RecvMeta {
                addr: addr.parse().unwrap(),
                len: 0,
                stride: 0,
                ecn: Some(EcnCodepoint::Ce),
                dst_ip: dst.map(|d| d.parse().unwrap()),
            };
            let datagram = b"\x40 a short-header packet";
            let mut buf = header(&meta).to_vec();
            buf.extend_from_slice(datagram);
            let got = unwrap_in_place(&mut buf).unwrap();
            assert_eq!((got.addr, got.ecn, got.dst_ip), (meta.addr, meta.ecn, meta.dst_ip));
            assert_eq!((got.len, got.stride), (datagram.len(), datagram.len()));
            assert_eq!(&buf[..got.len], datagram);
        }
        assert!(unwrap_in_place(&mut [VERSION; HEADER]).is_none(), "no datagram");
        let mut bad = [0u8; HEADER + 4];
        bad[0] = VERSION;
        bad[2] = 5;
        assert!(unwrap_in_place(&mut bad).is_none(), "no such address family");
    }

    /// Datagrams for an old process that is not reading wait, past what the kernel queues, and
    /// go on in order once it reads; past the bound they are dropped and counted.
    #[tokio::test]
    async fn relayed_datagrams_wait_for_a_busy_old_process() {
        use quinn_proto::ConnectionIdGenerator;
        let (send, receive) = UnixDatagram::pair().unwrap();
        let key = 7;
        let id = super::super::cid::SocketCids::new(3, key, &[], &[]).generate_cid();
        let old =
            ToOld::new(send.into(), PreviousCids::new(3, &[key]), Counter::default(), Counter::default()).unwrap();
        let meta = RecvMeta { addr: "192.0.2.7:4433".parse().unwrap(), len: 0, stride: 0, ecn: None, dst_ip: None };
        let datagram = |i: u32| {
            let mut d = vec![0x40];
            d.extend_from_slice(&id);
            d.extend_from_slice(&i.to_be_bytes());
            d.resize(1200, 0);
            d
        };
        // tokio sends nothing before its driver has seen the socket writable.
        std::future::poll_fn(|cx| old.socket.poll_send_ready(cx)).await.unwrap();
        let mut taken = 0u32;
        while old.dropped.get() == 0 {
            assert!(old.take(&datagram(taken), &meta), "the old process's datagram is taken");
            taken += 1;
            assert!(taken < 100_000, "never dropped");
        }
        let message = HEADER + 1200;
        assert!(old.sent.get() > 0, "the first went straight into the socket");
        assert!(old.waiting() * message > QUEUE_BYTES - message, "waiting: {}", old.waiting());
        assert!(!old.take(&[0x40; 40], &meta), "not the old process's: quinn's");
        // The old process reads now: all but the dropped last arrive, in order and whole.
        let receive = tokio::net::UnixDatagram::from_std({
            receive.set_nonblocking(true).unwrap();
            receive
        })
        .unwrap();
        let read = async {
            let mut buf = vec![0; 2048];
            for i in 0..taken - 1 {
                let len = receive.recv(&mut buf).await.unwrap();
                let m = unwrap_in_place(&mut buf[..len]).unwrap();
                assert_eq!((m.addr, m.len), (meta.addr, 1200));
                assert_eq!(buf[..m.len], datagram(i)[..], "datagram {i}");
            }
        };
        let flush = std::future::poll_fn(|cx| {
            old.poll_flush(cx);
            if old.waiting() == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(60), async { tokio::join!(read, flush) }).await.unwrap();
        assert_eq!((old.sent.get(), old.dropped.get()), (u64::from(taken) - 1, 1), "all but the last sent");
    }

    #[test]
    fn a_process_taking_over_keeps_the_reset_key_and_knows_the_old_id_keys() {
        let first = QuicKeys::random().unwrap();
        let second = QuicKeys::after(&first).unwrap();
        assert_eq!((second.reset, &second.earlier[..]), (first.reset, &[first.cid][..]));
        assert_ne!(second.cid, first.cid);
        let mut keys = second.clone();
        for _ in 0..QuicKeys::EARLIER + 2 {
            keys = QuicKeys::after(&keys).unwrap();
        }
        assert_eq!(keys.reset, first.reset);
        assert_eq!(keys.earlier.len(), QuicKeys::EARLIER, "a few generations back, no more");
    }

    /// With a secret from `tls.ticket_keys`: the same keys in every process of a host that reads it,
    /// a new ID key per generation that is never one it relays for, and a crashed process's
    /// IDs valid in its successor started cold, so quinn resets them.
    #[test]
    fn keys_from_the_file_are_shared_on_one_host_and_walk_the_generations() {
        use super::super::cid::{PreviousCids, SocketCids};
        use quinn::ConnectionIdGenerator;
        let first = QuicKeys::from_secret(&[7; 32], b"host");
        let again = QuicKeys::from_secret(&[7; 32], b"host");
        assert_eq!((first.reset, first.cid, &first.family), (again.reset, again.cid, &again.family));
        assert_ne!(first.reset, QuicKeys::from_secret(&[8; 32], b"host").reset, "another fleet's");
        assert_ne!(first.reset, QuicKeys::from_secret(&[7; 32], b"other").reset, "another host's");
        assert_eq!(first.family.len(), QuicKeys::GENERATIONS);
        let mut keys = first.clone();
        let mut crashed = None;
        for n in 1..=QuicKeys::GENERATIONS + 2 {
            keys = QuicKeys::after(&keys).unwrap();
            assert_eq!(keys.generation, n % QuicKeys::GENERATIONS);
            assert_eq!((keys.reset, keys.cid), (first.reset, first.family[n % QuicKeys::GENERATIONS]));
            assert!(!keys.earlier.contains(&keys.cid), "its own ID key is never one it relays for");
            if n == 3 {
                crashed = Some(keys.clone());
            }
        }
        // A process three upgrades on crashes; its successor starts cold, at generation 0.
        let crashed = crashed.unwrap();
        let theirs = SocketCids::new(1, crashed.cid, &crashed.earlier, &crashed.family_accepted()).generate_cid();
        let cold = QuicKeys::from_secret(&[7; 32], b"host");
        let successor = SocketCids::new(1, cold.cid, &cold.earlier, &cold.family_accepted());
        assert!(successor.validate(&theirs).is_ok(), "so its next packet is answered with a reset");
        assert!(!PreviousCids::new(1, &cold.earlier).issued(&theirs), "and not relayed anywhere");
        let stranger = QuicKeys::random().unwrap();
        let foreign = SocketCids::new(1, stranger.cid, &[], &[]).generate_cid();
        assert!(successor.validate(&foreign).is_err(), "an ID no process of the fleet issued");
        // While a process hands over, its successor's new IDs are not valid to it: it would
        // reset them.
        let next = QuicKeys::after(&cold).unwrap();
        let successors = SocketCids::new(1, next.cid, &next.earlier, &next.family_accepted()).generate_cid();
        assert!(successor.validate(&successors).is_err(), "never the successor's");
    }
}
