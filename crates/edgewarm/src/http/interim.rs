//! Informational heads (`103 Early Hints`) on their way to the client while its final response
//! is awaited. The HTTP/2 and HTTP/3 drivers make one [`Interims`] per request and hand its
//! [`ToClient`] to the request service with the request; the service passes it on as
//! [`Outgoing::interim`](crate::origin::seam::Outgoing::interim),
//! where a layer or the origin's kind sends what it has. The driver sends each head as it comes
//! and drops whatever is still queued once the final response is there: a hint after the
//! response is no use (and RFC 8297 allows none). HTTP/1.1 requests have none: browsers ignore
//! a 103 there.
//!
//! Bounded: a few heads per request, each sent without waiting (a hint is never worth holding
//! a response for); more are dropped, so an origin sending a stream of 103s cannot queue memory.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use http::{Response, StatusCode};

use super::forward;
use crate::metrics::{HintSource, RouteHttpMetrics};
use crate::origin::seam::Interim;

/// Heads one request may send before its final response; later ones are dropped.
const MAX_PER_REQUEST: u8 = 4;

/// The driver's end for one request.
pub(crate) struct Interims(Arc<Shared>);

/// The sending end, handed to the request service.
pub(crate) struct ToClient(Arc<Shared>);

struct Shared {
    queue: Mutex<Queue>,
    /// The route's metrics, once the request service knows which route serves the request.
    metrics: OnceLock<Arc<RouteHttpMetrics>>,
}

#[derive(Default)]
struct Queue {
    heads: VecDeque<(Response<()>, HintSource)>,
    accepted: u8,
    /// The edge's learned hints were taken: a request sent again (a retry) does not repeat them.
    learned: bool,
    /// The final response has gone (or the request ended): nothing more is sent.
    closed: bool,
    waker: Option<Waker>,
}

impl Interims {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Shared { queue: Mutex::default(), metrics: OnceLock::new() }))
    }

    pub(crate) fn to_client(&self) -> ToClient {
        ToClient(self.0.clone())
    }

    /// The next head to send; pending while there is none (so a `select!` branch that never
    /// ends the wait for the final response).
    pub(crate) async fn next(&self) -> (Response<()>, HintSource) {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<(Response<()>, HintSource)> {
        let mut queue = self.0.lock();
        match queue.heads.pop_front() {
            Some(head) => Poll::Ready(head),
            None => {
                queue.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// A head went out: counted for the route that served the request.
    pub(crate) fn sent(&self, source: HintSource) {
        if let Some(metrics) = self.0.metrics.get() {
            metrics.early_hint(source);
        }
    }
}

impl Drop for Interims {
    /// The final response is on its way (or the request is gone): what is queued is dropped and
    /// nothing more is taken.
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.closed = true;
        queue.heads.clear();
    }
}

impl ToClient {
    /// The sink for the seam, counted under `metrics` (the route serving the request).
    pub(crate) fn sink(&self, metrics: &Arc<RouteHttpMetrics>) -> Arc<dyn Interim> {
        let _ = self.0.metrics.set(metrics.clone());
        self.0.clone()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Interim for Shared {
    fn send(&self, mut head: Response<()>, source: HintSource) {
        // 103 only: a 100 Continue answers the edge's own request to the origin, 101 is an
        // upgrade (never informational here), 102 is obsolete.
        if head.status() != StatusCode::EARLY_HINTS {
            return;
        }
        // An HTTP/1.1 origin's head may name connection options; HTTP/2 and HTTP/3 forbid them.
        forward::strip_hop_by_hop(head.headers_mut());
        let waker = {
            let mut queue = self.lock();
            let again = source == HintSource::Learned && queue.learned;
            if queue.closed || queue.accepted >= MAX_PER_REQUEST || again {
                return;
            }
            queue.accepted += 1;
            queue.learned |= source == HintSource::Learned;
            queue.heads.push_back((head, source));
            queue.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(status: u16) -> Response<()> {
        let mut r = Response::new(());
        *r.status_mut() = StatusCode::from_u16(status).unwrap();
        r.headers_mut().insert("link", "</a.css>; rel=preload; as=style".parse().unwrap());
        r.headers_mut().insert("connection", "close".parse().unwrap());
        r
    }

    fn ready(i: &Interims) -> Option<(Response<()>, HintSource)> {
        match i.poll_next(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(h) => Some(h),
            Poll::Pending => None,
        }
    }

    #[test]
    fn early_hints_only_a_few_and_none_after_the_end() {
        let interims = Interims::new();
        let sink: Arc<dyn Interim> = interims.to_client().0;
        sink.send(hint(100), HintSource::Origin);
        assert!(ready(&interims).is_none(), "a 100 is not passed on");
        for _ in 0..10 {
            sink.send(hint(103), HintSource::Origin);
        }
        let mut n = 0;
        while let Some((head, source)) = ready(&interims) {
            assert_eq!(head.status(), 103);
            assert_eq!(source, HintSource::Origin);
            assert!(head.headers().contains_key("link"));
            assert!(!head.headers().contains_key("connection"), "hop-by-hop headers go");
            n += 1;
        }
        assert_eq!(n, MAX_PER_REQUEST);
        let once = Interims::new();
        let sink: Arc<dyn Interim> = once.to_client().0;
        sink.send(hint(103), HintSource::Learned);
        sink.send(hint(103), HintSource::Learned);
        assert!(ready(&once).is_some() && ready(&once).is_none(), "learned hints once per request");
        let late = Interims::new();
        let sink: Arc<dyn Interim> = late.to_client().0;
        let queue = late.0.clone();
        drop(late);
        sink.send(hint(103), HintSource::Learned);
        assert!(queue.lock().heads.is_empty(), "nothing is queued once the final response went");
    }
}
