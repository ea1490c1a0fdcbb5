//! The far end of the long link as a real process (an edgewarm near the origin, serving HTTP/2
//! and HTTP/3) that crashes or upgrades under load, seen from a near edge whose route rides
//! standing connections to it (`upstream.protocol: h3` or `h2`): what its clients see (issue 46).

use std::time::Instant;

use super::*;

/// Requests in flight at once through the near edge.
const CLIENTS: usize = 4;
/// A hang guard, not a speed bound: an answer is expected within about a second (the
/// connection's death found in `DEAD_AFTER`, or a new connection's handshake).
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// One request's outcome: when it was sent, how long its answer took, and the answer (a
/// status, or the client's error when it got none).
#[derive(Debug)]
struct Outcome {
    at: Instant,
    took: Duration,
    answer: Result<u16, String>,
}

/// A near edge in this process: route `h.test` to the far edge at `far` over `kind`.
async fn near_edge(s: &Setup, kind: &str) -> common::Edge {
    let p = s.dir.display();
    let route = format!(
        "  - sni: h.test\n    action: http\n    origin: \"{far}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    \
         origin_tls: {{sni: h.test, ca: {p}/edge/ca.pem}}\n    upstream: {{protocol: {kind}, connections: 2}}\n",
        far = s.edge
    );
    common::edge(&route, "timeouts: {connect: 2s}", "").await
}

/// GETs on keep-alive HTTP/2 connections to the near edge, `CLIENTS` at a time, until `stop`;
/// a connection that fails is replaced.
async fn load(s: Arc<Setup>, near: SocketAddr, stop: Arc<AtomicBool>) -> Vec<Outcome> {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                let mut client = None;
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let answer = tokio::time::timeout(ANSWER_WITHIN, async {
                        if client.is_none() {
                            client = Some(HttpClient::connect(&s.edge_certs, near, "h.test", true).await?);
                        }
                        let c = client.as_mut().expect("connected");
                        let sent = c.send("GET", "h.test", "/x", &[], Vec::new()).await;
                        sent.map(|(head, _)| head.status.as_u16()).map_err(std::io::Error::other)
                    })
                    .await;
                    let answer = match answer {
                        Ok(Ok(status)) => Ok(status),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("no answer".to_string()),
                    };
                    if answer.is_err() {
                        client = None;
                    }
                    out.push(Outcome { at, took: at.elapsed(), answer });
                    // An open loop's pace, not a bound: about 100 requests a second in all.
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by_key(|o| o.at);
    all
}

/// Every request got an HTTP answer (never a closed connection, never a hang): the failures'
/// statuses, and the longest wait.
fn answered(outcomes: &[Outcome]) -> (Vec<u16>, Duration) {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.answer.is_err()).collect();
    assert!(failed.is_empty(), "requests without an answer: {failed:?}");
    let statuses = outcomes.iter().filter_map(|o| o.answer.as_ref().ok()).copied().filter(|s| *s != 200).collect();
    (statuses, outcomes.iter().map(|o| o.took).max().unwrap_or_default())
}

fn sample(m: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    edgewarm::metrics::sample(m, name, labels).unwrap_or(0.0)
}

/// A far edge (process `far-0`) with a near edge in front of it over `kind`, and the load
/// running for half a second already.
struct Scene {
    s: Arc<Setup>,
    cfg: PathBuf,
    procs: Vec<ChildGuard>,
    near: common::Edge,
    stop: Arc<AtomicBool>,
    running: tokio::task::JoinHandle<Vec<Outcome>>,
}

