//! Protocol upgrades (WebSocket) through an http route.

use super::*;

/// A WebSocket-style upgrade: the edge opens an HTTP/1.1 connection to the origin for it,
/// passes the 101 back, then relays bytes both ways; the origin was told who the client is.
#[tokio::test]
async fn upgrades_are_relayed_on_their_own_origin_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = fixture();
    let origin = upgrade_echo_origin(&fx.origin).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
    let head = websocket_upgrade(&mut tls, "").await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket") && head.contains("x-seen-for: 127.0.0.1"), "{head}");
    echo_round_trips(&mut tls).await;
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("status", "1xx")]), 1.0);
    edge.stop().await;
}

/// A real WebSocket server and client (Python `websockets`, Debian's python3-websockets) through
/// an http route: the handshake (Sec-WebSocket-Accept checked by the client), text and binary
/// messages, and a clean close.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (real clients): scripts/test.sh runs it")]
async fn a_real_websocket_echo_through_the_edge() {
    let fx = fixture();
    let origin_port = free_port();
    let p = fx.path.display().to_string();
    let server = format!(
        "import asyncio, ssl, websockets\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
         ctx.load_cert_chain('{p}/origin/cert.pem', '{p}/origin/key.pem')\n\
         async def echo(ws, *_):\n    async for m in ws:\n        await ws.send(m)\n\
         async def main():\n    async with websockets.serve(echo, '127.0.0.1', {origin_port}, ssl=ctx):\n        await asyncio.Future()\n\
         asyncio.run(main())\n"
    );
    let _server = ChildGuard(std::process::Command::new("/usr/bin/python3").args(["-c", &server]).spawn().unwrap());
    wait_for_port(origin_port);
    let origin: SocketAddr = format!("127.0.0.1:{origin_port}").parse().unwrap();
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let port = edge.addr.port();
    let client = format!(
        "import asyncio, ssl, websockets\n\
         ctx = ssl.create_default_context(cafile='{p}/edge/ca.pem')\n\
         async def main():\n\
         \x20   async with websockets.connect('wss://b.test:{port}/chat', ssl=ctx, host='127.0.0.1', port={port}, server_hostname='b.test') as ws:\n\
         \x20       for m in ['hello', b'\\x00\\x01binary', 'x' * 100000]:\n\
         \x20           await ws.send(m)\n\
         \x20           assert await ws.recv() == m\n\
         \x20   print('echoed')\n\
         asyncio.run(main())\n"
    );
    let (ok, out, err) = run("/usr/bin/python3", vec!["-c".to_string(), client]).await;
    assert!(ok && out.trim() == "echoed", "{out}\n{err}");
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("status", "1xx")]), 1.0);
    edge.stop().await;
}

/// RFC 8441: an origin that announces extended CONNECT carries a client's HTTP/1.1 WebSocket
/// as a stream on a standing connection: no origin handshake, the edge answers the key itself
/// (RFC 6455's sample key and accept), subprotocols pass, bytes echo both ways, and the client's
/// close ends the stream and frees its place.
#[tokio::test]
async fn websockets_ride_the_standing_connections_when_the_origin_offers_rfc_8441() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { websocket: true, ..Default::default() }).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 1}\n"), "", "").await;
    wait_for(&edge, OPENED, &[("route", "b.test")], 1.0).await;
    let (mut tls, _) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
    let head = websocket_upgrade(&mut tls, "sec-websocket-protocol: chat, superchat\r\n").await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    for want in [
        "upgrade: websocket",
        "sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=",
        "sec-websocket-protocol: chat",
        "x-seen-for: 127.0.0.1",
    ] {
        assert!(head.contains(want), "{want} missing: {head}");
    }
    echo_round_trips(&mut tls).await;
    assert_eq!(edge.metric("edgewarm_upstream_streams", &[("route", "b.test")]), 1.0, "the WebSocket holds a stream");
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    wait_for_zero(&edge, "edgewarm_upstream_streams", &[("route", "b.test")]).await;
    assert_eq!(stats.connections.load(Ordering::Relaxed), 1, "no origin connection of its own");
    edge.settle().await;
    assert_eq!(edge.metric("edgewarm_http_requests_total", &[("status", "1xx")]), 1.0);
    edge.stop().await;
}
