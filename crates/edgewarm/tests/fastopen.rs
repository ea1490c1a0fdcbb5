//! Tests that need a network namespace of their own, each re-running one ignored inner test of
//! this file inside a fresh namespace (`unshare --net`) that disappears with the process, also
//! on failure:
//!
//! - TCP Fast Open on both sides: client → edgewarm listener, and edgewarm → origin with the
//!   replayed ClientHello riding in the SYN. TFO needs `net.ipv4.tcp_fastopen=3`, a
//!   per-namespace setting we may only change in a namespace we own.
//! - An unreachable origin: in a namespace with only `lo`, any non-local address fails at once
//!   with ENETUNREACH, and no packet can leave the machine.

use edgewarm_test_support as common;

use std::process::Command;
use std::time::Duration;

use common::*;
use edgewarm::config::OriginAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Run the ignored test `inner` of this binary in a fresh network namespace with `lo` up and
/// `net.ipv4.tcp_fastopen=3`.
fn in_private_namespace(inner: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c"])
        .arg("ip link set lo up && echo 3 > /proc/sys/net/ipv4/tcp_fastopen && exec \"$0\" --exact \"$1\" --ignored --nocapture")
        .arg(exe)
        .arg(inner)
        .output()
        .expect("unshare (util-linux) is installed");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "inner test {inner} failed (it needs root):\n{text}");
    assert!(text.contains("1 passed"), "inner test {inner} did not run:\n{text}");
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn fast_open_on_both_sides_in_a_private_namespace() {
    in_private_namespace("fast_open_inner");
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "system test (root, real clients or nginx): scripts/test.sh runs it"
)]
fn unreachable_origin_in_a_private_namespace() {
    in_private_namespace("unreachable_inner");
}

#[tokio::test]
#[ignore = "run by unreachable_origin_in_a_private_namespace inside its own network namespace"]
async fn unreachable_inner() {
    // 192.0.2.0/24 is TEST-NET-1; this namespace has no route to anything but loopback.
    let edge = edge("  - {sni: a.test, action: tunnel, origin: \"192.0.2.1:443\"}\n", "", "").await;
    let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(&client_hello("a.test")).await.unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(read_all(&mut s).await, [0x15, 3, 3, 0, 2, 2, 80], "internal_error alert");
    edge.settle().await;
    assert_eq!(
        edge.metric("edgewarm_connections_closed_total", &[("route", "a.test"), ("reason", "origin_unreachable")]),
        1.0
    );
    assert_eq!(edge.metric("edgewarm_origin_connect_errors_total", &[("reason", "origin_unreachable")]), 1.0);
    edge.stop().await;
}

/// TcpExt counters of this network namespace.
fn tcp_ext(name: &str) -> u64 {
    let netstat = std::fs::read_to_string("/proc/net/netstat").unwrap();
    let mut lines = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let i = names.split_whitespace().position(|n| n == name).unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

#[tokio::test]
#[ignore = "run by fast_open_on_both_sides_in_a_private_namespace inside its own network namespace"]
async fn fast_open_inner() {
    assert_eq!(edgewarm::transport::sockopt::fastopen_sysctl(), Some(3), "must run in a namespace with tcp_fastopen=3");
    // An origin listening with a TFO queue, answering "ok" after EOF.
    let std = edgewarm::transport::sockopt::bind_listener("127.0.0.1:0".parse().unwrap(), 16).unwrap();
    let listener = tokio::net::TcpListener::from_std(std).unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                let _ = s.write_all(format!("ok {}", got.len()).as_bytes()).await;
            });
        }
    });
    let routes = format!("  - {{sni: a.test, action: tunnel, origin: \"{origin}\", origin_tcp_fastopen: true}}\n");
    let edge = edge(&routes, "", "tcp_fastopen: 16").await;
    let hello = client_hello("a.test");
    let edge_addr = OriginAddr { host: "127.0.0.1".into(), port: edge.addr.port() };

    let (active0, passive0) = (tcp_ext("TCPFastOpenActive"), tcp_ext("TCPFastOpenPassive"));
    for round in 0..3 {
        // The client side of the test uses edgewarm's own TFO connect: SYN carries the hello.
        let (mut s, _) =
            edgewarm::transport::dial::connect(&Default::default(), &edge_addr, true, Duration::from_secs(5), &hello)
                .await
                .unwrap();
        s.shutdown().await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, format!("ok {}", hello.len()), "round {round}");
    }
    // Round 1 fetches cookies on both hops; rounds 2 and 3 put data in the SYN on both hops.
    let active = tcp_ext("TCPFastOpenActive") - active0;
    let passive = tcp_ext("TCPFastOpenPassive") - passive0;
    println!("TFO active {active}, passive {passive}");
    assert!(active >= 4, "SYNs with data sent: {active}");
    assert!(passive >= 4, "SYNs with data accepted: {passive}");
    edge.settle().await;
    edge.stop().await;
}
