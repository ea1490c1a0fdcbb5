//! The blind tunnel end to end: real sockets on 127.0.0.1, real ClientHellos from rustls, real
//! TLS between client and origin through edgewarm.

use edgewarm_test_support as common;

use common::*;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CLOSED: &str = "edgewarm_connections_closed_total";
const REJECTED: &str = "edgewarm_clienthello_rejected_total";

#[tokio::test]
async fn rustls_client_reaches_tls_origin_through_the_tunnel() {
    let certs = certs(&["a.test"]);
    let origin = tls_echo_origin(&certs).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;

    for round in 0..3 {
        let tcp = TcpStream::connect(edge.addr).await.unwrap();
        let name = ServerName::try_from("a.test").unwrap();
        let mut tls = certs.connector().connect(name, tcp).await.unwrap();
        let msg = format!("hello through edgewarm {round}");
        tls.write_all(msg.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        tls.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, msg.as_bytes());
        tls.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = tls.read_to_end(&mut rest).await;
    }
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_connections_accepted_total", &[]), 3.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "done")]), 3.0);
    assert!(edge.metric("edgewarm_bytes_total", &[("route", "a.test"), ("direction", "origin_to_client")]) > 0.0);
    assert_eq!(edge.metric("edgewarm_clienthello_parsed_total", &[]), 3.0);
    let metrics = edge.server.metrics().encode();
    assert!(metrics.contains("edgewarm_accept_to_first_origin_byte_seconds_count{route=\"a.test\"} 3"), "{metrics}");
    edge.stop().await;
}

/// Send raw bytes, half-close, and return what edgewarm answered.
async fn exchange(edge: &Edge, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s.shutdown().await.unwrap();
    read_all(&mut s).await
}

#[tokio::test]
async fn unknown_sni_is_refused_with_unrecognized_name() {
    let (origin, received) = recording_origin(vec![]).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let answer = exchange(&edge, &client_hello("evil.test")).await;
    assert_eq!(answer, [0x15, 3, 3, 0, 2, 2, 112], "fatal unrecognized_name alert");
    edge.settle().await;
    assert_eq!(edge.metric(REJECTED, &[("reason", "unknown_sni")]), 1.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "<none>"), ("reason", "unknown_sni")]), 1.0);
    assert!(received.lock().unwrap().is_empty(), "nothing reached an origin");
    edge.stop().await;
}

#[tokio::test]
async fn reject_route_and_default() {
    let (origin, received) = recording_origin(vec![]).await;
    let routes = format!("{}  - {{sni: \"*\", action: reject}}\n", route_to("a.test", origin));
    let edge = edge(&routes, "", "").await;
    assert_eq!(exchange(&edge, &client_hello("other.test")).await, [0x15, 3, 3, 0, 2, 2, 112]);
    edge.settle().await;
    assert_eq!(edge.metric(REJECTED, &[("reason", "route_reject")]), 1.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "*"), ("reason", "route_reject")]), 1.0);
    assert!(received.lock().unwrap().is_empty());
    edge.stop().await;
}

#[tokio::test]
async fn bad_input_is_refused_counted_and_never_forwarded() {
    let (origin, received) = recording_origin(vec![]).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;

    // Plain HTTP on the TLS port gets an HTTP answer saying so.
    let answer = exchange(&edge, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await;
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("https://"), "{answer}");

    // Bytes that are neither TLS nor HTTP: closed without an answer.
    assert!(exchange(&edge, &[0x00, 0xff, 0x13, 0x37, 9, 9, 9, 9]).await.is_empty());

    // A hello cut short, then EOF.
    let hello = client_hello("a.test");
    assert!(exchange(&edge, &hello[..hello.len() / 2]).await.is_empty());

    // A handshake header announcing more than 64 KiB.
    let huge = [0x16, 3, 1, 0x40, 0x00, 0x01, 0x01, 0x20, 0x00];
    assert_eq!(exchange(&edge, &huge).await, [0x15, 3, 3, 0, 2, 2, 50], "decode_error alert");

    edge.settle().await;
    for reason in ["http", "not_tls", "truncated", "too_large"] {
        assert_eq!(edge.metric(REJECTED, &[("reason", reason)]), 1.0, "{reason}");
    }
    assert!(received.lock().unwrap().is_empty(), "no bad input reached the origin");
    edge.stop().await;
}