async fn scene(kind: &str) -> Scene {
    let s = Arc::new(setup().await);
    let cfg = quic::config_h3(&s, "");
    let first = s.dir.join("far-0.log");
    let procs = vec![start(&cfg, false, &first)];
    logged(&first, "listening for upgrades").await;
    let near = near_edge(&s, kind).await;
    common::wait_for(&near, "edgewarm_pool_opened_total", &[("route", "h.test")], 2.0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(s.clone(), near.addr, stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    Scene { s, cfg, procs, near, stop, running }
}

/// The far edge SIGKILLed under load and started again 3 s later: every request the near edge
/// took got an answer (503 or 502 while the far edge was gone, never a hang or a closed
/// connection), the near edge found its connections dead by their silence and replaced them,
/// and requests succeed again once the far edge is back.
async fn far_edge_crash(kind: &str) {
    let Scene { s, cfg, mut procs, near, stop, running } = scene(kind).await;
    let log = |n: usize| s.dir.join(format!("far-{n}.log"));
    let far = &mut procs[0];
    far.0.kill().unwrap();
    let killed = Instant::now();
    let _ = far.0.wait();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _far = start(&cfg, false, &log(1));
    logged(&log(1), "listening for upgrades").await;
    let back = Instant::now();
    // Until the near edge has its standing connections to the new far edge (bounded), then a
    // little more load.
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, text) = common::admin_get(near.admin, "/metrics").await;
        if sample(&text, "edgewarm_pool_opened_total", &[("route", "h.test")]) >= 4.0 {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes = running.await.unwrap();
    let (failures, longest) = answered(&outcomes);
    let first_ok_after = outcomes.iter().find(|o| o.at >= back && o.answer == Ok(200)).map(|o| o.at - back);
    let last_ok_before = outcomes.iter().filter(|o| o.at < killed && o.answer == Ok(200)).count();
    assert!(last_ok_before > 0, "served before the kill");
    assert!(first_ok_after.is_some(), "served again after the far edge's return: {outcomes:?}");
    assert!(failures.iter().all(|s| [502, 503, 504].contains(s)), "{failures:?}");
    let (_, text) = common::admin_get(near.admin, "/metrics").await;
    eprintln!(
        "{kind}: {} requests, {} answered with an error ({} 502, {} 503, {} 504), longest wait {longest:?}, first success {:?} after the far edge's return; replaced: {}",
        outcomes.len(),
        failures.len(),
        failures.iter().filter(|s| **s == 502).count(),
        failures.iter().filter(|s| **s == 503).count(),
        failures.iter().filter(|s| **s == 504).count(),
        first_ok_after,
        text.lines().filter(|l| l.starts_with("edgewarm_upstream_replaced_total")).collect::<Vec<_>>().join(" "),
    );
    near.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_that_crashes_costs_h3_clients_answers_not_hangs() {
    bounded(far_edge_crash("h3")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_that_crashes_costs_h2_clients_answers_not_hangs() {
    bounded(far_edge_crash("h2")).await;
}

/// The far edge upgraded (`run --upgrade`) under load: every standing connection to it is
/// told GOAWAY at once; requests go on new connections to the new process, and not one fails.
async fn far_edge_upgrade(kind: &str) {
    let Scene { s, cfg, mut procs, near, stop, running } = scene(kind).await;
    let log = |n: usize| s.dir.join(format!("far-{n}.log"));
    for i in 1..=2 {
        procs.push(start(&cfg, true, &log(i)));
        logged(&log(i), "took over").await;
        logged(&log(i), "listening for upgrades").await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let outcomes = running.await.unwrap();
    let (failures, longest) = answered(&outcomes);
    let (_, text) = common::admin_get(near.admin, "/metrics").await;
    eprintln!("{kind}: {} requests across two upgrades, longest wait {longest:?}", outcomes.len());
    assert!(failures.is_empty(), "{kind}: {failures:?} of {} requests", outcomes.len());
    assert!(sample(&text, "edgewarm_pool_opened_total", &[("route", "h.test")]) >= 4.0, "{text}");
    near.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_upgraded_under_load_fails_no_h3_request() {
    bounded(far_edge_upgrade("h3")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_upgraded_under_load_fails_no_h2_request() {
    bounded(far_edge_upgrade("h2")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_that_crashes_costs_http1_clients_answers_not_hangs() {
    bounded(far_edge_crash("http/1.1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_edge_upgraded_under_load_fails_no_http1_request() {
    bounded(far_edge_upgrade("http/1.1")).await;
}
