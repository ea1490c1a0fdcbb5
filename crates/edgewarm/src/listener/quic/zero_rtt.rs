//! Counting 0-RTT on an HTTP/3 listener, which quinn does not report on the server side.
//!
//! quinn's server reads a client's 0-RTT packets only if the TLS session hands it 0-RTT keys,
//! once the ClientHello is read: so the crypto configuration is wrapped, and each session's
//! keys are seen as quinn asks for them. The wrapper also shares a connection's Initial keys
//! between quinn-proto's two derivations of them ([`super::initial`]), and has the keys the
//! connection reads the client's packets with cut their trailing padding ([`super::padding`]).
//! Everything else goes straight through to quinn's own rustls session.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;
use quinn::crypto::{
    ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, ServerConfig, Session, UnsupportedVersion,
};
use quinn::{ConnectionId, Side};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::TransportError;

use super::next_keys::{lock, Deferred, Shared};

/// A server crypto configuration whose sessions count 0-RTT accepted in `accepted`.
pub(crate) struct Counting {
    inner: Arc<dyn ServerConfig>,
    accepted: Counter,
}

impl Counting {
    pub(crate) fn new(inner: Arc<dyn ServerConfig>, accepted: Counter) -> Self {
        Self { inner, accepted }
    }
}

impl ServerConfig for Counting {
    fn initial_keys(&self, version: u32, dst_cid: &ConnectionId) -> Result<Keys, UnsupportedVersion> {
        // Kept for the connection's own derivation, should this packet start one.
        self.inner.initial_keys(version, dst_cid).map(|keys| super::initial::remember(version, dst_cid, keys))
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.inner.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(self: Arc<Self>, version: u32, params: &TransportParameters) -> Box<dyn Session> {
        let inner = Arc::new(Mutex::new(self.inner.clone().start_session(version, params)));
        Box::new(CountingSession { inner, accepted: self.accepted.clone(), version, key_changes: 0, next: None })
    }
}

/// `keys`, the client's packets read with them losing their trailing padding.
fn trimming(mut keys: Keys) -> Keys {
    keys.packet.remote = Box::new(super::padding::Trimming(keys.packet.remote));
    keys
}

/// One connection's TLS session. quinn asks a server session for its 0-RTT keys once, after
/// the ClientHello: keys then mean the client's early data is accepted.
///
/// The session is shared with its next 1-RTT keys, which derive themselves from it when first
/// used ([`super::next_keys`]).
struct CountingSession {
    inner: Shared,
    accepted: Counter,
    version: u32,
    /// Key changes handed out: the Handshake keys, then the 1-RTT ones.
    key_changes: u8,
    /// The next phase's keys as last handed out, perhaps not derived yet.
    next: Option<Arc<Deferred>>,
}

impl CountingSession {
    fn inner(&self) -> MutexGuard<'_, Box<dyn Session>> {
        lock(&self.inner)
    }
}

impl Session for CountingSession {
    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        let keys = self.inner().early_crypto();
        if keys.is_some() {
            self.accepted.inc();
        }
        keys
    }

    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        // Those its first packet was read with, if this thread has just derived them.
        let taken = if side == Side::Server { super::initial::take(self.version, dst_cid) } else { None };
        trimming(taken.unwrap_or_else(|| self.inner().initial_keys(dst_cid, side)))
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.inner().handshake_data()
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner().peer_identity()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner().early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner().is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.inner().read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner().transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        // The Handshake keys, then the 1-RTT ones (an MTU probe is a padded 1-RTT packet).
        let keys = self.inner().write_handshake(buf).map(trimming);
        self.key_changes += u8::from(keys.is_some() && self.key_changes < 2);
        keys
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        if self.key_changes < 2 {
            // No 1-RTT keys yet, so no next ones: the session says so itself.
            return self.inner().next_1rtt_keys();
        }
        // The pair handed out before is derived first: each phase's keys come from the last's.
        if let Some(previous) = self.next.take() {
            previous.force();
        }
        let (next, pair) = Deferred::pair(self.inner.clone());
        self.next = Some(next);
        Some(pair)
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner().is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner().export_keying_material(output, label, context)
    }
}
