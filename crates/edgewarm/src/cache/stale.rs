//! A stored response past its freshness: served at once while one background request
//! revalidates it (`stale-while-revalidate`), else revalidated before it is served (a 304
//! updates the stored headers, RFC 9111 §4.3.4), and served anyway when the origin fails
//! within `stale-if-error`.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{
    HeaderMap, CACHE_CONTROL, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, LAST_MODIFIED, PRAGMA, RANGE,
    SET_COOKIE,
};
use http::{Request, Response, StatusCode};
use http_cache_semantics::AfterResponse;

use super::fill::{FillHead, Leading, Turn};
use super::keep::{self, copy};
use super::key::{self, Key};
use super::routes::RouteCache;
use super::serve;
use super::status::Status;
use super::store::{self, Entry};
use super::{decide, directives};
use crate::metrics::CacheResult;
use crate::origin::seam::{Affinity, Origin, OutBody, Outgoing, OwnRequest, SendFailure, Sent};

/// Headers a 304 does not change in the stored response: they describe its body, or belong
/// to one client.
const KEPT_ON_304: [&str; 5] =
    ["content-length", "content-encoding", "transfer-encoding", "content-range", "set-cookie"];

/// One request that found its stored response stale.
pub(crate) struct Stale<'a> {
    pub(crate) cache: &'a Arc<RouteCache>,
    pub(crate) inner: &'a Arc<dyn Origin>,
    pub(crate) key: Key,
    pub(crate) entry: Arc<Entry>,
    /// The request as it would go to the origin.
    pub(crate) head: &'a Request<()>,
}

impl Stale<'_> {
    /// `reval` is the conditional request RFC 9111 makes of the stored response's validators.
    pub(crate) async fn run(
        self,
        reval: http::request::Parts,
        timeout: Duration,
        up: &Arc<AtomicU64>,
        affinity: &Affinity,
        tried: &AtomicU64,
    ) -> Result<Sent, SendFailure> {
        let now = SystemTime::now();
        let staleness = self.entry.staleness(now);
        let mut reval = Request::from_parts(reval, ());
        // The whole object is revalidated, whatever part this client wants, with the stored
        // response's validators only: a 304 is then about it, and the client's own
        // conditional is answered from it afterwards.
        let h = reval.headers_mut();
        for name in [RANGE, IF_RANGE, IF_NONE_MATCH, IF_MODIFIED_SINCE] {
            h.remove(name);
        }
        if let Some(etag) = self.entry.headers.get(ETAG) {
            h.insert(IF_NONE_MATCH, etag.clone());
        }
        if let Some(date) = self.entry.headers.get(LAST_MODIFIED) {
            h.insert(IF_MODIFIED_SINCE, date.clone());
        }
        let grace = self.entry.grace;
        if staleness <= grace.while_revalidate && !client_insists(self.head) {
            self.in_background(reval, timeout);
            return Ok(self.stored(&self.entry, CacheResult::Stale, None, Some("stale-while-revalidate")));
        }
        // One revalidation for every request that finds it stale meanwhile: they read its
        // outcome as it arrives, as misses read a fetch.
        let lead = match self.cache.fills.join_or_lead(&self.key) {
            Turn::Lead(lead) => lead,
            Turn::Join(fill) => {
                let shared = fill.head().await.filter(|h| key::variant(&h.vary, self.head.headers()) == h.variant);
                if let Some(shared) = shared {
                    return Ok(self.cache.collapsed(&shared, fill, self.head, "stale"));
                }
                Leading::alone()
            }
        };
        let mut build = || copy(&reval);
        // A revalidation's 103s are not passed on: the origin answers a conditional request, and
        // what the client gets may well be the stored response.
        let began = tokio::time::Instant::now();
        let body = OutBody::Empty;
        let attempt =
            Outgoing { build: &mut build, body, up, timeout, affinity, tried, interim: None, began, client: None };
        let sent = match self.inner.send(attempt).await {
            Ok(sent) => sent,
            Err(_) if staleness <= grace.if_error => {
                publish(lead, &self.entry, self.head);
                return Ok(self.stored(&self.entry, CacheResult::Stale, None, Some("stale-if-error")));
            }
            Err(failure) => return Err(failure),
        };
        let code = sent.response.status();
        if code.is_server_error() && staleness <= grace.if_error {
            publish(lead, &self.entry, self.head);
            return Ok(self.stored(&self.entry, CacheResult::Stale, Some(code), Some("stale-if-error")));
        }
        if code == StatusCode::NOT_MODIFIED {
            if let Some(fresh) = refreshed(self.cache, &self.entry, &reval, self.head, sent.response.headers(), now) {
                publish(lead, &fresh, self.head);
                return Ok(self.stored(&fresh, CacheResult::Revalidated, Some(code), None));
            }
        }
        // A new response (or a 304 for the client's own validator): like a miss's.
        let url = self.key.url.clone();
        Ok(self.cache.relay(sent, CacheResult::Miss, |response| {
            keep::keep(self.cache, response, self.head, url, lead, "stale", now)
        }))
    }

    /// The stored response, marked: forwarded (`fwd=stale`) when the origin was asked.
    fn stored(
        &self,
        entry: &Arc<Entry>,
        result: CacheResult,
        fwd: Option<StatusCode>,
        detail: Option<&'static str>,
    ) -> Sent {
        let now = SystemTime::now();
        let status = Status {
            fwd: fwd.map(|_| "stale"),
            fwd_status: fwd.map(|c| c.as_u16()),
            ttl: Some(keep::ttl(entry, now)),
            detail,
            ..Status::default()
        };
        self.cache.answer(serve::response(entry, self.head, now), result, &status)
    }

    /// One revalidation per key in a task of its own; the response is served meanwhile.
    fn in_background(&self, reval: Request<()>, timeout: Duration) {
        if !self.cache.start_revalidating(&self.key) {
            return;
        }
        let (cache, inner, key, entry, head) =
            (self.cache.clone(), self.inner.clone(), self.key.clone(), self.entry.clone(), copy(self.head));
        tokio::spawn(async move {
            let mut build = || copy(&reval);
            let own = OwnRequest::default();
            let attempt = own.outgoing(&mut build, timeout);
            let now = SystemTime::now();
            match inner.send(attempt).await {
                Ok(sent) if sent.response.status() == StatusCode::NOT_MODIFIED => {
                    refreshed(&cache, &entry, &reval, &head, sent.response.headers(), now);
                }
                // Stored as it arrives if it may be; nobody reads it here.
                Ok(sent) => {
                    drop(keep::keep(&cache, sent.response, &head, key.url.clone(), Leading::alone(), "stale", now))
                }
                Err(failure) => {
                    tracing::debug!(route = %cache.route, error = %failure.error, "background revalidation failed")
                }
            }
            cache.done_revalidating(&key);
        });
    }
}

