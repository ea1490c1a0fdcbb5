//! `http` routes' metrics, registered under the `http` prefix: requests by status class,
//! their duration, the errors the edge answered (by reason and whose fault), retries, and the
//! `103 Early Hints` sent to clients.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{latency_histogram, HistogramFamily, RouteLabel, RouteName};

label_enum! {
    /// Why edgewarm answered an `http` request itself.
    HttpError {
        NoConnection => "no_connection",
        Timeout => "timeout",
        OriginError => "origin_error",
        // A response already under way whose origin body failed: the client's response is
        // cut, the only honest signal once its status has gone.
        BodyCut => "body_cut",
        BodyTooLarge => "body_too_large",
        // The client's faults (`fault="client"`), answered 4xx.
        BadRequest => "bad_request",
        BadBody => "bad_body",
        Misdirected => "misdirected",
        MethodNotAllowed => "method_not_allowed",
        HandshakeFailed => "handshake_failed",
        // edgewarm's own fault: a stream's handler panicked (the stream is reset; its
        // connection and the connection's other streams go on).
        Internal => "internal",
    }
}
label_enum! {
    /// Whose fault an error was (the HTTP core's error table says which).
    Fault {
        Client => "client",
        Origin => "origin",
        Edge => "edge",
    }
}
label_enum! {
    /// An HTTP status class.
    StatusClass {
        Informational => "1xx",
        Success => "2xx",
        Redirect => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
    }
}
label_enum! {
    /// The protocol a request came in over, from the client.
    ClientProtocol {
        Http1 => "http/1.1",
        Http2 => "h2",
        Http3 => "h3",
    }
}
label_enum! {
    /// Where a `103 Early Hints` sent to a client came from.
    HintSource {
        // The edge's: the `Link` entries it learned from an earlier response for the URL.
        Learned => "learned",
        // The origin's own 103, passed on.
        Origin => "origin",
    }
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteHintSource {
    pub route: RouteName,
    pub source: HintSource,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatus {
    pub route: RouteName,
    pub status: StatusClass,
    pub protocol: ClientProtocol,
}
/// A request on a route with rules, by the upstream its rule (or the route's default) sent it
/// to: names from the file only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteUpstream {
    pub route: RouteName,
    pub upstream: RouteName,
    pub status: StatusClass,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteError {
    pub route: RouteName,
    pub reason: HttpError,
    pub fault: Fault,
}
/// `http` routes: requests, their errors and retries.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    pub requests: Family<RouteStatus, Counter>,
    pub duration: HistogramFamily<RouteLabel>,
    pub errors: Family<RouteError, Counter>,
    pub retries: Family<RouteLabel, Counter>,
    pub early_hints: Family<RouteHintSource, Counter>,
    pub upstreams: Family<RouteUpstream, Counter>,
}
impl HttpMetrics {
    pub(super) fn new() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            retries: Family::default(),
            early_hints: Family::default(),
            upstreams: Family::default(),
        }
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register("requests", "Requests on http routes, by status class and client protocol", self.requests.clone());
        r.register("request_duration_seconds", "Request to end of response", self.duration.clone());
        r.register("errors", "Requests answered by edgewarm with an error, by reason", self.errors.clone());
        r.register("retries", "Requests sent again because the origin refused the stream", self.retries.clone());
        r.register(
            "upstream_requests",
            "Requests on http routes with rules, by the upstream they were sent to and status class",
            self.upstreams.clone(),
        );
        r.register(
            "early_hints",
            "103 Early Hints sent to clients (HTTP/2 and HTTP/3), by route and by where they came from",
            self.early_hints.clone(),
        );
    }

    /// One route's request handles, resolved once (per client connection) instead of per
    /// request.
    pub fn for_route(&self, route: &RouteName, protocol: ClientProtocol) -> RouteHttpMetrics {
        let class =
            |status| self.requests.get_or_create(&RouteStatus { route: route.clone(), status, protocol }).clone();
        RouteHttpMetrics {
            by_class: [
                class(StatusClass::Informational),
                class(StatusClass::Success),
                class(StatusClass::Redirect),
                class(StatusClass::ClientError),
                class(StatusClass::ServerError),
            ],
            duration: self.duration.get_or_create(&RouteLabel { route: route.clone() }).clone(),
            early_hints: [HintSource::Learned, HintSource::Origin].map(|source| {
                self.early_hints.get_or_create(&RouteHintSource { route: route.clone(), source }).clone()
            }),
            route: route.clone(),
            upstreams: self.upstreams.clone(),
        }
    }

    pub fn error(&self, route: &RouteName, reason: HttpError, fault: Fault) {
        self.errors.get_or_create(&RouteError { route: route.clone(), reason, fault }).inc();
    }

    pub fn retry(&self, route: &RouteName) {
        self.retries.get_or_create(&RouteLabel { route: route.clone() }).inc();
    }
}
/// [`HttpMetrics::for_route`].
#[derive(Debug)]
pub struct RouteHttpMetrics {
    by_class: [Counter; 5],
    duration: Histogram,
    /// 103s sent, by [`HintSource`] (in its order).
    early_hints: [Counter; 2],
    route: RouteName,
    upstreams: Family<RouteUpstream, Counter>,
}
impl RouteHttpMetrics {
    pub fn request(&self, status: u16, took: std::time::Duration) {
        self.by_class[class(status) as usize].inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// A request on a route with rules went to `upstream` (looked up per request: the upstream
    /// is the rule's, known only then).
    pub fn upstream(&self, upstream: &RouteName, status: u16) {
        let labels = RouteUpstream { route: self.route.clone(), upstream: upstream.clone(), status: class(status) };
        self.upstreams.get_or_create(&labels).inc();
    }

    /// A `103 Early Hints` went to the client.
    pub fn early_hint(&self, source: HintSource) {
        self.early_hints[source as usize].inc();
    }
}

/// A status's class.
fn class(status: u16) -> StatusClass {
    match status {
        100..=199 => StatusClass::Informational,
        200..=299 => StatusClass::Success,
        300..=399 => StatusClass::Redirect,
        400..=499 => StatusClass::ClientError,
        _ => StatusClass::ServerError,
    }
}
