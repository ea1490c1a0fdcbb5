//! TLS for `prewarm` routes: terminating the client's TLS ([`client`]) and the origin-facing
//! client side ([`origin`]). Nothing here runs for blind tunnels.

pub mod client;
pub mod origin;
pub mod pem;

use std::sync::Arc;

/// The one crypto provider, aws-lc-rs, given explicitly so a second provider compiled in by
/// some dependency can never change which one edgewarm uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}
