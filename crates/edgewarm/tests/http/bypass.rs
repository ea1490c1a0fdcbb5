//! The classic path bypasses against a route with rules (issue 59, "one path, normalized
//! once"): `/public/` goes to upstream `pub`, `/admin/` is answered 403 by a rule, the rest
//! goes to the default upstream. Each bypass, sent as is over HTTP/1.1 (raw bytes on TLS),
//! HTTP/2 (hyper's client, which sends `:path` as given) and HTTP/3 (aioquic, `:path` as raw
//! bytes), is answered as a careful origin would: the admin rule's 403, or 400. Neither origin
//! ever receives a path in the admin area, and `pub` nothing outside `/public/`.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::access_log::{capture, request_lines_where};
use super::*;

/// What a request must come to.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Normalized into the admin area: the admin rule's own 403.
    Admin,
    /// Refused by the edge's path check: 400, counted as `bad_request`, and logged with this
    /// text of the reason (`PathError`'s).
    Refused(&'static str),
    /// Not a request target the protocol's own parser takes (`http::Uri` needs a leading `/`
    /// and no NUL): refused before any route reads it: 400 over HTTP/1.1, the stream reset with
    /// H3_MESSAGE_ERROR over HTTP/3, not sendable with the h2 crate.
    Unparsable,
    /// Outside the admin area: the default origin gets exactly this path.
    Default(&'static str),
    /// In `/public/`: `pub` gets exactly this path.
    Public(&'static str),
}

/// The bypasses, and two controls that show each upstream is reached.
const CASES: &[(&[u8], Want)] = &[
    (b"/public/a/../ok", Want::Public("/public/ok")),
    (b"/admin/", Want::Admin),
    (b"/public/../admin", Want::Admin),
    (b"/public/%2e%2e/admin", Want::Admin),
    (b"/public/..%2fadmin", Want::Refused("an encoded slash")),
    (b"/public%2f..%2fadmin", Want::Refused("an encoded slash")),
    (b"//admin", Want::Admin),
    (b"/./admin", Want::Admin),
    // A parameter on a named segment is kept (route/path.rs, the documented choice: nginx,
    // Apache and Envoy read `/admin;x` as another path than `/admin`): it is not the /admin/
    // rule's, and the default origin gets exactly `/admin;x`, never `/admin`.
    (b"/admin;x", Want::Default("/admin;x")),
    (b"/public/..;/admin", Want::Refused("a dot segment with path parameters")),
    (b"/%61dmin", Want::Admin),
    (b"\\admin", Want::Unparsable),
    (b"/public/\\..\\admin", Want::Refused("a backslash")),
    (b"/public/%00/../admin", Want::Refused("a NUL")),
    (b"/public/\0/../admin", Want::Unparsable),
    (b"/public/%c0%ae%c0%ae/admin", Want::Refused("an overlong UTF-8 encoding")),
    (b"/%2e%2e/admin", Want::Refused("the path climbs above the root")),
    (b"/public/..%5cadmin", Want::Refused("a backslash")),
    (b"/public/%2e%2e;/admin", Want::Refused("a dot segment with path parameters")),
    // Decoded once only: `%25` stays `%25`, so the segment is a name, and `pub` gets it as
    // sent (an origin decoding once reads the name `%2e%2e`, not a climb).
    (b"/public/%252e%252e/admin", Want::Public("/public/%252e%252e/admin")),
];

/// One answer: its status (0 where the stream was reset), body and reset code.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
    reset: Option<u64>,
}

/// The header lines of a WebSocket upgrade.
const UPGRADE: &str = "connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                       sec-websocket-version: 13\r\n";

const BAD: [(&str, &str); 2] = [("route", "b.test"), ("reason", "bad_request")];
/// How an HTTP/1.1 connection whose request hyper could not parse is counted as it closes.
const UNPARSED: [(&str, &str); 2] = [("route", "b.test"), ("reason", "client_reset")];

/// The route: default upstream `site`, `/public/` to `pub`, `/admin/` answered here.
fn config(fx: &Pki, site: SocketAddr, public: SocketAddr) -> (String, String) {
    let p = fx.path.display();
    let route = format!(
        "  - sni: b.test\n    action: http\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    \
         upstream: site\n    rules:\n      \
         - {{prefix: /public/, upstream: pub}}\n      \
         - {{prefix: /admin/, respond: {{status: 403, body: \"admin rule\"}}}}\n"
    );
    let upstream = |a: SocketAddr| format!("{{origin: \"{a}\", protocol: http/1.1, tls: false, connections: 1}}");
    (route, format!("upstreams:\n  site: {}\n  pub: {}\n", upstream(site), upstream(public)))
}

/// The two recording origins and the edge in front of them (`listener`: its listener's keys),
/// its access log captured.
async fn setup(listener: &str) -> (Pki, Edge, Arc<OriginLog>, Arc<OriginLog>) {
    capture();
    let fx = fixture();
    let (site, site_log) = cache_origin().await;
    let (public, pub_log) = cache_origin().await;
    let (route, upstreams) = config(&fx, site, public);
    let edge = edge(&route, &upstreams, listener).await;
    (fx, edge, site_log, pub_log)
}

/// `answer` is what `want` says, over `proto`; `counted`: by how much `bad_request` rose.
async fn judge(proto: &str, target: &[u8], want: Want, answer: &Answer, counted: Option<f64>) {
    let what = format!("{proto} {}: {answer:?}", target.escape_ascii());
    match want {
        Want::Admin => assert_eq!((answer.status, answer.body.as_str()), (403, "admin rule"), "{what}"),
        Want::Refused(reason) => {
            assert_eq!((answer.status, answer.body.as_str()), (400, "bad request: path refused\n"), "{what}");
            if let Some(n) = counted {
                assert_eq!(n, 1.0, "one bad_request counted: {what}");
            }
            // The log line says why, as an operator reads it.
            let path = String::from_utf8_lossy(target).into_owned();
            let detail = format!("path refused: {reason}");
            let lines = request_lines_where("b.test", 1, |l| {
                l.get("path") == Some(&path) && l.get("version").is_some_and(|v| v.contains(proto))
            })
            .await;
            assert!(
                lines.iter().all(|l| l["status"] == "400" && l["detail"].starts_with(&detail)),
                "{what}: {lines:?}"
            );
        }
        Want::Unparsable if proto == "HTTP/3" => assert_eq!(answer.reset, Some(0x10e), "H3_MESSAGE_ERROR: {what}"),
        Want::Unparsable => assert_eq!(answer.status, 400, "refused before any route: {what}"),
        Want::Default(path) | Want::Public(path) => {
            assert_eq!(answer.status, 200, "{what}");
            assert!(answer.body.starts_with(&format!("{path} #")), "the origin got exactly {path}: {what}");
        }
    }
}

/// One request on its own HTTP/1.1 connection over TLS, the request line's bytes as given;
/// `extra`: more header lines, each ending in CRLF.
async fn h1(fx: &Pki, edge: &Edge, target: &[u8], host: &str, extra: &str) -> Answer {
    let (mut tls, alpn) = tls_client(&fx.edge, edge.addr, "b.test", &["http/1.1"]).await.unwrap();
    assert_eq!(alpn.as_deref(), Some("http/1.1"));
    let mut request = b"GET ".to_vec();
    request.extend_from_slice(target);
    request.extend_from_slice(format!(" HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n{extra}\r\n").as_bytes());
    tls.write_all(&request).await.unwrap();
    let mut raw = Vec::new();
    // A peer that closes without close_notify ends the read with an error: what came is kept.
    let _ = tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut raw)).await.expect("closed within 20 s");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // The edge's own answers are short: a chunked one is a single chunk.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split_once("\r\n").map_or("", |(_, rest)| rest).split("\r\n").next().unwrap_or("").to_string()
    } else {
        body.to_string()
    };
    Answer { status, body, reset: None }
}

