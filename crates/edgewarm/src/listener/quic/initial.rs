//! A new connection's Initial keys, derived once instead of twice.
//!
//! quinn-proto derives them from the client's first destination connection ID twice: once to
//! read the client's first packet (`ServerConfig::initial_keys`, in `Endpoint::handle`) and again
//! as the connection is made (`Session::initial_keys`, in `Endpoint::accept`). Each derivation
//! is an HKDF extract, six expansions and four AES key schedules: about 2 % of an HTTP/3
//! request's instructions at 31 requests a connection (docs/benchmarks.md). The keys are a pure
//! function of the QUIC version and that ID, and keep no state between packets, so the second
//! derivation takes the first one's keys, shared.
//!
//! The keys wait in slots of the thread's own: both calls run on the worker that received the
//! packet, the first as quinn's endpoint task reads it, the second when the listener's accept
//! loop accepts it, after the endpoint task may have read the rest of its batch (other clients'
//! first packets among them). So the last [`RECENT`] derivations are kept, each taken once; a
//! connection whose keys were pushed out derives its own, as it would without this.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use quinn::crypto::{CryptoError, HeaderKey, KeyPair, Keys, PacketKey};
use quinn::ConnectionId;

/// Derivations kept per worker: more than new connections' first packets in one receive batch
/// usually are, and a few hundred bytes each.
const RECENT: usize = 16;

thread_local! {
    static LAST: RefCell<VecDeque<Derived>> = const { RefCell::new(VecDeque::new()) };
}

#[cfg(test)]
thread_local! {
    /// Connections on this thread whose own derivation took the first packet's keys.
    pub(super) static TAKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Keys derived for a connection ID, shared between the two who ask for them.
struct Derived {
    version: u32,
    cid: ConnectionId,
    header: KeyPair<Arc<dyn HeaderKey>>,
    packet: KeyPair<Arc<dyn PacketKey>>,
}

impl Derived {
    fn keys(&self) -> Keys {
        let header = |k: &Arc<dyn HeaderKey>| Box::new(Shared(k.clone())) as Box<dyn HeaderKey>;
        let packet = |k: &Arc<dyn PacketKey>| Box::new(Shared(k.clone())) as Box<dyn PacketKey>;
        Keys {
            header: KeyPair { local: header(&self.header.local), remote: header(&self.header.remote) },
            packet: KeyPair { local: packet(&self.packet.local), remote: packet(&self.packet.remote) },
        }
    }
}

/// Keep `keys`, just derived for `cid`, for the connection's own derivation; what to use now.
pub(super) fn remember(version: u32, cid: &ConnectionId, keys: Keys) -> Keys {
    let derived = Derived {
        version,
        cid: *cid,
        header: KeyPair { local: Arc::from(keys.header.local), remote: Arc::from(keys.header.remote) },
        packet: KeyPair { local: Arc::from(keys.packet.local), remote: Arc::from(keys.packet.remote) },
    };
    let now = derived.keys();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.len() >= RECENT {
            last.pop_front();
        }
        last.push_back(derived);
    });
    now
}

/// The keys remembered for `cid`, once.
pub(super) fn take(version: u32, cid: &ConnectionId) -> Option<Keys> {
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        let at = last.iter().position(|d| d.version == version && d.cid == *cid)?;
        #[cfg(test)]
        TAKEN.with(|n| n.set(n.get() + 1));
        last.remove(at).map(|d| d.keys())
    })
}

/// One of the shared keys.
struct Shared<K: ?Sized>(Arc<K>);

impl HeaderKey for Shared<dyn HeaderKey> {
    fn decrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        self.0.decrypt(pn_offset, packet);
    }

    fn encrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        self.0.encrypt(pn_offset, packet);
    }

    fn sample_size(&self) -> usize {
        self.0.sample_size()
    }
}

impl PacketKey for Shared<dyn PacketKey> {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        self.0.encrypt(packet, buf, header_len);
    }

    fn decrypt(&self, packet: u64, header: &[u8], payload: &mut BytesMut) -> Result<(), CryptoError> {
        self.0.decrypt(packet, header, payload)
    }

    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }

    fn confidentiality_limit(&self) -> u64 {
        self.0.confidentiality_limit()
    }

    fn integrity_limit(&self) -> u64 {
        self.0.integrity_limit()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quinn::crypto::ServerConfig;
    use quinn::ConnectionId;

    use super::*;

    /// rustls's QUIC server configuration, as the listener's is made (its certificate does not
    /// matter to Initial keys).
    fn config() -> quinn::crypto::rustls::QuicServerConfig {
        quinn::crypto::rustls::QuicServerConfig::try_from(super::super::assumptions::server_tls().0).unwrap()
    }

    /// A packet sealed with one set of keys opens with the other.
    fn same(sealer: &Keys, opener: &Keys) -> bool {
        let mut packet = vec![0xc3, 1, 2, 3, 4, 5, 6, 7];
        packet.extend_from_slice(b"a client's first flight");
        packet.resize(packet.len() + sealer.packet.local.tag_len(), 0);
        sealer.packet.local.encrypt(7, &mut packet, 8);
        let (header, payload) = packet.split_at(8);
        let mut payload = BytesMut::from(payload);
        opener.packet.local.decrypt(7, header, &mut payload).is_ok() && &payload[..] == b"a client's first flight"
    }

    #[test]
    fn the_connection_s_derivation_takes_the_first_packet_s_keys_once_and_only_for_its_id() {
        let config = Arc::new(config());
        let (v1, id, other) = (1, ConnectionId::new(&[7; 8]), ConnectionId::new(&[8; 8]));
        let fresh = config.initial_keys(v1, &id).unwrap();
        let first = remember(v1, &id, config.initial_keys(v1, &id).unwrap());
        assert!(same(&fresh, &first), "the shared keys are the keys");
        assert!(take(v1, &other).is_none(), "another connection's ID");
        assert!(take(0xff00_001d, &id).is_none(), "another version");
        let second = take(v1, &id).expect("the keys remembered");
        assert!(same(&first, &second) && same(&second, &fresh));
        assert!(take(v1, &id).is_none(), "taken once");
    }

    /// A batch of first packets read before any is accepted: each connection still finds its
    /// own keys, up to [`RECENT`] of them; older ones are derived again.
    #[test]
    fn a_batch_of_first_packets_each_keep_their_keys_up_to_recent() {
        let config = Arc::new(config());
        let ids: Vec<ConnectionId> = (0..=RECENT as u8).map(|i| ConnectionId::new(&[i; 8])).collect();
        for id in &ids {
            remember(1, id, config.initial_keys(1, id).unwrap());
        }
        assert!(take(1, &ids[0]).is_none(), "the oldest was pushed out");
        for id in ids[1..].iter().rev() {
            let keys = take(1, id).expect("kept");
            assert!(same(&keys, &config.initial_keys(1, id).unwrap()));
        }
    }
}