#[tokio::test]
async fn slow_hello_times_out() {
    let (origin, received) = recording_origin(vec![]).await;
    let edge = edge(&route_to("a.test", origin), "timeouts: {client_hello: 200ms}", "").await;
    let hello = client_hello("a.test");
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    // Slowloris: a valid start, then nothing. The edge must close on its own.
    s.write_all(&hello[..10]).await.unwrap();
    assert!(read_all(&mut s).await.is_empty());
    edge.settle().await;
    assert_eq!(edge.metric(REJECTED, &[("reason", "hello_timeout")]), 1.0);
    assert!(received.lock().unwrap().is_empty());
    edge.stop().await;
}

#[tokio::test]
async fn hello_split_across_segments_and_records_is_replayed_unchanged() {
    let (origin, received) = recording_origin(b"served".to_vec()).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let hello = client_hello("a.test");
    assert!(hello.len() > 1200, "post-quantum key share expected, got {} bytes", hello.len());
    for (i, variant) in [hello.clone(), refragment(&hello, 200), refragment(&hello, 7)].into_iter().enumerate() {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        // Dribble it: many small TCP segments (NODELAY is on for the test socket too).
        s.set_nodelay(true).unwrap();
        for chunk in variant.chunks(97) {
            s.write_all(chunk).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        s.write_all(b"after the hello").await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(read_all(&mut s).await, b"served", "variant {i}");
        let mut expected = variant.clone();
        expected.extend_from_slice(b"after the hello");
        assert_eq!(received.lock().unwrap().last().unwrap(), &expected, "variant {i} replayed byte for byte");
    }
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "done")]), 3.0);
    edge.stop().await;
}

#[tokio::test]
async fn half_close_keeps_the_other_direction_open() {
    // The origin reads to EOF and only then answers: the client's FIN must reach it while the
    // origin→client direction stays open for the answer.
    let (origin, received) = recording_origin(vec![7u8; 300_000]).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("a.test")).await.unwrap();
    s.write_all(b"request").await.unwrap();
    s.shutdown().await.unwrap();
    let answer = read_all(&mut s).await;
    assert_eq!(answer.len(), 300_000);
    assert!(received.lock().unwrap()[0].ends_with(b"request"));
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "done")]), 1.0);
    assert_eq!(
        edge.metric("edgewarm_bytes_total", &[("route", "a.test"), ("direction", "origin_to_client")]),
        300_000.0
    );
    edge.stop().await;
}

#[tokio::test]
async fn origin_refused_gets_an_alert_and_a_metric() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }; // closed again: connecting is refused
    let edge = edge(&route_to("a.test", port), "", "").await;
    assert_eq!(exchange(&edge, &client_hello("a.test")).await, [0x15, 3, 3, 0, 2, 2, 80]);
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "origin_refused")]), 1.0);
    assert_eq!(edge.metric("edgewarm_origin_connect_errors_total", &[("reason", "origin_refused")]), 1.0);
    edge.stop().await;
}

#[tokio::test]
async fn origin_connect_timeout() {
    // A listener whose accept queue is full drops further SYNs: connects hang until timeout.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    socket.listen(0).unwrap();
    let full = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(std::time::Duration::from_millis(300), TcpStream::connect(full)).await {
            fillers.push(s);
        }
    }
    let edge = edge(&route_to("a.test", full), "timeouts: {connect: 300ms}", "").await;
    assert_eq!(exchange(&edge, &client_hello("a.test")).await, [0x15, 3, 3, 0, 2, 2, 80]);
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "origin_timeout")]), 1.0);
    drop(socket);
    edge.stop().await;
}

#[tokio::test]
async fn idle_tunnel_is_closed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    // An origin that accepts and then says nothing, keeping the socket open.
    let hold = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        drop(s);
    });
    let edge = edge(&route_to("a.test", origin), "timeouts: {idle: 200ms}", "").await;
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("a.test")).await.unwrap();
    assert!(read_all(&mut s).await.is_empty());
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "idle_timeout")]), 1.0);
    hold.abort();
    edge.stop().await;
}