/// Over HTTP/1.1 and HTTP/2 each case, the counter read around each request; then the
/// other-host targets (absolute-form, `:authority`): 400 or 421, never routed.
#[tokio::test]
async fn bypasses_reach_neither_origin_over_http1_and_http2() {
    let (fx, edge, site_log, pub_log) = setup("").await;

    // Plain, then as a WebSocket upgrade (hyper's other way in: the same rules must hold; the
    // origin is no WebSocket server, so what it answers comes back as it is).
    for extra in ["", UPGRADE] {
        for &(target, want) in CASES {
            let before = edge.metric("edgewarm_http_errors_total", &BAD);
            let broken = edge.metric("edgewarm_connections_closed_total", &UNPARSED);
            let answer = h1(&fx, &edge, target, "b.test", extra).await;
            let counted = edge.metric("edgewarm_http_errors_total", &BAD) - before;
            judge("HTTP/1.1", target, want, &answer, Some(counted)).await;
            if matches!(want, Want::Unparsable) {
                // hyper's own 400 never reaches a route: the connection's end counts it (and
                // its log line says why).
                wait_for(&edge, "edgewarm_connections_closed_total", &UNPARSED, broken + 1.0).await;
            }
        }
    }
    // Another host named in the target: refused, whatever the path: 400 where Host says
    // otherwise (which of the two is meant cannot be told), 421 where both name it (a name
    // this connection's route does not serve).
    let other: [(&[u8], &str, u16); 3] = [
        (b"http://evil.test/admin", "b.test", 400),
        (b"http://evil.test/public/../admin", "b.test", 400),
        (b"http://evil.test/admin", "evil.test", 421),
    ];
    for (target, host, status) in other {
        let answer = h1(&fx, &edge, target, host, "").await;
        assert_eq!(answer.status, status, "HTTP/1.1 {} host {host}: {answer:?}", target.escape_ascii());
    }

    let mut client = HttpClient::connect(&fx.edge, edge.addr, "b.test", true).await.unwrap();
    for &(target, want) in CASES {
        if matches!(want, Want::Unparsable) {
            // The h2 crate sends only an `http::Uri`'s path, which cannot be these bytes.
            continue;
        }
        let before = edge.metric("edgewarm_http_errors_total", &BAD);
        let path = std::str::from_utf8(target).unwrap();
        let (head, body) = client.send("GET", "b.test", path, &[], Vec::new()).await.unwrap();
        let answer = Answer { status: head.status.as_u16(), body: String::from_utf8(body).unwrap(), reset: None };
        let counted = edge.metric("edgewarm_http_errors_total", &BAD) - before;
        judge("HTTP/2", target, want, &answer, Some(counted)).await;
    }
    // `:authority` naming a host this connection's route does not serve: 421.
    let (head, _) = client.send("GET", "evil.test", "/admin", &[], Vec::new()).await.unwrap();
    assert_eq!(head.status, 421, "{head:?}");

    origins_kept_out(&site_log, &pub_log, 3);
    // The upgrades were sent on as upgrades (the relay's way, not a plain request's).
    let upgrades =
        |log: &OriginLog| log.seen.lock().unwrap().iter().filter(|(_, _, h)| h.contains_key("upgrade")).count();
    assert_eq!((upgrades(&site_log), upgrades(&pub_log)), (1, 2));
    edge.stop().await;
}

