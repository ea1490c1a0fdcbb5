//! The checks of `validate.rs`, each on a config as an operator writes it.
use super::*;

const GOOD: &str = "
listeners:
  - listen: 127.0.0.1:8443
routes:
  - sni: a.example.com
    action: tunnel
    origin: origin-a.internal:443
  - sni: \"*\"
    action: reject
";

fn err(yaml: &str) -> String {
    match Config::parse(yaml).and_then(|c| c.validate()) {
        Ok(()) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn good_config_and_defaults() {
    let c = Config::parse(GOOD).unwrap();
    c.validate().unwrap();
    assert_eq!(c.admin.listen.to_string(), "127.0.0.1:9900");
    assert_eq!(c.timeouts.client_hello, Duration::from_secs(10));
    assert_eq!(c.listeners[0].tcp_fastopen, 256);
}

#[test]
fn misspelt_key_is_named_with_line() {
    let e = err(&GOOD.replace("origin: origin-a", "orign: origin-a"));
    assert!(e.contains("orign") && e.contains("line"), "{e}");
    let e = err(&format!("{GOOD}timeouts:\n  conect: 5s\n"));
    assert!(e.contains("conect"), "{e}");
}

/// A key an earlier version took is refused with what became of it.
#[test]
fn a_removed_key_says_so() {
    let e =
        err(&GOOD.replace("listen: 127.0.0.1:8443", "listen: 127.0.0.1:8443\n    http3: true\n    quic_driver: own"));
    assert!(e.starts_with("listeners[0].quic_driver: removed: ") && e.contains("one QUIC driver"), "{e}");
}

#[test]
fn semantic_errors_name_the_key() {
    assert!(err(&GOOD.replace("origin-a.internal:443", "origin-a.internal")).starts_with("routes[0].origin"));
    assert!(err(&GOOD.replace("a.example.com", "a..example.com")).starts_with("routes[0].sni"));
    assert!(err(&GOOD.replace("\"*\"", "A.example.com.")).starts_with("routes[1].sni"));
    assert!(err(&GOOD.replace("127.0.0.1:8443", "127.0.0.1:9900")).starts_with("listeners[0].listen"));
    assert!(err(&format!("{GOOD}admin:\n  listen: 0.0.0.0:9900\n")).starts_with("admin.listen"));
    let e = err(&format!("{GOOD}timeouts:\n  idle: 10\n"));
    assert!(e.contains("timeouts.idle") && e.contains("invalid duration"), "{e}");
    let e = err(&GOOD.replace("action: reject", "action: open"));
    assert!(e.contains("routes[1].action"), "{e}");
    assert!(err(&format!("{GOOD}workers: 0\n")).starts_with("workers: must be at least 1"));
    let e = err(&format!("{GOOD}workers: many\n"));
    assert!(e.contains("workers"), "{e}");
    let c = Config::parse(&format!("{GOOD}workers: 3\n")).unwrap();
    assert_eq!((c.validate().is_ok(), c.worker_count()), (true, 3));
    assert!(Config::parse(GOOD).unwrap().worker_count() >= 1, "one per core when unset");
}

#[test]
fn ktls_is_checked_per_action() {
    let terminating = |action: &str, extra: &str| {
        GOOD.replace(
            "action: tunnel",
            &format!("action: {action}\n    cert: c.pem\n    key: k.pem\n    origin_tls: {{sni: o}}\n{extra}"),
        )
    };
    let e = err(&terminating("http", "    ktls: on"));
    assert!(e.starts_with("routes[0].ktls: only for action prewarm"), "{e}");
    let e = err(&terminating("prewarm", "    ktls: on\n    ktls_after: 1MiB"));
    assert_eq!(e, "routes[0].ktls_after: only with ktls: auto");
    let e = err(&terminating("prewarm", "    ktls: auto\n    ktls_after: 0"));
    assert!(e.starts_with("routes[0].ktls_after: must be at least 1 byte"), "{e}");
    let e = err(&terminating("prewarm", "    ktls: on\n    early_data: opaque"));
    assert!(e.starts_with("routes[0].ktls: not with early_data"), "{e}");
    let e = err(&terminating("prewarm", "    ktls: always"));
    assert!(e.contains("ktls") && e.contains("unknown variant"), "{e}");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    ktls: on"));
    assert_eq!(e, "routes[0].ktls: only for actions prewarm and http");
    for ok in [
        terminating("prewarm", "    ktls: on"),
        terminating("prewarm", "    ktls: auto\n    ktls_after: 1MiB"),
        terminating("prewarm", "    ktls: off"),
    ] {
        let c = Config::parse(&ok).unwrap();
        c.validate().unwrap();
    }
}

#[test]
fn early_data_is_checked_per_action() {
    let terminating = |action: &str, extra: &str| {
        GOOD.replace(
            "action: tunnel",
            &format!("action: {action}\n    cert: c.pem\n    key: k.pem\n    origin_tls: {{sni: o}}\n{extra}"),
        )
    };
    let e = err(&terminating("prewarm", "    early_data: safe"));
    assert!(e.starts_with("routes[0].early_data: prewarm routes cannot see requests"), "{e}");
    let e = err(&terminating("http", "    early_data: opaque"));
    assert!(e.starts_with("routes[0].early_data: http routes"), "{e}");
    let e = err(&terminating("http", "    early_data: safe\n    max_early_data_size: 0"));
    assert!(e.starts_with("routes[0].max_early_data_size"), "{e}");
    let e = err(&terminating("http", "    early_data: always"));
    assert!(e.contains("early_data") && e.contains("unknown variant"), "{e}");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    early_data: opaque"));
    assert_eq!(e, "routes[0].early_data: only for actions prewarm and http");
    for ok in [
        terminating("http", "    early_data: safe\n    max_early_data_size: 32KiB"),
        terminating("prewarm", "    early_data: opaque"),
    ] {
        let c = Config::parse(&ok).unwrap();
        c.validate().unwrap();
    }
}

#[test]
fn keys_the_action_does_not_take_are_named() {
    let e = err(&GOOD.replace("origin: origin-a.internal:443", "origin: origin-a.internal:443\n    cert: c.pem"));
    assert_eq!(e, "routes[0].cert: only for actions prewarm and http");
    let e = err(&GOOD.replace("action: reject", "action: reject\n    min_tls: \"1.3\""));
    assert_eq!(e, "routes[1].min_tls: only for actions prewarm and http");
    let e = err(&GOOD.replace("action: reject", "action: reject\n    origin: x.internal:443"));
    assert_eq!(e, "routes[1].origin: action reject takes no origin");
    let e = err(&GOOD.replace("action: tunnel", "action: prewarm\n    origin_tcp_fastopen: true"));
    assert!(e.starts_with("routes[0].origin_tcp_fastopen: origin connections are made before"), "{e}");
    let e = err(&GOOD.replace("    origin: origin-a.internal:443\n", ""));
    assert_eq!(e, "routes[0].origin: required for actions tunnel, prewarm and http (or, on http, origins: a list)");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    upstream: {connections: 3}"));
    assert_eq!(e, "routes[0].upstream: only for action http");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    forward_headers: [via]"));
    assert_eq!(e, "routes[0].forward_headers: only for action http: other actions do not see requests");
}

#[test]
fn cache_sizes_are_named() {
    let http = "action: http\n    cert: c.pem\n    key: k.pem\n    cache:";
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{max_size: 1MiB, max_object_size: 2MiB}}")));
    assert!(e.starts_with("routes[0].cache.max_object_size: is larger than cache.max_size"), "{e}");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    cache: {}"));
    assert_eq!(e, "routes[0].cache: only for action http: other actions do not see requests");
}

#[test]
fn cache_disk_settings_are_named() {
    let http = "action: http\n    cert: c.pem\n    key: k.pem\n    cache:";
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{disk: {{path: cache, max_size: 1GiB}}}}")));
    assert_eq!(e, "routes[0].cache.disk.path: must be an absolute path");
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{disk: {{path: /var/cache/ew, max_size: 0}}}}")));
    assert_eq!(e, "routes[0].cache.disk.max_size: must be greater than zero");
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{disk: {{path: /var/cache/ew}}}}")));
    assert!(e.contains("max_size"), "{e}");
    // Two routes, one directory (spelt with and without a trailing slash).
    let two =
        GOOD.replace("action: tunnel", &format!("{http} {{disk: {{path: /var/cache/ew, max_size: 1GiB}}}}")).replace(
            "  - sni: \"*\"\n    action: reject",
            &format!(
            "  - sni: b.example.com\n    origin: o:80\n    {http} {{disk: {{path: /var/cache/ew/, max_size: 1GiB}}}}"
        ),
        );
    assert_eq!(err(&two), "routes[1].cache.disk.path: /var/cache/ew/ is another route's disk tier");
    let ok = GOOD.replace("action: tunnel", &format!("{http} {{disk: {{path: /var/cache/ew, max_size: 10GiB}}}}"));
    Config::parse(&ok).and_then(|c| c.validate()).unwrap();
}