/// Client and origin both stream 32 MiB at the same time; both ends hash what they got.
async fn large_transfer(extra: &str) {
    const SIZE: usize = 32 << 20;
    fn pattern(seed: u8) -> Vec<u8> {
        let mut x = u32::from(seed) | 1;
        (0..SIZE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }
    let up = pattern(1);
    let down = pattern(2);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin_addr = listener.local_addr().unwrap();
    let hello = client_hello("a.test");
    let hello_len = hello.len();
    let down2 = down.clone();
    let origin = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.into_split();
        let writer = tokio::spawn(async move {
            w.write_all(&down2).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        got
    });
    let edge = edge(&route_to("a.test", origin_addr), extra, "").await;
    let s = TcpStream::connect(edge.addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let up2 = up.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&hello).await.unwrap();
        w.write_all(&up2).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut got_down = Vec::new();
    r.read_to_end(&mut got_down).await.unwrap();
    writer.await.unwrap();
    let got_up = origin.await.unwrap();
    assert_eq!(Sha256::digest(&got_down), Sha256::digest(&down), "origin→client bytes identical");
    assert_eq!(Sha256::digest(&got_up[hello_len..]), Sha256::digest(&up), "client→origin bytes identical");
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "done")]), 1.0);
    assert_eq!(
        edge.metric("edgewarm_bytes_total", &[("route", "a.test"), ("direction", "client_to_origin")]),
        (SIZE + hello_len) as f64
    );
    edge.stop().await;
}

#[tokio::test]
async fn large_transfer_each_way_is_byte_identical() {
    large_transfer("").await;
}

#[tokio::test]
async fn large_transfer_with_the_copy_relay() {
    large_transfer("relay: copy").await;
}

#[tokio::test]
async fn proxy_protocol_header_is_consumed_not_forwarded() {
    let (origin, received) = recording_origin(b"ok".to_vec()).await;
    let edge = edge(&route_to("a.test", origin), "", "proxy_protocol: true").await;
    let hello = client_hello("a.test");
    let mut bytes = b"PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n".to_vec();
    bytes.extend_from_slice(&hello);
    assert_eq!(exchange(&edge, &bytes).await, b"ok");
    assert_eq!(received.lock().unwrap()[0], hello);
    // Without the header, the listener refuses the connection.
    assert!(exchange(&edge, &hello).await.is_empty());
    edge.settle().await;
    assert_eq!(edge.metric(REJECTED, &[("reason", "proxy_header")]), 1.0);
    edge.stop().await;
}

/// `origin_proxy_protocol`: the origin gets a PROXY header naming the client, then the hello
/// byte for byte; v1 and v2.
#[tokio::test]
async fn origins_can_be_told_the_client_with_proxy_protocol() {
    for version in ["v1", "v2"] {
        let (origin, received) = recording_origin(b"ok".to_vec()).await;
        let route =
            format!("  - {{sni: a.test, action: tunnel, origin: \"{origin}\", origin_proxy_protocol: {version}}}\n");
        let edge = edge(&route, "", "").await;
        let hello = client_hello("a.test");
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        let client = s.local_addr().unwrap();
        s.write_all(&hello).await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(read_all(&mut s).await, b"ok");
        edge.settle().await;
        let got = received.lock().unwrap()[0].clone();
        let edgewarm::peek::proxy::ProxyHeader::Complete { len, source } = edgewarm::peek::proxy::parse(&got) else {
            panic!("{version}: no PROXY header in {:?}", &got[..got.len().min(40)]);
        };
        assert_eq!(source, Some(client), "{version}");
        assert_eq!(&got[len..], &hello[..], "{version}: the hello follows the header unchanged");
        edge.stop().await;
    }
}

/// Open descriptors of this process (the in-process edge's and the test's own).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// How many slowloris connections the descriptor limit allows (each costs two here: the
/// client's and the edge's), up to 1000.
fn slowloris_count() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1024);
    (soft.saturating_sub(open_fds() + 200) / 2).min(1000)
}

