//! The HTTP/3 origin kind (`upstream.protocol: h3`): an edge whose origin is another edgewarm's
//! `http3` listener (both ends of the long link ours), over real QUIC and TLS on 127.0.0.1.

use super::*;

/// The far edge: `http3` in front of the HTTP/2 test origin, tickets for 0-RTT on.
async fn far_edge(fx: &Pki, origin: SocketAddr) -> Edge {
    edge(&fx.route(origin, "    early_data: safe\n    upstream: {connections: 1}\n"), "", "http3: true").await
}

/// The near edge: `b.test` to the far edge over HTTP/3, verified against the edge CA.
fn near_route(fx: &Pki, far: SocketAddr, upstream: &str) -> String {
    let p = fx.path.display();
    format!(
        "  - sni: b.test\n    action: http\n    origin: \"{far}\"\n    cert: {p}/edge/cert.pem\n    \
         key: {p}/edge/key.pem\n    origin_tls: {{sni: b.test, ca: {p}/edge/ca.pem}}\n    \
         upstream: {{protocol: h3, connections: 2{upstream}}}\n"
    )
}

/// curl over HTTP/1.1 and HTTP/2, and a client's uploads and downloads, go through both edges:
/// the near one's standing QUIC connections (opened at load, two, and no more for any number
/// of requests) to the far one, then its standing HTTP/2 connection to the origin. `/origins`
/// shows the set as `h3` over `quic`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (curl): scripts/test.sh runs it")]
async fn requests_cross_an_h3_origin_to_a_far_edge() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let far = far_edge(&fx, origin).await;
    let near = edge(&near_route(&fx, far.addr, ""), "", "").await;
    wait_for(&near, OPENED, &[("route", "b.test"), ("alpn", "h3")], 2.0).await;
    let (port, ca) = (near.addr.port(), fx.path.join("edge/ca.pem").display().to_string());
    let resolve = format!("b.test:{port}:127.0.0.1");
    for (flag, status_line) in [("--http1.1", "HTTP/1.1 200"), ("--http2", "HTTP/2 200")] {
        let mut args: Vec<String> =
            ["-sS", "-i", flag, "--cacert", &ca, "--resolve", &resolve].iter().map(|s| s.to_string()).collect();
        args.push(format!("https://b.test:{port}/curl"));
        let (ok, out, err) = run("curl", args).await;
        assert!(ok, "curl {flag}: {err}");
        assert!(out.starts_with(status_line), "{flag}: {out}");
        assert!(out.ends_with("hello /curl"), "{flag}: {out}");
    }
    let mut client = HttpClient::connect(&fx.edge, near.addr, "b.test", true).await.unwrap();
    let size = 3 * 1024 * 1024 + 17;
    let (head, body) = client.send("POST", "b.test", "/sink", &[], pattern(0, size)).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(String::from_utf8(body).unwrap(), pattern_sha256(size as u64), "the origin hashed the whole upload");
    let (head, body) = client.send("GET", "b.test", "/source/1048576", &[], vec![]).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(body == pattern(0, 1_048_576), "{} bytes back", body.len());
    for i in 0..20 {
        let (head, _) = client.send("GET", "b.test", &format!("/n{i}"), &[], vec![]).await.unwrap();
        assert_eq!(head.status, 200);
    }
    // Both hops were counted; the far edge saw the near one's two QUIC connections, no more.
    assert_eq!(stats.requests.load(Ordering::Relaxed), 24);
    assert_eq!(far.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]), 2.0);
    let seen = stats.seen.lock().unwrap().last().cloned().unwrap();
    let via: Vec<_> = seen.get_all("via").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(via, ["2 edgewarm", "3 edgewarm"], "the near edge took it over HTTP/2, the far one over HTTP/3");
    let (_, json) = admin_get(near.admin, "/origins").await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let set = &v["origins"][0];
    assert_eq!((set["kind"].as_str(), set["transport"].as_str()), (Some("h3"), Some("quic")), "{json}");
    assert_eq!(set["connections"].as_array().map(Vec::len), Some(2), "{json}");
    near.stop().await;
    far.stop().await;
}

/// A connection replaced at `max_age` comes back with 0-RTT on the ticket the far edge gave
/// the first (its early data accepted, on both sides' counts), and requests go on across the
/// replacement.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (QUIC 0-RTT): scripts/test.sh runs it")]
async fn a_replaced_h3_origin_connection_resumes_with_0rtt() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let far = far_edge(&fx, origin).await;
    let near =
        edge(&near_route(&fx, far.addr, ", max_age: 1s").replace("connections: 2", "connections: 1"), "", "").await;
    let zero_rtt = |result| near.metric("edgewarm_upstream_zero_rtt_total", &[("result", result)]);
    // Bounded: max_age 1 s, checked once a second; 10 s at most.
    for _ in 0..1000 {
        if zero_rtt("accepted") >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(zero_rtt("accepted") >= 1.0, "no replacement resumed with 0-RTT");
    assert_eq!(zero_rtt("rejected"), 0.0);
    assert!(far.metric("edgewarm_quic_zero_rtt_total", &[("result", "accepted")]) >= 1.0);
    let mut client = HttpClient::connect(&fx.edge, near.addr, "b.test", true).await.unwrap();
    for i in 0..5 {
        let (head, body) = client.send("GET", "b.test", &format!("/r{i}"), &[], vec![]).await.unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(body, format!("hello /r{i}").into_bytes());
    }
    near.stop().await;
    far.stop().await;
}
