//! `edgewarm run --upgrade` as an operator runs it: real processes, real sockets, under load.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{certs, free_port, h2_origin, tls_client, tls_origin, ChildGuard, H2Opts, HttpClient, OriginOpts};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod far;
mod quic;

const BIN: &str = env!("CARGO_BIN_EXE_edgewarm");

/// Every test here ends within this, whatever hangs (a client, a tunnel, a process that never
/// answers): its processes are killed on the way out by their guards.
const LIMIT: Duration = Duration::from_secs(300);

async fn bounded(test: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(LIMIT, test).await.expect("the test did not finish in time");
}

/// A process that is not our child (started by edgewarm itself on SIGUSR2), killed on drop.
struct PidGuard(String);

impl Drop for PidGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.0).status();
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    edge: SocketAddr,
    admin: SocketAddr,
    edge_certs: common::Certs,
    /// Origins: a plain TCP echo (tunnel), a TLS echo (prewarm), HTTP/2 (http).
    tunnel: SocketAddr,
    prewarm: SocketAddr,
    http: SocketAddr,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (edge_certs, origin_certs) = (certs(&["b.test", "h.test"]), certs(&["origin.test"]));
    for (name, c) in [("edge", &edge_certs), ("origin", &origin_certs)] {
        std::fs::create_dir(path.join(name)).unwrap();
        c.write(&path.join(name));
    }
    let (prewarm, _) = tls_origin(&origin_certs, OriginOpts::default()).await;
    let (http, _) = h2_origin(&origin_certs, H2Opts::default()).await;
    Setup {
        _dir: dir,
        dir: path,
        edge: SocketAddr::from(([127, 0, 0, 1], free_port())),
        admin: SocketAddr::from(([127, 0, 0, 1], free_port())),
        edge_certs,
        tunnel: echo_origin().await,
        prewarm,
        http,
    }
}

/// Echoes every byte back, after the ClientHello the tunnel replays.
async fn echo_origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tcp.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// The configuration, with `extra` appended to the routes.
fn config(s: &Setup, extra: &str) -> PathBuf {
    let p = s.dir.display();
    let text = format!(
        "admin: {{listen: \"{}\"}}\nlisteners: [{{listen: \"{}\"}}]\nupgrade: {{socket: {p}/upgrade.sock, warm_timeout: 3s}}\n\
         timeouts: {{shutdown_grace: 60s}}\nroutes:\n\
         \x20 - {{sni: a.test, action: tunnel, origin: \"{}\"}}\n\
         \x20 - sni: b.test\n    action: prewarm\n    origin: \"{}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
         \x20   origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n    pool: {{min: 4}}\n\
         \x20 - sni: h.test\n    action: http\n    origin: \"{}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n\
         \x20   origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{extra}",
        s.admin, s.edge, s.tunnel, s.prewarm, s.http
    );
    let path = s.dir.join(format!("edge-{}.yaml", text.len()));
    std::fs::write(&path, text).unwrap();
    path
}

/// An edgewarm process; its log goes to `log`.
fn start(config: &Path, upgrade: bool, log: &Path) -> ChildGuard {
    let mut c = Command::new(BIN);
    c.args(["run", "--config"]).arg(config);
    if upgrade {
        c.arg("--upgrade");
    }
    ChildGuard(c.stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap()).spawn().unwrap())
}

/// Wait (at most 30 s) until `log` says `what`.
async fn logged(log: &Path, what: &str) -> String {
    for _ in 0..1500 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never said {what:?}:\n{}", log.display(), std::fs::read_to_string(log).unwrap_or_default());
}

/// One client through the prewarm route, its bytes echoed by the origin.
async fn ping(s: &Setup) {
    let (mut tls, _) = tls_client(&s.edge_certs, s.edge, "b.test", &[]).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
}

async fn metrics(admin: SocketAddr) -> String {
    common::admin_get(admin, "/metrics").await.1
}

