//! Per-client limits from outside: a listener's cap on one address's connections, a route's
//! request rate (429 with `Retry-After`), and address lists on listeners and routes, each
//! while another client is served.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITED: &str = "edgewarm_limited_total";

/// A TCP connection to `edge` from `source` (127.0.0.x: the whole range is this machine's).
async fn connect_from(source: &str, edge: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source.parse().unwrap(), 0))?;
    socket.connect(edge).await
}

/// One GET over TLS from `source`: the status, or the error that ended the connection.
async fn get_from(fx: &Pki, source: &str, edge: SocketAddr) -> Result<u16, String> {
    let tcp = connect_from(source, edge).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut tls = fx.edge.connector().connect(name, tcp).await.map_err(|e| format!("handshake: {e}"))?;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n").await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no response: {text:?}"))
}

/// `max_connections_per_client: 50`: the 51st connection of one address is closed before any
/// TLS, while another address is served; a place given back is a place again.
#[tokio::test]
async fn the_51st_connection_of_one_address_is_refused_while_another_client_is_served() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "max_connections_per_client: 50").await;
    let name = || rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut held = Vec::new();
    for _ in 0..50 {
        let tcp = connect_from("127.0.0.1", edge.addr).await.unwrap();
        held.push(fx.edge.connector().connect(name(), tcp).await.unwrap());
    }
    let tcp = connect_from("127.0.0.1", edge.addr).await.unwrap();
    let refused = fx.edge.connector().connect(name(), tcp).await;
    assert!(refused.is_err(), "the 51st handshake must not complete");
    wait_for(&edge, LIMITED, &[("scope", "listener"), ("reason", "client_connections")], 1.0).await;
    wait_for(&edge, "edgewarm_connections_closed_total", &[("reason", "client_limit")], 1.0).await;
    assert_eq!(get_from(&fx, "127.0.0.2", edge.addr).await, Ok(200), "another address is served");
    let (_, body) = admin_get(edge.admin, "/limits").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["listeners"][0]["clients"][0], serde_json::json!({"client": "127.0.0.1", "connections": 50}), "{v}");
    // One place given back: the address may connect again.
    drop(held.pop());
    for _ in 0..2000 {
        if get_from(&fx, "127.0.0.1", edge.addr).await == Ok(200) {
            drop(held);
            edge.stop().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the place given back never came back");
}

/// A listener full of idle connections (`max_connections: 20`, the default per-client cap):
/// one address holds 19 places with idle TLS connections and one with a request in flight, a
/// second address holds the last; a third client is then served, because the full listener
/// asks an idle connection of the address holding the most to finish (counted, its close
/// reason `reclaimed`). The second address's connection and the request in flight are kept:
/// both are answered afterwards on the connections they were on.
#[tokio::test]
async fn a_full_listener_reclaims_the_biggest_holders_idle_connection_for_a_new_client() {
    let fx = pki("http");
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (origin, _) = h2_origin(&fx.origin, H2Opts { gate: Some(gate.clone()), ..H2Opts::default() }).await;
    let edge = edge(&fx.route(origin, ""), "", "max_connections: 20").await;
    let name = || rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let open = |source: &'static str| {
        let connector = fx.edge.connector();
        async move { connector.connect(name(), connect_from(source, edge.addr).await.unwrap()).await.unwrap() }
    };
    let mut busy = open("127.0.0.1").await;
    busy.write_all(b"GET /gate HTTP/1.1\r\nHost: b.test\r\n\r\n").await.unwrap();
    let mut idle = Vec::new();
    for _ in 0..18 {
        idle.push(open("127.0.0.1").await);
    }
    let mut other = open("127.0.0.3").await;
    // The edge takes a place once it accepts; the 20th (other's) was taken when its handshake
    // completed, so the listener is full now.
    let served = tokio::time::timeout(Duration::from_secs(30), get_from(&fx, "127.0.0.2", edge.addr)).await;
    assert_eq!(served.expect("a new client waited behind a full listener"), Ok(200));
    wait_for(&edge, "edgewarm_connections_reclaimed_total", &[], 1.0).await;
    wait_for(&edge, "edgewarm_connections_closed_total", &[("reason", "reclaimed")], 1.0).await;
    // The second address's idle connection was not the one asked: it serves a request.
    other.write_all(b"GET /kept HTTP/1.1\r\nHost: b.test\r\n\r\n").await.unwrap();
    assert_eq!(read_response(&mut other).await, Some(200));
    // The request in flight was never cut: answered once its origin answers.
    gate.notify_one();
    assert_eq!(read_response(&mut busy).await, Some(200));
    drop((idle, other, busy));
    edge.stop().await;
}

