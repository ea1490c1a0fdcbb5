//! The `edgewarm` binary as a user runs it, with real clients: curl and openssl s_client
//! through edgewarm to an `openssl s_server` origin; config errors; SIGHUP; SIGTERM.

use edgewarm_test_support as common;

use common::{free_port, wait_for_port, wait_ready, ChildGuard};

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_edgewarm");

fn check(path: &Path) -> Output {
    Command::new(BIN).args(["check", "--config"]).arg(path).output().unwrap()
}

#[test]
fn check_accepts_the_example_and_names_a_misspelt_key() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/edge.yaml");
    let out = check(&example);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(&example).unwrap().replace("client_hello: 10s", "clienthello: 10s");
    std::fs::write(&bad, text).unwrap();
    let out = check(&bad);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("timeouts.clienthello") && err.contains("line"), "{err}");

    // `run` refuses the same file before binding anything.
    let out = Command::new(BIN).args(["run", "--config"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// `upgrade.socket` must be a path a Unix socket can have: named in the error, exit 64.
#[test]
fn check_names_an_unusable_upgrade_socket() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    let base =
        "listeners: [{listen: \"127.0.0.1:0\"}]\nroutes:\n  - {sni: a.test, action: tunnel, origin: \"127.0.0.1:9\"}\n";
    for socket in ["upgrade.sock".to_owned(), format!("/run/{}.sock", "x".repeat(110))] {
        std::fs::write(&config, format!("{base}upgrade: {{socket: {socket}}}\n")).unwrap();
        let out = check(&config);
        assert_eq!(out.status.code(), Some(64), "{socket}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("upgrade.socket"), "{err}");
    }
    std::fs::write(&config, format!("{base}upgrade: {{socket: /run/edgewarm-test/u.sock}}\n")).unwrap();
    assert!(check(&config).status.success());
}

/// `origins` beside `origin` is refused by `check`, naming the key, exit 64 (issue 47); the
/// list alone is taken.
#[test]
fn check_refuses_origin_beside_origins() {
    let dir = tempfile::tempdir().unwrap();
    common::certs(&["a.test"]).write(dir.path());
    let (config, d) = (dir.path().join("edge.yaml"), dir.path().display());
    let route = |origin: &str| {
        format!(
            "listeners: [{{listen: \"127.0.0.1:0\"}}]\nroutes:\n  - {{sni: a.test, action: http, {origin}\
             origins: [{{address: \"127.0.0.1:9\"}}, {{address: \"127.0.0.1:10\", backup: true}}], \
             cert: {d}/cert.pem, key: {d}/key.pem}}\n"
        )
    };
    std::fs::write(&config, route("origin: \"127.0.0.1:8\", ")).unwrap();
    let out = check(&config);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("routes[0].origins: not beside origin"), "{err}");
    std::fs::write(&config, route("")).unwrap();
    let out = check(&config);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `cache.disk`: a relative path, a zero size and a directory two routes share are refused by
/// `check`, naming the key, exit 64.
#[test]
fn check_names_a_bad_cache_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    let route = |sni: &str, disk: &str| {
        format!(
            "  - {{sni: {sni}, action: http, origin: \"127.0.0.1:9\", cert: c.pem, key: k.pem, \
             upstream: {{tls: false}}, cache: {{disk: {disk}}}}}\n"
        )
    };
    let base = "listeners: [{listen: \"127.0.0.1:0\"}]\nroutes:\n";
    let cases = [
        (route("a.test", "{path: cache, max_size: 1GiB}"), "routes[0].cache.disk.path"),
        (route("a.test", "{path: /tmp/ew-disk, max_size: 0}"), "routes[0].cache.disk.max_size"),
        (
            route("a.test", "{path: /tmp/ew-disk, max_size: 1GiB}")
                + &route("b.test", "{path: /tmp/ew-disk, max_size: 1GiB}"),
            "routes[1].cache.disk.path",
        ),
    ];
    for (routes, key) in cases {
        std::fs::write(&config, format!("{base}{routes}")).unwrap();
        let out = check(&config);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{key}: {err}");
        assert!(err.contains(key), "{key}: {err}");
    }
}

/// `upstream.tls: false` (a cleartext origin) beside `origin_tls`: `check` names the key and
/// exits 64; without `origin_tls` it is accepted.
#[test]
fn check_refuses_a_cleartext_upstream_with_origin_tls() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    let route = "listeners: [{listen: \"127.0.0.1:0\"}]\nroutes:\n  - sni: a.test\n    action: http\n    \
                 origin: \"127.0.0.1:9\"\n    cert: c.pem\n    key: k.pem\n    upstream: {tls: false}\n";
    std::fs::write(&config, format!("{route}    origin_tls: {{verify: false}}\n")).unwrap();
    let out = check(&config);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("routes[0].upstream.tls") && err.contains("origin_tls"), "{err}");
}

