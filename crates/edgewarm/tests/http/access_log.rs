//! The per-request access-log line (`edgewarm::access`, `"request"`) says what the route's
//! cache did (`cache`) and which server of its group answered (`server`), read by a tracing
//! layer installed in this test binary, as an operator's log collector would read them.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use super::*;

/// One event's fields, rendered as the JSON log renders them (`-` for a value left out).
pub(super) type Line = HashMap<&'static str, String>;

/// Every `edgewarm::access` event since the layer was installed, from every test of this binary
/// (they run at once: a test keeps only its own routes' lines).
static LINES: Mutex<Vec<Line>> = Mutex::new(Vec::new());

/// Collects `edgewarm::access` events into [`LINES`].
struct Capture;

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(Line);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.insert(field.name(), format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0.insert(field.name(), value.to_string());
            }
        }
        let mut fields = Fields(Line::new());
        event.record(&mut fields);
        LINES.lock().unwrap().push(fields.0);
    }
}

/// The capture, installed process-wide once: connections are served on the edge's worker
/// threads, which a thread-local subscriber would not see. Only the access log is enabled, so
/// the other tests of this binary log nothing more than before.
pub(super) fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let only_access = tracing_subscriber::filter::filter_fn(|m| m.target() == "edgewarm::access");
        let subscriber = tracing_subscriber::registry().with(Capture.with_filter(only_access));
        tracing::subscriber::set_global_default(subscriber).expect("no other test installs a subscriber");
    });
}

/// The `"request"` lines of `route` once there are `n` of them (bounded: 10 s). A line is
/// written when its response body has ended at the edge, which may be just after the client
/// has read it.
async fn request_lines(route: &str, n: usize) -> Vec<Line> {
    request_lines_where(route, n, |_| true).await
}

/// [`request_lines`], of those lines only the ones `keep` takes.
pub(super) async fn request_lines_where(route: &str, n: usize, keep: impl Fn(&Line) -> bool) -> Vec<Line> {
    for _ in 0..2000 {
        let lines: Vec<Line> = LINES
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.get("message").is_some_and(|m| m == "request") && l.get("route").is_some_and(|r| r == route))
            .filter(|l| keep(l))
            .cloned()
            .collect();
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{route}: fewer than {n} request lines");
}

/// A route of two servers (the one test origin by two names) with a cache: the fill's line
/// names the cache's `miss` and the server that answered it, the stored answer's line says
/// `hit`. A route of one server and no cache says neither.
#[tokio::test]
async fn request_lines_say_what_the_cache_did_and_which_server_answered() {
    capture();
    let (cached, plain) = ("cached.access.test", "plain.access.test");
    let certs = certs(&[cached, plain]);
    let dir = tempfile::tempdir().unwrap();
    certs.write(dir.path());
    let (origin, log) = cache_origin().await;
    let port = origin.port();
    let servers = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    let route = |sni: &str, origin: &str, extra: &str| {
        let p = dir.path().display();
        format!(
            "  - sni: {sni}\n    action: http\n    {origin}\n    cert: {p}/cert.pem\n    key: {p}/key.pem\n    \
             upstream: {{protocol: http/1.1, tls: false, connections: 1}}\n{extra}"
        )
    };
    let group = format!("origins: [{{address: \"{}\"}}, {{address: \"{}\"}}]", servers[0], servers[1]);
    let routes = route(cached, &group, "    cache: {}\n") + &route(plain, &format!("origin: \"{origin}\""), "");
    let edge = edge(&routes, "", "").await;

    let path = "/logged?cc=max-age%3D60";
    for sni in [cached, cached, plain] {
        let mut client = HttpClient::connect(&certs, edge.addr, sni, true).await.unwrap();
        let (head, _) = client.send("GET", sni, path, &[], vec![]).await.unwrap();
        assert_eq!(head.status, 200, "{sni}");
    }
    assert_eq!(log.count(path), 2, "the cached route's origin asked once, the plain route's once");

    let lines = request_lines(cached, 2).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["cache"], "miss", "{lines:?}");
    assert!(servers.contains(&lines[0]["server"]), "the fill names a server of the group: {lines:?}");
    assert_eq!(lines[1]["cache"], "hit", "{lines:?}");
    assert_eq!(lines[1]["server"], "-", "no server answered a hit: {lines:?}");

    let lines = request_lines(plain, 1).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!((lines[0]["cache"].as_str(), lines[0]["server"].as_str()), ("-", "-"), "{lines:?}");
    edge.stop().await;
}
