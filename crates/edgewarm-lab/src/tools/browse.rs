//! `edgewarm-lab browse`: headless Chromium loads a page, driven over the DevTools protocol
//! (chromiumoxide), and reports what a person waits for: the document's time to first byte,
//! the page load time, the connections the browser opened and each resource's protocol and
//! timing. The lab runs it in the client namespace, so Chromium's traffic crosses the emulated
//! WAN like the load generator's.
//!
//! Every load is a pair, each in a browser context of its own (Chromium gives a context its own
//! socket pools, TLS session cache and HTTP cache):
//! - **first visit**: the fresh context's first navigation: no session ticket, no connection,
//!   no cache;
//! - **returning visit**: the same context, after `chrome.benchmarking.closeConnections()` and
//!   `clearCache()` (`--enable-net-benchmarking`): the browser keeps its TLS session tickets (and
//!   QUIC's 0-RTT state) but has no open connection and no cached response, so it pays the
//!   handshakes again, resumed. The lab's pages are `no-store` as well;
//! - **warm-edge visit** (`--warm-edge`): after the pair, a new context's first navigation to
//!   the same URL: a new visitor, browser cache empty, after an earlier visitor filled whatever
//!   cache the path has (the edge's).
//!
//! A `{n}` in the URL is the pair's number, so that each pair can ask for URLs no earlier pair
//! asked for (the browser lab's cached site: a release per pair, a cold edge for every first
//! visit).

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::network::{ClearBrowserCacheParams, EventResponseReceived};
use chromiumoxide::cdp::browser_protocol::target::{CreateBrowserContextParams, CreateTargetParams};
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, clap::Args)]
pub struct BrowseOpts {
    /// The page, e.g. https://h.test/news/; `{n}` stands for the load pair's number (0, 1, …).
    pub url: String,
    /// Where a name goes (Chromium's host resolver rules): NAME=IP. Repeatable.
    #[arg(long = "resolve", value_name = "NAME=IP")]
    pub resolve: Vec<String>,
    /// Speak HTTP/3 (QUIC) to these HOST:PORT from the first request; all others TCP only.
    #[arg(long = "quic", value_name = "HOST:PORT")]
    pub quic: Vec<String>,
    /// QUIC as a browser has it by default: HTTP/3 only where a server's `Alt-Svc` offers it
    /// (without this and without `--quic`, QUIC is off).
    #[arg(long, conflicts_with = "quic")]
    pub alt_svc: bool,
    /// Certificates to trust: base64 SHA-256 of their public key (SubjectPublicKeyInfo).
    #[arg(long = "spki", value_name = "BASE64")]
    pub spki: Vec<String>,
    /// Pairs of loads (a first visit, then a returning one).
    #[arg(long, default_value_t = 1)]
    pub loads: usize,
    /// After each pair, a warm-edge visit: a new context's first navigation to the same URL.
    #[arg(long)]
    pub warm_edge: bool,
    /// Keep the browser's HTTP cache on (each context's starts empty, and the returning visit
    /// still clears it). Off by default: DevTools' cache-off mode sends `Cache-Control:
    /// no-cache` on every request, which a cache on the path must honour by asking the origin.
    #[arg(long)]
    pub browser_cache: bool,
    /// The Chromium binary.
    #[arg(long, default_value = CHROMIUM)]
    pub chromium: std::path::PathBuf,
    /// Give up on a page after this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub timeout: Duration,
}

/// One page load as the browser saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Load {
    /// `first` or `returning`.
    pub visit: String,
    /// The document's first byte, from the start of the navigation: Navigation Timing's
    /// `finalResponseHeadersStart` (since Chromium 115 `responseStart` is a 103's arrival when
    /// there is one), else `responseStart`.
    pub ttfb_ms: f64,
    /// `loadEventEnd`.
    pub load_event_ms: f64,
    /// When the page settled: the load event or the last resource's end, whichever is later
    /// (the single-page app's API calls finish after its load event).
    pub plt_ms: f64,
    /// Distinct connections the responses arrived on (DevTools `connectionId`).
    pub connections: usize,
    /// The document's protocol (`nextHopProtocol`: h2, h3, http/1.1).
    pub protocol: String,
    /// When the document's first interim response (a 103) arrived, from the navigation's start
    /// (`firstInterimResponseStart`); 0 without one.
    #[serde(default)]
    pub early_hints_ms: f64,
    /// Resources that got no response (a failed fetch still has a Resource Timing entry).
    pub failed: usize,
    pub resources: Vec<ResourceTiming>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResourceTiming {
    pub name: String,
    pub protocol: String,
    pub start_ms: f64,
    /// Connection set-up (DNS, TCP, TLS or QUIC) inside this resource's fetch, if it had one.
    pub connect_ms: f64,
    pub response_start_ms: f64,
    pub end_ms: f64,
    /// What started the fetch (`initiatorType`): `link`, `script`, `img`, `css`, or
    /// `early-hints` for a preload a 103 started.
    #[serde(default)]
    pub initiator: String,
    /// Bytes over the network, headers included; 0 from the browser's own cache.
    #[serde(default)]
    pub transfer_bytes: f64,
}

