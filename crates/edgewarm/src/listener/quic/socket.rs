//! The HTTP/3 listener's UDP socket: quinn's own (GSO and GRO where the kernel has them),
//! wrapped to count the datagrams that cannot be QUIC for us (quinn drops those silently; an
//! internet-facing UDP port needs them seen), and to relay datagrams between the two processes
//! of an upgrade ([`super::relay`]). [`check`] is a pure function over one datagram (and
//! [`super::cid::destination_id`], which finds the connection a datagram is for).

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use prometheus_client::metrics::counter::Counter;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

use super::relay::{self, ToOld};
use crate::metrics::{QuicDropped, QuicDroppedLabel, QuicMetrics};

/// Why a datagram cannot be a QUIC packet for this endpoint (RFC 9000 §17, §14.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// Shorter than any packet this endpoint could accept.
    Truncated,
    /// A long header whose connection ID lengths break the limit of 20 bytes.
    Malformed,
    /// A client's Initial in a datagram under 1200 bytes, which a server must discard (it
    /// would let a spoofed source amplify more than three times).
    SmallInitial,
}

/// The least a short-header packet to us holds: a flags byte, our connection ID (8 bytes at
/// the least), a packet number byte and the 16-byte AEAD tag.
const MIN_SHORT: usize = 1 + 8 + 1 + 16;
/// Version 1 (RFC 9000), the one whose Initial type bits we read.
const V1: u32 = 1;

/// What is wrong with one datagram, if anything visible before decryption.
pub(crate) fn check(d: &[u8]) -> Option<Unusable> {
    let first = *d.first()?;
    if first & 0x80 == 0 {
        return (d.len() < MIN_SHORT).then_some(Unusable::Truncated);
    }
    // Long header: flags, version (4), DCID length and DCID, SCID length and SCID.
    let Some(&dcid_len) = d.get(5) else { return Some(Unusable::Truncated) };
    if dcid_len > 20 {
        return Some(Unusable::Malformed);
    }
    let scid_at = 6 + usize::from(dcid_len);
    let Some(&scid_len) = d.get(scid_at) else { return Some(Unusable::Truncated) };
    if scid_len > 20 {
        return Some(Unusable::Malformed);
    }
    let version = u32::from_be_bytes([d[1], d[2], d[3], d[4]]);
    let initial = first & 0x30 == 0;
    if version == V1 && initial && d.len() < 1200 {
        return Some(Unusable::SmallInitial);
    }
    None
}

/// The two ends of an upgrade, as one socket's endpoint sees them.
pub(crate) struct Relay {
    /// Datagrams a newer process passes on once this one has handed over.
    pub from_next: tokio::net::UnixDatagram,
    /// Set when this process hands over: the socket is then the newer process's to read.
    pub handed_over: Arc<AtomicBool>,
    /// After taking over: the older process's connections.
    pub to_old: Option<ToOld>,
}

