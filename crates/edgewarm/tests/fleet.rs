//! A fleet of edges purging as one through a real `nats-server -js` on 127.0.0.1: a purge made
//! on one node with `?wait=fleet` is applied on the other before the call answers; a node
//! restarted while a purge was made applies it before serving that object again; garbage in
//! the stream is skipped.

use edgewarm_test_support as common;

use std::net::SocketAddr;

use common::*;

const PAGE: &str = "/page?cc=max-age%3D600";

// The faults (a NATS restart, a reset link, a silent server): their own file, below this one.
#[path = "fleet/faults.rs"]
mod faults;

/// An edge named `name` in the fleet at `nats`, caching on disk in `disk`.
async fn node(fx: &Pki, origin: SocketAddr, nats: &Nats, name: &str, disk: &std::path::Path) -> Edge {
    let edge = member(fx, origin, &format!("fleet: {{nats: [\"{}\"], name: {name}}}", nats.url()), disk).await;
    // Caught up (nothing to replay, or replayed): hits are served.
    caught_up(&edge).await;
    edge
}

/// An edge with the `fleet` section given, caching on disk in `disk` (not waited for).
async fn member(fx: &Pki, origin: SocketAddr, fleet: &str, disk: &std::path::Path) -> Edge {
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    \
         cache: {{disk: {{path: \"{}\", max_size: 64MiB}}}}\n",
        disk.display()
    );
    edge(&route, fleet, "").await
}

async fn fleet_status(edge: &Edge) -> serde_json::Value {
    let (status, body) = admin_get(edge.admin, "/fleet").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn caught_up(edge: &Edge) {
    for _ in 0..2000 {
        if fleet_status(edge).await["caught_up"] == true {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("never caught up: {}", fleet_status(edge).await);
}

/// The `Cache-Status` of one GET of `PAGE`, and its body.
async fn get(fx: &Pki, edge: &Edge) -> (String, String) {
    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    let (head, body) = client.send("GET", "b.test", PAGE, &[], vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    let status = head.headers.get("cache-status").map_or("", |v| v.to_str().unwrap()).to_string();
    (status, String::from_utf8(body).unwrap())
}

async fn admin_post(edge: &Edge, path: &str) -> (u16, String) {
    admin_post_to(edge.admin, path).await
}

async fn admin_post_to(admin: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(admin).await.unwrap();
    let req = format!("POST {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let text = String::from_utf8(read_all(&mut s).await).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// The bar: both nodes serve the object from cache; a purge by URL on the first with
/// `?wait=fleet` makes the next request on the second a miss; the second, stopped while a
/// second purge is made and started again on its disk cache, applies that purge before it
/// serves the object again.
#[tokio::test]
async fn a_purge_on_one_node_reaches_the_other_and_a_restarted_node_replays_it() {
    let fx = pki("http");
    let (origin, log) = cache_origin().await;
    let nats = nats();
    let (disk_a, disk_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(&fx, origin, &nats, "a", disk_a.path()).await;
    let b = node(&fx, origin, &nats, "b", disk_b.path()).await;
    for edge in [&a, &b] {
        get(&fx, edge).await;
        assert!(get(&fx, edge).await.0.contains("hit"), "both nodes serve it from cache");
    }
    let url = "https%3A%2F%2Fb.test%2Fpage%3Fcc%3Dmax-age%253D600";
    let asked = std::time::Instant::now();
    let (status, body) = admin_post(&a, &format!("/cache/purge?url={url}&wait=fleet")).await;
    // For the record (`-- --nocapture`), not a threshold.
    eprintln!("measured: purge stored and applied by both nodes in {:?}: {body}", asked.elapsed());
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["applied"], serde_json::json!(["a", "b"]), "{v}");
    let before = log.count(PAGE);
    assert!(get(&fx, &b).await.0.contains("fwd=uri-miss"), "purged on the other node");
    assert_eq!(log.count(PAGE), before + 1);
    assert!(get(&fx, &b).await.0.contains("hit"), "stored again");

    // Garbage in the stream (another writer, a newer kind): skipped by every node.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let ack = js.publish("edgewarm.EDGEWARM_PURGES.purge", "{\"everything\": true}".into()).await.unwrap();
    ack.await.unwrap();

    // The second node away while a purge is made; back on its disk cache.
    b.stop().await;
    let (status, body) = admin_post(&a, &format!("/cache/purge?url={url}")).await;
    assert_eq!(status, 200, "{body}");
    let b = node(&fx, origin, &nats, "b", disk_b.path()).await;
    let (cache_status, _) = get(&fx, &b).await;
    assert!(cache_status.contains("fwd=uri-miss"), "replayed before serving: {cache_status}");
    let status = fleet_status(&b).await;
    assert!(status["applied"].as_u64().unwrap() >= 3, "the purge after the garbage too: {status}");
    a.stop().await;
    b.stop().await;
}

/// NATS unreachable at start: after `catch_up` the node serves its local cache; a purge made
/// there is refused (503, not silently local), and the node still serves.
#[tokio::test]
async fn a_node_without_nats_serves_its_cache_and_refuses_fleet_purges() {
    let fx = pki("http");
    let (origin, _) = cache_origin().await;
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    cache: {{}}\n"
    );
    let fleet = format!("fleet: {{nats: [\"nats://127.0.0.1:{}\"], name: alone, catch_up: 200ms}}", free_port());
    let edge = edge(&route, &fleet, "").await;
    caught_up(&edge).await;
    assert_eq!(fleet_status(&edge).await["connected"], false);
    get(&fx, &edge).await;
    assert!(get(&fx, &edge).await.0.contains("hit"), "the local cache serves");
    let (status, body) = admin_post(&edge, "/cache/purge?url=https%3A%2F%2Fb.test%2Fpage").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not connected"), "{body}");
    edge.stop().await;
}

/// One request on a new connection with `config` (a client that keeps its tickets, like a
/// browser); whether the session was resumed.
async fn resumed(config: &std::sync::Arc<rustls::ClientConfig>, edge: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(edge).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await.unwrap();
    tls.write_all(format!("GET {PAGE} HTTP/1.1\r\nhost: b.test\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

fn ticket_client(fx: &Pki) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fx.edge.ca_der.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    std::sync::Arc::new(config)
}

async fn following(edge: &Edge) {
    for _ in 0..2000 {
        if fleet_status(edge).await["ticket_keys"] == "fleet" {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("never followed the fleet's ticket keys: {}", fleet_status(edge).await);
}

/// Ticket keys shared through the fleet's bucket, no file: a session made on one node resumes
/// on the other; a rotation written to the bucket is followed by both (the previous key still
/// decrypts); garbage written there is replaced by a node, and sessions still resume across.
#[tokio::test]
async fn ticket_keys_are_shared_and_rotated_through_the_fleet() {
    use base64::Engine;
    let fx = pki("http");
    let (origin, _) = cache_origin().await;
    let nats = nats();
    let (disk_a, disk_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(&fx, origin, &nats, "a", disk_a.path()).await;
    let b = node(&fx, origin, &nats, "b", disk_b.path()).await;
    following(&a).await;
    following(&b).await;
    let c = ticket_client(&fx);
    assert!(!resumed(&c, a.addr).await, "first visit: full handshake");
    assert!(resumed(&c, b.addr).await, "a ticket from one node resumes on the other");

    // A rotation, as a node writes it: a new key first, the old one second.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let kv = js.get_key_value("EDGEWARM_PURGES_TICKETS").await.unwrap();
    let old: serde_json::Value = serde_json::from_slice(&kv.get("ticket_keys").await.unwrap().unwrap()).unwrap();
    let new_key = base64::engine::general_purpose::STANDARD.encode([7u8; 48]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let rotated = serde_json::json!({"keys": [new_key, old["keys"][0]], "since": now});
    kv.put("ticket_keys", serde_json::to_vec(&rotated).unwrap().into()).await.unwrap();
    let kept = ticket_client(&fx);
    assert!(!resumed(&kept, a.addr).await);
    // Until both follow the new entry, a ticket may be made under either key: both decrypt.
    assert!(resumed(&c, a.addr).await, "a ticket under the previous key still resumes");
    assert!(resumed(&kept, b.addr).await);

    // Garbage in the entry: logged, and replaced by one of the nodes with keys of its own.
    kv.put("ticket_keys", "not keys".into()).await.unwrap();
    let mut replaced = None;
    for _ in 0..3000 {
        let value = kv.get("ticket_keys").await.unwrap().unwrap();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&value) {
            replaced = Some(v);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let replaced = replaced.expect("a node replaced the garbage");
    assert_eq!(replaced["keys"].as_array().unwrap().len(), 1, "{replaced}");
    // Both nodes follow the replacement (a reader of the bucket sees what they use).
    let fresh = ticket_client(&fx);
    let mut across = false;
    for _ in 0..200 {
        resumed(&fresh, a.addr).await;
        if resumed(&fresh, b.addr).await {
            across = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(across, "sessions resume across the nodes after the replacement");
    a.stop().await;
    b.stop().await;
}

/// A node away longer than the stream keeps purges (here the stream made beforehand with a
/// one-second `max_age`; in life `keep`, a week) cannot know what it missed: it drops its
/// caches, counts it, and serves the object from the origin.
#[tokio::test]
async fn a_node_that_missed_purges_the_stream_no_longer_holds_drops_its_cache() {
    let fx = pki("http");
    let (origin, log) = cache_origin().await;
    let nats = nats();
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let short = async_nats::jetstream::stream::Config {
        name: "EDGEWARM_PURGES".into(),
        subjects: vec!["edgewarm.EDGEWARM_PURGES.purge".into()],
        max_age: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    js.create_stream(short).await.unwrap();
    let (disk_a, disk_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(&fx, origin, &nats, "a", disk_a.path()).await;
    let b = node(&fx, origin, &nats, "b", disk_b.path()).await;
    get(&fx, &b).await;
    assert!(get(&fx, &b).await.0.contains("hit"));
    b.stop().await;
    let url = "https%3A%2F%2Fb.test%2Fpage%3Fcc%3Dmax-age%253D600";
    let (status, body) = admin_post(&a, &format!("/cache/purge?url={url}")).await;
    assert_eq!(status, 200, "{body}");
    // Bounded wait for the server to let the purge expire.
    let mut stream = js.get_stream("EDGEWARM_PURGES").await.unwrap();
    for _ in 0..500 {
        if stream.info().await.unwrap().state.messages == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(stream.info().await.unwrap().state.messages, 0, "expired");

    let b = node(&fx, origin, &nats, "b", disk_b.path()).await;
    let before = log.count(PAGE);
    let (cache_status, _) = get(&fx, &b).await;
    assert!(cache_status.contains("fwd=uri-miss"), "its disk cache was dropped: {cache_status}");
    assert_eq!(log.count(PAGE), before + 1);
    let (_, metrics) = admin_get(b.admin, "/metrics").await;
    assert!(metrics.contains("edgewarm_fleet_cache_drops_total 1"), "{metrics}");
    // The node that applied everything dropped nothing.
    let (_, metrics) = admin_get(a.admin, "/metrics").await;
    assert!(metrics.contains("edgewarm_fleet_cache_drops_total 0"));
    a.stop().await;
    b.stop().await;
}

/// A node whose NATS goes dark (the server stopped with SIGSTOP: its connections stay open and
/// nothing answers, as over a cut link) notices by itself within seconds: its caches serve no
/// hit, so no purge it cannot hear of is missed; NATS back, it catches up and serves hits.
#[tokio::test]
async fn a_node_cut_off_from_nats_fences_its_cache_until_it_is_back() {
    let fx = pki("http");
    let (origin, log) = cache_origin().await;
    let nats = nats();
    let disk = tempfile::tempdir().unwrap();
    let a = node(&fx, origin, &nats, "a", disk.path()).await;
    // Heard itself at least once (the watch only counts a silence after a word).
    for _ in 0..500 {
        if fleet_status(&a).await["peers"].as_array().is_some_and(|p| !p.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    get(&fx, &a).await;
    assert!(get(&fx, &a).await.0.contains("hit"));

    nats.freeze(true);
    let mut fenced = false;
    for _ in 0..1000 {
        if fleet_status(&a).await["caught_up"] == false {
            fenced = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(fenced, "the node noticed it was cut off: {}", fleet_status(&a).await);
    let before = log.count(PAGE);
    let (cache_status, _) = get(&fx, &a).await;
    assert!(cache_status.contains("fleet-catch-up"), "no hit while cut off: {cache_status}");
    assert_eq!(log.count(PAGE), before + 1, "served by the origin");

    nats.freeze(false);
    caught_up(&a).await;
    assert!(get(&fx, &a).await.0.contains("hit"), "hits again once back");
    a.stop().await;
}