#[test]
fn early_hints_settings_are_named() {
    let http = "action: http\n    cert: c.pem\n    key: k.pem\n    early_hints:";
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{max_link_bytes: 32KiB}}")));
    assert_eq!(e, "routes[0].early_hints.max_link_bytes: must be 1 byte to 16KiB");
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{max_size: 1KiB}}")));
    assert!(e.starts_with("routes[0].early_hints.max_link_bytes: is larger than early_hints.max_size"), "{e}");
    let e = err(&GOOD.replace("action: tunnel", &format!("{http} {{learn: yes please}}")));
    assert!(e.contains("early_hints.learn"), "{e}");
    let e = err(&GOOD.replace("action: tunnel", "action: tunnel\n    early_hints: {}"));
    assert_eq!(e, "routes[0].early_hints: only for action http: other actions do not see requests");
    let config = Config::parse(&GOOD.replace("action: tunnel", &format!("{http} {{}}"))).unwrap();
    let ActionConfig::Http(h) = &config.routes[0].action else { panic!("an http route") };
    assert_eq!(
        h.early_hints,
        Some(crate::config::EarlyHintsConfig::default()),
        "`{{}}` learns, passes the origin's on"
    );
}

#[test]
fn cleartext_upstream_refuses_origin_tls() {
    let http = "action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {tls: false}";
    let e = err(&GOOD.replace("action: tunnel", &format!("{http}\n    origin_tls: {{verify: true}}")));
    assert!(e.starts_with("routes[0].upstream.tls: false means a cleartext origin"), "{e}");
    // A catch-all cleartext route needs no origin name: there is no TLS to send one in.
    Config::parse(&GOOD.replace("action: reject", &format!("{http}\n    origin: o:80"))).unwrap().validate().unwrap();
}

