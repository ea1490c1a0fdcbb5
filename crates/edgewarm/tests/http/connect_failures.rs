//! Failed origin connects, whatever kind of origin: one family,
//! `edgewarm_origin_connect_failures_total{route, server, kind, reason}`.

use super::*;

/// A refused connect to an HTTP/1.1 origin and to an HTTP/2 one move the same family, told
/// apart by `kind` and `server`, as the admin listener's `/metrics` shows it; the deprecated
/// `upstream_connect_errors` still counts the HTTP/2 set's, as before.
#[tokio::test]
async fn refused_connects_to_http1_and_http2_origins_count_in_one_family() {
    let fx = fixture();
    // Bound and closed again: nothing listens, so every connect is refused.
    let closed = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h1, h2) = (closed(), closed());
    let routes = format!(
        "{}{}",
        fx.route(h1, "    upstream: {protocol: http/1.1, connections: 1}\n"),
        fx.route(h2, "    upstream: {connections: 1}\n").replace("sni: b.test", "sni: c.test"),
    );
    let edge = edge(&routes, "", "").await;
    let family = "edgewarm_origin_connect_failures_total";
    let (h1_server, h2_server) = (h1.to_string(), h2.to_string());
    let h1_labels = [("route", "b.test"), ("server", h1_server.as_str()), ("kind", "http/1.1"), ("reason", "refused")];
    let h2_labels = [("route", "c.test"), ("server", h2_server.as_str()), ("kind", "h2"), ("reason", "refused")];
    let alias =
        |text: &str| edgewarm::metrics::sample(text, "edgewarm_upstream_connect_errors_total", &[("route", "c.test")]);
    let counted = |text: &str, labels: &[(&str, &str)]| edgewarm::metrics::sample(text, family, labels).unwrap_or(0.0);
    // Until both kinds have failed, read between two counts of one attempt (the family and its
    // alias are two counters: a scrape can fall between them).
    let mut text = String::new();
    for _ in 0..2000 {
        text = admin_get(edge.admin, "/metrics").await.1;
        let h2_count = counted(&text, &h2_labels);
        if counted(&text, &h1_labels) >= 1.0 && h2_count >= 1.0 && alias(&text) == Some(h2_count) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let counted = |labels: &[(&str, &str)]| counted(&text, labels);
    assert!(counted(&h1_labels) >= 1.0, "HTTP/1.1 origin's refused connects:\n{text}");
    assert!(counted(&h2_labels) >= 1.0, "HTTP/2 origin's refused connects:\n{text}");
    // Nothing but refusals, and one query (the family, summed) sees both kinds.
    assert_eq!(counted(&[("reason", "refused")]), counted(&[]));
    assert_eq!(counted(&[]), counted(&h1_labels) + counted(&h2_labels));
    // The deprecated alias counts the HTTP/2 set's failures, the same attempts.
    let alias = alias(&text);
    assert_eq!(alias, Some(counted(&h2_labels)));
    // The origin-side families name the address `server`, and `origin` too for one release.
    let both = [("route", "c.test"), ("server", h2_server.as_str()), ("origin", h2_server.as_str())];
    assert_eq!(edgewarm::metrics::sample(&text, "edgewarm_upstream_connect_errors_total", &both), alias);
    assert!(text.contains("deprecated: use edgewarm_origin_connect_failures_total"), "{text}");
    edge.stop().await;
}
