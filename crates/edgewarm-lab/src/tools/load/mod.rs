//! The load generator (`edgewarm-lab load URL`): every request on a new TCP + TLS connection, the
//! case pre-warming exists for, timing each phase.
//!
//! Per request, from its *scheduled* start: TCP connected, TLS done, first response byte
//! (TTFB, the headline), response complete. Open loop (`--rate`) schedules request `i` at
//! `t0 + i/rate` and measures from that instant even if it starts late, so a slow system cannot
//! hide its own queueing (no coordinated omission); closed loop (`--concurrency`) runs N clients
//! back to back. Both stop after `--requests` or `--duration`, whichever comes first.
//!
//! HTTP is written by hand (`GET` with `Connection: close`, HTTP/1.1 only): the first byte read
//! after the request is exactly the TTFB, with no client library buffering in between.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use edgewarm::config::OriginAddr;
use edgewarm::transport::dial as connect;

pub(crate) mod h2;
pub mod h3;
pub(crate) mod report;
pub(crate) mod target;

pub(crate) use crate::tools::load::target::{Sample, Target};
use report::summarise;
pub use report::{LoadReport, Percentiles};

#[derive(Debug, Clone, clap::Args)]
pub struct LoadOpts {
    /// `https://HOST[:PORT]/PATH` — HOST is the SNI and Host header. `{i}` in PATH is replaced
    /// by each request's index (0, 1, …): every request then asks for an object of its own.
    pub url: String,
    /// Connect here instead of resolving HOST (like curl's --connect-to / --resolve).
    #[arg(long)]
    pub connect_to: Option<SocketAddr>,
    /// CA bundle (PEM) to verify the server with.
    #[arg(long)]
    pub cacert: std::path::PathBuf,
    /// Total requests.
    #[arg(long, default_value_t = 100)]
    pub requests: usize,
    /// Stop after this long at most.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub duration: Duration,
    /// Closed loop: clients running back to back.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Open loop: new connections per second (overrides --concurrency).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop with a ramp: the rate rises linearly from --rate to this over --duration.
    #[arg(long, requires = "rate")]
    pub ramp_to: Option<f64>,
    /// TLS versions offered: 1.3 only, 1.2 only, or both.
    #[arg(long, default_value = "1.3")]
    pub tls: String,
    /// Client TCP Fast Open (the ClientHello rides in the SYN once a cookie is cached).
    #[arg(long)]
    pub tfo: bool,
    /// Reuse TLS sessions across connections (tickets).
    #[arg(long)]
    pub resume: bool,
    /// Give up on one request after this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
    /// ALPN to offer: http/1.1, h2 (HTTP/2 through hyper) or h3 (HTTP/3 over QUIC, quinn); with
    /// h2 and h3 TTFB is the arrival of the response headers.
    #[arg(long, default_value = "http/1.1")]
    pub alpn: String,
    /// TLS 1.3 0-RTT: with a resumable session, send the request as early data (implies
    /// --resume). A server that declines gets it again after the handshake.
    #[arg(long)]
    pub zero_rtt: bool,
    /// Offer only classical key exchange (X25519, P-256): a ~250-byte ClientHello instead of a
    /// ~1.5 KB post-quantum one, which no longer fits in a SYN with Fast Open.
    #[arg(long)]
    pub classic_kx: bool,
    /// Page workload: after the first response, fetch this many sub-resources at once on the
    /// same connection (needs --alpn h2 or h3); `total_ms` is then the page time, from the
    /// connect to the last sub-resource's last byte.
    #[arg(long, default_value_t = 0)]
    pub page: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid URL {0:?}: expected https://host[:port]/path")]
    Url(String),
    #[error("CA file: {0}")]
    Ca(String),
    #[error("--tls must be 1.2, 1.3 or both")]
    TlsVersion,
    #[error("--alpn must be http/1.1, h2 or h3")]
    Alpn,
    #[error("HTTP/3 client: {0}")]
    H3(String),
    #[error("--page needs --alpn h2 or h3 (sub-resources are multiplexed on the page's connection)")]
    PageNeedsH2,
}

fn parse_url(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (authority, 443),
    };
    (!host.is_empty()).then(|| (host.to_string(), port, path))
}

