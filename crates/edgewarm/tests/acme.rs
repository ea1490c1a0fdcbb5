//! `cert: acme` routes against a real ACME server (Debian's pebble, on 127.0.0.1): issued over
//! TLS-ALPN-01 answered by edgewarm's own listener, verified by curl against pebble's root,
//! stored and served again after a restart with the ACME server gone, renewed under load
//! without a failed handshake; an order the server rejects leaves the route refusing
//! handshakes with a reason.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use rustls::pki_types::pem::PemObject;

const NAME: &str = "www.edgewarm.test";
const VALID: &[(&str, &str)] = &[("result", "valid")];

/// A configuration with one `cert: acme` http route for `name` on 127.0.0.1:`port`.
fn config(fx: &Pki, pebble: &Pebble, storage: &std::path::Path, port: u16, origin: SocketAddr, name: &str) -> String {
    let p = fx.path.display();
    format!(
        "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:{port}\n\
         acme:\n  directory: {}\n  ca: {}\n  storage: {}\n  contact: [mailto:ops@edgewarm.test]\n  retry: 1h\n\
         routes:\n  - sni: {name}\n    action: http\n    origin: \"{origin}\"\n    cert: acme\n\
         \x20   origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n",
        pebble.directory,
        pebble.ca.display(),
        storage.display()
    )
}

/// curl through the route, trusting only `root`: (HTTP status, curl's stderr).
async fn curl(root: &std::path::Path, port: u16, name: &str) -> (String, String) {
    let args = vec![
        "-sS".to_string(),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_code}".into(),
        "--cacert".into(),
        root.display().to_string(),
        "--resolve".into(),
        format!("{name}:{port}:127.0.0.1"),
        format!("https://{name}:{port}/"),
    ];
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("curl").args(&args).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await
    .unwrap()
}

/// The `/certificates` entry of `name`.
async fn listed(edge: &Edge, name: &str) -> serde_json::Value {
    let (status, body) = admin_get(edge.admin, "/certificates").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["certificates"].as_array().unwrap().iter().find(|c| c["route"] == name).cloned().unwrap_or_default()
}

