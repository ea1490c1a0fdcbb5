//! Connection IDs that name the socket whose endpoint issued them, so that the kernel can steer
//! a connection's packets back to it whatever the client's address
//! ([`crate::transport::sockopt::steer_quic_by_connection_id`]).
//!
//! The first byte is the socket's index in the listener's reuseport group; the eight after it
//! are quinn's own keyed-hash IDs, so a forged ID is still told apart without a lookup (and gets
//! no stateless reset). Routing information in the first bytes is what QUIC load balancers do
//! (draft-ietf-quic-load-balancers); the rest stays unpredictable, so IDs do not link one path
//! of a connection to another.

use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use quinn_proto::{HashedConnectionIdGenerator, InvalidCid};

/// The length of every connection ID an HTTP/3 endpoint issues.
pub(crate) const CID_LEN: usize = 1 + HASHED_LEN;
/// quinn's keyed-hash IDs.
const HASHED_LEN: usize = 8;

/// Issues connection IDs that begin with one socket's index.
pub(crate) struct SocketCids {
    socket: u8,
    inner: HashedConnectionIdGenerator,
    /// The earlier processes', after upgrades: their IDs are valid here too, so that once they
    /// have gone quinn answers them with a stateless reset ([`super::relay`]).
    earlier: PreviousCids,
    /// Every generation's that shares this process's `tls.ticket_keys` (`QuicKeys::family`):
    /// valid too, so a crashed process's connections are reset by its successor.
    family: PreviousCids,
}

impl SocketCids {
    /// IDs for the socket at `socket` in the group, signed with `key`; `earlier`, the ID keys of
    /// the processes this one took over from (the latest first); `family`, every generation's.
    pub(crate) fn new(socket: u8, key: u64, earlier: &[u64], family: &[u64]) -> Self {
        Self {
            socket,
            inner: HashedConnectionIdGenerator::from_key(key),
            earlier: PreviousCids::new(socket, earlier),
            family: PreviousCids::new(socket, family),
        }
    }
}

/// Tells the IDs one socket's endpoint issued in earlier processes.
pub(crate) struct PreviousCids {
    socket: u8,
    keys: Vec<HashedConnectionIdGenerator>,
}

impl PreviousCids {
    pub(crate) fn new(socket: u8, keys: &[u64]) -> Self {
        Self { socket, keys: keys.iter().map(|&k| HashedConnectionIdGenerator::from_key(k)).collect() }
    }

    /// Whether `id` (a packet's destination connection ID) is one of them.
    pub(crate) fn issued(&self, id: &[u8]) -> bool {
        self.keys.iter().any(|inner| signed(self.socket, inner, id))
    }
}

/// `id` begins with `socket` and the rest is signed by `inner`'s key.
fn signed(socket: u8, inner: &HashedConnectionIdGenerator, id: &[u8]) -> bool {
    match id.split_first() {
        Some((&first, hashed)) if first == socket && hashed.len() == HASHED_LEN => {
            inner.validate(&ConnectionId::new(hashed)).is_ok()
        }
        _ => false,
    }
}

impl ConnectionIdGenerator for SocketCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let hashed = self.inner.generate_cid();
        let mut bytes = [0; CID_LEN];
        bytes[0] = self.socket;
        bytes[1..].copy_from_slice(&hashed);
        ConnectionId::new(&bytes)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        // Only IDs no connection here has are asked about (quinn looks its own up first), so
        // the family's keys cost nothing per packet.
        if signed(self.socket, &self.inner, cid) || self.earlier.issued(cid) || self.family.issued(cid) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The destination connection ID of a packet to us, if the datagram is long enough to hold
/// one of ours: in a short header, the bytes after the flags; in a long header, the ID whose
/// length it gives, if that is ours.
pub(crate) fn destination_id(d: &[u8]) -> Option<&[u8]> {
    let first = *d.first()?;
    if first & 0x80 == 0 {
        return d.get(1..1 + CID_LEN);
    }
    if usize::from(*d.get(5)?) != CID_LEN {
        return None;
    }
    d.get(6..6 + CID_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_begin_with_their_socket_and_only_their_own_validate() {
        let mut three = SocketCids::new(3, 7, &[], &[]);
        let mut four = SocketCids::new(4, 7, &[], &[]);
        let a = three.generate_cid();
        let b = three.generate_cid();
        assert_eq!((a.len(), a[0], b[0]), (CID_LEN, 3, 3));
        assert_ne!(a, b, "the rest is random");
        assert!(three.validate(&a).is_ok());
        assert!(four.validate(&a).is_err(), "another socket's ID");
        let mut forged = [0; CID_LEN];
        forged.copy_from_slice(&a);
        forged[5] ^= 1;
        assert!(three.validate(&ConnectionId::new(&forged)).is_err(), "a forged ID");
        assert!(three.validate(&ConnectionId::new(&a[..HASHED_LEN])).is_err(), "a short ID");
        assert_eq!(four.generate_cid()[0], 4);
    }

    #[test]
    fn after_an_upgrade_the_old_processs_ids_are_told_apart_and_still_valid() {
        let mut older = SocketCids::new(2, 10, &[], &[]);
        let mut old = SocketCids::new(2, 11, &[10], &[]);
        let mut new = SocketCids::new(2, 12, &[11, 10], &[]);
        let previous = PreviousCids::new(2, &[11, 10]);
        let (theirs, ours) = (old.generate_cid(), new.generate_cid());
        assert!(previous.issued(&theirs));
        assert!(!previous.issued(&ours), "the new process's own");
        assert!(previous.issued(&older.generate_cid()), "two upgrades back");
        assert!(!previous.issued(&SocketCids::new(3, 11, &[], &[]).generate_cid()), "another socket's");
        assert!(!PreviousCids::new(2, &[]).issued(&theirs), "none before");
        assert!(new.validate(&theirs).is_ok(), "so quinn resets it once the old process has gone");
        assert!(new.validate(&ours).is_ok());
        assert!(old.validate(&ours).is_err());
        assert!(!previous.issued(&[2; 20]), "a client's own first ID");
    }
}
