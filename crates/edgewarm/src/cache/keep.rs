//! A response fresh from the origin: stored if it may be ([`super::decide`]), read into the
//! store by a task of its own while it goes out to the client that asked and to any request
//! that joined the fetch ([`super::fill`]). The fetch finishes for the store even if that
//! client goes away; a body that outgrows `max_object_size` stops being stored, and the
//! task stops once no one reads it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, SET_COOKIE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use http_cache_semantics::CachePolicy;

use super::decide::{self, Grace, Refusal};
use super::fill::{FillBody, FillHead, Leading};
use super::key;
use super::routes::RouteCache;
use super::status::Status;
use super::store::{self, Entry, Store};
use crate::origin::body::OriginBody;

/// A stalled origin body is given up after this long without a frame, so a fetch that no
/// client waits for any more cannot hold its task for ever.
const BODY_IDLE: Duration = Duration::from_secs(60);

/// A request head again (the origin seam builds one per attempt).
pub(crate) fn copy(head: &Request<()>) -> Request<()> {
    let mut out = Request::new(());
    *out.method_mut() = head.method().clone();
    *out.uri_mut() = head.uri().clone();
    *out.version_mut() = head.version();
    *out.headers_mut() = head.headers().clone();
    out
}

/// Seconds of freshness left at `now`, negative once stale (`Cache-Status`'s `ttl`).
pub(crate) fn ttl(entry: &Entry, now: SystemTime) -> i64 {
    match entry.stale_at.duration_since(now) {
        Ok(left) => i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
        Err(past) => -i64::try_from(past.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// The response for the client that fetched it, and its `Cache-Status`; stored on the way if
/// it may be. `lead` is the fetch's place in the lock table (released at once when the
/// response is not stored, so its waiters go to the origin).
pub(crate) fn keep(
    cache: &Arc<RouteCache>,
    response: Response<OriginBody>,
    head: &Request<()>,
    url: Arc<str>,
    lead: Leading,
    fwd: &'static str,
    now: SystemTime,
) -> (Response<OriginBody>, Status) {
    let (parts, body) = response.into_parts();
    let store = &cache.store;
    let mut status = Status { fwd: Some(fwd), fwd_status: Some(parts.status.as_u16()), ..Status::default() };
    let policy = decide::policy(head, parts.status, &parts.headers, now);
    let verdict = if head.method() == Method::HEAD {
        // A HEAD response has no body to store; HEAD is answered from a stored GET.
        Err(None)
    } else {
        decide::storable(&store.config, head, parts.status, &parts.headers, &policy, now).map_err(Some)
    };
    let names = match verdict {
        Ok(names) => names,
        Err(refusal) => {
            drop(lead);
            if let Some(refusal) = refusal {
                if refusal != Refusal::Partial && remembered(parts.status) && !decide::request_specific(head) {
                    store.remember_uncacheable(url, refusal);
                }
                status.detail = Some(refusal.as_str());
            }
            return (Response::from_parts(parts, body), status);
        }
    };
    // The request as its variant is keyed (its Vary headers normalised).
    let mut normalised = copy(head);
    key::normalise(&mut normalised, &names);
    let head = &normalised;
    // What is stored owns its bytes, and keeps of the request only what its policy reads.
    let mut stored = store::owned(&parts.headers);
    let policy = decide::policy(&store::kept_head(head, &names), parts.status, &stored, now);
    // Only with `store_set_cookie`: the cookie is this client's, never another's.
    stored.remove(SET_COOKIE);
    let variant = key::variant(&names, head.headers());
    lead.fill.ready(Arc::new(FillHead { status: parts.status, headers: stored.clone(), vary: names.clone(), variant }));
    let template = Template::new(&store.config, policy, parts.status, stored, now);
    status.stored = true;
    status.ttl = Some(i64::try_from(template.lifetime.as_secs()).unwrap_or(i64::MAX));
    let reader = FillBody::new(lead.fill.clone());
    tokio::spawn(pump(lead, body, store.clone(), url, names, copy(head), template));
    (Response::from_parts(parts, OriginBody::new(reader, Box::new(()))), status)
}

/// Whether an unstorable answer with this status says the URL is uncacheable (hit-for-miss):
/// not an origin's passing trouble (5xx, 429, 425), not a 304 for a client's own validator.
fn remembered(status: StatusCode) -> bool {
    !(status.is_server_error() || matches!(status.as_u16(), 304 | 425 | 429))
}

/// An entry but for its body.
struct Template {
    policy: CachePolicy,
    status: StatusCode,
    headers: HeaderMap,
    grace: Grace,
    lifetime: Duration,
    stale_at: SystemTime,
}

impl Template {
    fn new(
        config: &crate::config::CacheConfig,
        policy: CachePolicy,
        status: StatusCode,
        headers: HeaderMap,
        now: SystemTime,
    ) -> Self {
        let lifetime = policy.time_to_live(now);
        Self { grace: decide::grace(config, &headers), policy, status, headers, lifetime, stale_at: now + lifetime }
    }

    fn entry(self, body: Vec<Bytes>, trailers: Option<HeaderMap>, size: u64) -> Entry {
        let tags = tags(&self.headers);
        let Self { policy, status, headers, grace, stale_at, .. } = self;
        Entry { policy, status, headers, body, trailers, size, tags, grace, stale_at, request_bytes: 0 }
    }
}

/// A response's `Cache-Tag` values (comma or space separated), for purge by tag.
fn tags(headers: &HeaderMap) -> Vec<Box<str>> {
    headers
        .get_all(HeaderName::from_static("cache-tag"))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ' ']))
        .filter(|t| !t.is_empty())
        .map(Box::from)
        .collect()
}

/// Read the origin's body into the fill (and so to its readers), then into the store.
async fn pump(
    mut lead: Leading,
    mut body: OriginBody,
    store: Arc<Store>,
    url: Arc<str>,
    names: Vec<HeaderName>,
    head: Request<()>,
    template: Template,
) {
    let max = store.config.max_object_size;
    let (mut size, mut storing) = (0u64, true);
    loop {
        let frame = match tokio::time::timeout(BODY_IDLE, body.frame()).await {
            Ok(None) => break,
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) => return lead.fill.finish(Err(e.to_string())),
            Err(_) => return lead.fill.finish(Err("origin body stalled".into())),
        };
        match frame.into_data() {
            Ok(data) => {
                size += data.len() as u64;
                if storing && size > max {
                    storing = false;
                    lead.detach();
                }
                lead.fill.push(data);
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    lead.fill.trailers(trailers);
                }
            }
        }
        if !storing && lead.readers() == 0 {
            return;
        }
    }
    // Stored before the readers see the end, so a client's next request finds it.
    if storing {
        let (chunks, trailers) = lead.fill.contents();
        // One copy, owned: the chunks are slices of the origin connection's read buffers.
        let body = vec![Bytes::from(chunks.concat())];
        let trailers = trailers.as_ref().map(store::owned);
        store.insert(url, names, &head, template.entry(body, trailers, size));
    }
    lead.fill.finish(Ok(()));
}
