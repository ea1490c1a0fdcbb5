//! HTTP/3 across an upgrade: a connection stays with the old process until it drains, on the
//! datagrams the new process relays to it; and once the old process has gone, the new one
//! resets its connections in a way their clients believe.

use super::*;

use bytes::Buf;

/// The configuration with HTTP/3 on the listener, two workers (so two sockets, steered by
/// connection ID) and `extra` appended to the routes.
fn config_h3(s: &Setup, extra: &str) -> PathBuf {
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
    bounded(async {
        let s = setup().await;
        let cfg = config_h3(&s, "");
        let _old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        let (_endpoint, conn, mut send) = h3_connect(&s, None).await;
        // Much more than QUIC's and HTTP/2's windows hold: most of it leaves the origin only
        // after the upgrade, as the client reads.
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
        let _new = start(&cfg, true, &s.dir.join("new.log"));
        logged(&s.dir.join("new.log"), "took over").await;
        logged(&s.dir.join("old.log"), "this one stops accepting").await;
        // Both processes' logs if the body breaks off: which one ended the connection, and why.
        let logs =
            || ["old.log", "new.log"].map(|l| std::fs::read_to_string(s.dir.join(l)).unwrap_or_default()).join("\n");
        while let Some(mut chunk) = stream.recv_data().await.unwrap_or_else(|e| panic!("{e}\n{}", logs())) {
            read += chunk.remaining() as u64;
            got.update(chunk.copy_to_bytes(chunk.remaining()));
        }
        assert_eq!(read, TOTAL);
        assert_eq!(hex(&got.finalize()), common::pattern_sha256(TOTAL), "the body, byte for byte");
        assert!(conn.close_reason().is_none(), "the same connection throughout");
        assert!(relayed(s.admin, "sent").await > 0.0, "the client's datagrams went through the new process");
        // And the old process ends its connection now that its last request is done.
        let reason = conn.closed().await;
        assert!(matches!(reason, quinn::ConnectionError::ApplicationClosed(_)), "{reason:?}\n{}", logs());
    })
    .await;
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
