//! HTTP/3 (`listeners[].http3`) with a real QUIC client (aioquic): the same request path, the
//! same standing origin connections, 0-RTT under RFC 8470's rules, `Alt-Svc` on the TCP side.

use super::*;

fn ca(fx: &Pki) -> std::path::PathBuf {
    fx.path.join("edge/ca.pem")
}

/// GET and POST over HTTP/3 reach the HTTP/2 origin on the standing connections (no origin
/// handshake per client), with the forwarding headers, and come back whole; the access log and
/// metrics count them like any other request.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn get_and_post_over_http3_ride_the_standing_connections() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", "http3: true").await;
    wait_for(&edge, OPENED, &[("route", "b.test")], 2.0).await;
    let size = 3 * 1024 * 1024 + 17;
    let out =
        h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/hello", &format!("POST:/sink:{size}"), "GET:/source/1048576"])
            .await;
    let r = &out["responses"];
    assert_eq!(r[0]["status"], 200, "{out}");
    assert_eq!(r[0]["length"], "hello /hello".len(), "{out}");
    assert_eq!(r[1]["status"], 200, "{out}");
    assert_eq!(r[1]["text"], pattern_sha256(size), "the origin hashed the upload: {out}");
    assert_eq!(r[2]["length"], 1_048_576, "{out}");
    assert_eq!(r[2]["sha256"], pattern_sha256(1_048_576), "{out}");
    // The origin saw our forwarding headers and the HTTP/3 hop.
    let seen = stats.seen.lock().unwrap().clone();
    let first = &seen[0];
    assert_eq!(first["x-forwarded-proto"], "https");
    assert_eq!(first["via"], "3 edgewarm");
    assert_eq!(first["x-forwarded-for"], "127.0.0.1");
    assert_eq!(stats.connections.load(Ordering::Relaxed), 2, "no origin connection per HTTP/3 client");
    assert_eq!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]), 1.0);
    edge.stop().await;
}

/// A request body the edge does not need (declared over `max_request_body`: a 413 before any of
/// it is read) has its sending stopped (STOP_SENDING), so the client does not upload the rest;
/// nothing of it reaches the origin, and the connection goes on. The code is H3_NO_ERROR, as
/// RFC 9114 §4.1.2 asks (quinn alone would stop it with 0: transport/quic_conn.rs's `Recv`
/// stops it first).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_body_the_edge_refuses_is_stopped() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    max_request_body: 64KiB\n"), "", "http3: true").await;
    // More than the stream's flow-control window: the client cannot finish before the edge
    // either reads or stops it.
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["POST:/sink:16777216", "GET:/after"]).await;
    let r = &out["responses"];
    assert_eq!(r[0]["status"], 413, "{out}");
    assert_eq!(r[0]["stop_sending"], 0x100, "STOP_SENDING with H3_NO_ERROR: {out}");
    assert_eq!(r[1]["status"], 200, "{out}");
    assert_eq!(stats.seen.lock().unwrap().len(), 1, "only the GET reached the origin");
    edge.stop().await;
}

/// The edge's QPACK dynamic table has a capacity of 0: on the client's encoder stream, setting
/// that capacity to 0 is allowed and the connection goes on; asking for a larger one (or
/// inserting) closes the connection with QPACK_ENCODER_STREAM_ERROR (RFC 9204 §4.3.1).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn the_encoder_stream_may_only_keep_the_table_empty() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--encoder", "20", "GET:/after"]).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    // Set Dynamic Table Capacity 4096: 001 11111, then 4065 as a prefixed integer.
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--encoder", "3fe11f", "--hold", "10"]).await;
    assert_eq!(out["closed"]["error_code"], 0x201, "QPACK_ENCODER_STREAM_ERROR: {out}");
    edge.stop().await;
}

/// A malformed request (here a connection-specific field, which HTTP/3 forbids: RFC 9114
/// §4.2) is refused on its stream with H3_MESSAGE_ERROR both ways, counted as the client's bad
/// request, and never reaches the origin; the next client is served as ever.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_malformed_request_is_refused_on_its_stream() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--header", "transfer-encoding=chunked", "GET:/bad"]).await;
    let r = &out["responses"][0];
    assert_eq!((&r["reset"], &r["stop_sending"]), (&0x10e.into(), &0x10e.into()), "H3_MESSAGE_ERROR: {out}");
    let bad = [("route", "b.test"), ("reason", "bad_request"), ("fault", "client")];
    assert_eq!(edge.metric("edgewarm_http_errors_total", &bad), 1.0);
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/good"]).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!(stats.seen.lock().unwrap().len(), 1, "only the good request reached the origin");
    edge.stop().await;
}

