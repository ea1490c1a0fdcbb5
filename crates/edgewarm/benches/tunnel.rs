//! Loopback benchmarks of the blind tunnel, reported as ratios measured in one run:
//!
//! 1. New-connection rate: edgewarm (read ClientHello + route + tunnel) against a plain TCP
//!    forwarder that relays the same bytes with the same connect and relay code but no peek.
//!    This prices the peek. Target: < 5 % slower.
//! 2. Throughput of one long tunnel: direct, through edgewarm with splice, with the copy relay.
//!
//! Trials alternate between the variants (ABAB…) so drift on a shared machine hits both, and the
//! median of the trials is reported. Run: `cargo bench --bench tunnel` (EDGEWARM_BENCH_QUICK=1
//! for a short smoke run, as CI does).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use edgewarm::config::Config;
use edgewarm::server::{Bound, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn hello() -> Vec<u8> {
    let mut config =
        rustls::ClientConfig::builder().with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

/// Origin: reads until EOF, answers with the byte count, closes.
async fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n as u64,
                    }
                }
                let _ = s.write_all(&total.to_be_bytes()).await;
            });
        }
    });
    addr
}

async fn edgewarm(origin: SocketAddr, relay: &str) -> SocketAddr {
    let yaml = format!(
        "admin: {{listen: \"127.0.0.1:0\"}}\nlisteners: [{{listen: \"127.0.0.1:0\", max_connections: 100000}}]\n\
         relay: {relay}\nroutes:\n  - {{sni: a.test, action: tunnel, origin: \"{origin}\"}}\n"
    );
    let config = Config::parse(&yaml).unwrap();
    let server = Server::new(&config).unwrap();
    let bound = Bound::bind(&config).unwrap();
    let addr = bound.local_addrs()[0];
    tokio::spawn(async move { server.run(bound.listeners).await });
    addr
}

/// The baseline: accept, connect the origin, relay. Same connect and relay code as edgewarm,
/// no ClientHello read and no routing.
async fn plain_forwarder(origin: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(edgewarm::relay::plain::plain_forward(listener, origin));
    addr
}

/// `count` connections, `concurrency` at a time: connect, send the hello, half-close, read the
/// answer. Returns connections per second.
async fn connection_rate(target: SocketAddr, hello: Arc<Vec<u8>>, count: usize, concurrency: usize) -> f64 {
    let start = Instant::now();
    let per_worker = count / concurrency;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let hello = hello.clone();
        workers.spawn(async move {
            for _ in 0..per_worker {
                let mut s = TcpStream::connect(target).await.unwrap();
                s.set_nodelay(true).unwrap();
                s.write_all(&hello).await.unwrap();
                s.shutdown().await.unwrap();
                let mut answer = [0u8; 8];
                s.read_exact(&mut answer).await.unwrap();
                assert_eq!(u64::from_be_bytes(answer), hello.len() as u64);
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.unwrap();
    }
    (per_worker * concurrency) as f64 / start.elapsed().as_secs_f64()
}

/// One connection: the hello, then `bytes` of payload. Returns Gbit/s.
async fn throughput(target: SocketAddr, hello: &[u8], bytes: usize) -> f64 {
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut s = TcpStream::connect(target).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(hello).await.unwrap();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    s.shutdown().await.unwrap();
    let mut answer = [0u8; 8];
    s.read_exact(&mut answer).await.unwrap();
    assert_eq!(u64::from_be_bytes(answer), (hello.len() + bytes) as u64);
    (bytes as f64 * 8.0) / start.elapsed().as_secs_f64() / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let quick = std::env::var_os("EDGEWARM_BENCH_QUICK").is_some();
    let (trials, conns, bytes) = if quick { (1, 500, 64 << 20) } else { (7, 5000, 1 << 30) };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let hello = Arc::new(hello());
        let origin = origin().await;
        let edge = edgewarm(origin, "splice").await;
        let edge_copy = edgewarm(origin, "copy").await;
        let plain = plain_forwarder(origin).await;

        println!("# edgewarm tunnel benchmark (loopback, {} cores)", std::thread::available_parallelism().unwrap());
        println!("hello size: {} bytes; {trials} alternating trials, median reported", hello.len());

        let (mut peek, mut base) = (Vec::new(), Vec::new());
        for _ in 0..trials {
            base.push(connection_rate(plain, hello.clone(), conns, 32).await);
            peek.push(connection_rate(edge, hello.clone(), conns, 32).await);
        }
        let (p, b) = (median(peek), median(base));
        println!("\n## New connections/s ({conns} per trial, 32 concurrent)");
        println!("| path | conn/s |\n|---|---|");
        println!("| plain TCP forwarder (no peek) | {b:.0} |");
        println!("| edgewarm (peek + route + tunnel) | {p:.0} |");
        println!("peek cost: {:.1} % (edgewarm/plain = {:.3})", (1.0 - p / b) * 100.0, p / b);

        let (mut direct, mut splice, mut copy) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..trials {
            direct.push(throughput(origin, &hello, bytes).await);
            splice.push(throughput(edge, &hello, bytes).await);
            copy.push(throughput(edge_copy, &hello, bytes).await);
        }
        let (d, s, c) = (median(direct), median(splice), median(copy));
        println!("\n## Throughput of one connection ({} MiB per trial)", bytes >> 20);
        println!("| path | Gbit/s | vs direct |\n|---|---|---|");
        println!("| direct | {d:.2} | 1.00 |");
        println!("| edgewarm, splice relay | {s:.2} | {:.2} |", s / d);
        println!("| edgewarm, copy relay | {c:.2} | {:.2} |", c / d);
    });
}