/// Offer the cipher suites in the browsers' order: Chromium and Firefox put AES-128-GCM first,
/// and a server following the client's order (edgewarm, nginx, HAProxy by default) then
/// negotiates it. rustls' own order starts with AES-256-GCM and SHA-384, which no browser
/// would make the server run.
fn browser_order(suites: &mut [rustls::SupportedCipherSuite]) {
    use rustls::CipherSuite as S;
    suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            S::TLS13_AES_128_GCM_SHA256
                | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
}

pub async fn run(opts: &LoadOpts) -> Result<LoadReport, LoadError> {
    let (host, port, path) = parse_url(&opts.url).ok_or_else(|| LoadError::Url(opts.url.clone()))?;
    let file = edgewarm::tls::pem::read(&opts.cacert).map_err(LoadError::Ca)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in edgewarm::tls::pem::certs(&file, &opts.cacert).map_err(LoadError::Ca)? {
        roots.add(c).map_err(|e| LoadError::Ca(e.to_string()))?;
    }
    let versions: &[&rustls::SupportedProtocolVersion] = match opts.tls.as_str() {
        "1.3" => &[&rustls::version::TLS13],
        "1.2" => &[&rustls::version::TLS12],
        "both" => &[&rustls::version::TLS13, &rustls::version::TLS12],
        _ => return Err(LoadError::TlsVersion),
    };
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if opts.classic_kx {
        use rustls::crypto::aws_lc_rs::kx_group;
        provider.kx_groups = vec![kx_group::X25519, kx_group::SECP256R1];
    }
    browser_order(&mut provider.cipher_suites);
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .map_err(|_| LoadError::TlsVersion)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !matches!(opts.alpn.as_str(), "http/1.1" | "h2" | "h3") {
        return Err(LoadError::Alpn);
    }
    if opts.page > 0 && opts.alpn == "http/1.1" {
        return Err(LoadError::PageNeedsH2);
    }
    tls.alpn_protocols = vec![opts.alpn.as_bytes().to_vec()];
    if !opts.resume && !opts.zero_rtt {
        tls.resumption = rustls::client::Resumption::disabled();
    }
    tls.enable_early_data = opts.zero_rtt;
    let addr = match opts.connect_to {
        Some(a) => OriginAddr { host: a.ip().to_string(), port: a.port() },
        None => OriginAddr { host: host.clone(), port },
    };
    let h3 = if opts.alpn == "h3" {
        let to = match opts.connect_to {
            Some(a) => a,
            None => tokio::net::lookup_host((host.as_str(), port))
                .await
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| LoadError::H3(format!("cannot resolve {host}")))?,
        };
        Some((crate::tools::load::h3::H3Client::new(tls.clone(), to).map_err(LoadError::H3)?, to))
    } else {
        None
    };
    let target = Arc::new(Target {
        host,
        addr,
        path,
        tls: Arc::new(tls),
        tfo: opts.tfo,
        zero_rtt: opts.zero_rtt,
        timeout: opts.timeout,
        resolver: edgewarm::transport::Resolver::new(Duration::from_secs(3600)),
        page: opts.page,
        h3,
    });

    warm_up_crypto(&target);
    let start = Instant::now();
    let deadline = start + opts.duration;
    let mut results: Vec<Option<Result<Sample, &'static str>>> = (0..opts.requests).map(|_| None).collect();
    let mut tasks = tokio::task::JoinSet::new();
    match opts.rate {
        Some(rate) => {
            let span = opts.duration.as_secs_f64();
            let end_rate = opts.ramp_to.unwrap_or(rate);
            // Arrival i is scheduled where the integral of the rate reaches i: spacing follows
            // the rate at that moment, computed step by step (the rate is linear in time).
            let mut at = 0.0f64;
            for i in 0..opts.requests {
                let scheduled = start + Duration::from_secs_f64(at);
                if scheduled >= deadline {
                    break;
                }
                let now_rate = rate + (end_rate - rate) * (at / span).min(1.0);
                at += 1.0 / now_rate.max(1e-3);
                tokio::time::sleep_until(scheduled).await;
                let t = target.clone();
                tasks.spawn(async move { vec![(i, one(&t, i, scheduled, start).await)] });
            }
        }
        None => {
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            for _ in 0..opts.concurrency.max(1) {
                let (t, next, n) = (target.clone(), next.clone(), opts.requests);
                tasks.spawn(async move {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n || Instant::now() >= deadline {
                            return mine;
                        }
                        mine.push((i, one(&t, i, Instant::now(), start).await));
                    }
                });
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        for (i, r) in done.unwrap_or_default() {
            results[i] = Some(r);
        }
    }
    Ok(summarise(results))
}