/// A name whose route is not `http` (here a tunnel) is refused in the QUIC handshake, and so is
/// a name with no route: edgewarm is never an open proxy, over UDP either.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn names_without_an_http_route_are_refused_over_quic() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let routes = format!("{}  - {{sni: a.test, action: tunnel, origin: \"{origin}\"}}\n", fx.route(origin, ""));
    let edge = edge(&routes, "", "http3: true").await;
    for sni in ["a.test", "nobody.test"] {
        let out = h3_client_result(edge.addr, sni, &ca(&fx), &["GET:/"]).await;
        assert!(out.is_err(), "{sni}: {out:?}");
    }
    assert_eq!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "failed")]), 2.0);
    edge.stop().await;
}

/// `Alt-Svc` tells HTTP/1.1 and HTTP/2 clients of a listener with `http3` where HTTP/3 is (the
/// same port, a day by default); a listener without it says nothing, and an origin's own
/// `Alt-Svc` never passes (it names the origin, not the edge).
#[tokio::test]
async fn alt_svc_is_the_listener_s_not_the_origin_s() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let with = edge(&fx.route(origin, ""), "", "http3: true\n    alt_svc_max_age: 1h").await;
    let without = edge(&fx.route(origin, ""), "", "").await;
    for h2 in [true, false] {
        let mut c = HttpClient::connect(&fx.edge, with.addr, "b.test", h2).await.unwrap();
        let (head, _) = c.send("GET", "b.test", "/alt-svc", &[], vec![]).await.unwrap();
        let port = with.addr.port();
        assert_eq!(head.headers["alt-svc"], format!("h3=\":{port}\"; ma=3600").as_str(), "h2: {h2}");
        let mut c = HttpClient::connect(&fx.edge, without.addr, "b.test", h2).await.unwrap();
        let (head, _) = c.send("GET", "b.test", "/alt-svc", &[], vec![]).await.unwrap();
        assert!(!head.headers.contains_key("alt-svc"), "h2: {h2}: {:?}", head.headers);
    }
    with.stop().await;
    without.stop().await;
}

/// Over HTTP/3 the client is already where `Alt-Svc` points: the listener's goes out on a
/// connection's first response, which renews the client's record of it, and not on every one
/// after (QPACK would code it afresh each time).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn alt_svc_goes_out_once_a_connection_over_http3() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true\n    alt_svc_max_age: 1h").await;
    let port = edge.addr.port();
    for _ in 0..2 {
        let out = h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/a", "GET:/b", "GET:/c"]).await;
        let r = &out["responses"];
        assert_eq!(r[0]["headers"]["alt-svc"], format!("h3=\":{port}\"; ma=3600").as_str(), "{out}");
        for later in [&r[1], &r[2]] {
            assert_eq!(later["status"], 200, "{out}");
            assert!(later["headers"].get("alt-svc").is_none(), "{out}");
        }
    }
    edge.stop().await;
}

/// A fresh ticket from a full handshake on a route with `early_data: safe`: its file.
async fn ticket(edge: &Edge, fx: &Pki, dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(name).display().to_string();
    let out = h3_client(edge.addr, "b.test", &ca(fx), &["--ticket-out", &path, "GET:/first"]).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!(out["resumed"], false, "{out}");
    path
}