/// HTTP/3 origins: QUIC is always encrypted, and runs its own congestion control (quinn's
/// three, whatever the kernel has).
#[test]
fn h3_upstream_is_encrypted_and_names_quic_congestion() {
    let h3 = |extra: &str| {
        GOOD.replace(
            "action: tunnel",
            &format!("action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {{protocol: h3{extra}}}"),
        )
    };
    assert!(err(&h3(", tls: false")).starts_with("routes[0].upstream.tls: false cannot go with protocol h3"));
    let e = err(&h3(", congestion: vegas"));
    assert!(e.starts_with("routes[0].upstream.congestion: \"vegas\" is not a QUIC congestion controller"), "{e}");
    for ok in ["", ", congestion: bbr", ", congestion: cubic", ", congestion: reno"] {
        Config::parse(&h3(ok)).unwrap().validate().unwrap();
    }
    let listener = GOOD.replace("listen: 127.0.0.1:8443", "listen: 127.0.0.1:8443\n    quic_congestion: vegas");
    assert!(err(&listener).starts_with("listeners[0].quic_congestion: \"vegas\" is not a QUIC"), "{}", err(&listener));
}

#[test]
fn upstream_durations_are_named_when_zero() {
    for key in ["keepalive", "max_age", "idle_timeout"] {
        let yaml = GOOD.replace(
            "action: tunnel",
            &format!("action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {{{key}: 0s}}"),
        );
        assert_eq!(err(&yaml), format!("routes[0].upstream.{key}: must be greater than zero"));
    }
    let cc = |name: &str| {
        GOOD.replace(
            "action: tunnel",
            &format!("action: http\n    cert: c.pem\n    key: k.pem\n    upstream: {{congestion: {name}}}"),
        )
    };
    assert!(err(&cc("no-such-algorithm")).starts_with("routes[0].upstream.congestion: \"no-such-algorithm\" is not"));
    assert!(Config::parse(&cc("reno")).and_then(|c| c.validate()).is_ok(), "reno is always built in");
}

#[test]
fn forward_headers_are_chosen_by_name() {
    let http = |list: &str| {
        GOOD.replace(
            "action: tunnel",
            &format!("action: http\n    cert: c.pem\n    key: k.pem\n    forward_headers: {list}"),
        )
    };
    let headers = |yaml: &str| match &Config::parse(yaml).unwrap().routes[0].action {
        ActionConfig::Http(h) => h.forward_headers,
        _ => unreachable!("an http route"),
    };
    let all = headers(&GOOD.replace("action: tunnel", "action: http\n    cert: c.pem\n    key: k.pem"));
    assert!(all.x_forwarded_for && all.x_forwarded_proto && all.forwarded && all.via, "all four by default");
    let none = headers(&http("[]"));
    assert!(!none.x_forwarded_for && !none.x_forwarded_proto && !none.forwarded && !none.via);
    let two = headers(&http("[x-forwarded-for, via]"));
    assert!(two.x_forwarded_for && two.via && !two.forwarded && !two.x_forwarded_proto);
    let e = err(&http("[x-real-ip]"));
    assert!(e.contains("routes[0].forward_headers") && e.contains("x-real-ip"), "{e}");
}

