//! The named upstreams (`upstreams:`, `routes[].upstream: NAME`): copied into the routes naming
//! them, and checked by key.

use super::*;

/// Two http routes naming the upstream `app`, and the block, for the named-upstream checks.
fn named(block: &str, route_extra: &str) -> String {
    format!(
        "
listeners:
  - listen: 127.0.0.1:8443
upstreams:
  app: {block}
routes:
  - sni: a.example.com
    action: http
    cert: c.pem
    key: k.pem
    upstream: app{route_extra}
  - sni: b.example.com
    action: http
    cert: c.pem
    key: k.pem
    upstream: app
"
    )
}

/// `upstreams:` blocks hold servers, their TLS and today's upstream keys side by side; a route
/// naming one gets them all, and keeps the name.
#[test]
fn a_named_upstream_is_copied_into_the_routes_naming_it() {
    let yaml = named(
        "{origins: [{address: 10.0.1.5:443}, {address: 10.0.1.6:443}], origin_tls: {sni: app.internal}, \
         balance: round_robin, connections: 3, health: {fails: 5}}",
        "",
    );
    let c = Config::parse(&yaml).unwrap();
    c.validate().unwrap();
    for r in &c.routes {
        let ActionConfig::Http(h) = &r.action else { panic!() };
        assert_eq!(h.upstream_name.as_deref(), Some("app"));
        assert_eq!(h.servers().len(), 2);
        assert_eq!(h.origin_tls.sni.as_deref(), Some("app.internal"));
        assert!(h.origin_tls_set);
        assert_eq!((h.upstream.connections, h.upstream.health.fails), (3, 5));
        assert_eq!(h.upstream.balance, crate::config::Balance::RoundRobin);
        assert!(h.upstream.origins.is_none() && h.upstream.origin_tls.is_none(), "the settings hold no servers");
    }
    // The cleartext block: no server name needed without TLS.
    let c = Config::parse(&named("{origin: 10.0.2.9:80, protocol: http/1.1, tls: false}", "")).unwrap();
    c.validate().unwrap();
    // Today's inline form is still the route's own.
    let c = Config::parse(
        &GOOD
            .replace("action: tunnel", "action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {connections: 2}"),
    )
    .unwrap();
    c.validate().unwrap();
    let ActionConfig::Http(h) = &c.routes[0].action else { panic!() };
    assert_eq!((h.upstream_name.as_deref(), h.upstream.connections), (None, 2));
}

#[test]
fn named_upstreams_are_checked_by_key() {
    let app = "{origin: app.internal:443, origin_tls: {sni: app.internal}}";
    let cases = [
        // Unknown keys in a block are refused by name, as everywhere.
        (
            named("{origin: app.internal:443, origin_tls: {sni: app.internal}, conections: 2}", ""),
            "upstreams.app.conections",
        ),
        (
            named(app, "").replace("upstream: app\n  - sni: b", "upstream: apps\n  - sni: b"),
            "routes[0].upstream: no upstream named \"apps\" (there are app)",
        ),
        (named(app, "\n    origin: o.internal:443"), "routes[0].origin: not beside upstream: NAME"),
        (named(app, "\n    origins: [{address: o.internal:443}]"), "routes[0].origins: not beside upstream: NAME"),
        (named(app, "\n    origin_tls: {sni: o}"), "routes[0].origin_tls: not beside upstream: NAME"),
        (named(app, "").replace("routes:", "  other: {origin: o.internal:80, tls: false}\nroutes:"), ""),
        (named("{origin_tls: {sni: app.internal}}", ""), "upstreams.app.origin: required"),
        (named("{origin: app.internal}", ""), "upstreams.app.origin: "),
        (named("{origin: app.internal:443}", ""), "upstreams.app.origin_tls.sni: required on an upstream over TLS"),
        (
            named("{origin: app.internal:443, tls: false, origin_tls: {sni: x}}", ""),
            "upstreams.app.tls: false means a cleartext origin",
        ),
        (
            named("{origin: app.internal:443, origin_tls: {sni: x}, connections: 0}", ""),
            "upstreams.app.max_connections: need 1 <= connections",
        ),
        (
            named("{origin: app.internal:443, origin_tls: {sni: x}, keepalive: 0s}", ""),
            "upstreams.app.keepalive: must be greater than zero",
        ),
        (
            named("{origins: [{address: a.internal:443}], origin_tls: {sni: x}, health: {fails: 0}}", ""),
            "upstreams.app.health.fails",
        ),
        (
            named("{origins: [{address: a.internal:443, weight: 0}], origin_tls: {sni: x}}", ""),
            "upstreams.app.origins[0].weight",
        ),
        (
            named("{origin: a.internal:443, origins: [{address: b.internal:443}], origin_tls: {sni: x}}", ""),
            "upstreams.app.origins: not beside origin",
        ),
        (
            named("{origin: a.internal:443, origin_tls: {sni: x, client_cert: c.pem}}", ""),
            "upstreams.app.origin_tls.client_key",
        ),
        (
            named(app, "").replace("  app:", "  \"a b\":").replace("upstream: app", "upstream: \"a b\""),
            "upstreams.a b: a name is",
        ),
        (
            named(app, "").replace("  app:", "  a.example.com:").replace("upstream: app", "upstream: a.example.com"),
            "upstreams.a.example.com: is the name of routes[0]",
        ),
        (named(app, "").replace("upstream: app", "upstream: 5"), "routes[0].upstream"),
        // A route's own map holds settings only.
        (
            GOOD.replace(
                "action: tunnel",
                "action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {origin: o.internal:443}",
            ),
            "routes[0].upstream.origin: only in a block of upstreams:",
        ),
        // The name goes with an http route only.
        (
            format!(
                "{}upstreams:\n  app: {app}\n",
                GOOD.replace("origin: origin-a.internal:443", "origin: origin-a.internal:443\n    upstream: app")
            ),
            "routes[0].upstream: only for action http",
        ),
    ];
    for (yaml, want) in cases {
        if want.is_empty() {
            // Two blocks, one unused.
            assert_eq!(err(&yaml), "upstreams.other: no route names it");
            continue;
        }
        let e = err(&yaml);
        assert!(e.starts_with(want), "want {want:?}, got {e:?}");
    }
    // An unused block, alone.
    let unused = format!("{GOOD}upstreams:\n  app: {app}\n");
    assert_eq!(err(&unused), "upstreams.app: no route names it");
    // A server naming itself stands for the block's name.
    Config::parse(&named("{origins: [{address: a.internal:443, sni: a.internal}]}", "")).unwrap().validate().unwrap();
}
