//! TLS for routes that terminate it: the client-facing server ([`client`]; with 0-RTT, its
//! handshake driver [`early`] and session store [`sessions`]; [`handshake`]: whether a client's
//! handshake is still running as requests are read, over TCP or QUIC; a fleet's shared ticket keys
//! [`ticket_keys`], else the process's own, handed over at upgrades: [`process_keys`]) and the
//! origin-facing client side ([`origin`]); handing either side's record
//! layer to the kernel ([`ktls`]); what a route's certificate says of itself, its names and
//! expiry ([`certinfo`]). Nothing here runs for blind tunnels.

pub mod certinfo;
pub mod client;
pub mod early;
pub(crate) mod handshake;
mod hkdf;
pub mod ktls;
pub mod origin;
pub mod pem;
pub mod process_keys;
pub mod sessions;
pub mod ticket_keys;

use std::sync::Arc;

/// The one crypto provider, aws-lc-rs, given explicitly so a second provider compiled in by
/// some dependency can never change which one edgewarm uses; its TLS 1.3 suites expand keys
/// with an HMAC keyed once per secret ([`hkdf`]).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    hkdf::provider()
}
