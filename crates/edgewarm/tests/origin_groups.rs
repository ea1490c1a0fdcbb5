//! A route with several origin servers (`origins:`) in front of real nginx processes (HTTP/2
//! over TLS, one process each): what clients see while servers die or fail (issue 47).

use edgewarm_test_support as common;

use common::*;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Clients sending at once.
const CLIENTS: usize = 4;

/// nginx as one server of the group, named `name` in its answers and logging each request's
/// method and path to `dir/name.log`; `status` is what it answers (and to `/health` too).
fn nginx(dir: &Path, name: &str, port: u16, status: u16) -> ChildGuard {
    nginx_health(dir, name, port, status, status)
}

/// The same, answering `/health` with `health`.
fn nginx_health(dir: &Path, name: &str, port: u16, status: u16, health: u16) -> ChildGuard {
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/{name}.pid;\nerror_log {d}/{name}-error.log;\nevents {{}}\n\
         http {{\n  log_format ids '$request_method $request_uri';\n  access_log {d}/{name}.log ids;\n\
         \x20 client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n\
         \x20 server {{\n    listen 127.0.0.1:{port} ssl http2;\n    server_name origin.test;\n    ssl_certificate {d}/origin/cert.pem;\n    ssl_certificate_key {d}/origin/key.pem;\n\
         \x20   location / {{ return {status} \"{name} $host\\n\"; }}\n    location = /health {{ return {health} \"{name}\\n\"; }}\n  }}\n}}\n"
    );
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("nginx")
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is installed (scripts/deps.sh)");
    wait_for_port(port);
    ChildGuard(child)
}

/// Route b.test with `servers` (YAML list items) and `upstream` settings.
fn route(pki: &Pki, servers: &str, upstream: &str) -> String {
    let p = pki.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origins: [{servers}]\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    \
         origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    upstream: {{connections: 2{upstream}}}\n"
    )
}

/// An edge with [`route`].
async fn edge(pki: &Pki, servers: &str, upstream: &str) -> Edge {
    common::edge(&route(pki, servers, upstream), "timeouts: {connect: 2s}", "").await
}

/// A GET of `path` on a new HTTP/2 connection (no client sticks to the server it had): its
/// status and body.
async fn get_afresh(pki: &Pki, edge: &Edge, path: &str) -> (u16, String) {
    let mut client = HttpClient::connect(&pki.edge, edge.addr, "b.test", true).await.unwrap();
    let (head, body) = client.send("GET", "b.test", path, &[], Vec::new()).await.unwrap();
    (head.status.as_u16(), String::from_utf8(body).unwrap())
}

/// One request's outcome: method, path, and the status and body (or the client's error).
#[derive(Debug, Clone)]
struct Outcome {
    method: &'static str,
    path: String,
    answer: Result<(u16, String), String>,
    at: std::time::Instant,
}

/// GETs and POSTs (each path once) on HTTP/2 connections, `CLIENTS` at a time, until `stop`.
async fn load(certs: Arc<Certs>, addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> Vec<Outcome> {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (certs, stop) = (certs.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut out, mut client) = (Vec::new(), None);
                let mut i = 0;
                // Bounded: about 25 a second per client, and never past 2,000.
                while !stop.load(Ordering::Relaxed) && i < 2000 {
                    i += 1;
                    let (method, path) =
                        if i % 2 == 0 { ("POST", format!("/post/{c}-{i}")) } else { ("GET", format!("/get/{c}-{i}")) };
                    let at = std::time::Instant::now();
                    let answer = tokio::time::timeout(Duration::from_secs(20), async {
                        if client.is_none() {
                            client = Some(
                                HttpClient::connect(&certs, addr, "b.test", true).await.map_err(|e| e.to_string())?,
                            );
                        }
                        let c = client.as_mut().expect("connected");
                        let sent = c
                            .send(
                                method,
                                "b.test",
                                &path,
                                &[],
                                if method == "POST" { b"x".to_vec() } else { Vec::new() },
                            )
                            .await;
                        sent.map(|(head, body)| (head.status.as_u16(), String::from_utf8_lossy(&body).into_owned()))
                            .map_err(|e| e.to_string())
                    })
                    .await
                    .unwrap_or_else(|_| Err("no answer".into()));
                    if answer.is_err() {
                        client = None;
                    }
                    out.push(Outcome { method, path, answer, at });
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
    all
}

/// How many times each request line reached any of the servers (their access logs).
fn executed(dir: &Path, names: &[&str]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for name in names {
        for line in std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default().lines() {
            *seen.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    seen
}

/// The group's servers as `/origins` shows them: server → (state, backup).
async fn servers(edge: &Edge) -> HashMap<String, (String, bool)> {
    let (status, body) = admin_get(edge.admin, "/origins").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let group = v["groups"].as_array().unwrap().iter().find(|g| g["route"] == "b.test").expect("the group").clone();
    group["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["server"].as_str().unwrap().to_string();
            (name, (s["state"].as_str().unwrap().to_string(), s["backup"].as_bool().unwrap()))
        })
        .collect()
}

/// Two primaries and a backup; the primaries SIGKILLed one after the other under load. Every
/// GET is answered 200 (one whose server died under it goes again to another), no POST
/// reaches a server twice, a POST fails only when its server died with it in flight, the
/// backup answers once both primaries are gone, and `/origins` shows the three servers and
/// their states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (nginx): scripts/test.sh runs it")]
async fn primaries_killed_one_after_the_other_cost_no_get_and_send_no_post_twice() {
    let pki = pki("http");
    let d = pki.path.clone();
    let (a, b, c) = (free_port(), free_port(), free_port());
    let mut primary_a = nginx(&d, "a", a, 200);
    let mut primary_b = nginx(&d, "b", b, 200);
    let _backup = nginx(&d, "c", c, 200);
    let servers_yaml = format!(
        "{{address: \"127.0.0.1:{a}\"}}, {{address: \"127.0.0.1:{b}\"}}, {{address: \"127.0.0.1:{c}\", backup: true}}"
    );
    let edge = edge(&pki, &servers_yaml, "").await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test")], 6.0).await;
    let (name_a, name_b, name_c) = (format!("127.0.0.1:{a}"), format!("127.0.0.1:{b}"), format!("127.0.0.1:{c}"));
    let all = servers(&edge).await;
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[&name_c], ("healthy".to_string(), true));

    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(pki.edge.clone(), edge.addr, stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    primary_a.0.kill().unwrap();
    let _ = primary_a.0.wait();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(servers(&edge).await[&name_a].0, "down");
    primary_b.0.kill().unwrap();
    let _ = primary_b.0.wait();
    let b_killed = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes = running.await.unwrap();

    let after = servers(&edge).await;
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(after[&name_a].0, "down");
    assert_eq!(after[&name_b].0, "down");
    assert_eq!(after[&name_c], ("healthy".to_string(), true));
    assert_eq!(edge.metric("edgewarm_origin_server_up", &[("server", &name_a)]), 0.0);
    assert_eq!(edge.metric("edgewarm_origin_server_up", &[("server", &name_b)]), 0.0);
    assert_eq!(edge.metric("edgewarm_origin_server_up", &[("server", &name_c)]), 1.0);
    // Each dead primary taken out once or more: found down, or ejected by the failures it
    // caused first (whichever came first).
    let text = edge.server.metrics().encode();
    for name in [&name_a, &name_b] {
        let outs = text
            .lines()
            .filter(|l| l.starts_with("edgewarm_origin_ejections_total") && l.contains(name.as_str()))
            .count();
        assert!(outs >= 1, "{name}: {text}");
    }

    let gets: Vec<&Outcome> = outcomes.iter().filter(|o| o.method == "GET").collect();
    let failed_gets: Vec<_> = gets.iter().filter(|o| !matches!(&o.answer, Ok((200, _)))).collect();
    assert!(failed_gets.is_empty(), "GETs not served: {failed_gets:?}");
    let by_backup = gets.iter().filter(|o| o.at > b_killed + Duration::from_millis(500)).collect::<Vec<_>>();
    assert!(
        !by_backup.is_empty() && by_backup.iter().all(|o| o.answer.as_ref().unwrap().1 == "c b.test\n"),
        "{by_backup:?}"
    );

    let seen = executed(&d, &["a", "b", "c"]);
    let twice: Vec<_> = seen.iter().filter(|(l, n)| l.starts_with("POST") && **n > 1).collect();
    assert!(twice.is_empty(), "POSTs executed twice: {twice:?}");
    let posts: Vec<&Outcome> = outcomes.iter().filter(|o| o.method == "POST").collect();
    let failed_posts: Vec<&&Outcome> = posts.iter().filter(|o| !matches!(&o.answer, Ok((200, _)))).collect();
    for o in &posts {
        if let Ok((200, body)) = &o.answer {
            // nginx logs a request after answering it: a primary SIGKILLed in between answered
            // a POST whose line it never wrote (seen on CI). The backup is never killed.
            let logged = seen.get(&format!("POST {}", o.path));
            let killed_after_answering = !body.starts_with('c') && logged.is_none();
            assert!(logged == Some(&1) || killed_after_answering, "{o:?}: logged {logged:?}");
        }
    }
    // Each kill can cost the POSTs in flight on the killed server, one per client at most.
    assert!(failed_posts.len() <= 2 * CLIENTS, "{failed_posts:?}");
    assert!(failed_posts.iter().all(|o| matches!(&o.answer, Ok((502..=504, _)))), "{failed_posts:?}");
    eprintln!(
        "{} GETs all served; {} POSTs, {} failed (in flight at a kill), none executed twice; retried elsewhere: {}",
        gets.len(),
        posts.len(),
        failed_posts.len(),
        edge.server
            .metrics()
            .encode()
            .lines()
            .filter(|l| l.starts_with("edgewarm_origin_retried_elsewhere"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    edge.stop().await;
}

/// One of two servers answers 503: after `fails` of them in a row it is ejected (counted, and
/// `/origins` says so), and the other takes every request; clients see no more 503s than it
/// took to find out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (nginx): scripts/test.sh runs it")]
async fn a_server_answering_503_is_ejected_and_the_other_serves() {
    let pki = pki("http");
    let d = pki.path.clone();
    let (good, bad) = (free_port(), free_port());
    let _good = nginx(&d, "good", good, 200);
    let _bad = nginx(&d, "bad", bad, 503);
    let servers_yaml = format!("{{address: \"127.0.0.1:{good}\"}}, {{address: \"127.0.0.1:{bad}\"}}");
    let edge = edge(&pki, &servers_yaml, ", balance: round_robin, health: {fails: 3, eject: 30s}").await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test")], 4.0).await;
    let mut statuses = Vec::new();
    // A new connection each time: no client sticks to the server it had.
    for i in 0..40 {
        statuses.push(get_afresh(&pki, &edge, &format!("/{i}")).await.0);
    }
    let bad_name = format!("127.0.0.1:{bad}");
    let n503 = statuses.iter().filter(|s| **s == 503).count();
    assert_eq!(n503, 3, "{statuses:?}");
    assert!(statuses[statuses.iter().rposition(|s| *s == 503).unwrap() + 1..].iter().all(|s| *s == 200));
    assert_eq!(edge.metric("edgewarm_origin_ejections_total", &[("server", &bad_name), ("reason", "5xx")]), 1.0);
    assert_eq!(servers(&edge).await[&bad_name].0, "ejected");
    edge.stop().await;
}

/// A reload from servers a and b to b and c keeps b's standing connections and its state,
/// retires a's (gone from `/origins`), opens c's before the new configuration is used, and new
/// clients are served by b and c only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (nginx): scripts/test.sh runs it")]
async fn a_reload_keeps_the_servers_that_stay_and_retires_the_removed() {
    let pki = pki("http");
    let d = pki.path.clone();
    let (a, b, c) = (free_port(), free_port(), free_port());
    let (_a, _b, _c) = (nginx(&d, "a", a, 200), nginx(&d, "b", b, 200), nginx(&d, "c", c, 200));
    let listed = |x: u16, y: u16| format!("{{address: \"127.0.0.1:{x}\"}}, {{address: \"127.0.0.1:{y}\"}}");
    let edge = edge(&pki, &listed(a, b), ", balance: round_robin").await;
    let (name_a, name_b, name_c) = (format!("127.0.0.1:{a}"), format!("127.0.0.1:{b}"), format!("127.0.0.1:{c}"));
    let opened =
        |edge: &Edge, name: &str| edge.metric("edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", name)]);
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", &name_b)], 2.0).await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", &name_a)], 2.0).await;
    let b_before = opened(&edge, &name_b);
    let yaml = format!(
        "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\ntimeouts: {{connect: 2s}}\nroutes:\n{}",
        route(&pki, &listed(b, c), ", balance: round_robin")
    );
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", &name_c)], 2.0).await;
    let now: Vec<String> = {
        let mut v: Vec<String> = servers(&edge).await.into_keys().collect();
        v.sort();
        v
    };
    let mut want = vec![name_b.clone(), name_c.clone()];
    want.sort();
    assert_eq!(now, want);
    let (_, body) = admin_get(edge.admin, "/origins").await;
    assert!(!body.contains(&format!("\"origin\":\"{name_a}\"")), "a's set retired: {body}");
    let mut answered_by = std::collections::HashSet::new();
    for i in 0..12 {
        let (status, body) = get_afresh(&pki, &edge, &format!("/{i}")).await;
        assert_eq!(status, 200);
        answered_by.insert(body);
    }
    assert_eq!(answered_by, ["b b.test\n".to_string(), "c b.test\n".to_string()].into_iter().collect());
    assert_eq!(opened(&edge, &name_b), b_before, "b's standing connections were kept");
    edge.stop().await;
}

/// With `health.path`, a server that accepts connections and answers requests but fails its
/// probe (`/health` 503: a maintenance mode) takes no client request; `/origins` says why, and
/// the probe's failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (nginx): scripts/test.sh runs it")]
async fn a_server_failing_its_health_probe_takes_no_request() {
    let pki = pki("http");
    let d = pki.path.clone();
    let (good, sick) = (free_port(), free_port());
    let _good = nginx(&d, "good", good, 200);
    let _sick = nginx_health(&d, "sick", sick, 200, 503);
    let servers_yaml = format!("{{address: \"127.0.0.1:{good}\"}}, {{address: \"127.0.0.1:{sick}\"}}");
    let health = ", balance: round_robin, health: {path: /health, interval: 200ms}";
    let edge = edge(&pki, &servers_yaml, health).await;
    let sick_name = format!("127.0.0.1:{sick}");
    wait_for(&edge, "edgewarm_origin_ejections_total", &[("server", &sick_name), ("reason", "probe")], 1.0).await;
    assert_eq!(servers(&edge).await[&sick_name].0, "probe_failed");
    for i in 0..20 {
        assert_eq!(get_afresh(&pki, &edge, &format!("/{i}")).await, (200, "good b.test\n".to_string()));
    }
    // The probes went to both, asking for the servers' own name.
    let probes = std::fs::read_to_string(d.join("good.log")).unwrap();
    assert!(probes.contains("GET /health"), "{probes}");
    edge.stop().await;
}

/// A server that takes requests and dies under them (its connection drops with the request in
/// flight): a GET it lost goes again to the other server and is answered; a POST it lost is
/// answered 502 and never sent to the other (it may have been acted on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_in_flight_goes_elsewhere_only_if_it_may() {
    let pki = pki("http");
    let dying = H2Opts { drop_first_request_on: usize::MAX, ..H2Opts::default() };
    let (a, a_stats) = h2_origin(&pki.origin, dying).await;
    let (b, b_stats) = h2_origin(&pki.origin, H2Opts::default()).await;
    let servers_yaml = format!("{{address: \"{a}\"}}, {{address: \"{b}\"}}");
    let edge = edge(&pki, &servers_yaml, ", balance: round_robin").await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", &a.to_string())], 2.0).await;
    wait_for(&edge, "edgewarm_pool_opened_total", &[("route", "b.test"), ("origin", &b.to_string())], 2.0).await;
    let send = |method: &'static str, path: &'static str| {
        let certs = pki.edge.clone();
        async move {
            let mut client = HttpClient::connect(&certs, edge.addr, "b.test", true).await.unwrap();
            let body = if method == "POST" { b"x".to_vec() } else { Vec::new() };
            let (head, body) = client.send(method, "b.test", path, &[], body).await.unwrap();
            (head.status.as_u16(), String::from_utf8_lossy(&body).into_owned())
        }
    };
    // Round robin: a, then b, then a.
    assert_eq!(send("GET", "/one").await, (200, "hello /one".to_string()), "lost at a, answered by b");
    assert_eq!(send("POST", "/two").await.0, 200, "b's turn");
    assert_eq!(send("POST", "/three").await.0, 502, "lost at a: not sent again");
    assert_eq!(a_stats.requests.load(Ordering::Relaxed), 2, "a saw /one and /three");
    assert_eq!(b_stats.requests.load(Ordering::Relaxed), 2, "b saw /one again and /two, never /three");
    let b_name = b.to_string();
    assert_eq!(edge.metric("edgewarm_origin_retried_elsewhere_total", &[("server", &b_name)]), 1.0);
    edge.stop().await;
}
