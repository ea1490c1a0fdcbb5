//! `http` routes end to end: real TLS and real HTTP clients (hyper) through edgewarm to an
//! HTTP/2 origin on 127.0.0.1, which counts the connections it accepts.

use edgewarm_test_support as common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;

fn fixture() -> Pki {
    pki("http")
}

const OPENED: &str = "edgewarm_pool_opened_total";

/// Runs a command to completion off the runtime; returns (success, stdout, stderr).
async fn run(cmd: &str, args: Vec<String>) -> (bool, String, String) {
    let cmd = cmd.to_string();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&cmd).args(&args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

async fn wait_for_zero(edge: &Edge, name: &str, labels: &[(&str, &str)]) {
    wait_for_at_most(edge, name, labels, 0.0).await;
}

/// Wait (bounded: 10 s) until a gauge is down to `most`.
async fn wait_for_at_most(edge: &Edge, name: &str, labels: &[(&str, &str)], most: f64) {
    for _ in 0..2000 {
        if edge.metric(name, labels) <= most {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}{labels:?} stayed at {}", edge.metric(name, labels));
}

/// An HTTP/1.1 response head, read byte by byte (what follows it is the upgraded stream's),
/// lower-cased.
async fn response_head(tls: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// A WebSocket upgrade for `/chat` on b.test, sent on an HTTP/1.1 connection (`extra`: more
/// header lines, each ending in CRLF); its response head, lower-cased.
async fn websocket_upgrade(
    tls: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    extra: &str,
) -> String {
    use tokio::io::AsyncWriteExt;
    let request = format!(
        "GET /chat HTTP/1.1\r\nhost: b.test\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n{extra}\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    response_head(tls).await
}

/// Text, a WebSocket-framed message and 100 KB, each echoed back intact.
async fn echo_round_trips(tls: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin)) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for message in [&b"hello"[..], &[0x81, 0x05, b'w', b'o', b'r', b'l', b'd'], &vec![7u8; 100_000]] {
        tls.write_all(message).await.unwrap();
        let mut back = vec![0u8; message.len()];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(back, message);
    }
}

mod access_log;
mod bypass;
mod cache;
mod cache_disk;
mod certificates;
mod cleartext;
mod clients;
mod connect_failures;
mod grpc;
mod h1_origins;
mod h3;
mod h3_aioquic;
mod h3_origin;
mod headers;
mod hints;
mod poisoning;
mod requests;
mod site;
mod standing;
mod upgrades;