/// QUIC 0-RTT under RFC 8470, as over TCP: a resumed client's GET sent in 0-RTT data is
/// forwarded before the handshake completes, marked `Early-Data: 1`; a POST sent in 0-RTT data
/// reaches the origin only after it, unmarked. Each is counted as 0-RTT accepted. (Whether the edge reads the GET before the
/// client's Finished arrives is a race on loopback: up to eight resumptions, one must.)
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn zero_rtt_gets_are_forwarded_early_and_posts_wait() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    early_data: safe\n"), "", "http3: true").await;
    let dir = tempfile::tempdir().unwrap();
    let early = || stats.seen.lock().unwrap().iter().filter(|h| h.get("early-data").is_some_and(|v| v == "1")).count();
    let metric = |outcome| edge.metric("edgewarm_tls_early_requests_total", &[("outcome", outcome)]);
    let zero_rtt = |result| edge.metric("edgewarm_quic_zero_rtt_total", &[("result", result)]);
    let mut resumed = 0.0;
    for i in 0..8 {
        let t = ticket(&edge, &fx, dir.path(), &format!("get{i}")).await;
        let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--ticket-in", &t, "--early", "GET:/zero"]).await;
        assert_eq!((out["resumed"].clone(), out["early_accepted"].clone()), (true.into(), true.into()), "{out}");
        assert_eq!(out["responses"][0]["status"], 200, "{out}");
        let t = ticket(&edge, &fx, dir.path(), &format!("post{i}")).await;
        let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--ticket-in", &t, "--early", "POST:/echo:100"]).await;
        assert_eq!(out["early_accepted"], true, "{out}");
        assert_eq!(out["responses"][0]["length"], 100, "{out}");
        // The edge counts each 0-RTT it read, as each client saw it accepted.
        resumed += 2.0;
        assert_eq!((zero_rtt("accepted"), zero_rtt("rejected")), (resumed, 0.0));
        // Only what was forwarded early is marked: never a POST.
        assert_eq!(early() as f64, metric("forwarded"));
        if metric("forwarded") >= 1.0 && metric("held") >= 1.0 {
            break;
        }
    }
    assert!(metric("forwarded") >= 1.0, "no 0-RTT GET was forwarded before the handshake completed in eight tries");
    assert!(metric("held") >= 1.0, "no 0-RTT POST was read (and held) before the handshake completed in eight tries");
    // Every resumption was counted: two per try, each on a ticket of its own.
    assert!(edge.metric("edgewarm_quic_resumed_total", &[]) >= 2.0);
    edge.stop().await;
}

/// A captured first flight (Initial and 0-RTT packets with a GET) sent twice: the first copy
/// resumes the session and its GET is forwarded (a safe request: that is RFC 8470's bargain);
/// the second finds its ticket used up, so its early data is never read and nothing more
/// reaches the origin. The replay is counted, and the two copies' 0-RTT as accepted, rejected. (While the first copy's connection lives, quinn
/// takes the second for a duplicate of its Initial and drops it: the idle timeout is short so
/// the second copy meets the ticket store.)
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_replayed_zero_rtt_flight_forwards_nothing_more() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    early_data: safe\n"), "timeouts: {idle: 1s}", "http3: true").await;
    let dir = tempfile::tempdir().unwrap();
    let t = ticket(&edge, &fx, dir.path(), "t").await;
    let flight = dir.path().join("flight").display().to_string();
    let out =
        h3_client(edge.addr, "b.test", &ca(&fx), &["--ticket-in", &t, "--capture", &flight, "GET:/replayed"]).await;
    assert!(out["captured"].as_u64().unwrap() >= 1, "{out}");
    let replayed = || stats.seen.lock().unwrap().iter().filter(|h| h.get("early-data").is_some()).count();
    let first = h3_client(edge.addr, "b.test", &ca(&fx), &["--replay", &flight]).await;
    assert!(first["answers"].as_u64().unwrap() >= 1, "the first copy is answered: {first}");
    wait_until(|| replayed() == 1).await;
    let zero_rtt = |result| edge.metric("edgewarm_quic_zero_rtt_total", &[("result", result)]);
    assert_eq!((zero_rtt("accepted"), zero_rtt("rejected")), (1.0, 0.0));
    // The first copy's connection times out (its handshake never completes).
    wait_for(&edge, "edgewarm_quic_handshakes_total", &[("result", "failed")], 1.0).await;
    let second = h3_client(edge.addr, "b.test", &ca(&fx), &["--replay", &flight]).await;
    assert!(second["answers"].as_u64().unwrap() >= 1, "the second copy gets a full handshake: {second}");
    wait_for(&edge, "edgewarm_tls_ticket_replays_total", &[("route", "<h3>")], 1.0).await;
    // Give a wrongly accepted copy the time to reach the origin.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(replayed(), 1, "the replayed copy's GET reached the origin");
    assert_eq!((zero_rtt("accepted"), zero_rtt("rejected")), (1.0, 1.0), "the second copy's 0-RTT is counted rejected");
    edge.stop().await;
}