/// Slowloris at scale: many connections send one byte of a hello and go silent. A real client
/// is served while they hang; every one of them is closed at `timeouts.client_hello` and
/// counted; the edge's descriptors return to where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slowloris_connections_cost_nothing_lasting() {
    let (origin, _) = recording_origin(b"served".to_vec()).await;
    // Long enough that opening them all (slow on a busy machine) ends before the first expires.
    let edge = edge(&route_to("a.test", origin), "timeouts: {client_hello: 5s}", "").await;
    // One tunnel first: the relay keeps the pipes it has used for the next tunnels (a few per
    // worker thread), and those are not what this test is about.
    assert_eq!(exchange(&edge, &client_hello("a.test")).await, b"served");
    let baseline = open_fds();
    let n = slowloris_count();
    assert!(n >= 300, "descriptor limit too low for this test: {n}");
    let mut slow = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(&[0x16]).await.unwrap();
        slow.push(s);
    }
    // A real client, while all of them hang.
    let answer = exchange(&edge, &client_hello("a.test")).await;
    assert_eq!(answer, b"served");
    assert!(edge.server.open_connections() >= n, "the slow ones were still open when it was served");
    // Each is closed by the edge at the hello timeout.
    for s in &mut slow {
        assert!(read_all(s).await.is_empty());
    }
    drop(slow);
    edge.settle().await;
    assert_eq!(edge.metric(REJECTED, &[("reason", "hello_timeout")]), n as f64);
    // Closed sockets leave the descriptor table at once; allow the runtime a moment. The real
    // client's tunnel may have run on the other worker thread and left that thread's two
    // pipes (four descriptors) in its spare list: a thousand leaked sockets would be far more.
    let slack = 4;
    let mut fds = open_fds();
    for _ in 0..200 {
        if fds <= baseline + slack {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        fds = open_fds();
    }
    assert!(fds <= baseline + slack, "descriptors: {fds} now, {baseline} before");
    edge.stop().await;
}

/// An origin that dies mid-transfer (TCP reset): the client sees the end at once, the close is
/// counted as `origin_reset`, and the edge serves the next client.
#[tokio::test]
async fn an_origin_reset_mid_transfer_ends_the_tunnel_and_nothing_else() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = vec![0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            if first {
                first = false;
                // Part of an answer, then a reset (SO_LINGER 0 makes close send RST).
                let _ = s.write_all(&vec![b'x'; 100_000]).await;
                s.set_zero_linger().unwrap();
                drop(s);
            } else {
                let _ = s.write_all(b"served").await;
            }
        }
    });
    let edge = edge(&route_to("a.test", origin), "", "").await;
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("a.test")).await.unwrap();
    let mut got = Vec::new();
    // Ends with EOF or a reset, never a hang: the read below returns.
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut got).await;
    assert!(got.len() <= 100_000);
    edge.settle().await;
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "origin_reset")]), 1.0);
    let mut next = TcpStream::connect(edge.addr).await.unwrap();
    next.write_all(&client_hello("a.test")).await.unwrap();
    let mut answer = [0u8; 6];
    tokio::io::AsyncReadExt::read_exact(&mut next, &mut answer).await.unwrap();
    assert_eq!(&answer, b"served");
    drop(next);
    edge.settle().await;
    edge.stop().await;
}

/// A minimal ClientHello (TLS 1.2 style) with the given server_name entries (none: no
/// extension) and extra extensions, as one record (cut it with `refragment`).
fn crafted_hello(names: &[&[u8]], extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    let mut exts = Vec::new();
    if !names.is_empty() {
        let mut list = Vec::new();
        for n in names {
            list.push(0);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n);
        }
        exts.extend_from_slice(&[0, 0]);
        exts.extend_from_slice(&((list.len() + 2) as u16).to_be_bytes());
        exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
        exts.extend_from_slice(&list);
    }
    for (ty, data) in extra {
        exts.extend_from_slice(&ty.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(data);
    }
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut msg = vec![1, (body.len() >> 16) as u8, (body.len() >> 8) as u8, body.len() as u8];
    msg.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    rec.extend_from_slice(&msg);
    rec
}