/// Hand a stored response to the requests waiting on this revalidation.
fn publish(lead: Leading, entry: &Entry, head: &Request<()>) {
    let vary = key::vary_names(&entry.headers).unwrap_or_default();
    let variant = key::variant(&vary, head.headers());
    lead.fill.ready(Arc::new(FillHead { status: entry.status, headers: entry.headers.clone(), vary, variant }));
    for chunk in &entry.body {
        lead.fill.push(chunk.clone());
    }
    if let Some(trailers) = &entry.trailers {
        lead.fill.trailers(trailers.clone());
    }
    lead.fill.finish(Ok(()));
}

/// The client asks for a response validated now (`no-cache`, `max-age=0`): no stale answer.
fn client_insists(head: &Request<()>) -> bool {
    let h = head.headers();
    let cc = |d: &str| h.get_all(CACHE_CONTROL).iter().any(|v| v.to_str().is_ok_and(|v| v.contains(d)));
    cc("no-cache") || cc("max-age") || h.get(PRAGMA).is_some_and(|v| v.as_bytes() == b"no-cache")
}

/// The stored response updated by a 304 for its own validators (stored again and returned),
/// or `None` when the 304 is not about it.
fn refreshed(
    cache: &RouteCache,
    entry: &Entry,
    reval: &Request<()>,
    head: &Request<()>,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<Arc<Entry>> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    *response.headers_mut() = directives::read(&store::owned(headers));
    // A 304 to a request that named only this response's validators confirms it, whether or
    // not it repeats them.
    let confirm = response.headers_mut();
    if !confirm.contains_key(ETAG) && !confirm.contains_key(LAST_MODIFIED) {
        for name in [ETAG, LAST_MODIFIED] {
            if let Some(v) = entry.headers.get(&name) {
                confirm.insert(name, v.clone());
            }
        }
    }
    let vary = key::vary_names(&entry.headers).unwrap_or_default();
    let kept = store::kept_head(reval, &vary);
    let AfterResponse::NotModified(policy, _) = entry.policy.after_response(&kept, &response, now) else {
        return None;
    };
    let mut merged = entry.headers.clone();
    for name in headers.keys().filter(|n| !KEPT_ON_304.contains(&n.as_str())) {
        merged.remove(name);
        for v in headers.get_all(name) {
            merged.append(name.clone(), v.clone());
        }
    }
    merged.remove(SET_COOKIE);
    let merged = store::owned(&merged);
    let names = key::vary_names(&merged)?;
    let lifetime = policy.time_to_live(now);
    let updated = Entry {
        grace: decide::grace(&cache.store.config, &merged),
        policy,
        status: entry.status,
        headers: merged,
        body: entry.body.clone(),
        trailers: entry.trailers.clone(),
        size: entry.size,
        tags: entry.tags.clone(),
        stale_at: now + lifetime,
        request_bytes: 0,
    };
    let key = cache.store.insert(key::url(reval), names, head, updated);
    cache.store.get(&key)
}