/// `upstream: NAME` naming no block, a block no route names, and a name beside the route's
/// own `origin`: `check` and `run` name the key and exit 64, before any port is bound.
#[test]
fn check_refuses_unknown_unused_and_shadowed_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    common::certs(&["a.test"]).write(dir.path());
    let (config, d) = (dir.path().join("edge.yaml"), dir.path().display());
    let yaml = |upstreams: &str, route: &str| {
        format!(
            "listeners: [{{listen: \"127.0.0.1:0\"}}]\nupstreams:\n{upstreams}routes:\n  - {{sni: a.test, action: http, \
             cert: {d}/cert.pem, key: {d}/key.pem, {route}}}\n"
        )
    };
    let app = "  app: {origin: \"127.0.0.1:9\", tls: false}\n";
    let cases = [
        (yaml(app, "upstream: apps"), "routes[0].upstream: no upstream named \"apps\""),
        (
            yaml(&format!("{app}  spare: {{origin: \"127.0.0.1:10\", tls: false}}\n"), "upstream: app"),
            "upstreams.spare: no route names it",
        ),
        (yaml(app, "upstream: app, origin: \"127.0.0.1:8\""), "routes[0].origin: not beside upstream: NAME"),
    ];
    for (text, key) in cases {
        std::fs::write(&config, text).unwrap();
        let out = check(&config);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{key}: {err}");
        assert!(err.contains(key), "{key}: {err}");
        let out = Command::new(BIN).args(["run", "--config"]).arg(&config).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "run: {key}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(key));
    }
    std::fs::write(&config, yaml(app, "upstream: app")).unwrap();
    let out = check(&config);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The package's man pages and completions come from the CLI itself.
#[test]
fn generate_writes_man_pages_and_completions() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).args(["generate", "man"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for page in ["edgewarm.1", "edgewarm-run.1", "edgewarm-check.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}: {text}");
    }
    let run = std::fs::read_to_string(dir.path().join("edgewarm-run.1")).unwrap();
    assert!(run.contains("upgrade"), "{run}");
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN).args(["generate", "completions", shell]).output().unwrap();
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("check"), "{shell}");
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    edge_port: u16,
    admin_port: u16,
    origin_port: u16,
}

/// The test's upgrade socket sits in its own folder: the default, under /run, would outlive it.
fn config_text(s: &Setup, sni: &str) -> String {
    format!(
        "admin: {{listen: \"127.0.0.1:{}\"}}\nupgrade: {{socket: {}/upgrade.sock}}\nlisteners:\n  - listen: \"127.0.0.1:{}\"\nroutes:\n  - {{sni: {sni}, action: tunnel, origin: \"127.0.0.1:{}\"}}\n",
        s.admin_port,
        s.dir.display(),
        s.edge_port,
        s.origin_port
    )
}

fn admin(s: &Setup, path: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", s.admin_port)).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut c, &mut out).unwrap();
    out
}

fn metric(s: &Setup, name: &str, labels: &[(&str, &str)]) -> f64 {
    edgewarm::metrics::sample(&admin(s, "/metrics"), name, labels).unwrap_or(0.0)
}

