//! A cleartext HTTP/1.1 origin whose answers the request chooses, for cache tests. The query
//! string says what to send (`%`-encoded values):
//! `cc=` Cache-Control, `cdn=` CDN-Cache-Control, `etag=`, `lm=` Last-Modified, `vary=`,
//! `cookie=` Set-Cookie, `tag=` Cache-Tag, `server=` Server, `status=` the status (200 by
//! default), `size=` body bytes, `delay=` milliseconds before
//! the head, `drip=` milliseconds between the body's 4 chunks, `fail_after=N` (500 from the
//! N+1th request for this URL on). The body is `<path?query> #<n>`, n counting this URL's
//! requests, so a test sees whether an answer is a new one. A request whose `If-None-Match`
//! names the `etag` is answered 304. `reflect=1` makes it an origin that writes what it was told
//! into its page, as many frameworks do when they build absolute links: every `x-…` (or
//! `x_…`) and `forwarded` header is appended to the body as ` name=value`, sorted, then the
//! request body's length as ` body=N` if it had one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};

use super::plain_origin_loop;

/// What the cache test origin saw.
#[derive(Default)]
pub struct OriginLog {
    /// Requests by `path?query`.
    pub by_url: Mutex<HashMap<String, usize>>,
    /// Every request's method, `path?query` and headers, in arrival order.
    pub seen: Mutex<Vec<(String, String, http::HeaderMap)>>,
}

impl OriginLog {
    /// Requests seen for `path?query`.
    pub fn count(&self, url: &str) -> usize {
        self.by_url.lock().unwrap().get(url).copied().unwrap_or(0)
    }
}

/// Start the origin; it serves until the test's runtime ends.
pub async fn cache_origin() -> (SocketAddr, Arc<OriginLog>) {
    let log = Arc::new(OriginLog::default());
    let l = log.clone();
    let (addr, _) = plain_origin_loop(move |tcp, _, _| {
        let log = l.clone();
        async move {
            let service = hyper::service::service_fn(move |req| answer(req, log.clone()));
            let io = hyper_util::rt::TokioIo::new(tcp);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        }
    })
    .await;
    (addr, log)
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 3 <= b.len() {
            if let Ok(n) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn answer(req: Request<hyper::body::Incoming>, log: Arc<OriginLog>) -> Result<Response<Body>, hyper::Error> {
    let url = req.uri().path_and_query().map_or("/".to_string(), |p| p.to_string());
    let n = {
        let mut by = log.by_url.lock().unwrap();
        let n = by.entry(url.clone()).or_default();
        *n += 1;
        *n
    };
    log.seen.lock().unwrap().push((req.method().to_string(), url.clone(), req.headers().clone()));
    let q: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect();
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let ms = |k: &str| Duration::from_millis(get(k).and_then(|v| v.parse().ok()).unwrap_or(0));
    tokio::time::sleep(ms("delay")).await;
    let inm = req.headers().get(http::header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut reflected: Vec<String> = req
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-") || k.as_str().starts_with("x_") || k.as_str() == "forwarded")
        .map(|(k, v)| format!(" {k}={}", String::from_utf8_lossy(v.as_bytes())))
        .collect();
    reflected.sort();
    let body = req.into_body().collect().await?.to_bytes();
    if !body.is_empty() {
        reflected.push(format!(" body={}", body.len()));
    }
    let mut response = Response::new(BodyExt::boxed(http_body_util::Empty::new()));
    let failing = get("fail_after").and_then(|v| v.parse::<usize>().ok()).is_some_and(|after| n > after);
    let head = response.headers_mut();
    for (param, name) in [
        ("cc", "cache-control"),
        ("cdn", "cdn-cache-control"),
        ("etag", "etag"),
        ("lm", "last-modified"),
        ("vary", "vary"),
        ("cookie", "set-cookie"),
        ("tag", "cache-tag"),
        ("server", "server"),
    ] {
        if let Some(v) = get(param) {
            head.insert(name, HeaderValue::from_str(&v).unwrap());
        }
    }
    if failing {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        return Ok(response);
    }
    if let (Some(inm), Some(etag)) = (inm, get("etag")) {
        if inm.split(',').any(|t| t.trim() == etag) {
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            return Ok(response);
        }
    }
    let text = match get("size").and_then(|s| s.parse::<usize>().ok()) {
        Some(size) => Bytes::from((0..size).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>()),
        None if get("reflect").is_some() => Bytes::from(format!("{url} #{n}{}", reflected.concat())),
        None => Bytes::from(format!("{url} #{n}")),
    };
    response.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    if let Some(status) = get("status").and_then(|s| StatusCode::from_bytes(s.as_bytes()).ok()) {
        *response.status_mut() = status;
    }
    let drip = ms("drip");
    let quarter = text.len().div_ceil(4).max(1);
    let chunks: Vec<Bytes> = text.chunks(quarter).map(Bytes::copy_from_slice).collect();
    let stream = futures_stream(chunks, drip);
    *response.body_mut() = BodyExt::boxed(StreamBody::new(stream));
    Ok(response)
}

/// The chunks as body frames, `drip` apart.
fn futures_stream(
    chunks: Vec<Bytes>,
    drip: Duration,
) -> impl futures_util::Stream<Item = Result<http_body::Frame<Bytes>, std::convert::Infallible>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for (i, c) in chunks.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(drip).await;
            }
            if tx.send(Ok(http_body::Frame::data(c))).await.is_err() {
                return;
            }
        }
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