/// Every file under `dir`, recursively.
fn every_file(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(every_file(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The bar: issued over TLS-ALPN-01, verified by curl against pebble's root, listed
/// with its not-after, stored 0600; restarted with the ACME server down, the stored
/// certificate serves and nothing is ordered.
#[tokio::test]
async fn a_route_is_certified_over_tls_alpn_01_and_its_stored_certificate_serves_after_a_restart() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let port = free_port();
    let mut pebble = pebble(port);
    let storage = tempfile::tempdir().unwrap();
    let yaml = config(&fx, &pebble, storage.path(), port, origin, NAME);
    let started = std::time::Instant::now();
    let edge = edge_from(&yaml).await;
    wait_for(&edge, "edgewarm_acme_orders_total", VALID, 1.0).await;
    // A measurement for the record (`-- --nocapture`), not a threshold.
    eprintln!("measured: start to certificate installed: {:?}", started.elapsed());
    let root = pebble.root();
    let (status, err) = curl(&root, port, NAME).await;
    assert_eq!(status, "200", "curl: {err}");
    let cert = listed(&edge, NAME).await;
    assert_eq!(cert["source"], "acme", "{cert}");
    assert_eq!(cert["names"], serde_json::json!([NAME]), "{cert}");
    assert!(cert["issuer"].as_str().unwrap().contains("Pebble"), "{cert}");
    let not_after = cert["not_after"].as_i64().unwrap();
    assert!(not_after > unix_now(), "{cert}");
    assert!(cert["next_order"].as_i64().unwrap() > unix_now(), "renewal is not due yet: {cert}");
    assert!(cert["last_error"].is_null(), "{cert}");
    assert_eq!(edge.metric("edgewarm_tls_certificate_expiry_seconds", &[("route", NAME)]), not_after as f64);
    // Secrets on disk: the account and the certificate with its key, 0600.
    let files = every_file(storage.path());
    assert!(files.iter().any(|f| f.ends_with("account.json")), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with(format!("{NAME}.pem"))), "{files:?}");
    for f in &files {
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
    edge.stop().await;

    // Restarted with the ACME server gone: the stored certificate serves at once.
    pebble.stop();
    let edge = edge_from(&yaml).await;
    let (status, err) = curl(&root, port, NAME).await;
    assert_eq!(status, "200", "curl after restart: {err}");
    let cert = listed(&edge, NAME).await;
    assert_eq!(cert["not_after"].as_i64(), Some(not_after), "the same certificate: {cert}");
    assert!(cert["last_error"].is_null(), "nothing was ordered: {cert}");
    assert!(!edge.server.metrics().encode().contains("edgewarm_acme_orders_total{"), "no order");
    edge.stop().await;
}

/// An order whose validation fails (the name resolves where nothing answers): counted as
/// rejected, shown in `/certificates`, and the route refuses handshakes with an alert and
/// `reason="no_certificate"` rather than presenting anything else.
#[tokio::test]
async fn a_rejected_order_leaves_the_route_refusing_handshakes_with_a_reason() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let port = free_port();
    let pebble = pebble(port);
    let name = "elsewhere.edgewarm.test";
    pebble.resolve(name, "127.0.0.2");
    let storage = tempfile::tempdir().unwrap();
    let edge = edge_from(&config(&fx, &pebble, storage.path(), port, origin, name)).await;
    wait_for(&edge, "edgewarm_acme_orders_total", &[("result", "rejected")], 1.0).await;
    let cert = listed(&edge, name).await;
    assert!(cert["not_after"].is_null(), "{cert}");
    assert!(cert["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{cert}");
    assert!(cert["next_order"].as_i64().unwrap() > unix_now(), "a retry is scheduled: {cert}");
    let (status, err) = curl(&pebble.root(), port, name).await;
    assert_eq!(status, "000", "no response without a certificate");
    assert!(err.contains("alert") || err.contains("handshake"), "a TLS alert, not a silent close: {err}");
    wait_for(&edge, "edgewarm_connections_closed_total", &[("route", name), ("reason", "no_certificate")], 1.0).await;
    edge.stop().await;
}

/// A renewal asked for on the admin listener while clients handshake without pause: every
/// handshake succeeds, and the new certificate is served once it is installed.
#[tokio::test]
async fn a_renewal_under_load_fails_no_handshake() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let port = free_port();
    let pebble = pebble(port);
    let storage = tempfile::tempdir().unwrap();
    let edge = edge_from(&config(&fx, &pebble, storage.path(), port, origin, NAME)).await;
    wait_for(&edge, "edgewarm_acme_orders_total", VALID, 1.0).await;
    let mut roots = rustls::RootCertStore::empty();
    let root = std::fs::read(pebble.root()).unwrap();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&root) {
        roots.add(c.unwrap()).unwrap();
    }
    let client = tokio_rustls::TlsConnector::from(Arc::new(
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth(),
    ));
    let renewed = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (client, renewed, done, failed) = (client.clone(), renewed.clone(), done.clone(), failed.clone());
        loops.spawn(async move {
            let mut leaves = std::collections::HashSet::new();
            // Bounded: until 20 handshakes after the renewal, at most 5,000.
            let mut after = 0;
            for _ in 0..5000 {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from(NAME).unwrap();
                match client.connect(name, tcp).await {
                    Ok(tls) => {
                        leaves.insert(tls.get_ref().1.peer_certificates().unwrap()[0].to_vec());
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("handshake failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if renewed.load(Ordering::Relaxed) {
                    after += 1;
                    if after == 20 {
                        break;
                    }
                }
            }
            leaves.len()
        });
    }
    // Some handshakes under the first certificate, then the renewal.
    while done.load(Ordering::Relaxed) < 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    renew_now(&edge, NAME).await;
    wait_for(&edge, "edgewarm_acme_orders_total", VALID, 2.0).await;
    renewed.store(true, Ordering::Relaxed);
    let mut both = 0;
    while let Some(leaves) = loops.join_next().await {
        both += usize::from(leaves.unwrap() == 2);
    }
    eprintln!("measured: {} handshakes across the renewal, none failed", done.load(Ordering::Relaxed));
    assert_eq!(failed.load(Ordering::Relaxed), 0, "of {} handshakes", done.load(Ordering::Relaxed));
    assert!(both > 0, "the renewed certificate was served");
    edge.stop().await;
}

/// The fleet's ACME bucket, made as a node makes it, before any node starts.
async fn acme_bucket(nats: &Nats) -> async_nats::jetstream::kv::Store {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "KV_EDGEWARM_PURGES_ACME".into(),
        subjects: vec!["$KV.EDGEWARM_PURGES_ACME.>".into()],
        max_messages_per_subject: 1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: async_nats::jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .unwrap();
    js.get_key_value("EDGEWARM_PURGES_ACME").await.unwrap()
}

/// `holder`'s lease on ordering `name` for an hour, as a node writes it.
async fn hold_lease(kv: &async_nats::jetstream::kv::Store, pebble: &Pebble, name: &str, holder: &str) {
    let folder: String = pebble
        .directory
        .trim_start_matches("https://")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    let lease = serde_json::json!({"holder": holder, "until": unix_now() + 3600});
    kv.put(format!("{}/leases/{name}", folder.trim_matches('_')), lease.to_string().into()).await.unwrap();
}

/// Two nodes of a fleet (`fleet:` on a real `nats-server -js`) in front of one name: the node
/// holding the name's lease orders it once for both; the ACME server's validation reaches the
/// *other* node, which answers it from the fleet's store; that node then serves the same
/// certificate, taken from the store, without an order of its own.
#[tokio::test]
async fn a_fleet_orders_a_name_once_and_the_node_the_validation_reaches_answers_it() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let mut nats = nats();
    let (port_a, port_b) = (free_port(), free_port());
    // Validations reach b.
    let pebble = pebble(port_b);
    // a holds the lease (as a node writes it): a orders, b waits for a's certificate.
    let kv = acme_bucket(&nats).await;
    hold_lease(&kv, &pebble, NAME, "a").await;

    let (storage_a, storage_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = nats.url();
    let fleet = |name: &str| format!("fleet: {{nats: [\"{url}\"], name: {name}}}\n");
    let a = edge_from(&(config(&fx, &pebble, storage_a.path(), port_a, origin, NAME) + &fleet("a"))).await;
    let b = edge_from(&(config(&fx, &pebble, storage_b.path(), port_b, origin, NAME) + &fleet("b"))).await;
    wait_for(&a, "edgewarm_acme_orders_total", VALID, 1.0).await;
    let ordered = listed(&a, NAME).await;
    let mut taken = serde_json::Value::Null;
    for _ in 0..1000 {
        taken = listed(&b, NAME).await;
        if !taken["not_after"].is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(taken["not_after"], ordered["not_after"], "b serves a's certificate: {taken} / {ordered}");
    assert_eq!(taken["not_before"], ordered["not_before"]);
    let (status, err) = curl(&pebble.root(), port_b, NAME).await;
    assert_eq!(status, "200", "curl through b: {err}");
    assert!(!b.server.metrics().encode().contains("edgewarm_acme_orders_total{"), "b ordered nothing");
    // b keeps a copy of what it serves, for a start without NATS.
    assert!(every_file(storage_b.path()).iter().any(|f| f.ends_with(format!("{NAME}.pem"))));
    a.stop().await;
    b.stop().await;

    // NATS down, b started again: it serves the certificate it had, and orders nothing.
    nats.stop();
    let b = edge_from(&(config(&fx, &pebble, storage_b.path(), port_b, origin, NAME) + &fleet("b"))).await;
    let (status, err) = curl(&pebble.root(), port_b, NAME).await;
    assert_eq!(status, "200", "curl through b without NATS: {err}");
    assert_eq!(listed(&b, NAME).await["not_after"], ordered["not_after"]);
    assert!(!b.server.metrics().encode().contains("edgewarm_acme_orders_total{"), "b ordered nothing");
    b.stop().await;
}

/// Ask for `name`'s renewal on the admin listener.
async fn renew_now(edge: &Edge, name: &str) {
    let mut s = tokio::net::TcpStream::connect(edge.admin).await.unwrap();
    let req = format!("POST /certificates/renew?name={name} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await.unwrap();
    let answer = String::from_utf8(read_all(&mut s).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Until `name`'s loop waits for its next order (`next_order` set), so a renewal asked for is
/// heard: one asked while the last order's tail still runs is that order's (bounded: ~10 s).
async fn idle(edge: &Edge, name: &str) {
    for _ in 0..1000 {
        if !listed(edge, name).await["next_order"].is_null() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{name}'s loop never waited");
}

/// Until `edge` has `valid` valid orders or one that did not end valid (bounded: ~10 s).
async fn order_ends(edge: &Edge, valid: f64) {
    let failed = || {
        edge.metric("edgewarm_acme_orders_total", &[("result", "rejected")])
            + edge.metric("edgewarm_acme_orders_total", &[("result", "failed")])
    };
    for _ in 0..2000 {
        if edge.metric("edgewarm_acme_orders_total", VALID) >= valid || failed() > 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Issue #57 (5): the ACME server restarted has forgotten the account (pebble keeps accounts in
/// memory; a CA reset does the same). The renewal asked for next registers a new account with
/// the same contact, replaces `account.json` (0600, no temporary file left) and orders again at
/// once, well within `acme.retry` (1 h here): a new certificate, under the new server's root,
/// served; no order counted as failed. The same for an account deactivated (`unauthorized`).
/// Before the fix the order failed with `accountDoesNotExist` and the stored account was kept,
/// for every retry.
#[tokio::test]
async fn a_forgotten_account_is_registered_anew_and_the_order_placed_again_at_once() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let port = free_port();
    let mut pebble = pebble(port);
    let storage = tempfile::tempdir().unwrap();
    let edge = edge_from(&config(&fx, &pebble, storage.path(), port, origin, NAME)).await;
    wait_for(&edge, "edgewarm_acme_orders_total", VALID, 1.0).await;
    let registered = |reason| edge.metric("edgewarm_acme_accounts_registered_total", &[("reason", reason)]);
    let file = every_file(storage.path()).into_iter().find(|f| f.ends_with("account.json")).unwrap();
    let before = std::fs::read(&file).unwrap();
    // pebble.root() rewrites one file: the old root is kept aside.
    let old_root = storage.path().join("root-before-restart.pem");
    std::fs::copy(pebble.root(), &old_root).unwrap();

    pebble.restart();
    idle(&edge, NAME).await;
    renew_now(&edge, NAME).await;
    order_ends(&edge, 2.0).await;
    let cert = listed(&edge, NAME).await;
    assert_eq!(edge.metric("edgewarm_acme_orders_total", VALID), 2.0, "renewed: {cert}");
    assert!(cert["last_error"].is_null(), "{cert}");
    assert!(!edge.server.metrics().encode().contains("result=\"rejected\""), "the refusal is not an order failure");
    assert_eq!((registered("none"), registered("refused")), (1.0, 1.0));
    let after = std::fs::read(&file).unwrap();
    assert_ne!(after, before, "account.json replaced");
    let parsed: serde_json::Value = serde_json::from_slice(&after).unwrap();
    assert!(parsed["id"].as_str().is_some_and(|id| id.starts_with("https://127.0.0.1:")), "{parsed}");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let folder = std::fs::read_dir(file.parent().unwrap()).unwrap();
    let left: Vec<_> =
        folder.map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
    assert!(left.is_empty(), "{left:?}");
    // The new certificate serves: it chains to the restarted server's root, not the old one's.
    let (status, err) = curl(&pebble.root(), port, NAME).await;
    assert_eq!(status, "200", "curl with the new root: {err}");
    let (status, _) = curl(&old_root, port, NAME).await;
    assert_eq!(status, "000", "the old certificate no longer serves");

    // The account deactivated (its holder's key, as an operator would): `unauthorized`, the same.
    let credentials = serde_json::from_slice(&after).unwrap();
    let builder = instant_acme::Account::builder_with_root(&pebble.ca).unwrap();
    builder.from_credentials(credentials).await.unwrap().deactivate().await.unwrap();
    idle(&edge, NAME).await;
    renew_now(&edge, NAME).await;
    order_ends(&edge, 3.0).await;
    let cert = listed(&edge, NAME).await;
    assert_eq!(edge.metric("edgewarm_acme_orders_total", VALID), 3.0, "renewed: {cert}");
    assert_eq!(registered("refused"), 2.0);
    assert_ne!(std::fs::read(&file).unwrap(), after, "account.json replaced");
    edge.stop().await;
}

/// Issue #57 (5) in a fleet: two nodes, each ordering one of two names (a lease each), share
/// one account; the ACME server restarted, both renewals are refused at once, and one node
/// registers the new account (the registration lease) while the other takes it from the
/// fleet's store: one registration for the fleet, both names renewed and served.
#[tokio::test]
async fn a_fleet_refused_on_two_nodes_at_once_registers_one_account() {
    const OTHER: &str = "two.edgewarm.test";
    const ACCOUNTS: &str = "edgewarm_acme_accounts_registered_total";
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let nats = nats();
    let (port_a, port_b) = (free_port(), free_port());
    let mut pebble = pebble(port_b);
    let kv = acme_bucket(&nats).await;
    hold_lease(&kv, &pebble, NAME, "a").await;
    hold_lease(&kv, &pebble, OTHER, "b").await;
    let (storage_a, storage_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (p, url) = (fx.path.display(), nats.url());
    let yaml = |storage: &std::path::Path, port, node: &str| {
        config(&fx, &pebble, storage, port, origin, NAME)
            + &format!("  - sni: {OTHER}\n    action: http\n    origin: \"{origin}\"\n    cert: acme\n")
            + &format!("    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n")
            + &format!("fleet: {{nats: [\"{url}\"], name: {node}}}\n")
    };
    let a = edge_from(&yaml(storage_a.path(), port_a, "a")).await;
    let b = edge_from(&yaml(storage_b.path(), port_b, "b")).await;
    wait_for(&a, "edgewarm_acme_orders_total", VALID, 1.0).await;
    wait_for(&b, "edgewarm_acme_orders_total", VALID, 1.0).await;
    let registered = |reason| a.metric(ACCOUNTS, &[("reason", reason)]) + b.metric(ACCOUNTS, &[("reason", reason)]);
    assert_eq!(registered("none"), 1.0, "one account for the fleet");

    pebble.restart();
    tokio::join!(idle(&a, NAME), idle(&b, OTHER));
    tokio::join!(renew_now(&a, NAME), renew_now(&b, OTHER));
    tokio::join!(order_ends(&a, 2.0), order_ends(&b, 2.0));
    for (edge, name) in [(&a, NAME), (&b, OTHER)] {
        let cert = listed(edge, name).await;
        assert_eq!(edge.metric("edgewarm_acme_orders_total", VALID), 2.0, "{name} renewed: {cert}");
    }
    assert_eq!(registered("refused"), 1.0, "one registration for the fleet");
    let root = pebble.root();
    for (port, name) in [(port_a, NAME), (port_b, OTHER)] {
        let (status, err) = curl(&root, port, name).await;
        assert_eq!(status, "200", "{name} with the new root: {err}");
    }
    a.stop().await;
    b.stop().await;
}
