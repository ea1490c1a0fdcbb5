//! `prewarm` against `tunnel` over an emulated long edge↔origin link, and the pool's hit rate
//! and waste at steady arrival rates and across a ramp.
//!
//! The long link is a delay relay in front of the origin (until the lab's TUN delay box runs
//! this): it accepts at once, waits one RTT `R` before its first byte can reach the origin (the
//! TCP handshake the edge did not see), then delays every chunk by `R/2` each way. So an origin
//! TLS 1.3 handshake costs `2R` from the edge, as over a real link, and the theoretical TTFB
//! through edgewarm on loopback clients (r ≈ 0) is `3R` for `tunnel` (TCP + TLS + request on the
//! long link) and `R` for a `prewarm` hit (request only).
//!
//! Run: `cargo bench --bench prewarm` (EDGEWARM_BENCH_QUICK=1 for a short run;
//! EDGEWARM_BENCH_RTT_MS to change R, default 100).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgewarm::config::Config;
use edgewarm::server::{Bound, Server};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// The test suite's PKI: a CA and a leaf for the given names.
use edgewarm_test_support::{certs as pki, Certs as Pki};

async fn origin(pki: &Pki) -> SocketAddr {
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![pki.cert_der.clone()], PrivateKeyDer::Pkcs8(pki.key_der.clone_key()))
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut buf = [0u8; 4096];
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// The emulated long link in front of `origin` (see the module doc).
async fn delay_relay(origin: SocketAddr, rtt: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (inbound, _) = listener.accept().await.unwrap();
            inbound.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(rtt).await;
                let Ok(outbound) = TcpStream::connect(origin).await else { return };
                outbound.set_nodelay(true).unwrap();
                let (ir, iw) = inbound.into_split();
                let (or, ow) = outbound.into_split();
                tokio::join!(delayed(ir, ow, rtt / 2), delayed(or, iw, rtt / 2));
            });
        }
    });
    addr
}

/// One direction: each chunk is written `delay` after it was read, in order.
async fn delayed(mut r: tokio::net::tcp::OwnedReadHalf, mut w: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    tokio::join!(reader, writer);
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// One client: new TCP + TLS 1.3 connection, one request; returns TTFB.
async fn client(edge: SocketAddr, tls: Arc<rustls::ClientConfig>, name: &'static str) -> Result<Duration, String> {
    let start = Instant::now();
    let tcp = TcpStream::connect(edge).await.map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).unwrap();
    let server_name = ServerName::try_from(name).unwrap();
    let mut s = tokio_rustls::TlsConnector::from(tls).connect(server_name, tcp).await.map_err(|e| e.to_string())?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("closed before a response".into());
    }
    let ttfb = start.elapsed();
    let _ = s.shutdown().await;
    Ok(ttfb)
}