/// A client whose port changes mid-connection (NAT rebinding; quinn's `rebind` moves it to a new
/// socket) keeps its connection, on an edge with four workers: whichever socket of the group the
/// kernel's hash of the new port would pick, the packets are steered by connection ID to the
/// endpoint that holds the connection. Eight moves: without steering, all would reach the right
/// socket by chance once in 4^7. The connection's path statistics are counted under its route.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_whose_port_changes_keeps_its_connection() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "workers: 4\n", "http3: true").await;
    let endpoint = common::h3_endpoint(&fx.edge.ca_der, quinn::TransportConfig::default());
    let conn = endpoint.connect(edge.addr, "b.test").unwrap().await.unwrap();
    let (mut driver, mut send) = ::h3::client::new(h3_quinn::Connection::new(conn.clone())).await.unwrap();
    let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    for moved in 0..8 {
        if moved > 0 {
            endpoint.rebind(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
        }
        let get = async {
            let req = http::Request::get("https://b.test/moved").body(()).unwrap();
            let mut stream = send.send_request(req).await.unwrap();
            // The edge may answer and stop reading first (RFC 9114 §4.1.2).
            let _ = stream.finish().await;
            let response = stream.recv_response().await.unwrap();
            while stream.recv_data().await.unwrap().is_some() {}
            response.status()
        };
        let status = tokio::time::timeout(Duration::from_secs(10), get)
            .await
            .unwrap_or_else(|_| panic!("no answer once the client's port had changed {moved} times"));
        assert_eq!(status, 200);
    }
    assert_eq!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]), 1.0, "one connection throughout");
    conn.close(0u32.into(), b"");
    drive.abort();
    // What the connection's path measured is counted under its route as it ends.
    wait_for(&edge, "edgewarm_quic_rtt_seconds_count", &[("route", "b.test")], 1.0).await;
    assert!(edge.metric("edgewarm_quic_sent_packets_total", &[("route", "b.test")]) >= 8.0);
    edge.stop().await;
}

/// Bounded wait (5 s) for a condition the edge reaches asynchronously.
async fn wait_until(cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition never reached");
}

/// Datagrams that cannot be QUIC are dropped and counted by why, and the listener goes on
/// serving.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn garbage_datagrams_are_counted_and_cost_nothing() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--garbage"]).await;
    assert_eq!(out["answers"], 0, "garbage is never answered: {out}");
    for reason in ["truncated", "malformed", "small_initial"] {
        wait_for(&edge, "edgewarm_quic_dropped_datagrams_total", &[("reason", reason)], 1.0).await;
    }
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/after"]).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    edge.stop().await;
}

/// A flood of Initial packets (handshakes that never complete, bounded: 48 from one socket to
/// 127.0.0.1) piles up handshakes; past the threshold new clients are sent a Retry, and a real
/// client (which answers the Retry) is still served.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn an_initial_flood_triggers_retry_and_clients_are_still_served() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    // The flood's handshakes never complete: the stop at the end would wait the default grace
    // (30 s) for them. Shutdown is not what this test checks.
    let edge = edge(&fx.route(origin, ""), "timeouts: {shutdown_grace: 1s}", "http3: true").await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--flood", "48"]).await;
    assert!(out["retries"].as_u64().unwrap() >= 1, "{out}");
    assert!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "retry")]) >= 1.0);
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/still-here"]).await;
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    edge.stop().await;
}

/// Big bodies over HTTP/3, hashed at both ends: a gibibyte down and 256 MiB up through the edge
/// (flow control both ways, nothing buffered whole); then 200 clients at once, every request
/// answered.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_gibibyte_down_256_mib_up_and_200_clients_over_http3() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    // The origin answers the upload once it has read all of it, and aioquic sends 256 MiB at a
    // few MB/s on the 2-core machine: the default origin_response (60 s) would time it out.
    let edge = edge(&fx.route(origin, ""), "timeouts:\n  origin_response: 600s\n", "http3: true").await;
    let (down, up) = (1u64 << 30, 256u64 << 20);
    let out =
        h3_client(edge.addr, "b.test", &ca(&fx), &[&format!("GET:/source/{down}"), &format!("POST:/sink:{up}")]).await;
    let r = &out["responses"];
    assert_eq!(r[0]["length"], down, "{out}");
    assert_eq!(r[0]["sha256"], pattern_sha256(down), "the gibibyte arrived intact");
    assert_eq!(r[1]["text"], pattern_sha256(up), "the origin hashed the 256 MiB upload: {out}");
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["--clients", "200", "GET:/many"]).await;
    let clients = out["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 200);
    let failed: Vec<_> = clients.iter().filter(|c| c["responses"][0]["status"] != 200).collect();
    assert!(failed.is_empty(), "{} of 200 failed: {:?}", failed.len(), failed.first());
    edge.stop().await;
}