/// 5 a second, burst 5: of 20 requests at once on one HTTP/2 connection, the burst is served
/// and the rest get 429 with `Retry-After`; a second later the client is served again; the
/// same on HTTP/1.1. The origin never sees a refused request.
#[tokio::test]
async fn a_rate_of_5_per_second_answers_429_with_retry_after_then_200_after_a_second() {
    let fx = pki("http");
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let limits = "    limits: {requests_per_second: 5, burst: 5}\n";
    let edge = edge(&fx.route(origin, limits), "", "").await;
    for h2 in [true, false] {
        let mut statuses = Vec::new();
        if h2 {
            let client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
            let HttpClient::H2(send) = client else { unreachable!() };
            let mut all = tokio::task::JoinSet::new();
            for _ in 0..20 {
                let mut client = HttpClient::H2(send.clone());
                all.spawn(async move { client.send("GET", "b.test", "/", &[], vec![]).await.unwrap().0 });
            }
            while let Some(parts) = all.join_next().await {
                statuses.push(parts.unwrap());
            }
        } else {
            let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
            for _ in 0..20 {
                statuses.push(client.send("GET", "b.test", "/", &[], vec![]).await.unwrap().0);
            }
        }
        let ok = statuses.iter().filter(|p| p.status == 200).count();
        let limited: Vec<_> = statuses.iter().filter(|p| p.status == 429).collect();
        assert!((5..=7).contains(&ok), "the burst, and at most what 20 requests' time refilled: {ok}");
        assert_eq!(
            ok + limited.len(),
            20,
            "only 200 and 429: {:?}",
            statuses.iter().map(|p| p.status).collect::<Vec<_>>()
        );
        for p in &limited {
            let after: u64 = p.headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!(after >= 1, "{after}");
        }
        // A second later the bucket has refilled.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        assert_eq!(client.send("GET", "b.test", "/", &[], vec![]).await.unwrap().0.status, 200);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    assert!(edge.metric(LIMITED, &[("scope", "route"), ("name", "b.test"), ("reason", "rate")]) >= 26.0);
    let _ = stats;
    edge.stop().await;
}

/// A listener's `deny` covering 127.0.0.2 refuses that client on accept while 127.0.0.1 is
/// served; a route's `allow` answers other addresses 403 on an http route.
#[tokio::test]
async fn a_denied_address_is_refused_on_accept_and_a_routes_list_answers_403() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let route = fx.route(origin, "    allow: [\"127.0.0.1\", \"127.0.0.2\"]\n");
    let edge = edge(&route, "", "deny: [\"127.0.0.2/32\"]").await;
    let refused = get_from(&fx, "127.0.0.2", edge.addr).await;
    assert!(refused.is_err(), "refused before TLS: {refused:?}");
    wait_for(&edge, LIMITED, &[("scope", "listener"), ("reason", "denied")], 1.0).await;
    wait_for(&edge, "edgewarm_connections_closed_total", &[("reason", "denied")], 1.0).await;
    assert_eq!(get_from(&fx, "127.0.0.1", edge.addr).await, Ok(200));
    // Past the listener, the route's allow list: 127.0.0.3 is not on it.
    assert_eq!(get_from(&fx, "127.0.0.3", edge.addr).await, Ok(403));
    wait_for(&edge, LIMITED, &[("scope", "route"), ("name", "b.test"), ("reason", "denied")], 1.0).await;
    edge.stop().await;
}

/// The same `deny` refuses a QUIC client from 127.0.0.2 at its first flight (HTTP/3 on the
/// listener), while 127.0.0.1 completes its handshake; `admin.deny` closes the admin listener
/// to an address.
#[tokio::test]
async fn a_denied_address_is_refused_over_quic_and_on_the_admin_listener() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let admin = "admin:\n  listen: 127.0.0.1:0\n  deny: [\"127.0.0.2\"]";
    let yaml = format!(
        "{admin}\nlisteners:\n  - listen: 127.0.0.1:0\n    http3: true\n    deny: [\"127.0.0.2\"]\nroutes:\n{}",
        fx.route(origin, "")
    );
    let edge = edge_from(&yaml).await;
    let transport = || quinn::TransportConfig::default();
    let allowed = h3_endpoint(&fx.edge.ca_der, transport());
    let conn = allowed.connect(edge.addr, "b.test").unwrap().await;
    assert!(conn.is_ok(), "127.0.0.1 is served: {conn:?}");
    let denied = h3_endpoint(&fx.edge.ca_der, transport());
    denied.rebind(std::net::UdpSocket::bind("127.0.0.2:0").unwrap()).unwrap();
    let refused = denied.connect(edge.addr, "b.test").unwrap().await;
    assert!(refused.is_err(), "127.0.0.2 is refused over QUIC");
    wait_for(&edge, LIMITED, &[("scope", "listener"), ("reason", "denied")], 1.0).await;
    // The admin listener: 127.0.0.1 answered, 127.0.0.2 closed unread.
    assert_eq!(admin_get(edge.admin, "/live").await.0, 200);
    let mut s = connect_from("127.0.0.2", edge.admin).await.unwrap();
    s.write_all(b"GET /live HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    edge.stop().await;
}

