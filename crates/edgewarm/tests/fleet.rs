//! A fleet of edges purging as one through a real `nats-server -js` on 127.0.0.1: a purge made
//! on one node with `?wait=fleet` is applied on the other before the call answers; a node
//! restarted while a purge was made applies it before serving that object again; garbage in
//! the stream is skipped.

use edgewarm_test_support as common;

use std::net::SocketAddr;

use common::*;

const PAGE: &str = "/page?cc=max-age%3D600";

/// An edge named `name` in the fleet at `nats`, caching on disk in `disk`.
async fn node(fx: &Pki, origin: SocketAddr, nats: &Nats, name: &str, disk: &std::path::Path) -> Edge {
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false, connections: 2}}\n    \
         cache: {{disk: {{path: \"{}\", max_size: 64MiB}}}}\n",
        disk.display()
    );
    let fleet = format!("fleet: {{nats: [\"{}\"], name: {name}}}", nats.url());
    let edge = edge(&route, &fleet, "").await;
    // Caught up (nothing to replay, or replayed): hits are served.
    caught_up(&edge).await;
    edge
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
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(edge.admin).await.unwrap();
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