/// Neither origin got a path in the admin area (but `/admin;x`, exactly, at the default one),
/// nor anything but what [`CASES`] says, once per protocol (or way in): `pub` nothing outside
/// `/public/`.
fn origins_kept_out(site: &OriginLog, public: &OriginLog, rounds: usize) {
    let urls = |log: &OriginLog| log.seen.lock().unwrap().iter().map(|(_, url, _)| url.clone()).collect::<Vec<_>>();
    let (site, public) = (urls(site), urls(public));
    assert!(site.iter().all(|u| u == "/admin;x" || !u.starts_with("/admin")), "default origin: {site:?}");
    assert!(public.iter().all(|u| u.starts_with("/public/")), "pub: {public:?}");
    let wanted = |pick: fn(Want) -> Option<&'static str>| -> Vec<String> {
        let round = CASES.iter().filter_map(|&(_, w)| pick(w)).collect::<Vec<_>>();
        round.repeat(rounds).into_iter().map(String::from).collect()
    };
    assert_eq!(site, wanted(|w| if let Want::Default(p) = w { Some(p) } else { None }), "the default origin");
    assert_eq!(public, wanted(|w| if let Want::Public(p) = w { Some(p) } else { None }), "pub");
}

/// The same cases over HTTP/3 (aioquic sends each `:path` as raw bytes, a NUL too), and a
/// `host` header naming another host than `:authority`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "system-tests"), ignore = "system test (aioquic): scripts/test.sh runs it")]
async fn bypasses_reach_neither_origin_over_http3() {
    let (fx, edge, site_log, pub_log) = setup("http3: true").await;

    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut args = vec!["--hex-paths".to_string()];
    args.extend(CASES.iter().map(|(target, _)| format!("GET:{}", hex(target))));
    args.extend(["--header".into(), "host=evil.test".into(), format!("GET:{}", hex(b"/admin"))]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = h3_client(edge.addr, "b.test", &fx.path.join("edge/ca.pem"), &args).await;
    let responses = out["responses"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(responses.len(), CASES.len() + 1, "{out}");
    for (&(target, want), r) in CASES.iter().zip(responses) {
        let answer = Answer {
            status: r["status"].as_u64().unwrap() as u16,
            body: r["text"].as_str().unwrap_or_default().to_string(),
            reset: r["reset"].as_u64(),
        };
        judge("HTTP/3", target, want, &answer, None).await;
    }
    // A request whose `host` and `:authority` differ is malformed (RFC 9114 §4.3.1).
    let other = &responses[CASES.len()];
    assert_eq!(other["reset"], 0x10e, "host naming another host than :authority: {other}");

    // Every refused request counted once: the edge's path refusals, and the stream resets
    // (aioquic sends all on one connection, so there is no counter to read between them).
    let refused = CASES.iter().filter(|(_, w)| matches!(w, Want::Refused(_) | Want::Unparsable)).count() + 1;
    assert_eq!(edge.metric("edgewarm_http_errors_total", &BAD), refused as f64);
    origins_kept_out(&site_log, &pub_log, 1);
    edge.stop().await;
}