/// One count per client across TCP and QUIC: with a cap of 2 and two TLS connections open,
/// the client's QUIC handshake is refused; another address's is not.
#[tokio::test]
async fn the_cap_counts_a_clients_quic_connections_with_its_tcp_ones() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true\n    max_connections_per_client: 2").await;
    let name = || rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        let tcp = connect_from("127.0.0.1", edge.addr).await.unwrap();
        held.push(fx.edge.connector().connect(name(), tcp).await.unwrap());
    }
    let same = h3_endpoint(&fx.edge.ca_der, quinn::TransportConfig::default());
    assert!(same.connect(edge.addr, "b.test").unwrap().await.is_err(), "the third connection, over QUIC");
    wait_for(&edge, LIMITED, &[("scope", "listener"), ("reason", "client_connections")], 1.0).await;
    let other = h3_endpoint(&fx.edge.ca_der, quinn::TransportConfig::default());
    other.rebind(std::net::UdpSocket::bind("127.0.0.2:0").unwrap()).unwrap();
    assert!(other.connect(edge.addr, "b.test").unwrap().await.is_ok(), "another address over QUIC");
    drop(held);
    edge.stop().await;
}

/// Reads one HTTP/1.1 response off `tls` (its head, then a `Content-Length` or chunked body):
/// its status, or `None` when the connection ended first.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(tls: &mut S) -> Option<u16> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tls.read_exact(&mut byte).await.is_err() || head.len() > 16 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let header = |name: &str| text.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::trim));
    if let Some(n) = header("content-length") {
        let mut body = vec![0; n.parse().ok()?];
        tls.read_exact(&mut body).await.ok()?;
    } else if header("transfer-encoding") == Some("chunked") {
        // Chunk sizes up to the last (zero) chunk; every chunk's data and CRLF skipped.
        for _ in 0..1000 {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                tls.read_exact(&mut byte).await.ok()?;
                line.push(byte[0]);
            }
            let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).ok()?;
            let mut rest = vec![0; size + 2];
            tls.read_exact(&mut rest).await.ok()?;
            if size == 0 {
                break;
            }
        }
    }
    Some(status)
}

/// `count` GETs carrying `upgrade` (header lines, exactly as written) from `source`, each on
/// a new connection or all on one keep-alive connection: their statuses, in order.
async fn upgrade_gets(fx: &Pki, source: &str, edge: SocketAddr, upgrade: &str, keep_alive: bool) -> Vec<u16> {
    let request = format!("GET / HTTP/1.1\r\nHost: b.test\r\n{upgrade}\r\n");
    let name = || rustls::pki_types::ServerName::try_from("b.test").unwrap();
    let mut statuses = Vec::new();
    let mut held = None;
    for _ in 0..30 {
        if held.is_none() || !keep_alive {
            let tcp = connect_from(source, edge).await.unwrap();
            held = Some(fx.edge.connector().connect(name(), tcp).await.unwrap());
        }
        let tls = held.as_mut().unwrap();
        tls.write_all(request.as_bytes()).await.unwrap();
        statuses.push(read_response(tls).await.unwrap_or(0));
    }
    statuses
}