#[test]
fn origin_addresses() {
    assert_eq!(OriginAddr::parse("[::1]:443").unwrap().to_string(), "[::1]:443");
    assert_eq!(OriginAddr::parse("o.internal:8443").unwrap().port, 8443);
    for bad in ["::1:443", "o.internal:0", "o.internal:https", ":443", "o internal:443"] {
        assert!(OriginAddr::parse(bad).is_err(), "{bad}");
    }
}

/// `origins:` lists servers: exclusive with `origin`, every entry checked and named, and
/// `origin: X` still one server.
#[test]
fn origins_are_checked_entry_by_entry() {
    let http = |origins: &str| {
        GOOD.replace(
            "action: tunnel\n    origin: origin-a.internal:443",
            &format!("action: http\n    cert: c.pem\n    key: k.pem\n    {origins}"),
        )
    };
    let ok = http("origins: [{address: a.internal:443}, {address: b.internal:443, weight: 3}, {address: c.internal:443, backup: true, host: c.example, sni: c.internal}]");
    let c = Config::parse(&ok).unwrap();
    c.validate().unwrap();
    let ActionConfig::Http(h) = &c.routes[0].action else { panic!() };
    let servers = h.servers();
    assert_eq!((servers.len(), servers[1].weight, servers[2].backup), (3, 3, true));
    assert_eq!(h.upstream.balance, super::super::Balance::Latency);
    let single = Config::parse(&http("origin: a.internal:443")).unwrap();
    let ActionConfig::Http(h) = &single.routes[0].action else { panic!() };
    assert_eq!(h.servers(), vec![super::super::OriginServer::single("a.internal:443")]);
    let cases = [
        ("origin: a.internal:443\n    origins: [{address: b.internal:443}]", "routes[0].origins: not beside origin"),
        ("origins: []", "routes[0].origins: needs at least one server"),
        ("origins: [{address: a.internal}]", "routes[0].origins[0].address"),
        (
            "origins: [{address: a.internal:443}, {address: A.internal:443}]",
            "routes[0].origins[1].address: A.internal:443 is listed twice",
        ),
        ("origins: [{address: a.internal:443, weight: 0}]", "routes[0].origins[0].weight"),
        ("origins: [{address: a.internal:443, backup: true}]", "routes[0].origins: every server is a backup"),
        ("origins: [{address: a.internal:443, host: \"a b\"}]", "routes[0].origins[0].host"),
        ("origins: [{address: a.internal:443, sni: \"-\"}]", "routes[0].origins[0].sni"),
        ("origins: [{address: a.internal:443, port: 1}]", "port"),
        ("origins: [{address: a.internal:443}]\n    upstream: {health: {fails: 0}}", "routes[0].upstream.health.fails"),
        (
            "origins: [{address: a.internal:443}]\n    upstream: {health: {eject: 20s, max_eject: 10s}}",
            "routes[0].upstream.health.eject",
        ),
        ("origins: [{address: a.internal:443}]\n    upstream: {balance: fastest}", "balance"),
        (
            "origins: [{address: a.internal:443}]\n    upstream: {health: {path: healthz}}",
            "routes[0].upstream.health.path",
        ),
        (
            "origins: [{address: a.internal:443}]\n    upstream: {health: {path: /h, status: 99}}",
            "routes[0].upstream.health.status",
        ),
        (
            "origins: [{address: a.internal:443}]\n    upstream: {health: {path: /h, interval: 10ms}}",
            "routes[0].upstream.health.interval",
        ),
    ];
    for (yaml, want) in cases {
        let e = err(&http(yaml));
        assert!(e.starts_with(want) || (want.len() < 10 && e.contains(want)), "{yaml}: {e}");
    }
    let e = err(&GOOD.replace("origin: origin-a.internal:443", "origins: [{address: a.internal:443}]"));
    assert!(e.starts_with("routes[0].origins: only for action http"), "{e}");
}

