//! The fleet when its peers misbehave: NATS killed (`kill -9`) and started again on its store,
//! a node's link reset, a listed server that accepts and never answers, NATS dying right after
//! it stored a purge.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};

use super::*;

const URL: &str = "https%3A%2F%2Fb.test%2Fpage%3Fcc%3Dmax-age%253D600";

/// The nodes' log on failure (libtest shows it then; with `--nocapture`, always).
fn logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("info,async_nats=warn").try_init();
}

/// How many times `edge` has connected to NATS.
async fn connects(edge: &Edge) -> u64 {
    fleet_status(edge).await["connects"].as_u64().unwrap()
}

/// Wait (bounded: 10 s) until each node has connected more than `before` times.
async fn connected_again(nodes: &[(&Edge, u64)]) {
    for _ in 0..1000 {
        let mut all = true;
        for (edge, before) in nodes {
            all &= connects(edge).await > *before && fleet_status(edge).await["connected"] == true;
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not connected again within 10 s");
}

/// A `?wait=fleet` purge on `edge` made now: retried while the node says NATS did not store it
/// (503: NATS still starting), never after a 504. Its answer.
async fn purge_fleet(edge: &Edge) -> serde_json::Value {
    for _ in 0..200 {
        let (status, body) = admin_post(edge, &format!("/cache/purge?url={URL}&wait=fleet")).await;
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(status, 200, "every node applied it: {body}");
        return serde_json::from_str(&body).unwrap();
    }
    panic!("NATS never stored the purge");
}

/// How long after `from` the node at `admin` says it has caught up (polled; bounded: 10 s).
fn catch_up_time(admin: SocketAddr, from: Instant) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        for _ in 0..2000 {
            let (_, body) = admin_get(admin, "/fleet").await;
            if serde_json::from_str::<serde_json::Value>(&body).unwrap()["caught_up"] == true {
                return from.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never caught up");
    })
}

/// Both nodes hear each other (a `?wait=fleet` waits for the nodes it has heard from).
async fn know_each_other(edge: &Edge) {
    for _ in 0..500 {
        if fleet_status(edge).await["peers"].as_array().is_some_and(|p| p.len() == 2) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the nodes never heard of each other: {}", fleet_status(edge).await);
}

/// NATS killed with `kill -9` and started again on its store 3 s later, then a TCP reset of
/// one node's link: each time the nodes connect again, and a `?wait=fleet` purge made as soon
/// as they are connected answers 200 with both applied (it answered 504 naming them missing:
/// they took their place in the stream again only 6.7-9.4 s after NATS was back).
#[tokio::test]
async fn after_a_nats_restart_or_a_reset_link_the_nodes_take_their_place_in_the_stream_at_once() {
    logs();
    let fx = pki("http");
    let (origin, _) = cache_origin().await;
    let mut nats = nats();
    let link = relay(nats.addr()).await;
    let (disk_a, disk_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(&fx, origin, &nats, "a", disk_a.path()).await;
    let b = member(&fx, origin, &format!("fleet: {{nats: [\"{}\"], name: b}}", link.url()), disk_b.path()).await;
    caught_up(&b).await;
    know_each_other(&a).await;

    // Purges flowing all along, as in life (refused while NATS is away).
    let flow = tokio::spawn({
        let admin = a.admin;
        async move {
            for i in 0..u64::MAX {
                let _ = admin_post_to(admin, &format!("/cache/purge?url=https%3A%2F%2Fb.test%2Fflow{i}")).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let before = (connects(&a).await, connects(&b).await);
    nats.stop();
    // Longer than a node takes to find itself cut off (2.5 s without its own word back): its
    // watch drops the connection for a new one, as after a dark link.
    tokio::time::sleep(Duration::from_secs(3)).await;
    nats.start();
    let back = Instant::now();
    connected_again(&[(&a, before.0), (&b, before.1)]).await;
    let connected = back.elapsed();
    let caught = (catch_up_time(a.admin, back), catch_up_time(b.admin, back));
    let v = purge_fleet(&a).await;
    assert_eq!(v["applied"], serde_json::json!(["a", "b"]), "{v}");
    let applied = back.elapsed();
    // For the record (`-- --nocapture`), not a threshold.
    eprintln!(
        "measured: NATS restart: connected {connected:?} after NATS was back, caught up after {:?} (a) and \
         {:?} (b), the purge applied by both {applied:?} after (waited_ms {})",
        caught.0.await.unwrap(),
        caught.1.await.unwrap(),
        v["waited_ms"]
    );

    let before = connects(&b).await;
    link.reset();
    let reset = Instant::now();
    connected_again(&[(&b, before)]).await;
    let connected = reset.elapsed();
    let caught = catch_up_time(b.admin, reset);
    let v = purge_fleet(&a).await;
    assert_eq!(v["applied"], serde_json::json!(["a", "b"]), "{v}");
    let v = purge_fleet(&b).await;
    assert_eq!(v["applied"], serde_json::json!(["a", "b"]), "{v}");
    eprintln!(
        "measured: reset link: connected {connected:?} after the reset, caught up after {:?}, two purges \
         applied by both {:?} after",
        caught.await.unwrap(),
        reset.elapsed()
    );
    flow.abort();
    a.stop().await;
    b.stop().await;
}

/// Three servers that accept and never say a word listed before a healthy one: each node's
/// attempts on them end at `connect_timeout`, and it connects to the healthy one and hears
/// purges (it was held by the silent one for good: `connected: false` after 31 s).
#[tokio::test]
async fn servers_that_accept_and_never_answer_do_not_hold_a_node() {
    logs();
    let fx = pki("http");
    let (origin, _) = cache_origin().await;
    let nats = nats();
    let silent = [silent_server().await, silent_server().await, silent_server().await];
    let fleet = |name: &str| {
        let listed: Vec<String> = silent.iter().map(|s| format!("\"nats://{}\"", s.addr)).collect();
        format!("fleet: {{nats: [{}, \"{}\"], name: {name}, connect_timeout: 300ms}}", listed.join(", "), nats.url())
    };
    let (disk_a, disk_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let started = Instant::now();
    let a = member(&fx, origin, &fleet("a"), disk_a.path()).await;
    let b = member(&fx, origin, &fleet("b"), disk_b.path()).await;
    // Bound: connect_timeout × 4 servers + 1 s = 2.2 s; given 10 s.
    connected_again(&[(&a, 0), (&b, 0)]).await;
    eprintln!("measured: both nodes connected {:?} after they started", started.elapsed());
    caught_up(&a).await;
    know_each_other(&b).await;
    let v = purge_fleet(&b).await;
    assert_eq!(v["applied"], serde_json::json!(["a", "b"]), "{v}");
    a.stop().await;
    b.stop().await;
}

/// A server that speaks NATS but whose JetStream never answers (here: started without it)
/// listed first: the first JetStream answer is part of the attempt, so after `connect_timeout`
/// the node moves on to the next server and takes its place in the stream there (it stayed on
/// the first, refusing every purge).
#[tokio::test]
async fn a_server_whose_jetstream_does_not_answer_is_left_for_the_next() {
    logs();
    let fx = pki("http");
    let (origin, _) = cache_origin().await;
    let (plain, nats) = (nats_without_jetstream(), nats());
    let fleet = format!("fleet: {{nats: [\"{}\", \"{}\"], name: a, connect_timeout: 300ms}}", plain.url(), nats.url());
    let disk = tempfile::tempdir().unwrap();
    let a = member(&fx, origin, &fleet, disk.path()).await;
    caught_up(&a).await;
    assert!(connects(&a).await >= 2, "moved on: {}", fleet_status(&a).await);
    let v = purge_fleet(&a).await;
    assert_eq!(v["applied"], serde_json::json!(["a"]), "{v}");
    a.stop().await;
}

/// The node asked to purge applies it to its own caches before it answers: here the stream
/// never hands the purge back to it (its place in the stream made beforehand for another
/// subject), and NATS is killed right after storing it, yet the next request for the object on
/// that node is a miss (it served the purged object until it fenced itself, 2.2 s).
#[tokio::test]
async fn the_node_asked_applies_a_plain_purge_before_it_answers() {
    logs();
    let fx = pki("http");
    let (origin, log) = cache_origin().await;
    let mut nats = nats();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let (purges, held) = ("edgewarm.EDGEWARM_PURGES.purge", "edgewarm.EDGEWARM_PURGES.held");
    let config = stream::Config {
        name: "EDGEWARM_PURGES".into(),
        subjects: vec![purges.into(), held.into()],
        ..Default::default()
    };
    let stream = js.create_stream(config).await.unwrap();
    let place = consumer::pull::Config {
        durable_name: Some("a".into()),
        filter_subject: held.into(),
        ack_policy: consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    stream.create_consumer(place).await.unwrap();
    let disk = tempfile::tempdir().unwrap();
    let a = node(&fx, origin, &nats, "a", disk.path()).await;
    get(&fx, &a).await;
    assert!(get(&fx, &a).await.0.contains("hit"));

    let (status, body) = admin_post(&a, &format!("/cache/purge?url={URL}")).await;
    assert_eq!(status, 200, "{body}");
    nats.stop();
    let before = log.count(PAGE);
    let (cache_status, _) = get(&fx, &a).await;
    assert!(cache_status.contains("fwd=uri-miss"), "applied before the answer: {cache_status} ({body})");
    assert_eq!(log.count(PAGE), before + 1, "served by the origin");
    a.stop().await;
}
