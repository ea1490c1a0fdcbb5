//! The edge cache with real clients and a real origin: h2load's concurrent misses for one
//! cold object reach nginx once (its access log says so), curl sees `Cache-Status`, and a
//! purge through the admin API makes the next request a miss.

use edgewarm_test_support as common;

use common::{free_port, wait_for_port, wait_ready, ChildGuard};

use std::path::Path;
use std::process::{Command, Stdio};

/// nginx, cleartext HTTP/1.1 on `port`, logging each request to `dir/access.log`; `/obj`
/// is a 1 KiB file that may be stored for a minute.
fn nginx(dir: &Path, port: u16) -> ChildGuard {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/obj"), vec![b'x'; 1024]).unwrap();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\n\
         http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  \
         fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n\
         server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n    \
         location / {{ add_header Cache-Control \"max-age=60\"; }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    ChildGuard(
        Command::new("nginx")
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx is installed (scripts/deps.sh)"),
    )
}

/// Requests nginx logged for `path`.
fn origin_requests(dir: &Path, path: &str) -> usize {
    let log = std::fs::read_to_string(dir.join("access.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains(&format!("GET {path} "))).count()
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn concurrent_misses_reach_nginx_once_and_a_purge_makes_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("edge")).unwrap();
    common::certs(&["b.test"]).write(&d.join("edge"));
    let (origin_port, edge_port, admin_port) = (free_port(), free_port(), free_port());
    let _nginx = nginx(d, origin_port);
    wait_for_port(origin_port);
    let p = d.display();
    let config = format!(
        "admin: {{listen: \"127.0.0.1:{admin_port}\"}}\nlisteners: [{{listen: \"127.0.0.1:{edge_port}\"}}]\n\
         upgrade: {{socket: {p}/upgrade.sock}}\nroutes:\n\
         \x20 - sni: b.test\n    action: http\n    origin: \"127.0.0.1:{origin_port}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    upstream: {{protocol: http/1.1, tls: false}}\n    cache: {{}}\n"
    );
    std::fs::write(d.join("edge.yaml"), config).unwrap();
    let _edge = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_edgewarm"))
            .args(["run", "--config"])
            .arg(d.join("edge.yaml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("edge.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_ready(admin_port);
    let url = format!("https://b.test:{edge_port}/obj");

    // 1,000 requests, 100 connections with 10 streams each, for one cold object.
    let out = Command::new("h2load")
        .args(["-n", "1000", "-c", "100", "-m", "10", "--connect-to"])
        .arg(format!("127.0.0.1:{edge_port}"))
        .arg(&url)
        .output()
        .expect("h2load is installed (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1000 succeeded") && text.contains("1000 2xx"), "{text}");
    assert_eq!(origin_requests(d, "/obj"), 1, "one origin request for 1,000 concurrent misses");

    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-i", "--resolve"])
            .arg(format!("b.test:{edge_port}:127.0.0.1"))
            .arg("--cacert")
            .arg(d.join("edge/ca.pem"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().to_ascii_lowercase()
    };
    let hit = curl(&[&url]);
    assert!(hit.contains("\ncache-status: edgewarm; hit; ttl="), "{hit}");

    let purge = format!("http://127.0.0.1:{admin_port}/cache/purge?url=https%3A%2F%2Fb.test%3A{edge_port}%2Fobj");
    let purged = Command::new("curl").args(["-sS", "-X", "POST", &purge]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&purged.stdout), "{\"purged\":1}");
    let miss = curl(&["--http1.1", &url]);
    assert!(miss.contains("\ncache-status: edgewarm; fwd=uri-miss; fwd-status=200; ttl=60; stored"), "{miss}");
    assert_eq!(origin_requests(d, "/obj"), 2, "after the purge, a miss");
}
