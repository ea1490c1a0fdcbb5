//! The cache as a decorator on the origin seam: [`Cached`] is an [`Origin`] that wraps the
//! route's origin. Per request: a fresh stored response is served at once; a stale one is
//! served while one background request revalidates it (`stale-while-revalidate`), or
//! revalidated first (304: served from storage), or served when the origin fails
//! (`stale-if-error`); a miss fetches once per key while concurrent misses read that fetch
//! as it arrives ([`super::fill`]); anything else passes through untouched.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use http::header::{CACHE_CONTROL, IF_MODIFIED_SINCE, IF_NONE_MATCH, PRAGMA, RANGE};
use http::{Method, Request};
use http_cache_semantics::BeforeRequest;

use super::fill::Turn;
use super::keep;
use super::routes::{Caches, RouteCache};
use super::stale::Stale;
use super::status::Status;
use super::store::Entry;
use super::{decide, key, serve};
use crate::config::HttpConfig;
use crate::metrics::{CacheResult, RouteName};
use crate::origin::layer::Layer;
use crate::origin::seam::{BoxFuture, Origin, OutBody, Outgoing, SendFailure, Sent, Upgrade, Upgraded};

/// A route's origin with its cache in front.
pub(crate) struct Cached {
    pub(crate) inner: Arc<dyn Origin>,
    pub(crate) cache: Arc<RouteCache>,
    /// The fleet's fence ([`Caches::fence`]).
    pub(crate) fence: Arc<std::sync::atomic::AtomicBool>,
}

/// A route with `cache:` gets its cache in front of its origin, the same cache across reloads
/// while its settings stay.
impl Layer for Caches {
    fn wrap(&self, route: &RouteName, config: &HttpConfig, inner: &Arc<dyn Origin>) -> Option<Arc<dyn Origin>> {
        let settings = config.cache.as_ref()?;
        Some(Arc::new(Cached { inner: inner.clone(), cache: self.route(route, settings), fence: self.fence().clone() }))
    }

    fn retain(&self, routes: &HashSet<RouteName>) {
        self.keep_only(routes);
    }
}

impl Origin for Cached {
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        Box::pin(self.serve(out))
    }

    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, crate::origin::seam::OriginError>> {
        self.inner.upgrade(up)
    }

    fn retired(&self) -> &tokio_util::sync::CancellationToken {
        self.inner.retired()
    }
}

