//! Early hints as a decorator on the origin seam: [`Hinted`] wraps a route's origin (and its
//! cache, if any). On a navigation it sends the hints learned for the URL to the client at once,
//! before anything else is asked of the origin or the cache; then it passes the request on
//! (with the origin's own 103s going to the client or not, `from_origin`) and learns from the
//! response ([`super::learn`]). A response already there when the client's driver next looks
//! (a cache hit) goes out alone: the queued 103 is dropped, there is nothing left to hint.

use std::collections::HashSet;
use std::sync::Arc;

use http::{Response, StatusCode};

use super::learn::{self, Lesson};
use super::routes::Hints;
use super::store::RouteHints;
use crate::cache::key;
use crate::config::HttpConfig;
use crate::metrics::{HintSource, RouteName};
use crate::origin::layer::Layer;
use crate::origin::seam::{BoxFuture, Origin, OriginError, Outgoing, SendFailure, Sent, Upgrade, Upgraded};

/// A route's origin with early hints in front.
pub(crate) struct Hinted {
    pub(crate) inner: Arc<dyn Origin>,
    pub(crate) hints: Arc<RouteHints>,
}

/// A route with `early_hints:` gets its learned hints in front of its origin (and its cache:
/// hints go out before the cache is asked), kept across reloads while its settings stay.
impl Layer for Hints {
    fn wrap(&self, route: &RouteName, config: &HttpConfig, inner: &Arc<dyn Origin>) -> Option<Arc<dyn Origin>> {
        let settings = config.early_hints.as_ref()?;
        Some(Arc::new(Hinted { inner: inner.clone(), hints: self.route(route, settings) }))
    }

    fn retain(&self, routes: &HashSet<RouteName>) {
        self.keep_only(routes);
    }
}

impl Origin for Hinted {
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        Box::pin(self.send(out))
    }

    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, OriginError>> {
        self.inner.upgrade(up)
    }

    fn retired(&self) -> &tokio_util::sync::CancellationToken {
        self.inner.retired()
    }
}

impl Hinted {
    async fn send<'a>(&'a self, mut out: Outgoing<'a>) -> Result<Sent, SendFailure> {
        let config = &self.hints.config;
        // The origin's own hints go on to the client only where the route says so.
        let interim = out.interim;
        out.interim = interim.filter(|_| config.from_origin);
        if !config.learn {
            return self.inner.send(out).await;
        }
        let head = (out.build)();
        let url = key::url(&head);
        if let Some(interim) = interim.filter(|_| learn::is_navigation(&head)) {
            if let Some(links) = self.hints.get(&url) {
                let mut early = Response::new(());
                *early.status_mut() = StatusCode::EARLY_HINTS;
                early.headers_mut().insert(http::header::LINK, links);
                interim.send(early, HintSource::Learned);
            }
        }
        let sent = self.inner.send(out).await?;
        let response = &sent.response;
        match learn::lesson(&head, response.status(), response.headers(), self.hints.max_link_bytes()) {
            Lesson::Keep(links) => self.hints.keep(url, links),
            Lesson::Forget => self.hints.forget(&url),
            Lesson::Nothing => {}
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;
    use std::time::Duration;

    use http::{HeaderValue, Request};

    use super::*;
    use crate::config::EarlyHintsConfig;
    use crate::origin::body::OriginBody;
    use crate::origin::seam::{Affinity, Interim, OutBody};

    /// An origin answering every request with the page (its preloads in `Link`), after a 103
    /// of its own.
    struct Page;

    impl Origin for Page {
        fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
            if let Some(interim) = out.interim {
                let mut early = Response::new(());
                *early.status_mut() = StatusCode::EARLY_HINTS;
                early.headers_mut().insert("link", HeaderValue::from_static("</origin.css>; rel=preload"));
                interim.send(early, HintSource::Origin);
            }
            let mut response = Response::new(OriginBody::new(http_body_util::Empty::new(), Box::new(())));
            response.headers_mut().insert("content-type", HeaderValue::from_static("text/html"));
            response.headers_mut().insert("link", HeaderValue::from_static("</a.css>; rel=preload; as=style"));
            Box::pin(async move { Ok(Sent::local(response)) })
        }

        fn upgrade<'a>(&'a self, _: Upgrade<'a>) -> BoxFuture<'a, Result<Upgraded, OriginError>> {
            Box::pin(async { Err(OriginError::Target) })
        }

        fn retired(&self) -> &tokio_util::sync::CancellationToken {
            unreachable!("not asked here")
        }
    }

