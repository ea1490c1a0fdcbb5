//! The relay once routed: origins that refuse, stall, reset or go idle, and bytes carried intact.

use super::*;

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
    let server = port.to_string();
    let labels = [("route", "a.test"), ("server", server.as_str()), ("kind", "tunnel"), ("reason", "refused")];
    assert_eq!(edge.metric("edgewarm_origin_connect_failures_total", &labels), 1.0);
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
