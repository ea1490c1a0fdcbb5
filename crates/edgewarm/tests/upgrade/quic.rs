//! HTTP/3 across an upgrade: a connection stays with the old process until it drains, on the
//! datagrams the new process relays to it; and once the old process has gone, the new one
//! resets its connections in a way their clients believe.

use super::*;

use bytes::Buf;

/// The configuration with HTTP/3 on the listener, two workers (so two sockets, steered by
/// connection ID) and `extra` appended to the routes.
pub(super) fn config_h3(s: &Setup, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(config(s, extra)).unwrap();
    let text = format!("workers: 2\n{}", text.replacen("\"}]", "\", http3: true}]", 1));
    let path = s.dir.join("edge-h3.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

type SendRequest = ::h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>;

/// An HTTP/3 client connection to the edge for `h.test` (its driver runs in a task), sending a
/// PING every `keep_alive` if given.
async fn h3_connect(s: &Setup, keep_alive: Option<Duration>) -> (quinn::Endpoint, quinn::Connection, SendRequest) {
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(keep_alive);
    let endpoint = common::h3_endpoint(&s.edge_certs.ca_der, transport);
    let conn = endpoint.connect(s.edge, "h.test").unwrap().await.unwrap();
    let (mut driver, send) = ::h3::client::new(h3_quinn::Connection::new(conn.clone())).await.unwrap();
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    (endpoint, conn, send)
}

/// The new process's count of datagrams it relayed to the old one, by result.
async fn relayed(admin: SocketAddr, result: &str) -> f64 {
    let text = metrics(admin).await;
    let want = format!("result=\"{result}\"");
    text.lines()
        .filter(|l| l.starts_with("edgewarm_quic_relayed_datagrams_total{") && l.contains(&want))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A download in progress when the upgrade happens finishes, whole, on its connection: the old
/// process serves it to the end on the client's window updates and acknowledgements, which
/// reach the UDP sockets it no longer reads and which the new process relays to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http3_download_carries_on_across_an_upgrade() {
    bounded(download_across_upgrades(1)).await;
}

/// The same across two upgrades in a row: the newest process relays to the one before, which
/// passes the first one's datagrams on to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http3_download_carries_on_across_two_upgrades_in_a_row() {
    bounded(download_across_upgrades(2)).await;
}

async fn download_across_upgrades(upgrades: usize) {
    let s = setup().await;
    let cfg = config_h3(&s, "");
    let log = |i: usize| s.dir.join(format!("edge-{i}.log"));
    let mut procs = vec![start(&cfg, false, &log(0))];
    logged(&log(0), "listening for upgrades").await;
    let (_endpoint, conn, mut send) = h3_connect(&s, None).await;
    // Much more than QUIC's and HTTP/2's windows hold: most of it leaves the origin only
    // after the upgrades, as the client reads.
    const TOTAL: u64 = 64 << 20;
    let req = http::Request::get(format!("https://h.test/source/{TOTAL}")).body(()).unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    assert_eq!(stream.recv_response().await.unwrap().status(), 200);
    let mut got = Sha256::new();
    let mut read = 0u64;
    while read < 1 << 20 {
        let mut chunk = stream.recv_data().await.unwrap().expect("the body ended early");
        read += chunk.remaining() as u64;
        got.update(chunk.copy_to_bytes(chunk.remaining()));
    }
    for i in 1..=upgrades {
        procs.push(start(&cfg, true, &log(i)));
        logged(&log(i), "took over").await;
        logged(&log(i - 1), "this one stops accepting").await;
        logged(&log(i), "listening for upgrades").await;
    }
    // Every process's log if the body breaks off: which one ended the connection, and why.
    let logs =
        || (0..=upgrades).map(|i| std::fs::read_to_string(log(i)).unwrap_or_default()).collect::<Vec<_>>().join("\n");
    while let Some(mut chunk) = stream.recv_data().await.unwrap_or_else(|e| panic!("{e}\n{}", logs())) {
        read += chunk.remaining() as u64;
        got.update(chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(read, TOTAL);
    assert_eq!(hex(&got.finalize()), common::pattern_sha256(TOTAL), "the body, byte for byte");
    assert!(conn.close_reason().is_none(), "the same connection throughout");
    assert!(relayed(s.admin, "sent").await > 0.0, "the client's datagrams went through the newest process");
    // And the first process ends its connection now that its last request is done.
    let reason = conn.closed().await;
    assert!(matches!(reason, quinn::ConnectionError::ApplicationClosed(_)), "{reason:?}\n{}", logs());
}

/// The old process killed mid-drain: the new one answers its connection's next packet with a
/// stateless reset the client believes (the reset key went with the sockets), so the client
/// learns at once instead of at its idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http3_client_of_a_killed_old_process_is_reset() {
    bounded(async {
        let s = setup().await;
        let cfg = config_h3(&s, "");
        let mut old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        let (_endpoint, conn, mut send) = h3_connect(&s, Some(Duration::from_millis(200))).await;
        // `/slow` is never answered: the connection stays open through the drain.
        let req = http::Request::get("https://h.test/slow").body(()).unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        stream.finish().await.unwrap();
        let _new = start(&cfg, true, &s.dir.join("new.log"));
        logged(&s.dir.join("new.log"), "took over").await;
        logged(&s.dir.join("old.log"), "this one stops accepting").await;
        old.0.kill().unwrap();
        old.0.wait().unwrap();
        let reason = conn.closed().await;
        assert!(matches!(reason, quinn::ConnectionError::Reset), "{reason:?}");
    })
    .await;
}

/// An edge that crashed (SIGKILL, no upgrade) and is started again at once, as systemd would:
/// with `tls.ticket_keys` its successor on the same host derives the same reset and
/// connection-ID keys, so it
/// answers the dead process's connection with a stateless reset the client believes, and the
/// client learns at once instead of at its idle timeout. Without the file it cannot: the
/// client's connection runs to its own timeout (here 8 s of silence), never reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_edge_s_successor_resets_its_connections_with_the_fleet_s_keys() {
    bounded(async {
        for fleet in [true, false] {
            let s = setup().await;
            let keys = s.dir.join("ticket.keys");
            std::fs::write(&keys, "# 48 bytes\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n")
                .unwrap();
            let cfg = config_h3(&s, "");
            if fleet {
                let text = std::fs::read_to_string(&cfg).unwrap();
                std::fs::write(&cfg, format!("tls: {{ticket_keys: {}}}\n{text}", keys.display())).unwrap();
            }
            let mut crashed = start(&cfg, false, &s.dir.join("crashed.log"));
            logged(&s.dir.join("crashed.log"), "listening for upgrades").await;
            let mut transport = quinn::TransportConfig::default();
            transport.keep_alive_interval(Some(Duration::from_millis(200)));
            // With the file, far longer than a successor takes to start and the client's backed
            // off probe to reach it, even on a busy machine: the reset is what ends it. Without,
            // the client's own timeout ends it, sooner.
            let idle = Duration::from_secs(if fleet { 60 } else { 8 });
            transport.max_idle_timeout(Some(idle.try_into().unwrap()));
            let endpoint = common::h3_endpoint(&s.edge_certs.ca_der, transport);
            let conn = endpoint.connect(s.edge, "h.test").unwrap().await.unwrap();
            crashed.0.kill().unwrap();
            crashed.0.wait().unwrap();
            let _successor = start(&cfg, false, &s.dir.join("successor.log"));
            logged(&s.dir.join("successor.log"), "listening for upgrades").await;
            let reason = conn.closed().await;
            if fleet {
                assert!(matches!(reason, quinn::ConnectionError::Reset), "{reason:?}");
            } else {
                assert!(matches!(reason, quinn::ConnectionError::TimedOut), "{reason:?}");
            }
        }
    })
    .await;
}

/// A request the edge never processed: refused by its GOAWAY, before or after it was sent
/// (RFC 9114 §5.2). A client sends it again on a new connection; browsers do.
fn unprocessed(e: &::h3::error::StreamError) -> bool {
    use ::h3::error::{Code, StreamError};
    matches!(e, StreamError::RemoteClosing { .. })
        || matches!(e, StreamError::RemoteTerminate { code, .. } if *code == Code::H3_REQUEST_REJECTED)
}

/// One HTTP/3 request on a new connection: whether it was answered 200, or an error; an
/// unprocessed request is sent once more on another new connection.
async fn h3_get(s: &Setup, retried: &AtomicUsize) -> Result<bool, String> {
    for attempt in 0..2 {
        let (_endpoint, conn, mut send) = h3_connect(s, None).await;
        let get = async {
            let mut stream = send.send_request(http::Request::get("https://h.test/x").body(()).unwrap()).await?;
            stream.finish().await?;
            let status = stream.recv_response().await?.status();
            while stream.recv_data().await?.is_some() {}
            Ok::<_, ::h3::error::StreamError>(status == 200)
        };
        let got = get.await;
        conn.close(0u32.into(), b"");
        match got {
            Ok(ok) => return Ok(ok),
            Err(e) if attempt == 0 && unprocessed(&e) => retried.fetch_add(1, Ordering::Relaxed),
            Err(e) => return Err(e.to_string()),
        };
    }
    unreachable!()
}

/// Three upgrades back to back under a steady stream of new HTTP/3 connections (each one
/// request): none fails, whichever process it reaches and whenever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_upgrades_under_http3_load_drop_nothing() {
    bounded(async {
        let s = Arc::new(setup().await);
        let cfg = config_h3(&s, "");
        let mut procs = vec![start(&cfg, false, &s.dir.join("edge-0.log"))];
        logged(&s.dir.join("edge-0.log"), "listening for upgrades").await;
        let stop = Arc::new(AtomicBool::new(false));
        let (failed, retried) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let load: Vec<_> = (0..4)
            .map(|_| {
                let (s, stop, failed, retried) = (s.clone(), stop.clone(), failed.clone(), retried.clone());
                tokio::spawn(async move {
                    let mut ok = 0;
                    while !stop.load(Ordering::Relaxed) {
                        match h3_get(&s, &retried).await {
                            Ok(true) => ok += 1,
                            other => {
                                eprintln!("HTTP/3 client failed: {other:?}");
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    ok
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        for i in 1..=3 {
            let log = s.dir.join(format!("edge-{i}.log"));
            procs.push(start(&cfg, true, &log));
            logged(&log, "took over").await;
            logged(&s.dir.join(format!("edge-{}.log", i - 1)), "this one stops accepting").await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let mut ok = 0;
        for l in load {
            ok += l.await.unwrap();
        }
        let retried = retried.load(Ordering::Relaxed);
        assert_eq!(failed.load(Ordering::Relaxed), 0, "failed requests ({ok} succeeded, {retried} retried)");
        assert!(ok > 0);
        only_the_newest_serves(&mut procs).await;
    })
    .await;
}

/// A new process that predates relays (its hello says nothing of them) gets the sockets as it
/// expects them, and no relays: an upgrade back to an older binary still works. One that takes
/// relays gets one per UDP socket, in a message of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_go_only_to_a_new_process_that_takes_them() {
    bounded(async {
        use edgewarm::upgrade::wire::{self, Msg};
        let s = setup().await;
        let cfg = config_h3(&s, "");
        let _old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        for takes in [false, true] {
            let stream = tokio::net::UnixStream::connect(s.dir.join("upgrade.sock")).await.unwrap();
            let hello = format!(
                r#"{{"hello":{{"pid":{},"version":"0.0.1"{}}}}}"#,
                std::process::id(),
                if takes { r#","relays":true"# } else { "" }
            );
            let mut frame = (hello.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(hello.as_bytes());
            stream.writable().await.unwrap();
            stream.try_write(&frame).unwrap();
            let (sockets, fds) = wire::recv(&stream, wire::MAX_FROM_OLD).await.unwrap();
            let Msg::Sockets { listeners, relays, quic, .. } = sockets else { panic!("{sockets:?}") };
            // Two workers: two UDP sockets beside the admin and TCP ones.
            assert_eq!((listeners[0].1, fds.len()), (2, 4), "the sockets as before relays");
            assert!(quic.is_some(), "the keys (a binary that predates them ignores them)");
            assert_eq!(relays, takes);
            if takes {
                let (msg, ends) = wire::recv(&stream, wire::MAX_FROM_OLD).await.unwrap();
                assert!(matches!(msg, Msg::Relays), "{msg:?}");
                assert_eq!(ends.len(), 2, "one relay per UDP socket");
            }
            // Closing here abandons the upgrade: the old process serves on for the next try.
            drop(stream);
            logged(&s.dir.join("old.log"), "upgrade abandoned").await;
        }
    })
    .await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
