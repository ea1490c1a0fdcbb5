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

mod hello;
mod relay;
