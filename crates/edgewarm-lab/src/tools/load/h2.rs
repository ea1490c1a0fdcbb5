//! HTTP/2 for the load generator (`--alpn h2`): one GET on the new TLS connection through
//! hyper, then the page's sub-resources at once on it (`--page`).

use std::time::Duration;

use tokio::time::Instant;

use crate::tools::load::target::{Sample, Target};

/// One GET of `path` over HTTP/2 (hyper), timed from `t0` (scheduled `at` into the run). TTFB
/// is when the response headers arrive.
pub(crate) async fn h2_request<S>(
    t: &Target,
    path: &str,
    tls: S,
    (t0, at): (Instant, Duration),
    connect: Duration,
    tls_done: Duration,
    resumed: bool,
) -> Result<Sample, &'static str>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let io = hyper_util::rt::TokioIo::new(tls);
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.map_err(|_| "http2")?;
    tokio::spawn(conn);
    let uri = format!("https://{}{path}", t.host);
    let req = hyper::Request::get(uri).body(http_body_util::Empty::<bytes::Bytes>::new()).map_err(|_| "http2")?;
    let resp = send.send_request(req).await.map_err(|_| "http2")?;
    let ttfb = t0.elapsed();
    if !resp.status().is_success() {
        return Err("http_status");
    }
    resp.into_body().collect().await.map_err(|_| "io")?;
    // The page's sub-resources, all at once on this connection, as a browser does.
    let mut subs = tokio::task::JoinSet::new();
    for i in 0..t.page {
        let mut send = send.clone();
        let uri = format!("https://{}{path}?sub={i}", t.host);
        subs.spawn(async move {
            let req =
                hyper::Request::get(uri).body(http_body_util::Empty::<bytes::Bytes>::new()).map_err(|_| "http2")?;
            let resp = send.send_request(req).await.map_err(|_| "http2")?;
            if !resp.status().is_success() {
                return Err("http_status");
            }
            resp.into_body().collect().await.map_err(|_| "io")?;
            Ok(())
        });
    }
    while let Some(done) = subs.join_next().await {
        done.map_err(|_| "http2")??;
    }
    Ok(Sample { at, connect, tls: tls_done, ttfb, total: t0.elapsed(), resumed, early: false, retried: 0 })
}