/// What the page reports of itself once it has settled; `null` until then.
const SETTLED: &str = r#"(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const want = Number(document.querySelector('meta[name=resources]')?.content ?? 0);
  const res = performance.getEntriesByType('resource');
  if (!nav || nav.loadEventEnd <= 0 || res.length < want) return null;
  return JSON.stringify({
    ttfb_ms: nav.finalResponseHeadersStart || nav.responseStart, load_event_ms: nav.loadEventEnd, protocol: nav.nextHopProtocol,
    early_hints_ms: nav.firstInterimResponseStart || 0,
    resources: res.map(r => ({ name: r.name, protocol: r.nextHopProtocol, start_ms: r.startTime,
      connect_ms: r.connectEnd - r.domainLookupStart, response_start_ms: r.responseStart, end_ms: r.responseEnd,
      initiator: r.initiatorType, transfer_bytes: r.transferSize })),
  });
})()"#;

#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    #[error("chromium: {0}")]
    Cdp(#[from] chromiumoxide::error::CdpError),
    #[error("chromium: {0}")]
    Launch(String),
    #[error("{url}: the page did not settle within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where Debian's package puts Chromium: what `browse` launches unless told otherwise.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Launch Chromium, load the page `opts.loads` times as a first and a returning visit (and a
/// warm-edge one), close it.
pub async fn run(opts: &BrowseOpts) -> Result<Vec<Load>, BrowseError> {
    let profile = tempfile::tempdir()?;
    let (mut browser, mut handler) = Browser::launch(config(opts, profile.path())?).await?;
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let result = async {
        let mut loads = Vec::with_capacity(3 * opts.loads);
        for n in 0..opts.loads {
            let url = opts.url.replace("{n}", &n.to_string());
            let (context, page) = fresh_page(&mut browser).await?;
            loads.push(visit(&page, opts, &url, "first").await?);
            // Both: the benchmarking call may reach only the default context's cache.
            page.execute(ClearBrowserCacheParams::default()).await?;
            page.evaluate("chrome.benchmarking.clearCache(); chrome.benchmarking.closeConnections(); true").await?;
            loads.push(visit(&page, opts, &url, "returning").await?);
            page.close().await?;
            browser.dispose_browser_context(context).await?;
            if opts.warm_edge {
                let (context, page) = fresh_page(&mut browser).await?;
                loads.push(visit(&page, opts, &url, "warm-edge").await?);
                page.close().await?;
                browser.dispose_browser_context(context).await?;
            }
        }
        Ok(loads)
    }
    .await;
    let _ = browser.close().await;
    let _ = browser.wait().await;
    events.abort();
    result
}

/// A new browser context (its own sockets, tickets and cache) with a blank page in it.
async fn fresh_page(browser: &mut Browser) -> Result<(BrowserContextId, Page), BrowseError> {
    let context = browser.create_browser_context(CreateBrowserContextParams::default()).await?;
    let target = CreateTargetParams::builder()
        .url("about:blank")
        .browser_context_id(context.clone())
        .build()
        .map_err(BrowseError::Launch)?;
    Ok((context, browser.new_page(target).await?))
}

fn config(opts: &BrowseOpts, profile: &std::path::Path) -> Result<BrowserConfig, BrowseError> {
    let rules = opts
        .resolve
        .iter()
        .filter_map(|r| r.split_once('='))
        .map(|(name, ip)| format!("MAP {name} {ip}"))
        .collect::<Vec<_>>()
        .join(",");
    let spki = opts.spki.join(",");
    let quic = opts.quic.join(",");
    let mut config = BrowserConfig::builder()
        .chrome_executable(&opts.chromium)
        .new_headless_mode()
        .no_sandbox()
        .respect_https_errors()
        .user_data_dir(profile)
        .launch_timeout(Duration::from_secs(30))
        .arg("disable-gpu")
        .arg("disable-component-update")
        .arg("enable-net-benchmarking")
        .arg(("host-resolver-rules", rules.as_str()))
        .arg(("ignore-certificate-errors-spki-list", spki.as_str()));
    if !opts.browser_cache {
        config = config.disable_cache();
    }
    config = if opts.alt_svc {
        config
    } else if opts.quic.is_empty() {
        // TCP rows stay on TCP: the edge's Alt-Svc would move a returning visit to HTTP/3.
        config.arg("disable-quic")
    } else {
        config.arg(("origin-to-force-quic-on", quic.as_str()))
    };
    config.build().map_err(BrowseError::Launch)
}

/// One navigation to the page, measured once it has settled.
async fn visit(page: &Page, opts: &BrowseOpts, url: &str, visit: &str) -> Result<Load, BrowseError> {
    let mut responses = page.event_listener::<EventResponseReceived>().await?;
    page.goto(url).await?;
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let text = loop {
        if let Some(text) = page.evaluate(SETTLED).await?.into_value::<Option<String>>().ok().flatten() {
            break text;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BrowseError::Timeout { url: url.into(), timeout: opts.timeout });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut connections = std::collections::BTreeSet::new();
    while let Some(Some(event)) = futures_util::FutureExt::now_or_never(responses.next()) {
        connections.insert(event.response.connection_id.to_bits());
    }
    #[derive(Deserialize)]
    struct Settled {
        ttfb_ms: f64,
        load_event_ms: f64,
        protocol: String,
        early_hints_ms: f64,
        resources: Vec<ResourceTiming>,
    }
    let s: Settled = serde_json::from_str(&text).map_err(|e| BrowseError::Launch(e.to_string()))?;
    let last = s.resources.iter().map(|r| r.end_ms).fold(s.load_event_ms, f64::max);
    Ok(Load {
        visit: visit.into(),
        ttfb_ms: s.ttfb_ms,
        load_event_ms: s.load_event_ms,
        plt_ms: last,
        connections: connections.len(),
        failed: s.resources.iter().filter(|r| r.response_start_ms <= 0.0).count(),
        protocol: s.protocol,
        early_hints_ms: s.early_hints_ms,
        resources: s.resources,
    })
}
