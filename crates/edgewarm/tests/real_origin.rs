//! Real clients (curl, h2load, nghttp) through `prewarm` routes to a real origin (nginx with HTTP/2).

use edgewarm_test_support as common;

use common::{free_port, wait_for_port, wait_ready, ChildGuard};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A temporary directory with `edge/` (b.test) and `origin/` (origin.test) certificates.
fn certs_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("edge")).unwrap();
    std::fs::create_dir(d.join("origin")).unwrap();
    common::certs(&["b.test"]).write(&d.join("edge"));
    common::certs(&["origin.test"]).write(&d.join("origin"));
    dir
}

/// The edgewarm binary with `config`, logging to `dir/edge.log`.
/// Its upgrade socket in `dir`: the default, under /run, would outlive the test.
fn run_edgewarm(dir: &std::path::Path, config: &str) -> ChildGuard {
    std::fs::write(dir.join("edge.yaml"), format!("{config}upgrade: {{socket: {}/upgrade.sock}}\n", dir.display()))
        .unwrap();
    ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_edgewarm"))
            .args(["run", "--config"])
            .arg(dir.join("edge.yaml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("edge.log")).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// nginx in the foreground, single process, everything under `dir`.
fn nginx(dir: &std::path::Path, port: u16) -> ChildGuard {
    nginx_with(dir, port, "")
}

/// The same, with extra directives in the `http` block.
fn nginx_with(dir: &std::path::Path, port: u16, http_extra: &str) -> ChildGuard {
    nginx_listening(dir, port, "ssl http2", http_extra)
}

/// nginx answering on `port` with `listen`'s parameters (`ssl http2`: HTTP/2 over TLS;
/// `http2`: cleartext HTTP/2 with prior knowledge, h2c).
fn nginx_listening(dir: &std::path::Path, port: u16, listen: &str, http_extra: &str) -> ChildGuard {
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
         http {{\n  access_log off;\n  {http_extra}\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n\
         server {{\n    listen 127.0.0.1:{port} {listen};\n    server_name origin.test;\n    ssl_certificate {d}/origin/cert.pem;\n    ssl_certificate_key {d}/origin/key.pem;\n\
         location / {{ return 200 \"hello from nginx over $server_protocol\\n\"; }}\n  }}\n}}\n"
    );
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is installed (scripts/deps.sh)");
    ChildGuard(child)
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn curl_h2load_and_nghttp_through_prewarm_to_nginx() {
    let dir = certs_dir();
    let d = dir.path();
    let (origin_port, edge_port, admin_port) = (free_port(), free_port(), free_port());
    let _nginx = nginx(d, origin_port);
    wait_for_port(origin_port);

    let p = d.display();
    let config = format!(
        "admin: {{listen: \"127.0.0.1:{admin_port}\"}}\nlisteners: [{{listen: \"127.0.0.1:{edge_port}\"}}]\nroutes:\n\
         \x20 - sni: b.test\n    action: prewarm\n    origin: \"127.0.0.1:{origin_port}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
         \x20   alpn: [h2, http/1.1]\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    pool: {{min: 4}}\n\
         \x20 - sni: \"\"\n    action: prewarm\n    origin: \"127.0.0.1:{origin_port}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
         \x20   alpn: [h2]\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    pool: {{min: 1}}\n"
    );
    let _edge = run_edgewarm(d, &config);
    wait_ready(admin_port);
    let metrics = || {
        let out =
            Command::new("curl").args(["-s", &format!("http://127.0.0.1:{admin_port}/metrics")]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while edgewarm::metrics::sample(&metrics(), "edgewarm_pool_ready", &[("alpn", "h2")]).unwrap_or(0.0) < 4.0 {
        assert!(
            Instant::now() < deadline,
            "pool never warmed: {}",
            std::fs::read_to_string(d.join("edge.log")).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let curl = |version: &str| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", version, "--resolve"])
            .arg(format!("b.test:{edge_port}:127.0.0.1"))
            .arg("--cacert")
            .arg(d.join("edge/ca.pem"))
            .arg(format!("https://b.test:{edge_port}/"))
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {version}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(curl("--http2"), "hello from nginx over HTTP/2.0\n");
    assert_eq!(curl("--http1.1"), "hello from nginx over HTTP/1.1\n");

    // h2load: 20 clients, each a new connection, 5 requests each over HTTP/2.
    let out = Command::new("h2load")
        .args(["-n", "100", "-c", "20", "-m", "1", "--connect-to"])
        .arg(format!("127.0.0.1:{edge_port}"))
        .arg(format!("https://b.test:{edge_port}/"))
        .output()
        .expect("h2load is installed (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("100 succeeded"), "{text}");
    assert!(text.contains("Application protocol: h2"), "{text}");

    // nghttp has no --resolve: it connects by IP and sends no SNI, which the `""` route serves.
    let out = Command::new("nghttp")
        .args(["-nv", &format!("https://127.0.0.1:{edge_port}/")])
        .output()
        .expect("nghttp is installed (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(":status: 200"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("The negotiated protocol: h2"), "{text}");

    // edgewarm's own load generator: HTTP/2 and HTTP/1.1, and 0-RTT (edgewarm declines early
    // data, so the request must be resent after the handshake and still succeed).
    // The load generator is the edgewarm-lab binary, built beside this one by `cargo test --workspace`.
    let load = std::path::Path::new(env!("CARGO_BIN_EXE_edgewarm")).with_file_name("edgewarm-lab");
    assert!(load.is_file(), "{} missing: run the workspace's tests (scripts/test.sh)", load.display());
    for extra in [&["--alpn", "h2"][..], &["--alpn", "http/1.1"], &["--zero-rtt"]] {
        let out = Command::new(&load)
            .args(["load", &format!("https://b.test:{edge_port}/"), "--connect-to"])
            .arg(format!("127.0.0.1:{edge_port}"))
            .arg("--cacert")
            .arg(d.join("edge/ca.pem"))
            .args(["--requests", "3", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(report["ok"], 3, "{extra:?}: {report}");
    }

    let m = metrics();
    let hits = edgewarm::metrics::sample(&m, "edgewarm_pool_hits_total", &[("route", "b.test"), ("alpn", "h2")])
        .unwrap_or(0.0);
    let misses = edgewarm::metrics::sample(&m, "edgewarm_pool_misses_total", &[("route", "b.test"), ("alpn", "h2")])
        .unwrap_or(0.0);
    // curl --http2 and h2load's 20 clients (h2load may open one more to probe).
    assert!(hits + misses >= 24.0, "{m}");
    assert!(hits >= 4.0, "hits {hits} misses {misses}");
    let h1 = |name| edgewarm::metrics::sample(&m, name, &[("alpn", "http/1.1")]).unwrap_or(0.0);
    assert_eq!(h1("edgewarm_pool_hits_total") + h1("edgewarm_pool_misses_total"), 7.0, "curl + load ×6\n{m}");
    let done =
        edgewarm::metrics::sample(&m, "edgewarm_connections_closed_total", &[("route", "b.test"), ("reason", "done")]);
    assert!(done.unwrap_or(0.0) >= 28.0, "clean closes expected:\n{m}");
}

/// `http` route to nginx over HTTP/2, with nginx closing each connection after 100 requests
/// (`keepalive_requests`, as in production configs; it sends GOAWAY): curl over both protocols
/// and h2load with 20 clients and 2000 requests see no failure, and the edge holds a handful of
/// origin connections, not one per client.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn curl_and_h2load_through_http_to_nginx_closing_connections() {
    let dir = certs_dir();
    let d = dir.path();
    let (origin_port, edge_port, admin_port) = (free_port(), free_port(), free_port());
    let _nginx = nginx_with(d, origin_port, "keepalive_requests 100;\n");
    wait_for_port(origin_port);
    let p = d.display();
    let config = format!(
        "admin: {{listen: \"127.0.0.1:{admin_port}\"}}\nlisteners: [{{listen: \"127.0.0.1:{edge_port}\"}}]\nroutes:\n\
         \x20 - sni: b.test\n    action: http\n    origin: \"127.0.0.1:{origin_port}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
         \x20   origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    upstream: {{connections: 2}}\n"
    );
    let _edge = run_edgewarm(d, &config);
    wait_ready(admin_port);
    let ca = format!("{p}/edge/ca.pem");
    let resolve = format!("b.test:{edge_port}:127.0.0.1");
    let url = format!("https://b.test:{edge_port}/");
    for flag in ["--http1.1", "--http2"] {
        let out =
            Command::new("curl").args(["-sS", flag, "--cacert", &ca, "--resolve", &resolve, &url]).output().unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "curl {flag}: {}", String::from_utf8_lossy(&out.stderr));
        // nginx saw HTTP/2 whatever the client spoke.
        assert_eq!(body, "hello from nginx over HTTP/2.0\n", "{flag}");
    }
    let out = Command::new("h2load")
        .args(["-c", "20", "-n", "2000", &format!("--connect-to=127.0.0.1:{edge_port}"), &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2000 succeeded, 0 failed, 0 errored"), "{text}");
    let metrics = String::from_utf8(
        Command::new("curl").args(["-s", &format!("http://127.0.0.1:{admin_port}/metrics")]).output().unwrap().stdout,
    )
    .unwrap();
    let opened =
        edgewarm::metrics::sample(&metrics, "edgewarm_pool_opened_total", &[("route", "b.test")]).unwrap_or(0.0);
    // 2002 requests at 100 per connection: about 21 connections, however many clients.
    assert!((20.0..=40.0).contains(&opened), "opened {opened} origin connections\n{metrics}");
    let ok = edgewarm::metrics::sample(&metrics, "edgewarm_http_requests_total", &[("status", "2xx")]).unwrap_or(0.0);
    assert_eq!(ok, 2002.0);
}

/// A dead origin is answered at once (issue 57): an `http` route's standing HTTP/2 set (over
/// TLS, and h2c) to nginx, which is killed: its port refuses connects, and each of three
/// requests in a row gets 503 at once (curl gives up at 10 s, where `timeouts.connect: 30s`
/// used to make each wait 30 s), its log line naming the refusal and never a TLS handshake
/// timeout; nginx started again on the same port, the route serves again.
#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn a_killed_h2_origin_is_refused_at_once_and_served_again_when_back() {
    for (kind, listen, upstream) in [("h2", "ssl http2", ""), ("h2c", "http2", "tls: false, ")] {
        let dir = certs_dir();
        let d = dir.path();
        let (origin_port, edge_port) = (free_port(), free_port());
        let nginx = nginx_listening(d, origin_port, listen, "");
        wait_for_port(origin_port);
        let p = d.display();
        let config = format!(
            "timeouts: {{connect: 30s}}\nlisteners: [{{listen: \"127.0.0.1:{edge_port}\"}}]\nroutes:\n\
             \x20 - sni: b.test\n    action: http\n    origin: \"127.0.0.1:{origin_port}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
             \x20   upstream: {{{upstream}connections: 2}}\n"
        );
        // A cleartext origin takes no `origin_tls`.
        let config = if kind == "h2" {
            format!("{config}    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n")
        } else {
            config
        };
        let _edge = run_edgewarm(d, &config);
        wait_for_port(edge_port);
        let (ca, resolve) = (format!("{p}/edge/ca.pem"), format!("b.test:{edge_port}:127.0.0.1"));
        let get = || {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "--max-time", "10", "-w", "%{http_code}", "--cacert", &ca])
                .args(["--resolve", &resolve, &format!("https://b.test:{edge_port}/")])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert_eq!(get(), "200", "{kind}: served while nginx is up");
        drop(nginx);
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", origin_port)).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for i in 0..3 {
            assert_eq!(get(), "503", "{kind}: request {i} to the dead origin, answered within curl's 10 s");
        }
        let log = std::fs::read_to_string(d.join("edge.log")).unwrap();
        let refused: Vec<_> = log.lines().filter(|l| l.contains("status=503")).collect();
        assert!(refused.len() >= 3, "{kind}: {log}");
        // Refused, or (a dying nginx's socket still accepting) reset in the handshake: either
        // way named, and answered at once.
        let named = |l: &&&str| l.contains("connection refused") || l.contains("reset by peer");
        assert!(refused.iter().all(|l| named(&l)), "{kind}: {refused:#?}");
        assert!(!log.contains("handshake timed out"), "{kind}: {log}");
        // Back on the same port: the set's next probe (at most ~1.2 s apart) finds it.
        let _nginx = nginx_listening(d, origin_port, listen, "");
        wait_for_port(origin_port);
        let started = Instant::now();
        let mut last = String::new();
        for _ in 0..100 {
            last = get();
            if last == "200" {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(last, "200", "{kind}: served again {:?} after nginx came back", started.elapsed());
    }
}