/// `cert: acme`: the `acme:` section, no key, a name the ACME server can validate; the
/// section's own keys named.
#[test]
fn acme_routes_and_section_are_checked_by_key() {
    let acme = "acme:\n  directory: https://acme.example/dir\n";
    let route = |sni: &str, extra: &str| {
        GOOD.replace("sni: a.example.com", &format!("sni: \"{sni}\""))
            .replace("action: tunnel", &format!("action: http\n    cert: acme{extra}"))
    };
    Config::parse(&format!("{}{acme}", route("a.example.com", ""))).unwrap().validate().unwrap();
    let e = err(&route("a.example.com", ""));
    assert!(e.starts_with("routes[0].cert: acme: needs the top-level acme: section"), "{e}");
    let e = err(&format!("{}{acme}", route("a.example.com", "\n    key: k.pem")));
    assert!(e.starts_with("routes[0].key: not with cert: acme"), "{e}");
    let e = err(&format!("{}{acme}", route("*.example.com", "")));
    assert!(e.starts_with("routes[0].cert: a wildcard name needs the DNS-01 challenge"), "{e}");
    let e = err(&format!("{}{acme}", route("localhost", "")));
    assert!(e.starts_with("routes[0].cert: sni \"localhost\" cannot be certified"), "{e}");
    let e = err(&format!("{GOOD}acme:\n  directory: http://acme.example/dir\n"));
    assert!(e.starts_with("acme.directory: "), "{e}");
    let e = err(&format!("{GOOD}{acme}  contact: [ops@example.com]\n"));
    assert!(e.starts_with("acme.contact[0]: "), "{e}");
    let e = err(&format!("{GOOD}{acme}  challenge: http-01\n"));
    assert!(e.starts_with("acme.challenge: http-01 needs a port-80 listener"), "{e}");
    let e = err(&format!("{GOOD}{acme}  challenge: dns-01\n"));
    assert!(e.contains("challenge") && e.contains("dns-01"), "{e}");
}

/// Limits: the caps, prefixes, rates and lists are checked by key; `limits` only on http.
#[test]
fn limits_and_lists_are_checked_by_key() {
    let listener =
        |extra: &str| GOOD.replace("listen: 127.0.0.1:8443", &format!("listen: 127.0.0.1:8443\n    {extra}"));
    Config::parse(&listener("max_connections_per_client: 50\n    deny: [127.0.0.2, \"10.0.0.0/8\"]"))
        .unwrap()
        .validate()
        .unwrap();
    // Unset: the default cap, but none behind trusted balancers that send no PROXY header
    // (their peer address is the balancer's); `null` turns it off; a number is that number.
    let cap = |extra: &str| Config::parse(&listener(extra)).unwrap().listeners[0].client_cap();
    assert_eq!(cap("tcp_fastopen: 256"), Some(crate::config::DEFAULT_CLIENT_CAP));
    assert_eq!(cap("max_connections_per_client: null"), None);
    assert_eq!(cap("max_connections_per_client: 7"), Some(7));
    assert_eq!(cap("trust_forwarded: true"), None);
    assert_eq!(cap("trust_forwarded: true\n    proxy_protocol: true"), Some(crate::config::DEFAULT_CLIENT_CAP));
    assert_eq!(cap("trust_forwarded: true\n    max_connections_per_client: 50"), Some(50));
    let e = err(&listener("max_connections_per_client: 0"));
    assert!(e.starts_with("listeners[0].max_connections_per_client: must be at least 1"), "{e}");
    let e = err(&listener("ipv6_prefix: 0"));
    assert!(e.starts_with("listeners[0].ipv6_prefix: "), "{e}");
    let e = err(&listener("deny: [\"10.0.0.0/40\"]"));
    assert!(e.contains("deny") && e.contains("prefix length"), "{e}");
    let http = |limits: &str| {
        GOOD.replace("action: tunnel", &format!("action: http\n    cert: c.pem\n    key: k.pem\n    limits: {limits}"))
    };
    Config::parse(&http("{requests_per_second: 5, burst: 5, by: header x-api-key}")).unwrap().validate().unwrap();
    let e = err(&http("{requests_per_second: 0}"));
    assert!(e.starts_with("routes[0].limits.requests_per_second: "), "{e}");
    let e = err(&http("{requests_per_second: 5, burst: 0}"));
    assert!(e.starts_with("routes[0].limits.burst: "), "{e}");
    let e = err(&http("{requests_per_second: 5, by: cookie}"));
    assert!(e.contains("write `client` or `header NAME`"), "{e}");
    let e = err(&GOOD.replace(
        "origin: origin-a.internal:443",
        "origin: origin-a.internal:443\n    limits: {requests_per_second: 1}",
    ));
    assert!(e.starts_with("routes[0].limits: only for action http"), "{e}");
    // Lists on any route.
    Config::parse(
        &GOOD.replace("origin: origin-a.internal:443", "origin: origin-a.internal:443\n    allow: [\"192.0.2.0/24\"]"),
    )
    .unwrap()
    .validate()
    .unwrap();
}

mod upstreams;
