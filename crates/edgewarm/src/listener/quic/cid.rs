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
}

impl SocketCids {
    /// IDs for the socket at `socket` in the group, signed with `key`.
    pub(crate) fn new(socket: u8, key: u64) -> Self {
        Self { socket, inner: HashedConnectionIdGenerator::from_key(key) }
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
        match cid.split_first() {
            Some((&socket, hashed)) if socket == self.socket && hashed.len() == HASHED_LEN => {
                self.inner.validate(&ConnectionId::new(hashed))
            }
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_begin_with_their_socket_and_only_their_own_validate() {
        let mut three = SocketCids::new(3, 7);
        let mut four = SocketCids::new(4, 7);
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
}
