//! A route's request limits as a decorator on its origin seam, outermost (before the cache and
//! the origin): a client the route's `deny` names, or its `allow` does not, gets 403; a key
//! over `limits`' rate gets 429 with `Retry-After`. The same answer on HTTP/1.1, HTTP/2 and
//! HTTP/3, since all three reach the origin through this one seam, and for a WebSocket upgrade
//! (one request, one token, counted like the others).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::clients::client_key;
use super::rate::Rate;
use crate::config::limits::{AccessList, RateConfig, RateKey};
use crate::config::HttpConfig;
use crate::metrics::{LimitReason, LimitedLabel, RouteName};
use crate::origin::body::OriginBody;
use crate::origin::layer::Layer;
use crate::origin::per_route::PerRoute;
use crate::origin::seam::{BoxFuture, EdgeAnswer, Origin, OriginError, Outgoing, SendFailure, Sent, Upgrade, Upgraded};

/// IPv6 clients share a rate by their /64 (one host owns a /64).
const RATE_PREFIX: u8 = 64;
/// A route's rate state when `limits.memory` is not set.
pub(crate) const DEFAULT_MEMORY: usize = 1 << 20;

/// The routes' limits, kept across reloads while their settings stay (a reload must not hand
/// every client a full burst again).
#[derive(Default)]
pub(crate) struct Limits {
    routes: PerRoute<RateConfig, Rate>,
    metrics: Family<LimitedLabel, Counter>,
}

impl Limits {
    pub(crate) fn new(metrics: Family<LimitedLabel, Counter>) -> Self {
        Self { routes: PerRoute::default(), metrics }
    }

    /// Each limited route's rate state size, for `/limits`.
    pub(crate) fn sizes(&self) -> Vec<(String, usize)> {
        let mut all = self.routes.each(|name, _, rate| (name.to_string(), rate.bytes()));
        all.sort();
        all
    }
}

struct Limited {
    inner: Arc<dyn Origin>,
    access: AccessList,
    rate: Option<(RateKey, Arc<Rate>)>,
    denied: Counter,
    over_rate: Counter,
}

impl Layer for Limits {
    fn wrap(&self, route: &RouteName, config: &HttpConfig, inner: &Arc<dyn Origin>) -> Option<Arc<dyn Origin>> {
        if config.limits.is_none() && config.access.is_empty() {
            return None;
        }
        let rate = config.limits.as_ref().map(|settings| {
            let rate = self.routes.get_or_make(route, settings, || {
                let memory = settings.memory.map_or(DEFAULT_MEMORY, |m| m as usize);
                Rate::new(settings.requests_per_second, settings.burst, memory)
            });
            (settings.by.clone(), rate)
        });
        let counter = |reason| {
            self.metrics.get_or_create(&LimitedLabel { scope: "route", name: route.to_string(), reason }).clone()
        };
        Some(Arc::new(Limited {
            inner: inner.clone(),
            access: config.access.clone(),
            rate,
            denied: counter(LimitReason::Denied),
            over_rate: counter(LimitReason::Rate),
        }))
    }

    fn retain(&self, routes: &HashSet<RouteName>) {
        self.routes.retain(routes);
    }
}

/// Why the route refuses a request: its status, its one-line text, its `Retry-After`.
struct Refused(StatusCode, &'static str, Option<u64>);

/// The edge's own answer (no origin was asked): `status`, a one-line text, `Retry-After`.
fn refusal(Refused(status, text, retry_after): Refused) -> Response<http_body_util::Full<Bytes>> {
    let mut response = Response::new(http_body_util::Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(secs) = retry_after {
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

impl Limited {
    /// The route's lists and rate for one request of `client`'s, counted when they refuse it;
    /// `headers` are the client's (for `by: header`).
    fn check(&self, client: IpAddr, headers: &http::HeaderMap) -> Result<(), Refused> {
        if !self.access.admits(client) {
            self.denied.inc();
            return Err(Refused(StatusCode::FORBIDDEN, "forbidden\n", None));
        }
        if let Some((by, rate)) = &self.rate {
            let header = match by {
                RateKey::Header(name) => headers.get(name.as_str()).map(|v| v.as_bytes().to_vec()),
                RateKey::Client => None,
            };
            let key = header.unwrap_or_else(|| client_key(client, RATE_PREFIX).to_be_bytes().to_vec());
            if let Err(wait) = rate.take(&key) {
                self.over_rate.inc();
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                return Err(Refused(StatusCode::TOO_MANY_REQUESTS, "too many requests\n", Some(secs.max(1))));
            }
        }
        Ok(())
    }
}

impl Origin for Limited {
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        // The edge's own requests (probes, revalidations) have no client and are not limited.
        let Some(client) = out.client else { return self.inner.send(out) };
        if let Err(refused) = self.check(client.address, client.head.headers()) {
            // Marked as the edge's own, so a gRPC client gets it as a gRPC status.
            let note = EdgeAnswer(refused.1.trim_end());
            let response = refusal(refused).map(|body| OriginBody::new(body, Box::new(())));
            let sent = Sent::local(response).noted(note);
            return Box::pin(async { Ok(sent) });
        }
        self.inner.send(out)
    }

    /// An upgrade is one request of the client's: refused like any other (counted the same),
    /// however long it would have lasted.
    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, OriginError>> {
        if let Err(refused) = self.check(up.address, up.head.headers()) {
            let response = refusal(refused).map(|body| body.map_err(|never| match never {}).boxed());
            return Box::pin(async { Ok(Upgraded { response, conn: None }) });
        }
        self.inner.upgrade(up)
    }

    fn retired(&self) -> &tokio_util::sync::CancellationToken {
        self.inner.retired()
    }
}
