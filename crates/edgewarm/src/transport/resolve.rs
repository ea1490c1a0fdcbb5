//! Origin name resolution: off the worker threads, one lookup per name at a time, cached.
//!
//! Resolution uses the system resolver (`getaddrinfo`, so `/etc/hosts`, nsswitch and the
//! search domains behave as operators expect), which blocks; tokio runs it on its blocking pool,
//! never on a worker thread. Without a cache every connection to a hostname origin would take a
//! blocking thread for its own lookup, and a slow resolver would pile up hundreds of them. So:
//!
//! - IP literals never reach the resolver.
//! - Concurrent connections to the same name share one lookup in flight (single flight): a
//!   resolver that takes 5 s costs one blocking thread per name, not one per connection.
//! - A successful answer is reused for `dns.cache_ttl` (getaddrinfo reports no TTL, so the
//!   operator sets one; `0s` resolves per connection). Failures are not cached: the next
//!   connection asks again.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::config::OriginAddr;

/// One name's lookup: in flight until the cell is set, then the answer until `expires`.
struct Slot {
    addrs: OnceCell<Arc<[SocketAddr]>>,
    expires: Instant,
}

/// Resolves origins; shared by every connection and pool of a server.
pub struct Resolver {
    ttl: Mutex<Duration>,
    cache: Mutex<HashMap<(String, u16), Arc<Slot>>>,
    lookups: std::sync::atomic::AtomicU64,
}

impl Default for Resolver {
    /// No caching: every call resolves (lookups in flight are still shared).
    fn default() -> Self {
        Self::new(Duration::ZERO)
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").field("ttl", &self.ttl()).finish_non_exhaustive()
    }
}

impl Resolver {
    pub fn new(ttl: Duration) -> Self {
        Self { ttl: Mutex::new(ttl), cache: Mutex::default(), lookups: Default::default() }
    }

    fn ttl(&self) -> Duration {
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A reload may change the TTL; answers already cached keep their expiry.
    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner()) = ttl;
    }

    /// System resolver calls made so far (for tests and the lab).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every address of `origin`, in the order the system resolver gave them.
    pub async fn resolve(&self, origin: &OriginAddr) -> io::Result<Arc<[SocketAddr]>> {
        if let Ok(ip) = origin.host.parse::<IpAddr>() {
            return Ok(Arc::new([SocketAddr::new(ip, origin.port)]));
        }
        let key = (origin.host.clone(), origin.port);
        let slot = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            // Drop expired answers as we go so names no longer used do not accumulate.
            cache.retain(|_, s| s.expires > now || !s.addrs.initialized());
            match cache.get(&key) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Slot { addrs: OnceCell::new(), expires: now + self.ttl() });
                    cache.insert(key.clone(), s.clone());
                    s
                }
            }
        };
        let result = slot.addrs.get_or_try_init(|| self.lookup(origin)).await.cloned();
        if result.is_err() || slot.expires <= Instant::now() {
            // Failed (not cached) or not to be cached (ttl 0): forget the slot, unless a later
            // caller already replaced it.
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                cache.remove(&key);
            }
        }
        result
    }

    async fn lookup(&self, origin: &OriginAddr) -> io::Result<Arc<[SocketAddr]>> {
        self.lookups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let addrs: Arc<[SocketAddr]> = tokio::net::lookup_host((origin.host.as_str(), origin.port)).await?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no addresses"));
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn localhost() -> OriginAddr {
        OriginAddr { host: "localhost".into(), port: 443 }
    }

    #[tokio::test]
    async fn literals_skip_the_resolver() {
        let r = Resolver::new(Duration::from_secs(10));
        let addrs = r.resolve(&OriginAddr { host: "::1".into(), port: 8443 }).await.unwrap();
        assert_eq!(addrs[..], ["[::1]:8443".parse().unwrap()]);
        assert_eq!(r.lookups(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_reused_within_the_ttl() {
        let r = Resolver::new(Duration::from_secs(10));
        let first = r.resolve(&localhost()).await.unwrap();
        assert!(first.iter().all(|a| a.ip().is_loopback() && a.port() == 443), "{first:?}");
        r.resolve(&localhost()).await.unwrap();
        assert_eq!(r.lookups(), 1);
        tokio::time::advance(Duration::from_secs(11)).await;
        r.resolve(&localhost()).await.unwrap();
        assert_eq!(r.lookups(), 2);
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_lookup() {
        let r = Resolver::new(Duration::from_secs(60));
        let o = localhost();
        let all = tokio::join!(r.resolve(&o), r.resolve(&o), r.resolve(&o), r.resolve(&o));
        assert!(all.0.is_ok() && all.1.is_ok() && all.2.is_ok() && all.3.is_ok());
        assert_eq!(r.lookups(), 1);
    }

    #[tokio::test]
    async fn ttl_zero_and_failures_are_not_cached() {
        let r = Resolver::default();
        r.resolve(&localhost()).await.unwrap();
        r.resolve(&localhost()).await.unwrap();
        assert_eq!(r.lookups(), 2);
        let bad = OriginAddr { host: "no-such-host.invalid".into(), port: 443 };
        let r = Resolver::new(Duration::from_secs(60));
        assert!(r.resolve(&bad).await.is_err());
        assert!(r.resolve(&bad).await.is_err());
        assert_eq!(r.lookups(), 2);
    }
}
