//! `Alt-Svc: h3=…` (RFC 7838) on the responses of a listener that serves HTTP/3 too. It is the
//! listener's news, not the request's: which value, and how often, is decided once per client
//! connection by its driver ([`AltSvc::over_tcp`], [`AltSvc::over_http3`]), and added to each
//! response after the request service has made it, so the service stays the same whatever
//! the client speaks.

use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderValue, Request};

/// Hosts an HTTP/3 connection remembers having sent `Alt-Svc` for.
const HOSTS: usize = 8;

/// A client connection's `Alt-Svc`: none, on every response, or on the first for each host.
/// A clone shares the hosts sent for (the driver hands one to each request); over TCP it is a
/// header value's clone, nothing allocated per connection.
#[derive(Clone)]
pub(crate) struct AltSvc {
    value: Option<HeaderValue>,
    /// Over HTTP/3: the hosts it has been sent for.
    sent: Option<Arc<Mutex<Vec<Box<str>>>>>,
}

impl AltSvc {
    /// Over HTTP/1.1 and HTTP/2: on every response, where it leads a client to HTTP/3.
    pub(crate) fn over_tcp(value: Option<HeaderValue>) -> Self {
        Self { value, sent: None }
    }

    /// Over HTTP/3: on a connection's first response for each host. A client already here
    /// needs no directions, only its record of them renewed, which it keeps per origin (RFC
    /// 7838 §2, §3.1: `ma` counts from the response that carried it): once a connection and
    /// host does that, for every origin a browser coalesces onto the connection. QPACK without
    /// a dynamic table would Huffman-code the value again on every response (HPACK sends it
    /// once a connection, then as an index): about 3 % of an HTTP/3 request's instructions
    /// (docs/benchmarks.md). Past [`HOSTS`] hosts on one connection, every response carries it.
    pub(crate) fn over_http3(value: Option<HeaderValue>) -> Self {
        Self { value, sent: Some(Arc::default()) }
    }

    /// The `Alt-Svc` for the response to `req`, decided as the request arrives (the request
    /// is then handed over).
    pub(crate) fn for_request<B>(&self, req: &Request<B>) -> Option<HeaderValue> {
        let value = self.value.as_ref()?;
        let Some(sent) = &self.sent else { return Some(value.clone()) };
        let host =
            req.uri().host().or_else(|| req.headers().get(http::header::HOST)?.to_str().ok()).unwrap_or_default();
        let mut sent = sent.lock().unwrap_or_else(|p| p.into_inner());
        if sent.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return None;
        }
        if sent.len() < HOSTS {
            sent.push(host.into());
        }
        Some(value.clone())
    }
}

/// `value`, from [`AltSvc::for_request`], on a response's `headers`.
pub(crate) fn add(headers: &mut HeaderMap, value: Option<HeaderValue>) {
    if let Some(value) = value {
        headers.insert(http::header::ALT_SVC, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str) -> Request<()> {
        Request::get(format!("https://{host}/")).body(()).unwrap()
    }

    #[test]
    fn over_tcp_every_response_and_over_http3_the_first_per_host() {
        let value = HeaderValue::from_static("h3=\":443\"; ma=86400");
        let tcp = AltSvc::over_tcp(Some(value.clone()));
        assert_eq!(tcp.for_request(&req("a.test")), Some(value.clone()));
        assert_eq!(tcp.for_request(&req("a.test")), Some(value.clone()));
        let h3 = AltSvc::over_http3(Some(value.clone()));
        assert_eq!(h3.for_request(&req("a.test")), Some(value.clone()));
        assert_eq!(h3.for_request(&req("A.TEST")), None, "hosts compare without case");
        assert_eq!(h3.for_request(&req("b.test")), Some(value.clone()), "a coalesced host gets its own");
        assert_eq!(AltSvc::over_tcp(None).for_request(&req("a.test")), None, "no HTTP/3 here");
    }

    #[test]
    fn past_the_hosts_it_remembers_every_response_carries_it() {
        let value = HeaderValue::from_static("h3=\":443\"");
        let h3 = AltSvc::over_http3(Some(value));
        for i in 0..HOSTS {
            assert!(h3.for_request(&req(&format!("h{i}.test"))).is_some());
        }
        let extra = req("extra.test");
        assert!(h3.for_request(&extra).is_some() && h3.for_request(&extra).is_some());
        assert!(h3.for_request(&req("h0.test")).is_none(), "the first ones are still remembered");
    }
}
