//! Cleartext origins (`upstream.tls: false`): the request kinds over plain TCP, for an edge in
//! front of app servers on its own network, and for the second tier of a two-tier deployment
//! (an edgewarm near the origin terminating what an edgewarm near the users sends it).
//! HTTP/1.1 rides a keep-alive pool, HTTP/2 is spoken with prior knowledge (h2c, RFC 9113
//! §3.3): the same sets as over TLS, given this [`Connect`].
//!
//! Nothing here is encrypted or authenticated, so only the operator can ask for it, per route,
//! and `check` refuses it beside any `origin_tls` key; a route whose origin is neither loopback
//! nor a private address gets a warning at load ([`warn_if_public`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::connect::{Connect, OriginIo};
use super::dial::WarmError;
use super::seam::BoxFuture;
use crate::config::OriginAddr;
use crate::metrics::RouteName;
use crate::tls::origin::PoolKey;
use crate::transport::{dial, Resolver};

/// Plain TCP connections to one origin.
pub(crate) struct Cleartext {
    key: PoolKey,
    resolver: Arc<Resolver>,
}

impl Cleartext {
    pub(crate) fn new(origin: OriginAddr, resolver: Arc<Resolver>) -> Self {
        // No TLS: nothing to verify and no name to present; the key is the address alone.
        let key = PoolKey { origin, alpn: None, tls: None };
        Self { key, resolver }
    }
}

impl Connect for Cleartext {
    fn key(&self) -> &PoolKey {
        &self.key
    }

    fn transport(&self) -> super::connect::Transport {
        super::connect::Transport::Cleartext
    }

    fn connect<'a>(
        &'a self,
        timeout: Duration,
        congestion: Option<&'a str>,
    ) -> BoxFuture<'a, Result<OriginIo, WarmError>> {
        Box::pin(async move {
            // TCP_NODELAY is set by `dial::connect_with`, as on every origin connection.
            let origin = &self.key.origin;
            let (tcp, _) = dial::connect_with(&self.resolver, origin, false, timeout, &[], congestion).await?;
            Ok(Box::new(tcp) as OriginIo)
        })
    }

    fn for_http1(&self) -> Arc<dyn Connect> {
        Arc::new(Self { key: self.key.clone(), resolver: self.resolver.clone() })
    }
}

/// One warning line when a cleartext origin is not on this host or a private network: its
/// requests and responses cross a network in the clear.
pub(crate) fn warn_if_public(route: &RouteName, origin: &OriginAddr) {
    if !is_local(&origin.host) {
        tracing::warn!(%route, %origin, "upstream.tls is false and the origin is not a loopback or private address: requests and responses cross the network unencrypted");
    }
}

/// Loopback, private (RFC 1918, RFC 4193 unique-local), link-local, or `localhost`. A host
/// name other than `localhost` is not resolved here: it counts as public.
fn is_local(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.is_loopback() || a.is_private() || a.is_link_local(),
        Ok(IpAddr::V6(a)) => {
            a.is_loopback() || (a.segments()[0] & 0xfe00) == 0xfc00 || (a.segments()[0] & 0xffc0) == 0xfe80
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_local;

    #[test]
    fn local_addresses_are_told_from_public_ones() {
        for local in
            ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "::1", "[::1]", "fd00::1", "fe80::1", "localhost"]
        {
            assert!(is_local(local), "{local}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "app.example.com"] {
            assert!(!is_local(public), "{public}");
        }
    }
}