/// {5/s, burst 10}: 30 GETs with `Connection: Upgrade` and `Upgrade: websocket` (the edge's
/// upgrade path), or `Upgrade: foo/1` (an ordinary request: not a protocol the edge switches
/// to), which the origin answers with a plain 200, are counted like any GET: at most the
/// burst plus what their time refilled pass, the rest get 429, on new connections and on one
/// keep-alive connection; the origin sees only those that passed. A WebSocket upgrade from an
/// address the route's `allow` leaves out gets 403, counted as denied.
#[tokio::test]
async fn upgrade_headers_count_against_the_rate_on_new_and_keep_alive_connections() {
    let fx = pki("http");
    let (origin, stats) = h1_origin(&fx.origin).await;
    let extra = "    upstream: {protocol: http/1.1}\n    limits: {requests_per_second: 5, burst: 10}\n    \
                 allow: [\"127.0.0.0/29\"]\n";
    let edge = edge(&fx.route(origin, extra), "", "").await;
    let websocket = "Connection: Upgrade\r\nUpgrade: websocket\r\n";
    let foo = "Connection: Upgrade\r\nUpgrade: foo/1\r\n";
    let mut passed = 0;
    let mut refused = 0;
    // A source address each, so each run starts with a full bucket.
    for (source, upgrade, keep_alive) in [
        ("127.0.0.1", websocket, false),
        ("127.0.0.2", websocket, true),
        ("127.0.0.3", foo, false),
        ("127.0.0.4", foo, true),
    ] {
        let started = std::time::Instant::now();
        let statuses = upgrade_gets(&fx, source, edge.addr, upgrade, keep_alive).await;
        let elapsed = started.elapsed();
        let ok = statuses.iter().filter(|&&s| s == 200).count();
        let limited = statuses.iter().filter(|&&s| s == 429).count();
        // The bucket's 10, and 5 a second of the time the 30 took (rounded up: generous).
        let bound = 10 + (5.0 * elapsed.as_secs_f64()).ceil() as usize;
        let case = format!("{upgrade:?} from {source}, keep-alive {keep_alive}, {elapsed:?}: {statuses:?}");
        assert!((10..=bound).contains(&ok), "{ok} passed, at most {bound}: {case}");
        assert_eq!(ok + limited, 30, "only 200 and 429: {case}");
        assert_eq!(statuses[..10], [200; 10], "the burst first: {case}");
        passed += ok;
        refused += limited;
    }
    let rate = [("scope", "route"), ("name", "b.test"), ("reason", "rate")];
    assert_eq!(edge.metric(LIMITED, &rate), refused as f64);
    let seen = stats.requests.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(seen, passed, "the origin sees only the requests that passed");
    let foo_seen = stats.seen.lock().unwrap().iter().filter(|h| h.get("upgrade").is_some_and(|v| v == "foo/1")).count();
    assert_eq!(foo_seen, 0, "`Upgrade: foo/1` is an ordinary request: no Upgrade reaches the origin");
    // Outside the route's allow list (127.0.0.0/29): refused, and counted like any request.
    let denied = upgrade_gets(&fx, "127.0.0.9", edge.addr, websocket, true).await;
    assert_eq!(denied, [403; 30]);
    assert_eq!(edge.metric(LIMITED, &[("scope", "route"), ("name", "b.test"), ("reason", "denied")]), 30.0);
    edge.stop().await;
}

/// One client on both workers (two keep-alive connections: the edge hands connections to its
/// workers in turn), each sending as fast as it is answered for a second at 200/s, burst 10:
/// together at most the burst plus what their time refilled pass.
#[tokio::test]
async fn a_client_on_both_workers_gets_no_more_than_its_rate() {
    let fx = pki("http");
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    limits: {requests_per_second: 200, burst: 10}\n"), "", "").await;
    let started = std::time::Instant::now();
    let mut all = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", false).await.unwrap();
        all.spawn(async move {
            let mut ok = 0;
            for _ in 0..20_000 {
                if started.elapsed() > Duration::from_secs(1) {
                    break;
                }
                ok += usize::from(client.send("GET", "b.test", "/", &[], vec![]).await.unwrap().0.status == 200);
            }
            ok
        });
    }
    let ok: usize = all.join_all().await.into_iter().sum();
    let elapsed = started.elapsed();
    let bound = 10 + (200.0 * elapsed.as_secs_f64()).ceil() as usize;
    let limited = edge.metric(LIMITED, &[("scope", "route"), ("name", "b.test"), ("reason", "rate")]);
    assert!(ok <= bound, "{ok} passed in {elapsed:?} ({limited} refused): at most {bound}");
    assert!(limited > 0.0, "both connections were over the rate: {ok} passed, none refused");
    edge.stop().await;
}

/// A reload with the same `limits` keeps the route's rate state (a reload must not hand every
/// client a fresh burst), and new settings start it afresh. The rate is about one request a day: no
/// token comes back while the test runs.
#[tokio::test]
async fn a_reload_keeps_a_routes_rate_while_its_settings_are_equal() {
    let fx = pki("http");
    let (origin, _stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let limits = |burst: u32| format!("    limits: {{requests_per_second: 0.00001, burst: {burst}}}\n");
    let edge = edge(&fx.route(origin, &limits(2)), "", "").await;
    let reload = |burst: u32| {
        let yaml = format!(
            "admin:\n  listen: 127.0.0.1:0\nlisteners:\n  - listen: 127.0.0.1:0\nroutes:\n{}",
            fx.route(origin, &limits(burst))
        );
        edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    };
    let get = || get_from(&fx, "127.0.0.1", edge.addr);
    assert_eq!([get().await, get().await, get().await], [Ok(200), Ok(200), Ok(429)]);
    reload(2);
    assert_eq!(get().await, Ok(429), "the same settings: the spent burst stays spent");
    reload(3);
    assert_eq!(
        [get().await, get().await, get().await, get().await],
        [Ok(200), Ok(200), Ok(200), Ok(429)],
        "new settings: a new bucket"
    );
    edge.stop().await;
}
