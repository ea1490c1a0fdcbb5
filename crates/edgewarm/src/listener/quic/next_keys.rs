//! The keys of a connection's next 1-RTT key phase, derived when first used.
//!
//! quinn-proto asks the TLS session for the keys of the key phase after the current one (RFC
//! 9001 §6) as soon as a connection has its 1-RTT keys, so that a peer's key update can be read
//! the moment it comes. quinn-proto updates a connection's keys itself once it has sent a random
//! 10 to 1,000 packets (so that peers that mishandle updates fail early), then at the AEAD's
//! limit; a connection that sends fewer, as most short-lived ones do, never uses them. Yet each
//! derivation is two secret updates, four HKDF expansions and two AEAD key schedules: 1.4 % of an
//! HTTP/3 request's instructions at 31 requests a connection (docs/benchmarks.md). So the session
//! gives quinn-proto a pair of stand-ins, which derive the real keys from the session the first
//! time either is used.
//!
//! The session derives each phase's keys from the previous phase's secrets, in turn: a pair not
//! yet derived is derived before the session is asked for the next one ([`Deferred::force`]).

use std::sync::{Arc, Mutex, OnceLock};

use bytes::BytesMut;
use quinn::crypto::{CryptoError, KeyPair, PacketKey, Session};

/// A TLS session shared between the connection (through its wrapper) and its deferred keys.
pub(super) type Shared = Arc<Mutex<Box<dyn Session>>>;

/// The session, locked (a panic elsewhere while it was held leaves nothing half-changed that
/// these calls rely on).
pub(super) fn lock(session: &Shared) -> std::sync::MutexGuard<'_, Box<dyn Session>> {
    session.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next phase's keys, derived from `session` on first use.
pub(super) struct Deferred {
    session: Shared,
    keys: OnceLock<Option<KeyPair<Box<dyn PacketKey>>>>,
}

impl Deferred {
    /// A pair of stand-ins for the keys `session` derives next, and what forces them.
    pub(super) fn pair(session: Shared) -> (Arc<Self>, KeyPair<Box<dyn PacketKey>>) {
        let next = Arc::new(Self { session, keys: OnceLock::new() });
        let half = |local| Box::new(Half { next: next.clone(), local }) as Box<dyn PacketKey>;
        let pair = KeyPair { local: half(true), remote: half(false) };
        (next, pair)
    }

    /// The keys, derived now if they were not yet. Never called with the session locked.
    pub(super) fn force(&self) -> Option<&KeyPair<Box<dyn PacketKey>>> {
        self.keys.get_or_init(|| lock(&self.session).next_1rtt_keys()).as_ref()
    }
}

/// One direction of a deferred pair.
struct Half {
    next: Arc<Deferred>,
    local: bool,
}

impl Half {
    /// The real key. `None` only if the session had no next secrets, which it has from the
    /// moment it gives out 1-RTT keys, before quinn-proto asks for the next ones.
    fn key(&self) -> Option<&dyn PacketKey> {
        let pair = self.next.force()?;
        Some(if self.local { &*pair.local } else { &*pair.remote })
    }
}

impl PacketKey for Half {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        // Without a key the packet goes out with its tag unwritten, and the peer drops it.
        if let Some(key) = self.key() {
            key.encrypt(packet, buf, header_len);
        }
    }

    fn decrypt(&self, packet: u64, header: &[u8], payload: &mut BytesMut) -> Result<(), CryptoError> {
        self.key().ok_or(CryptoError)?.decrypt(packet, header, payload)
    }

    // Asked of the new next keys at each key update (the phase's packet budget): derived then,
    // as they were before. Not asked at the handshake.
    fn tag_len(&self) -> usize {
        self.key().map_or(16, |k| k.tag_len())
    }

    fn confidentiality_limit(&self) -> u64 {
        self.key().map_or(0, |k| k.confidentiality_limit())
    }

    fn integrity_limit(&self) -> u64 {
        self.key().map_or(0, |k| k.integrity_limit())
    }
}