fn curl(s: &Setup, name: &str) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10", "--resolve"])
        .arg(format!("{name}:{}:127.0.0.1", s.edge_port))
        .arg("--cacert")
        .arg(s.dir.join("ca.pem"))
        .arg(format!("https://{name}:{}/", s.edge_port))
        .output()
        .expect("curl is installed")
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn curl_and_openssl_through_the_binary_with_reload_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let s = Setup {
        dir: dir.path().to_path_buf(),
        _dir: dir,
        edge_port: free_port(),
        admin_port: free_port(),
        origin_port: free_port(),
    };
    common::certs(&["a.test", "b.test"]).write(&s.dir);
    let _origin = ChildGuard(
        Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{}", s.origin_port))
            .arg("-cert")
            .arg(s.dir.join("cert.pem"))
            .arg("-key")
            .arg(s.dir.join("key.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl is installed"),
    );
    let config = s.dir.join("edge.yaml");
    std::fs::write(&config, config_text(&s, "a.test")).unwrap();
    let log = s.dir.join("edge.log");
    let mut edge = ChildGuard(
        Command::new(BIN)
            .args(["--log-format", "json", "run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_port(s.origin_port);
    // Ready as a load balancer sees it, not merely accepting: the admin port is bound first.
    wait_ready(s.admin_port);
    wait_for_port(s.edge_port);

    // curl, TLS end to end with the origin; edgewarm only saw the ClientHello.
    let out = curl(&s, "a.test");
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("s_server"), "origin page expected");

    // openssl s_client with a name edgewarm does not route: refused with unrecognized_name.
    let out = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{}", s.edge_port))
        .args(["-servername", "c.test"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(err.contains("unrecognized name"), "{err}");
    assert_eq!(metric(&s, "edgewarm_clienthello_rejected_total", &[("reason", "unknown_sni")]), 1.0);
    assert_eq!(metric(&s, "edgewarm_connections_closed_total", &[("route", "a.test"), ("reason", "done")]), 1.0);

    let hup = |pid: u32| assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    let wait_metric = |labels: &[(&str, &str)], want: f64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(&s, "edgewarm_config_reloads_total", labels) < want {
            assert!(Instant::now() < deadline, "reload not seen: {labels:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // SIGHUP with a broken file: logged, counted, old routes kept.
    std::fs::write(&config, "listeners: [oops").unwrap();
    hup(edge.0.id());
    wait_metric(&[("result", "error")], 1.0);
    assert!(curl(&s, "a.test").status.success());

    // SIGHUP with a good file: b.test now routes, a.test no longer does.
    std::fs::write(&config, config_text(&s, "b.test")).unwrap();
    hup(edge.0.id());
    wait_metric(&[("result", "ok")], 1.0);
    assert!(curl(&s, "b.test").status.success());
    assert!(!curl(&s, "a.test").status.success());

    // SIGTERM: drains (nothing open) and exits 0.
    assert!(Command::new("kill").args(["-TERM", &edge.0.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = edge.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "edgewarm did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");

    // One JSON access-log line per connection, with the fields an operator greps for.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    let access: Vec<_> = lines.iter().filter(|l| l["target"] == "edgewarm::access").collect();
    // The port probe (connect, close), curl ×4 (one refused after the reload), s_client.
    assert_eq!(access.len(), 6, "{text}");
    assert_eq!(access[0]["reason"], "truncated", "the port probe");
    let first = access[1];
    assert_eq!(first["sni"], "a.test");
    assert_eq!(first["route"], "a.test");
    assert_eq!(first["reason"], "done");
    assert_eq!(first["level"], "INFO");
    assert!(first["alpn"].as_str().unwrap().contains("http/1.1"), "{first}");
    assert!(first["bytes_down"].as_u64().unwrap() > 0);
    assert!(access.iter().any(|l| l["sni"] == "c.test" && l["reason"] == "unknown_sni"));
    assert!(lines.iter().any(|l| l["message"] == "reload failed, keeping the running configuration"));
}

/// A prewarm route naming a certificate that does not exist: `check` and `run` both exit 64
/// naming the key, and `run` binds nothing.
#[test]
fn missing_certificate_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = format!(
        "listeners: [{{listen: \"127.0.0.1:{port}\"}}]\nroutes:\n  - sni: b.test\n    action: prewarm\n    origin: \"127.0.0.1:1\"\n    cert: {d}/nope.pem\n    key: {d}/nope.key\n",
        d = dir.path().display()
    );
    let path = dir.path().join("edge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = check(&path);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("routes[0].cert") && err.contains("nope.pem"), "{err}");
    let out = Command::new(BIN).args(["run", "--config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(), "nothing was left bound");
}

/// CPU ticks (user + system) the process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// An edge config in `dir` with one tunnel route (a.test) to `origin_port` and a long hello
/// timeout: its ports and the file.
fn tunnel_to(dir: &Path, origin_port: u16) -> (Setup, std::path::PathBuf) {
    let s = Setup {
        _dir: tempfile::tempdir().unwrap(),
        dir: dir.into(),
        edge_port: free_port(),
        admin_port: free_port(),
        origin_port,
    };
    let config = dir.join("edge.yaml");
    std::fs::write(&config, format!("{}timeouts: {{client_hello: 60s}}\n", config_text(&s, "a.test"))).unwrap();
    (s, config)
}

/// Out of descriptors: the binary under `ulimit -n 256` gets 400 connections at once. It does
/// not crash, does not spin on a listener it cannot accept from (CPU sampled while it is stuck),
/// counts the failed accepts, and serves a new client as soon as the others have gone.
#[test]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (sh ulimit, the binary): scripts/test.sh runs it")]
fn out_of_descriptors_backs_off_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    // A plain TCP echo origin: the final client's bytes must come back through the tunnel.
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_port = origin.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in origin.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut r = c.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut c);
            });
        }
    });
    let (s, config) = tunnel_to(dir.path(), origin_port);
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n 256 && exec {BIN} run --config {}", config.display()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut edge = ChildGuard(child);
    wait_ready(s.admin_port);
    let pid = edge.0.id();

    // 400 clients connect and say nothing: far more than 256 descriptors.
    let mut held = Vec::new();
    for _ in 0..400 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", s.edge_port)) {
            held.push(c);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(Duration::from_secs(2));
    let used = (cpu_ticks(pid) - c0) as f64 / 100.0 / t0.elapsed().as_secs_f64();
    // A spinning accept loop would use a whole core; backing off uses next to nothing.
    assert!(used < 0.5, "edgewarm used {:.0} % of a core while out of descriptors", used * 100.0);
    assert!(edge.0.try_wait().unwrap().is_none(), "still running");

    drop(held);
    // Service resumes: a client's bytes go through the tunnel again (bounded: 20 s).
    let hello = common::client_hello("a.test");
    let mut served = false;
    for _ in 0..200 {
        if let Ok(mut c) = TcpStream::connect(("127.0.0.1", s.edge_port)) {
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            if c.write_all(&hello).is_ok() {
                let mut back = vec![0u8; hello.len()];
                if std::io::Read::read_exact(&mut c, &mut back).is_ok() && back == hello {
                    served = true;
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served, "a client was served once the descriptors were free");
    assert!(metric(&s, "edgewarm_accept_errors_total", &[("reason", "resources")]) >= 1.0, "the back-off was counted");
}

/// Open descriptors of a process: how many, and the highest number.
fn descriptors(pid: u32) -> (usize, usize) {
    let fds: Vec<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (fds.len(), fds.into_iter().max().unwrap_or(0))
}

/// A tunnel whose relay cannot get a pipe (the process is out of descriptors) moves its bytes
/// by copying instead: nothing is lost, and the fallback is counted by reason. Until this
/// counter existed, the fallback happened unseen in a benchmark (see docs/benchmarks-history.md).
#[test]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (prlimit, the binary): scripts/test.sh runs it")]
fn a_relay_without_a_pipe_falls_back_to_copy_loses_nothing_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let hello = common::client_hello("a.test");
    // An origin that swallows the hello, says it has it, then echoes: no byte moves through
    // a tunnel (so no pipe is taken) until the test sends one.
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_port = origin.local_addr().unwrap().port();
    let (got_hello, hellos) = std::sync::mpsc::channel();
    let hello_len = hello.len();
    std::thread::spawn(move || {
        for c in origin.incoming().flatten() {
            let got_hello = got_hello.clone();
            std::thread::spawn(move || {
                let mut c = c;
                let mut skip = vec![0u8; hello_len];
                if std::io::Read::read_exact(&mut c, &mut skip).is_ok() {
                    let _ = got_hello.send(());
                    let mut r = c.try_clone().unwrap();
                    let _ = std::io::copy(&mut r, &mut c);
                }
            });
        }
    });
    let (s, config) = tunnel_to(dir.path(), origin_port);
    let child = Command::new(BIN).args(["run", "--config"]).arg(&config).stderr(Stdio::null()).spawn().unwrap();
    let edge = ChildGuard(child);
    wait_ready(s.admin_port);
    let pid = edge.0.id();
    let open_tunnel = || {
        let mut c = TcpStream::connect(("127.0.0.1", s.edge_port)).unwrap();
        c.write_all(&hello).unwrap();
        hellos.recv_timeout(Duration::from_secs(20)).expect("the origin got the hello");
        c
    };

    // Tunnels until the process's descriptors are numbered without a gap: then a limit equal
    // to their count leaves no number free, and the next pipe2 fails with EMFILE.
    let mut tunnels = vec![open_tunnel()];
    let mut count = 0;
    for _ in 0..50 {
        let (n, max) = descriptors(pid);
        count = n;
        if n == max + 1 {
            break;
        }
        tunnels.push(open_tunnel());
    }
    let original = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .expect("the soft limit on open files");
    let limit = |soft: &str| {
        let st = Command::new("prlimit").args(["--pid", &pid.to_string(), &format!("--nofile={soft}:")]).status();
        assert!(st.expect("prlimit (util-linux) is installed").success());
    };
    limit(&count.to_string());

    // 256 KiB each way through the first tunnel, with no pipe to be had.
    let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 253) as u8).collect();
    let mut c = tunnels[0].try_clone().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let sent = data.clone();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&sent).unwrap());
    let mut back = vec![0u8; data.len()];
    std::io::Read::read_exact(&mut c, &mut back).expect("every byte came back");
    writer.join().unwrap();
    assert!(back == data, "the bytes came back intact");

    // Descriptors again, so the admin listener can answer.
    limit(&original);
    let no_pipe = metric(&s, "edgewarm_relay_copy_fallbacks_total", &[("route", "a.test"), ("reason", "no_pipe")]);
    assert!(no_pipe >= 1.0, "the fallback was counted ({no_pipe})");
    drop(tunnels);
}

/// A route's `rules`: `check` names the key and exits 64 for an upstream no block defines, a
/// header policy writing `Transfer-Encoding` (on the route or a rule), two actions on one
/// rule, a rewrite on an exact rule, and two rules no precedence can order (both named).
/// Before any port is bound: `check` binds none.
#[test]
fn check_refuses_bad_rules_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    let base = "listeners: [{listen: \"127.0.0.1:0\"}]\nupstreams:\n  assets: {origin: \"127.0.0.1:9\", \
                protocol: http/1.1, tls: false}\nroutes:\n  - {sni: a.test, action: http, origin: \"127.0.0.1:9\", \
                cert: c.pem, key: k.pem, upstream: {tls: false}, ";
    let cases = [
        ("rules: [{prefix: /static/, upstream: asets}]", "routes[0].rules[0].upstream", "no upstream named \"asets\""),
        (
            "rules: [{prefix: /s/, upstream: assets}], headers: {response: {set: {transfer-encoding: chunked}}}",
            "routes[0].headers",
            "transfer-encoding",
        ),
        (
            "rules: [{prefix: /s/, upstream: assets, header_policy: {response: {add: {Transfer-Encoding: gzip}}}}]",
            "routes[0].rules[0].header_policy",
            "transfer-encoding",
        ),
        (
            "rules: [{prefix: /s/, upstream: assets, respond: {status: 200}}]",
            "routes[0].rules[0].respond",
            "a rule does one thing",
        ),
        (
            "rules: [{exact: /s, upstream: assets, strip_prefix: true}]",
            "routes[0].rules[0].strip_prefix",
            "prefix rule",
        ),
        (
            "rules: [{prefix: /s/, upstream: assets}, {prefix: /s, respond: {status: 404}}]",
            "routes[0].rules[1]",
            "rules[0]",
        ),
    ];
    for (rules, key, says) in cases {
        std::fs::write(&config, format!("{base}{rules}}}\n")).unwrap();
        let out = check(&config);
        let err = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
        assert_eq!(out.status.code(), Some(64), "{key}: {err}");
        assert!(err.contains(key) && err.contains(&says.to_ascii_lowercase()), "{key} / {says}: {err}");
    }
}