/// A tunnel that streams both ways until told to stop, then checks every byte came back.
async fn tunnel(edge: SocketAddr, stop: Arc<AtomicBool>) -> Result<u64, String> {
    let mut tcp = TcpStream::connect(edge).await.map_err(|e| e.to_string())?;
    tcp.write_all(&common::client_hello("a.test")).await.map_err(|e| e.to_string())?;
    let (mut r, mut w) = tcp.into_split();
    let hello = common::client_hello("a.test").len();
    let writer = tokio::spawn(async move {
        let (mut sent, mut hash) = (0u64, Sha256::new());
        while !stop.load(Ordering::Relaxed) {
            let chunk = common::pattern(sent, 4096);
            w.write_all(&chunk).await.map_err(|e| e.to_string())?;
            hash.update(&chunk);
            sent += chunk.len() as u64;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        w.shutdown().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((sent, hash.finalize()))
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
    let (sent, hash) = writer.await.map_err(|e| e.to_string())??;
    let back = got.get(hello..).ok_or("nothing came back")?;
    if back.len() as u64 != sent || Sha256::digest(back) != hash {
        return Err(format!("sent {sent} bytes, {} came back", back.len()));
    }
    Ok(sent)
}

/// New TLS connections one after another through the prewarm and the http route until
/// `stop`: (succeeded, failed).
async fn clients(s: Arc<Setup>, stop: Arc<AtomicBool>, failed: Arc<AtomicUsize>, retried: Arc<AtomicUsize>) -> usize {
    let mut ok = 0;
    while !stop.load(Ordering::Relaxed) {
        let prewarm = async {
            let (mut tls, _) = tls_client(&s.edge_certs, s.edge, "b.test", &[]).await?;
            tls.write_all(b"ping").await?;
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(&buf == b"ping")
        };
        let http = async {
            // A connection the old process accepted just before it stopped may get GOAWAY before
            // its first request: that request was never processed, and a client sends it again
            // on a new connection (RFC 9113 §8.7; hyper-util's client and browsers do).
            for attempt in 0..2 {
                let mut c = HttpClient::connect(&s.edge_certs, s.edge, "h.test", true).await?;
                match c.send("GET", "h.test", "/x", &[], Vec::new()).await {
                    Ok((parts, _)) => return Ok::<_, std::io::Error>(parts.status == 200),
                    Err(e) if attempt == 0 && unprocessed(&e) => retried.fetch_add(1, Ordering::Relaxed),
                    Err(e) => return Err(std::io::Error::other(e)),
                };
            }
            unreachable!()
        };
        // One request on a new HTTP/1.1 connection, as short-lived clients make: a connection
        // the old process took just before it stopped is served its request, never closed
        // with nothing said, so this client sends nothing again.
        let http1 = async {
            let mut c = HttpClient::connect(&s.edge_certs, s.edge, "h.test", false).await?;
            let (parts, _) = c.send("GET", "h.test", "/x", &[], Vec::new()).await.map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>(parts.status == 200)
        };
        for (route, good) in [("prewarm", prewarm.await), ("http", http.await), ("http/1.1", http1.await)] {
            match good {
                Ok(true) => ok += 1,
                other => {
                    eprintln!("{route} client failed: {other:?}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    ok
}

/// A request the server never processed: the connection closed before it was sent, or a
/// graceful GOAWAY refused its stream.
fn unprocessed(e: &hyper::Error) -> bool {
    let goaway = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<h2::Error>())
        .is_some_and(|h| h.is_go_away() && h.reason() == Some(h2::Reason::NO_ERROR));
    e.is_canceled() || goaway
}

/// Three upgrades back to back under load: 50 tunnels streaming both ways and a steady stream
/// of new TLS connections through a prewarm and an http route (HTTP/2, and HTTP/1.1 with one
/// request a connection). Nothing fails, every tunnel gets
/// every byte back, each new process was warm before it accepted, and no client of any process
/// missed its pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_upgrades_under_load_drop_nothing() {
    bounded(async {
        let s = Arc::new(setup().await);
        let cfg = config(&s, "");
        let mut procs = vec![start(&cfg, false, &s.dir.join("edge-0.log"))];
        logged(&s.dir.join("edge-0.log"), "listening for upgrades").await;
        let stop = Arc::new(AtomicBool::new(false));
        let tunnels: Vec<_> = (0..50).map(|_| tokio::spawn(tunnel(s.edge, stop.clone()))).collect();
        let failed = Arc::new(AtomicUsize::new(0));
        let retried = Arc::new(AtomicUsize::new(0));
        let load = tokio::spawn(clients(s.clone(), stop.clone(), failed.clone(), retried.clone()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        for i in 1..=3 {
            let log = s.dir.join(format!("edge-{i}.log"));
            procs.push(start(&cfg, true, &log));
            let text = logged(&log, "took over").await;
            assert!(text.contains("origin connections ready, accepting") && !text.contains("not all ready"), "{text}");
            logged(&s.dir.join(format!("edge-{}.log", i - 1)), "this one stops accepting").await;
            // Its own listener for the next upgrade, then some clients on the new process.
            logged(&log, "listening for upgrades").await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let m = metrics(s.admin).await;
            let sample = |name, labels: &[(&str, &str)]| edgewarm::metrics::sample(&m, name, labels).unwrap_or(0.0);
            assert!(sample("edgewarm_pool_hits_total", &[("route", "b.test")]) > 0.0, "process {i}: {m}");
            assert_eq!(
                sample("edgewarm_pool_misses_total", &[("route", "b.test")]),
                0.0,
                "process {i} missed its pool"
            );
            assert_eq!(sample("edgewarm_upgrades_total", &[("result", "took_over")]), 1.0, "process {i}: {m}");
        }
        stop.store(true, Ordering::Relaxed);
        let ok = load.await.unwrap();
        for t in tunnels {
            let sent = t.await.unwrap().unwrap();
            assert!(sent > 0);
        }
        let retried = retried.load(Ordering::Relaxed);
        assert_eq!(failed.load(Ordering::Relaxed), 0, "failed connections ({ok} succeeded, {retried} retried)");
        assert!(ok > 0);
        // The three old processes drained their tunnels and exited.
        only_the_newest_serves(&mut procs).await;
    })
    .await;
}

/// Every process of a run of upgrades but the last has exited cleanly; the last serves on.
async fn only_the_newest_serves(procs: &mut [ChildGuard]) {
    let (newest, old) = procs.split_last_mut().expect("processes");
    for (i, p) in old.iter_mut().enumerate() {
        let status = wait_exit(&mut p.0).await;
        assert!(status.success(), "process {i}: {status:?}");
    }
    assert!(newest.0.try_wait().unwrap().is_none(), "the newest process serves");
}

async fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..1000 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still running");
}

/// An upgrade with a bad configuration exits 64 before it asks for anything; one killed in the
/// middle of the hand-over is abandoned: the old process serves on, counted, and a later
/// upgrade still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upgrade_leaves_the_old_process_serving() {
    bounded(async {
        let s = Arc::new(setup().await);
        let cfg = config(&s, "");
        let mut old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;

        // Clients and tunnels through both failed upgrades: none may notice them.
        let stop = Arc::new(AtomicBool::new(false));
        let tunnels: Vec<_> = (0..10).map(|_| tokio::spawn(tunnel(s.edge, stop.clone()))).collect();
        let (failed, retried) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let load = tokio::spawn(clients(s.clone(), stop.clone(), failed.clone(), retried.clone()));

        let bad = s.dir.join("bad.yaml");
        std::fs::write(&bad, std::fs::read_to_string(&cfg).unwrap().replace("pool: {min: 4}", "pool: {minimum: 4}"))
            .unwrap();
        let out = Command::new(BIN).args(["run", "--upgrade", "--config"]).arg(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
        ping(&s).await;

        // A new process whose extra route's origin never answers waits for warm-up: killed then.
        let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let p = s.dir.display();
        let never_warm = config(
            &s,
            &format!(
                "  - sni: c.test\n    action: prewarm\n    origin: \"{dead}\"\n    cert: {p}/edge/cert.pem\n\
                 \x20   key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n"
            ),
        );
        // A long warm-up: it must still be warming when it is killed, however loaded the machine.
        let text = std::fs::read_to_string(&never_warm).unwrap().replace("warm_timeout: 3s", "warm_timeout: 60s");
        std::fs::write(&never_warm, text).unwrap();
        let mut doomed = start(&never_warm, true, &s.dir.join("doomed.log"));
        logged(&s.dir.join("old.log"), "handing the listening sockets over").await;
        doomed.0.kill().unwrap();
        doomed.0.wait().unwrap();
        logged(&s.dir.join("old.log"), "upgrade abandoned, still serving").await;
        ping(&s).await;
        let m = metrics(s.admin).await;
        assert_eq!(
            edgewarm::metrics::sample(&m, "edgewarm_upgrades_total", &[("result", "abandoned")]),
            Some(1.0),
            "{m}"
        );
        stop.store(true, Ordering::Relaxed);
        let ok = load.await.unwrap();
        for t in tunnels {
            assert!(t.await.unwrap().unwrap() > 0, "a tunnel lost bytes");
        }
        assert_eq!(failed.load(Ordering::Relaxed), 0, "failed connections ({ok} succeeded)");
        // Nothing was refused: the old process never stopped serving.
        assert_eq!(retried.load(Ordering::Relaxed), 0);
        assert!(ok > 0);

        // Still upgradable, here the way systemd's unit asks: SIGUSR2 starts the new process (its
        // log goes where the old one's does), which takes over.
        let status = Command::new("kill").args(["-USR2", &old.0.id().to_string()]).status().unwrap();
        assert!(status.success());
        // The new process is not our child: it goes by its pid in the log, and is killed at the
        // end whatever happens before.
        let text = logged(&s.dir.join("old.log"), "upgrade: started the new process").await;
        let _new = PidGuard(
            text.split("upgrade: started the new process")
                .nth(1)
                .and_then(|t| t.split("pid=").nth(1))
                .and_then(|t| t.split_whitespace().next())
                .unwrap()
                .to_owned(),
        );
        logged(&s.dir.join("old.log"), "took over").await;
        ping(&s).await;
        // The old process drained (nothing was open) and exited.
        assert!(wait_exit(&mut old.0).await.success());
    })
    .await;
}

/// A client's TLS session resumes on the new process: the old one hands its ticket keys over
/// with the sockets (no `tls.ticket_keys` file here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_clients_resume_after_an_upgrade() {
    bounded(async {
        let s = setup().await;
        let cfg = config(&s, "");
        let _old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(s.edge_certs.ca_der.clone()).unwrap();
        let client = Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
        let visit = || async {
            let tcp = TcpStream::connect(s.edge).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("b.test").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(client.clone()).connect(name, tcp).await.unwrap();
            // The echo comes after the session ticket: once it is read, the ticket is stored.
            tls.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await.unwrap();
            tls.get_ref().1.handshake_kind()
        };
        assert_eq!(visit().await, Some(rustls::HandshakeKind::Full));
        assert_eq!(visit().await, Some(rustls::HandshakeKind::Resumed), "resumes on the same process");
        let _new = start(&cfg, true, &s.dir.join("new.log"));
        logged(&s.dir.join("new.log"), "took over").await;
        logged(&s.dir.join("old.log"), "this one stops accepting").await;
        assert_eq!(visit().await, Some(rustls::HandshakeKind::Resumed), "resumes on the new process");
    })
    .await;
}

/// A client holding a 0-RTT ticket from the old process sends its request in early data to the
/// new one, and it is accepted: the 0-RTT session stores go with the hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_rtt_tickets_work_after_an_upgrade() {
    bounded(async {
        let s = setup().await;
        let cfg = config(&s, "    early_data: safe\n");
        let _old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(s.edge_certs.ca_der.clone()).unwrap();
        let mut client = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        client.enable_early_data = true;
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = Arc::new(client);
        let get = || async {
            let tcp = TcpStream::connect(s.edge).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("h.test").unwrap();
            let mut tls =
                tokio_rustls::TlsConnector::from(client.clone()).early_data(true).connect(name, tcp).await.unwrap();
            tls.write_all(b"GET /x HTTP/1.1\r\nhost: h.test\r\nconnection: close\r\n\r\n").await.unwrap();
            // In early data, tokio-rustls sends nothing until flushed, and reads nothing before.
            tls.flush().await.unwrap();
            let mut response = Vec::new();
            let _ = tls.read_to_end(&mut response).await;
            assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
            tls.get_ref().1.is_early_data_accepted()
        };
        assert!(!get().await, "no ticket yet");
        let _new = start(&cfg, true, &s.dir.join("new.log"));
        let text = logged(&s.dir.join("new.log"), "0-RTT sessions adopted").await;
        // rustls issues two tickets per connection by default: both cross.
        assert!(text.contains("sessions=2"), "{text}");
        logged(&s.dir.join("old.log"), "this one stops accepting").await;
        assert!(get().await, "the old process's ticket resumes with 0-RTT on the new one");
    })
    .await;
}

/// An old process that hands its sockets over and then never agrees to stop (it abandoned the
/// upgrade, here a test playing its part of the conversation with the real sockets): the new
/// process stops accepting and exits non-zero, never left serving beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_the_old_one_does_not_release_exits() {
    bounded(async {
        use edgewarm::upgrade::wire::{self, Msg};
        use std::os::fd::AsFd;
        let s = setup().await;
        let cfg = config(&s, "");
        let edge = std::net::TcpListener::bind(s.edge).unwrap();
        let admin = std::net::TcpListener::bind(s.admin).unwrap();
        let socket = tokio::net::UnixListener::bind(s.dir.join("upgrade.sock")).unwrap();
        let mut new = start(&cfg, true, &s.dir.join("new.log"));
        let (stream, _) = socket.accept().await.unwrap();
        let (hello, _) = wire::recv(&stream, wire::MAX_FROM_NEW).await.unwrap();
        assert!(matches!(hello, Msg::Hello { .. }), "{hello:?}");
        // As from a process that predates relaying QUIC datagrams.
        let sockets = Msg::Sockets {
            admin: s.admin,
            listeners: vec![(s.edge, 0)],
            ticket_keys: String::new(),
            wait_ms: 40_000,
            quic: None,
            relays: false,
        };
        wire::send(&stream, &sockets, &[admin.as_fd(), edge.as_fd()]).await.unwrap();
        let (serving, _) = wire::recv(&stream, wire::MAX_FROM_NEW).await.unwrap();
        assert!(matches!(serving, Msg::Serving), "{serving:?}");
        // The new process accepts now (a client gets its answer), then it is told nothing.
        let (mut tls, _) = tls_client(&s.edge_certs, s.edge, "b.test", &[]).await.unwrap();
        tls.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.unwrap();
        drop(tls);
        drop(stream);
        let status = wait_exit(&mut new.0).await;
        assert!(!status.success(), "{status}");
        let text = std::fs::read_to_string(s.dir.join("new.log")).unwrap();
        assert!(text.contains("the running process serves on"), "{text}");
        // The listening socket is the old process's alone again, and still listening.
        let _client = std::net::TcpStream::connect(s.edge).unwrap();
        assert!(edge.accept().is_ok());
    })
    .await;
}

/// A new process that is told `Stopping` and never acknowledges (here a script playing its
/// part of the conversation on the real upgrade socket) is killed by the old process, which
/// serves on and counts the upgrade abandoned: never two processes serving for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_that_does_not_acknowledge_is_killed() {
    bounded(async {
        let s = setup().await;
        let cfg = config(&s, "");
        let _old = start(&cfg, false, &s.dir.join("old.log"));
        logged(&s.dir.join("old.log"), "listening for upgrades").await;
        // Length-prefixed JSON, as `upgrade::wire` frames it; the sockets that come with the
        // second message are closed unread.
        let script = format!(
            "import json,os,socket,struct,time\n\
             s=socket.socket(socket.AF_UNIX);s.connect('{}')\n\
             def send(m):\n  b=json.dumps(m).encode();s.sendall(struct.pack('>I',len(b))+b)\n\
             def recv():\n  n=struct.unpack('>I',s.recv(4,socket.MSG_WAITALL))[0];return json.loads(s.recv(n,socket.MSG_WAITALL))\n\
             send({{'hello':{{'pid':os.getpid(),'version':'test'}}}})\n\
             assert 'sockets' in recv()\n\
             send('serving')\n\
             assert 'stopping' in recv()\n\
             print('told to stop',flush=True)\n\
             time.sleep(120)\n",
            s.dir.join("upgrade.sock").display()
        );
        let mut new = ChildGuard(
            Command::new("python3").args(["-c", &script]).stdout(Stdio::piped()).spawn().unwrap(),
        );
        let status = wait_exit(&mut new.0).await;
        let mut said = String::new();
        std::io::Read::read_to_string(new.0.stdout.as_mut().unwrap(), &mut said).unwrap();
        assert_eq!(said.trim(), "told to stop");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");
        let text = logged(&s.dir.join("old.log"), "upgrade abandoned, still serving").await;
        assert!(text.contains("did not acknowledge stopping; killed it"), "{text}");
        ping(&s).await;
        let m = metrics(s.admin).await;
        let abandoned = edgewarm::metrics::sample(&m, "edgewarm_upgrades_total", &[("result", "abandoned")]);
        assert_eq!(abandoned, Some(1.0), "{m}");
    })
    .await;
}