impl Cached {
    async fn serve<'a>(&'a self, out: Outgoing<'a>) -> Result<Sent, SendFailure> {
        let mut head = (out.build)();
        let now = SystemTime::now();
        let store = &self.cache.store;
        if !matches!(*head.method(), Method::GET | Method::HEAD) {
            return self.other_method(out, &head).await;
        }
        let has_body = match &out.body {
            OutBody::Empty => false,
            OutBody::Replay(b) => !b.is_empty(),
            // Of unknown length: over HTTP/3, also a GET whose stream's end came after its head
            // (browsers send both in one packet); passing it on is the safe mistake.
            OutBody::Stream(_) => true,
        };
        if has_body {
            // A GET or HEAD with a body (a "fat GET"): the key does not hold the body, yet an
            // origin that reads it answers by it, so that answer is no one else's to be
            // served, and a stored one is not this request's.
            return self.pass(out, "bypass", Some("request-body")).await;
        }
        if self.fence.load(std::sync::atomic::Ordering::Relaxed) {
            // Catching up with the fleet's purges: a stored response may be one purged meanwhile.
            return self.pass(out, "bypass", Some("fleet-catch-up")).await;
        }
        let url = key::url(&head);
        let key = store.key(&url, &mut head);
        let head_only = head.method() == Method::HEAD;
        // A memory miss looks on the disk tier (if any) before it is a miss.
        let (found, tier) = match store.get(&key) {
            Some(entry) => (Some(entry), CacheResult::Hit),
            None => (store.get_disk(&key).await, CacheResult::HitDisk),
        };
        if let Some(entry) = found {
            // The common hit, judged without building the policy's answer: no request
            // directives, and still fresh (the key already matched host and variant).
            let h = head.headers();
            if !h.contains_key(CACHE_CONTROL) && !h.contains_key(PRAGMA) && now < entry.stale_at {
                return Ok(self.hit(&entry, &head, now, tier));
            }
            // HEAD is answered from a stored GET: it is judged as the GET it stands for.
            let as_get;
            let probe = if head_only {
                let mut get = keep::copy(&head);
                *get.method_mut() = Method::GET;
                as_get = get;
                &as_get
            } else {
                &head
            };
            match entry.policy.before_request(probe, now) {
                BeforeRequest::Fresh(_) => return Ok(self.hit(&entry, &head, now, tier)),
                BeforeRequest::Stale { request, matches: true } => {
                    let job = Stale { cache: &self.cache, inner: &self.inner, key, entry, head: &head };
                    return job.run(request, out.timeout, out.up, out.affinity, out.tried).await;
                }
                // Another variant, or a request the stored one cannot answer.
                BeforeRequest::Stale { matches: false, .. } => {}
            }
        }
        let range = head.headers().contains_key(RANGE);
        let uncacheable = store.uncacheable(&url);
        if range || head_only || uncacheable.is_some() || decide::asks_no_store(&head) {
            // A range or a HEAD on a miss goes to the origin as asked (nothing to store); a URL
            // just found uncacheable does not wait behind another request for it (hit-for-miss).
            let fwd = if range {
                "partial"
            } else if head_only {
                "uri-miss"
            } else if uncacheable.is_some() {
                "bypass"
            } else {
                "request"
            };
            return self.pass(out, fwd, uncacheable.map(|r| r.as_str())).await;
        }
        match self.cache.fills.join_or_lead(&key) {
            Turn::Lead(lead) => {
                // The client's own validators stay here: the origin is asked for the whole
                // object (storable, and shareable with the waiters), and the client's
                // conditional is answered against it.
                let Outgoing { build, body, up, timeout, affinity, tried, interim, began, client } = out;
                let mut whole = || {
                    let mut h = build();
                    for name in [IF_NONE_MATCH, IF_MODIFIED_SINCE] {
                        h.headers_mut().remove(name);
                    }
                    h
                };
                let attempt =
                    Outgoing { build: &mut whole, body, up, timeout, affinity, tried, interim, began, client };
                let sent = self.inner.send(attempt).await?;
                Ok(self.cache.relay(sent, CacheResult::Miss, |response| {
                    let (response, status) = keep::keep(&self.cache, response, &head, url, lead, "uri-miss", now);
                    (serve::conditional(response, &head), status)
                }))
            }
            Turn::Join(fill) => {
                let shared = fill.head().await.filter(|h| {
                    let mut mine = keep::copy(&head);
                    key::normalise(&mut mine, &h.vary);
                    key::variant(&h.vary, mine.headers()) == h.variant
                });
                if let Some(shared) = shared {
                    return Ok(self.cache.collapsed(&shared, fill, &head, "uri-miss"));
                }
                // Released (not storable, or the fetch failed) or another variant: on our own.
                let sent = self.inner.send(out).await?;
                let lead = super::fill::Leading::alone();
                Ok(self.cache.relay(sent, CacheResult::Miss, |response| {
                    keep::keep(&self.cache, response, &head, url, lead, "uri-miss", SystemTime::now())
                }))
            }
        }
    }

    /// A fresh stored response, served (`tier`: from memory or from disk).
    fn hit(&self, entry: &Arc<Entry>, head: &Request<()>, now: SystemTime, tier: CacheResult) -> Sent {
        let status = Status { ttl: Some(keep::ttl(entry, now)), ..Status::default() };
        self.cache.answer(serve::response(entry, head, now), tier, &status)
    }

    /// Passed to the origin as asked, nothing served from or kept in the cache (`fwd`, `detail`:
    /// why, for `Cache-Status`).
    async fn pass<'a>(
        &'a self,
        out: Outgoing<'a>,
        fwd: &'static str,
        detail: Option<&'static str>,
    ) -> Result<Sent, SendFailure> {
        let sent = self.inner.send(out).await?;
        Ok(self.cache.relay(sent, CacheResult::Bypass, |response| {
            let code = response.status().as_u16();
            (response, Status { fwd: Some(fwd), fwd_status: Some(code), detail, ..Status::default() })
        }))
    }

    /// Not GET or HEAD: passed on; a successful unsafe method invalidates what is stored for
    /// its URL (RFC 9111 §4.4).
    async fn other_method<'a>(&'a self, out: Outgoing<'a>, head: &Request<()>) -> Result<Sent, SendFailure> {
        let sent = self.inner.send(out).await?;
        let code = sent.response.status();
        if !head.method().is_safe() && (code.is_success() || code.is_redirection()) {
            let url = key::url(head);
            self.cache.store.purge(|u| u == &*url, |_| false);
        }
        let status = Status { fwd: Some("method"), fwd_status: Some(code.as_u16()), ..Status::default() };
        Ok(self.cache.relay(sent, CacheResult::Bypass, |response| (response, status)))
    }
}
