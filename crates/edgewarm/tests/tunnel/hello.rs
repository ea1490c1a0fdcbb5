//! The hello and the route: what is refused before any origin is contacted, and what is routed.

use super::*;

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

/// Slowloris at scale: many connections send one byte of a hello and go silent. A real client
/// is served while they hang; every one of them is closed at `timeouts.client_hello` and
/// counted; the edge's descriptors return to where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slowloris_connections_cost_nothing_lasting() {
    let (origin, _) = recording_origin(b"served".to_vec()).await;
    // Long enough that opening them all (slow on a busy machine) ends before the first expires.
    // No per-client cap: every connection here comes from 127.0.0.1, and what is measured is
    // what the slow ones cost, not the cap that would refuse them (tests/limits.rs).
    let edge =
        edge(&route_to("a.test", origin), "timeouts: {client_hello: 5s}", "max_connections_per_client: null").await;
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

/// Open descriptors of this process (the in-process edge's and the test's own).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
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