/// Headless Chromium loads a page and its four sub-resources over HTTP/3 through the edge, and
/// says so itself: every entry's `nextHopProtocol` (Navigation and Resource Timing) is `h3`.
/// Chromium is pointed at the edge with `--origin-to-force-quic-on` and trusts its certificate
/// by the SHA-256 of its public key; nothing leaves 127.0.0.1.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (Chromium): scripts/test.sh runs it")]
async fn chromium_loads_a_page_over_http3() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, "    upstream: {connections: 2}\n"), "", "http3: true").await;
    let cert = fx.path.join("edge/cert.pem");
    let spki = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64",
            cert.display()
        ))
        .output()
        .unwrap();
    let spki = String::from_utf8(spki.stdout).unwrap().trim().to_string();
    let profile = tempfile::tempdir().unwrap();
    let port = edge.addr.port();
    let mut chromium = tokio::process::Command::new("chromium");
    chromium
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--no-first-run", "--virtual-time-budget=10000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--origin-to-force-quic-on=b.test:{port}"))
        .arg("--host-resolver-rules=MAP b.test 127.0.0.1")
        .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
        .args(["--dump-dom", &format!("https://b.test:{port}/page")])
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), chromium.output())
        .await
        .expect("Chromium ran over 60 s")
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let protocols = dom
        .split("data-protocols=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no protocols in the page: {dom}\n{}", String::from_utf8_lossy(&out.stderr)));
    let entries: Vec<&str> = protocols.split_whitespace().collect();
    assert_eq!(entries.len(), 5, "the page and four sub-resources: {protocols}");
    assert!(entries.iter().all(|e| e.ends_with("=h3")), "{protocols}");
    assert_eq!(stats.connections.load(Ordering::Relaxed), 2, "no origin connection for the browser");
    assert!(edge.metric("edgewarm_quic_handshakes_total", &[("result", "ok")]) >= 1.0);
    edge.stop().await;
}