/// ClientHello torture through a real edge: every variant is either routed and replayed byte
/// for byte, or refused with the right alert and counted; nothing crashes, nothing reaches the
/// origin that should not, and every connection is closed afterwards.
#[tokio::test]
async fn clienthello_torture_routes_the_valid_and_refuses_the_rest() {
    let (origin, received) = recording_origin(b"served".to_vec()).await;
    let edge = edge(&route_to("a.test", origin), "", "").await;
    // Routed: one byte per TCP segment; one-byte records; a 17 KB hello (unknown extension
    // padding, so several records); SNI in capitals with a trailing dot.
    let real = client_hello("a.test");
    let big = refragment(&crafted_hello(&[b"a.test"], &[(0xff01, vec![0x5a; 17_000])]), 16_384);
    let routed: Vec<(&str, Vec<u8>, usize)> = vec![
        ("1-byte segments", real.clone(), 1),
        ("1-byte records", refragment(&real, 1), 4096),
        ("17 KB hello", big, 4096),
        ("A.TEST.", crafted_hello(&[b"A.TEST."], &[]), 4096),
    ];
    for (what, hello, segment) in routed {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        for chunk in hello.chunks(segment) {
            s.write_all(chunk).await.unwrap();
            if segment == 1 {
                tokio::task::yield_now().await;
            }
        }
        s.shutdown().await.unwrap();
        assert_eq!(read_all(&mut s).await, b"served", "{what}");
        assert_eq!(received.lock().unwrap().last().unwrap(), &hello, "{what}: replayed unchanged");
    }
    let forwarded = received.lock().unwrap().len();
    // Refused: the alert a TLS client understands, and a counted reason.
    let unrecognized = [0x15, 3, 3, 0, 2, 2, 112];
    let decode_error = [0x15, 3, 3, 0, 2, 2, 50];
    let refused: Vec<(&str, Vec<u8>, &[u8])> = vec![
        ("two host names", crafted_hello(&[b"a.test", b"b.test"], &[]), &decode_error),
        ("empty host name", crafted_hello(&[b""], &[]), &decode_error),
        ("IP literal (RFC 6066 forbids it; no route has it)", crafted_hello(&[b"127.0.0.1"], &[]), &unrecognized),
        ("no SNI and no default route", crafted_hello(&[], &[]), &unrecognized),
        ("SSLv2", vec![0x80, 0x2e, 0x01, 0x00, 0x02, 0, 0x15, 0, 0, 0, 0x10], &decode_error),
        ("garbage", (0..=255u8).cycle().take(3000).collect(), &[]),
    ];
    for (what, bytes, alert) in &refused {
        assert_eq!(&exchange(&edge, bytes).await, alert, "{what}");
    }
    edge.settle().await;
    assert_eq!(received.lock().unwrap().len(), forwarded, "nothing refused reached the origin");
    assert_eq!(edge.metric(REJECTED, &[("reason", "malformed")]), 2.0);
    assert_eq!(edge.metric(REJECTED, &[("reason", "unknown_sni")]), 2.0);
    assert_eq!(edge.metric(REJECTED, &[("reason", "sslv2")]), 1.0);
    assert_eq!(edge.metric(CLOSED, &[("route", "a.test"), ("reason", "done")]), 4.0);
    // Two malformed hellos with different details are one series (it once was two, with the
    // same labels: invalid exposition).
    let (_, text) = admin_get(edge.admin, "/metrics").await;
    let series: Vec<&str> = text.lines().filter(|l| l.starts_with("edgewarm_clienthello_rejected_total{")).collect();
    let mut unique = series.iter().map(|l| l.rsplit_once(' ').unwrap().0).collect::<Vec<_>>();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), series.len(), "duplicate series: {series:?}");
    // Every connection closed (descriptors are checked by the slowloris test, which runs alone:
    // here other tests share the process's descriptor table).
    assert_eq!(edge.server.open_connections(), 0);
    edge.stop().await;
}