/// The first TLS client in a process pays one-time initialisation (about 20 ms measured in the
/// lab: the crypto library's lazy set-up), which would land on the first request's TTFB. Build
/// and drop one client connection before the clock starts so every request measures the network.
fn warm_up_crypto(t: &Target) {
    if let Ok(name) = ServerName::try_from(t.host.clone()) {
        let _ = rustls::ClientConnection::new(t.tls.clone(), name);
    }
}

/// Request `i` on a fresh connection, timed from `t0`.
async fn one(t: &Target, i: usize, t0: Instant, run_start: Instant) -> Result<Sample, &'static str> {
    match tokio::time::timeout(t.timeout, attempt(t, &t.path(i), t0, t0.saturating_duration_since(run_start))).await {
        Ok(r) => r,
        Err(_) => Err("timeout"),
    }
}

async fn attempt(t: &Target, path: &str, t0: Instant, at: Duration) -> Result<Sample, &'static str> {
    if let Some((client, addr)) = &t.h3 {
        let s = client.get(*addr, &t.host, path, t.zero_rtt, t.page, t0).await?;
        let (connect, tls) = (s.handshake, s.handshake);
        return Ok(Sample {
            at,
            connect,
            tls,
            ttfb: s.ttfb,
            total: s.total,
            resumed: s.early,
            early: s.early,
            retried: s.retried,
        });
    }
    let (tcp, _) =
        connect::connect(&t.resolver, &t.addr, t.tfo, t.timeout, &[]).await.map_err(|e| e.close_reason().label())?;
    let connect = t0.elapsed();
    let name = ServerName::try_from(t.host.clone()).map_err(|_| "bad_name")?;
    let tcp = edgewarm::transport::FastOpenStream::new(tcp);
    let connector = tokio_rustls::TlsConnector::from(t.tls.clone()).early_data(t.zero_rtt);
    let mut tls = connector.connect(name, tcp).await.map_err(|_| "tls")?;
    // With 0-RTT this is when early data may be written, before the handshake completes.
    let tls_done = t0.elapsed();
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        return crate::tools::load::h2::h2_request(t, path, tls, (t0, at), connect, tls_done, resumed).await;
    }
    let req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", t.host);
    tls.write_all(req.as_bytes()).await.map_err(|_| "io")?;
    // With 0-RTT the write only queued the request as early data: the flush sends the hello
    // and it together (one SYN with Fast Open).
    tls.flush().await.map_err(|_| "io")?;
    let mut buf = vec![0u8; 16 * 1024];
    let n = tls.read(&mut buf).await.map_err(|_| "io")?;
    if n == 0 {
        return Err("closed");
    }
    let ttfb = t0.elapsed();
    if !buf[..n].starts_with(b"HTTP/1.1 2") {
        return Err("http_status");
    }
    loop {
        match tls.read(&mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            // Servers often close without close_notify after `Connection: close`.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(_) => return Err("io"),
        }
    }
    // With 0-RTT the handshake was still running when `connect` returned: ask now.
    let resumed = resumed || tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let early = tls.get_ref().1.is_early_data_accepted();
    Ok(Sample { at, connect, tls: tls_done, ttfb, total: t0.elapsed(), resumed, early, retried: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("https://a.test/"), Some(("a.test".into(), 443, "/".into())));
        assert_eq!(parse_url("https://a.test:8443/x/y"), Some(("a.test".into(), 8443, "/x/y".into())));
        assert_eq!(parse_url("https://a.test"), Some(("a.test".into(), 443, "/".into())));
        assert_eq!(parse_url("http://a.test/"), None);
        assert_eq!(parse_url("https://:1/"), None);
    }

    #[test]
    fn suites_are_offered_in_the_browsers_order() {
        let mut suites = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
        let all = suites.len();
        browser_order(&mut suites);
        assert_eq!(suites.len(), all, "nothing dropped");
        assert_eq!(suites[0].suite(), rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let tls12 = suites.iter().position(|s| s.version() == &rustls::version::TLS12).expect("TLS 1.2 suites kept");
        let name = format!("{:?}", suites[tls12].suite());
        assert!(name.contains("AES_128_GCM"), "first TLS 1.2 suite: {name}");
    }
}