/// quinn's socket, counting unusable datagrams as they are received (quinn then drops them),
/// and relaying across an upgrade.
pub(crate) struct Counted {
    inner: Arc<dyn AsyncUdpSocket>,
    truncated: Counter,
    malformed: Counter,
    small_initial: Counter,
    relay: Relay,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn AsyncUdpSocket>, metrics: &QuicMetrics, listener: &str, relay: Relay) -> Self {
        let counter = |reason| {
            metrics.dropped.get_or_create(&QuicDroppedLabel { listener: listener.to_string(), reason }).clone()
        };
        Self {
            inner,
            truncated: counter(QuicDropped::Truncated),
            malformed: counter(QuicDropped::Malformed),
            small_initial: counter(QuicDropped::SmallInitial),
            relay,
        }
    }

    /// Count what quinn will drop; after a takeover, take out the old process's datagrams and
    /// send them on. How many buffers are left (moved to the front).
    fn sort(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta], n: usize) -> usize {
        let Some(old) = &self.relay.to_old else {
            for (buf, m) in bufs.iter().zip(meta.iter()).take(n) {
                // With GRO one buffer holds several datagrams, `stride` bytes apart.
                for datagram in buf[..m.len.min(buf.len())].chunks(m.stride.max(1)) {
                    self.count(datagram);
                }
            }
            return n;
        };
        let mut kept = 0;
        for i in 0..n {
            let m = meta[i];
            let (len, stride) = (m.len.min(bufs[i].len()), m.stride.max(1));
            // The datagrams that stay are moved down over those taken; all but the last are
            // still `stride` long, as GRO has them.
            let (mut read, mut write) = (0, 0);
            while read < len {
                let end = (read + stride).min(len);
                self.count(&bufs[i][read..end]);
                if !old.take(&bufs[i][read..end], &m) {
                    bufs[i].copy_within(read..end, write);
                    write += end - read;
                }
                read = end;
            }
            if write == 0 {
                continue;
            }
            if kept != i {
                let (front, back) = bufs.split_at_mut(i);
                front[kept][..write].copy_from_slice(&back[0][..write]);
            }
            meta[kept] = RecvMeta { len: write, ..m };
            kept += 1;
        }
        kept
    }

    /// Datagrams relayed by a newer process, as many as there are buffers.
    fn poll_relayed(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let from = &self.relay.from_next;
        loop {
            ready!(from.poll_recv_ready(cx))?;
            let mut n = 0;
            while n < bufs.len() {
                match from.try_recv(&mut bufs[n]) {
                    Ok(len) => {
                        if let Some(m) = relay::unwrap_in_place(&mut bufs[n][..len]) {
                            // An earlier process's still: on down the chain.
                            let onward = self.relay.to_old.as_ref().is_some_and(|old| old.take(&bufs[n][..m.len], &m));
                            if !onward {
                                meta[n] = m;
                                n += 1;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // Never quinn's error: that would end the endpoint and every connection.
                        tracing::warn!(error = %e, "HTTP/3: cannot read datagrams relayed by the new process");
                        if n == 0 {
                            // Readiness stays set and no waker is registered: be polled again.
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        return Poll::Ready(Ok(n));
                    }
                }
            }
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
        }
    }

    /// What the endpoint is to read: from the socket until this process hands over, and what a
    /// newer process relays.
    fn poll_datagrams(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        // Once handed over, the socket is the newer process's: what is ours comes relayed.
        while !self.relay.handed_over.load(Ordering::Relaxed) {
            match self.inner.poll_recv(cx, bufs, meta) {
                Poll::Ready(Ok(n)) => match self.sort(bufs, meta, n) {
                    0 => continue,
                    kept => return Poll::Ready(Ok(kept)),
                },
                Poll::Pending => break,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            }
        }
        // Polled even before any upgrade, so that the first relayed datagram wakes the endpoint.
        self.poll_relayed(cx, bufs, meta)
    }

    fn count(&self, datagram: &[u8]) {
        let counter = match check(datagram) {
            None => return,
            Some(Unusable::Truncated) => &self.truncated,
            Some(Unusable::Malformed) => &self.malformed,
            Some(Unusable::SmallInitial) => &self.small_initial,
        };
        counter.inc();
    }
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for Counted {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let polled = self.poll_datagrams(cx, bufs, meta);
        // Relayed datagrams that found the old process's queue full wait here: sent now if it
        // has room, else the endpoint is woken when it has.
        if let Some(old) = &self.relay.to_old {
            old.poll_flush(cx);
        }
        polled
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(first: u8, dcid: &[u8], scid: &[u8], len: usize) -> Vec<u8> {
        let mut d = vec![first, 0, 0, 0, 1, dcid.len() as u8];
        d.extend_from_slice(dcid);
        d.push(scid.len() as u8);
        d.extend_from_slice(scid);
        d.resize(len.max(d.len()), 0);
        d
    }

    #[test]
    fn the_destination_id_is_found_in_either_header() {
        use super::super::cid::{destination_id, CID_LEN};
        let id = [9u8; CID_LEN];
        let mut short = vec![0x40];
        short.extend_from_slice(&id);
        short.extend_from_slice(&[0; 20]);
        assert_eq!(destination_id(&short), Some(&id[..]));
        assert_eq!(destination_id(&short[..CID_LEN]), None, "cut short");
        assert_eq!(destination_id(&long(0xe0, &id, &[2; 8], 100)), Some(&id[..]));
        assert_eq!(destination_id(&long(0xc0, &[1; 8], &[2; 8], 1200)), None, "not one of ours: a client's own");
        assert_eq!(destination_id(&[]), None);
    }

    #[test]
    fn datagrams_that_cannot_be_quic_are_told_apart() {
        assert_eq!(check(&[]), None, "nothing to count");
        assert_eq!(check(&[0x40; 10]), Some(Unusable::Truncated));
        assert_eq!(check(&[0x40; MIN_SHORT]), None);
        assert_eq!(check(&[0xc0, 0, 0, 0]), Some(Unusable::Truncated));
        let mut huge_cid = long(0xc0, &[1; 8], &[2; 8], 1200);
        huge_cid[5] = 200;
        assert_eq!(check(&huge_cid), Some(Unusable::Malformed));
        assert_eq!(check(&long(0xc0, &[1; 8], &[2; 21], 1200)), Some(Unusable::Malformed));
        assert_eq!(check(&long(0xc0, &[1; 8], &[2; 8], 300)), Some(Unusable::SmallInitial));
        assert_eq!(check(&long(0xc0, &[1; 8], &[2; 8], 1200)), None, "a client Initial");
        // A Handshake packet (type 2) may be small.
        assert_eq!(check(&long(0xe0, &[1; 8], &[2; 8], 100)), None);
        // A length byte pointing past the end.
        assert_eq!(check(&long(0xc0, &[1; 8], &[], 15)[..14]), Some(Unusable::Truncated));
    }
}