    /// The client's end, recording each head's source and `Link`.
    #[derive(Default)]
    struct Heads(Mutex<Vec<(HintSource, String)>>);

    impl Interim for Heads {
        fn send(&self, head: Response<()>, source: HintSource) {
            let link = head.headers().get("link").map(|v| v.to_str().unwrap_or_default().to_string());
            self.0.lock().unwrap().push((source, link.unwrap_or_default()));
        }
    }

    /// One request through `hinted` with the headers given; what reached the client's end.
    async fn send(hinted: &Hinted, headers: &[(&'static str, &'static str)]) -> Vec<(HintSource, String)> {
        let heads = Arc::new(Heads::default());
        let interim: Arc<dyn Interim> = heads.clone();
        let mut build = || {
            let mut head = Request::new(());
            *head.uri_mut() = "https://b.test/page".parse().unwrap();
            for (k, v) in headers {
                head.headers_mut().insert(*k, HeaderValue::from_static(v));
            }
            head
        };
        let (up, affinity, tried) = (Arc::default(), Affinity::default(), AtomicU64::default());
        let out = Outgoing {
            build: &mut build,
            body: OutBody::Empty,
            up: &up,
            timeout: Duration::from_secs(1),
            affinity: &affinity,
            tried: &tried,
            interim: Some(&interim),
            began: tokio::time::Instant::now(),
            client: None,
        };
        hinted.send(out).await.map_err(|f| f.error).unwrap();
        let got = heads.0.lock().unwrap().clone();
        got
    }

    fn hinted(config: EarlyHintsConfig) -> Hinted {
        Hinted { inner: Arc::new(Page), hints: Arc::new(RouteHints::new(config)) }
    }

    #[tokio::test]
    async fn learned_then_sent_on_navigations_and_origin_hints_as_configured() {
        let nav = [("sec-fetch-dest", "document")];
        let h = hinted(EarlyHintsConfig::default());
        let origin = || (HintSource::Origin, "</origin.css>; rel=preload".to_string());
        let learned = || (HintSource::Learned, "</a.css>; rel=preload; as=style".to_string());
        assert_eq!(send(&h, &nav).await, [origin()], "nothing learned yet");
        assert_eq!(send(&h, &nav).await, [learned(), origin()], "ours first, then the origin's");
        assert_eq!(send(&h, &[("sec-fetch-dest", "script")]).await, [origin()]);
        // A response to a request with a cookie neither teaches nor erases.
        let cookie_nav = [("sec-fetch-dest", "document"), ("cookie", "s=1")];
        assert_eq!(send(&hinted(EarlyHintsConfig::default()), &cookie_nav).await, [origin()]);

        let quiet = hinted(EarlyHintsConfig { from_origin: false, ..EarlyHintsConfig::default() });
        assert_eq!(send(&quiet, &nav).await, []);
        assert_eq!(send(&quiet, &nav).await, [learned()], "the origin's are held back, ours are not");
        let fresh = hinted(EarlyHintsConfig { from_origin: false, ..EarlyHintsConfig::default() });
        assert_eq!(send(&fresh, &cookie_nav).await, []);
        assert_eq!(send(&fresh, &nav).await, [], "the cookie's response taught nothing");

        let passive = hinted(EarlyHintsConfig { learn: false, ..EarlyHintsConfig::default() });
        send(&passive, &nav).await;
        assert_eq!(send(&passive, &nav).await, [origin()], "nothing learned with learn: false");
    }
}