/// An HTTP/3 client between requests is asked to finish, as HTTP/2 clients are: by a reload
/// that retires its route's origin connections, and by a shutdown. Either way the edge sends
/// GOAWAY and closes the idle connection at once with H3_NO_ERROR (0x100), long before the
/// client's own patience (20 s here) runs out.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn reloads_and_shutdowns_close_http3_clients_gracefully() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let (other, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let held = |edge: &Edge| {
        let (addr, ca) = (edge.addr, ca(&fx));
        tokio::spawn(async move { h3_client(addr, "b.test", &ca, &["--hold", "20", "GET:/before"]).await })
    };
    // A reload that moves the route to another origin retires the standing connections.
    let client = held(&edge);
    wait_for(&edge, "edgewarm_quic_handshakes_total", &[("result", "ok")], 1.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let yaml = format!(
        "listeners:\n  - listen: 127.0.0.1:0\n    http3: true\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}",
        fx.route(other, "")
    );
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    let out = client.await.unwrap();
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!(out["closed"]["error_code"], 0x100, "closed by the edge with H3_NO_ERROR: {out}");
    // A shutdown.
    let client = held(&edge);
    wait_for(&edge, "edgewarm_quic_handshakes_total", &[("result", "ok")], 2.0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    edge.server.shutdown();
    let out = client.await.unwrap();
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!(out["closed"]["error_code"], 0x100, "{out}");
    assert!(out["closed"]["after_s"].as_f64().unwrap() < 10.0, "{out}");
    edge.stop().await;
}

/// GOAWAY tells the client which of its requests were processed (RFC 9114 §5.2): every one on
/// a stream below its ID was answered, and every one at or above it was refused unprocessed
/// (H3_REQUEST_REJECTED), so the client may send those, and only those, again on a new
/// connection. A request in flight when the edge stops must be on the answered side: were it
/// announced as unprocessed, a browser could send a POST again elsewhere that the origin has
/// already taken. So too when the client then sends a GOAWAY of its own (h3, left to answer
/// it, would announce the last request answered as unprocessed).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn goaway_counts_the_requests_in_flight_as_processed() {
    let fx = fixture();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (origin, stats) = h2_origin(&fx.origin, H2Opts { gate: Some(gate.clone()), ..H2Opts::default() }).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let client = {
        let (addr, ca) = (edge.addr, ca(&fx));
        tokio::spawn(async move {
            h3_client(addr, "b.test", &ca, &["--send-goaway", "--hold", "20", "POST:/gate:100"]).await
        })
    };
    // The POST is held at the origin until the edge has been told to stop.
    while stats.requests.load(Ordering::Relaxed) == 0 {
        assert!(!client.is_finished(), "the client ended before its POST reached the origin");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    edge.server.shutdown();
    gate.notify_one();
    let out = client.await.unwrap();
    assert_eq!((&out["responses"][0]["stream"], &out["responses"][0]["status"]), (&0.into(), &200.into()), "{out}");
    // Every GOAWAY the edge sent says stream 0 was processed.
    assert_eq!(out["goaway"], serde_json::json!([4]), "{out}");
    assert_eq!(out["closed"]["error_code"], 0x100, "{out}");
    edge.stop().await;
}

/// A client that had asked nothing when the edge stopped gets GOAWAY 0, and a request it sends
/// after that is refused unprocessed, never answered.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn a_request_after_goaway_on_an_idle_connection_is_refused() {
    let fx = fixture();
    let (origin, stats) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let client = {
        let (addr, ca) = (edge.addr, ca(&fx));
        tokio::spawn(
            async move { h3_client(addr, "b.test", &ca, &["--after-goaway", "--hold", "20", "GET:/late"]).await },
        )
    };
    wait_for(&edge, "edgewarm_quic_handshakes_total", &[("result", "ok")], 1.0).await;
    edge.server.shutdown();
    let out = client.await.unwrap();
    assert_eq!(goaway(&out), 0, "{out}");
    assert_eq!(out["responses"][0]["stream"], 0, "{out}");
    assert_rejected(&out["responses"][0], &out);
    assert_eq!(stats.requests.load(Ordering::Relaxed), 0, "nothing reached the origin");
    assert_eq!(out["closed"]["error_code"], 0x100, "{out}");
    edge.stop().await;
}

/// The last GOAWAY's stream ID.
fn goaway(out: &serde_json::Value) -> u64 {
    let ids = out["goaway"].as_array().unwrap_or_else(|| panic!("{out}"));
    ids.last().and_then(|id| id.as_u64()).unwrap_or_else(|| panic!("no GOAWAY: {out}"))
}

/// Refused unprocessed: reset, and stopped, with H3_REQUEST_REJECTED.
fn assert_rejected(response: &serde_json::Value, out: &serde_json::Value) {
    assert_eq!(
        (&response["reset"], &response["stop_sending"]),
        (&0x10b.into(), &0x10b.into()),
        "H3_REQUEST_REJECTED both ways: {out}"
    );
}

/// The request metrics say which protocol each request came in over.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn request_metrics_carry_the_client_protocol() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "http3: true").await;
    let out = h3_client(edge.addr, "b.test", &ca(&fx), &["GET:/a", "GET:/b"]).await;
    assert_eq!(out["responses"][1]["status"], 200, "{out}");
    for h2 in [true, false] {
        let mut c = HttpClient::connect(&fx.edge, edge.addr, "b.test", h2).await.unwrap();
        c.send("GET", "b.test", "/c", &[], vec![]).await.unwrap();
    }
    let requests = |protocol| edge.metric("edgewarm_http_requests_total", &[("status", "2xx"), ("protocol", protocol)]);
    wait_for(&edge, "edgewarm_http_requests_total", &[("protocol", "h3")], 2.0).await;
    wait_for(&edge, "edgewarm_http_requests_total", &[("protocol", "http/1.1")], 1.0).await;
    assert_eq!((requests("h3"), requests("h2"), requests("http/1.1")), (2.0, 1.0, 1.0));
    edge.stop().await;
}