fn client_config(ca: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    // No session cache: every client is a first-time visitor, the case pre-warming is for.
    let mut c = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

/// Arrivals per second as a function of seconds since the phase began.
type RateFn = Box<dyn Fn(f64) -> f64>;

fn pct(mut v: Vec<Duration>, p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

/// Pool counters of the prewarm route, summed over ALPNs.
fn pool_counts(server: &Server) -> [f64; 4] {
    let m = server.metrics();
    let get = |name| m.sample(name, &[("route", "b.test")]).unwrap_or(0.0);
    [
        get("edgewarm_pool_hits_total"),
        get("edgewarm_pool_misses_total"),
        get("edgewarm_pool_opened_total"),
        get("edgewarm_pool_ready"),
    ]
}

/// Open loop: arrivals at `rate(t)` per second for `duration`; returns (clients, errors).
async fn open_loop(
    edge: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    duration: Duration,
    rate: &dyn Fn(f64) -> f64,
) -> (usize, usize) {
    let start = Instant::now();
    let mut next = 0.0f64;
    let mut tasks = tokio::task::JoinSet::new();
    while next < duration.as_secs_f64() {
        tokio::time::sleep_until((start + Duration::from_secs_f64(next)).into()).await;
        tasks.spawn(client(edge, tls.clone(), "b.test"));
        next += 1.0 / rate(next).max(0.1);
    }
    let (mut n, mut errors) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        n += 1;
        if !matches!(r, Ok(Ok(_))) {
            errors += 1;
        }
    }
    (n, errors)
}

fn main() {
    let quick = std::env::var_os("EDGEWARM_BENCH_QUICK").is_some();
    let rtt_ms: u64 = std::env::var("EDGEWARM_BENCH_RTT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let rtt = Duration::from_millis(rtt_ms);
    let (samples, steady, warmup) = if quick {
        (10, Duration::from_secs(3), Duration::from_secs(1))
    } else {
        (50, Duration::from_secs(20), Duration::from_secs(5))
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let edge_pki = pki(&["b.test"]);
        let origin_pki = pki(&["origin.test", "t.test"]);
        let origin_addr = origin(&origin_pki).await;
        let far = delay_relay(origin_addr, rtt).await;
        let (cert, key) = (write(d, "edge.pem", &edge_pki.cert_pem), write(d, "edge.key", &edge_pki.key_pem));
        let origin_ca = write(d, "origin-ca.pem", &origin_pki.ca_pem);
        let _ = (&edge_pki.ca_pem, &origin_pki.cert_pem, &origin_pki.key_pem);
        let yaml = format!(
            "admin: {{listen: \"127.0.0.1:0\"}}\nlisteners: [{{listen: \"127.0.0.1:0\", max_connections: 100000}}]\nroutes:\n\
             \x20 - {{sni: t.test, action: tunnel, origin: \"{far}\"}}\n\
             \x20 - {{sni: b.test, action: prewarm, origin: \"{far}\", cert: {cert}, key: {key}, origin_tls: {{sni: origin.test, ca: {origin_ca}}}, pool: {{min: 2, max: 1000, max_idle: 10s, period: 500ms}}}}\n"
        );
        let config = Config::parse(&yaml).unwrap();
        let server = Server::new(&config).unwrap();
        let bound = Bound::bind(&config).unwrap();
        let edge = bound.local_addrs()[0];
        let s = server.clone();
        tokio::spawn(async move { s.run(bound.listeners).await });
        let to_edge = client_config(&edge_pki.ca_der);
        let to_origin = client_config(&origin_pki.ca_der);
        tokio::time::sleep(rtt * 4).await;

        println!("# prewarm vs tunnel, R = {rtt_ms} ms emulated edge↔origin RTT, clients on loopback (r ≈ 0)");
        let (mut tunnel, mut prewarm) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            tunnel.push(client(edge, to_origin.clone(), "t.test").await.unwrap());
            prewarm.push(client(edge, to_edge.clone(), "b.test").await.unwrap());
            tokio::time::sleep(rtt).await;
        }
        let r = rtt_ms as f64;
        println!("\n## TTFB of new connections ({samples} each, alternating)");
        println!("| mode | p50 ms | p99 ms | theoretical ms | p50 / theoretical |\n|---|---|---|---|---|");
        let t50 = pct(tunnel.clone(), 0.5);
        let p50 = pct(prewarm.clone(), 0.5);
        println!("| tunnel | {t50:.1} | {:.1} | {:.0} (3R) | {:.3} |", pct(tunnel, 0.99), 3.0 * r, t50 / (3.0 * r));
        println!("| prewarm | {p50:.1} | {:.1} | {:.0} (R) | {:.3} |", pct(prewarm, 0.99), r, p50 / r);
        println!("prewarm saves {:.1} ms at p50 ({:.2}× faster)", t50 - p50, t50 / p50);

        println!(
            "\n## Pool hit rate and waste (open loop, {} s measured per rate after {} s at that rate; the ramp is measured whole)",
            steady.as_secs(),
            warmup.as_secs()
        );
        println!(
            "waste = origin connections opened per client connection (ready ones at the end excluded); pool max_idle 10 s, period 500 ms"
        );
        println!("| arrivals/s | clients | errors | hit rate | waste |\n|---|---|---|---|---|");
        let mut rates: Vec<(String, RateFn)> =
            vec![("10".into(), Box::new(|_| 10.0)), ("100".into(), Box::new(|_| 100.0)), ("500".into(), Box::new(|_| 500.0))];
        let secs = steady.as_secs_f64();
        rates.push(("ramp 10→500".into(), Box::new(move |t| 10.0 + 490.0 * t / secs)));
        for (label, rate) in rates {
            if !label.starts_with("ramp") {
                // Reach the steady state first: the step from the previous rate is not "steady".
                open_loop(edge, to_edge.clone(), warmup, &rate).await;
            }
            let [h0, m0, o0, r0] = pool_counts(&server);
            let (n, errors) = open_loop(edge, to_edge.clone(), steady, &rate).await;
            let [h1, m1, o1, r1] = pool_counts(&server);
            let (hits, misses, opened) = (h1 - h0, m1 - m0, (o1 - o0) - (r1 - r0));
            println!(
                "| {label} | {n} | {errors} | {:.2} % | {:.3} |",
                100.0 * hits / (hits + misses).max(1.0),
                opened / (hits + misses).max(1.0)
            );
            // Let the pool settle between phases as demand decays.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
}
