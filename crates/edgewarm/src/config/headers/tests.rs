//! Header policies as operators write them: compiled, merged, applied, and refused.
use std::sync::Arc;

use http::{HeaderMap, HeaderValue};

use super::*;
use crate::config::Config;

/// A policy from its YAML (`{request: …, response: …}`).
fn policy(yaml: &str) -> HeaderPolicy {
    let config: HeadersConfig = serde_norway::from_str(yaml).unwrap();
    config.compile("routes[0].headers").unwrap()
}

fn refused(yaml: &str) -> String {
    let config: HeadersConfig = serde_norway::from_str(yaml).unwrap();
    config.compile("routes[0].headers").unwrap_err().to_string()
}

fn message(fields: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in fields {
        m.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
    }
    m
}

fn lines(m: &HeaderMap, name: &str) -> Vec<String> {
    m.get_all(name).iter().map(|v| v.to_str().unwrap().to_string()).collect()
}

#[test]
fn set_add_remove_and_default_on_a_response() {
    let p = policy(
        "response:
           set: {Strict-Transport-Security: max-age=31536000, x-frame-options: DENY}
           add: {link: [</a.css>; rel=preload, </b.js>; rel=preload], x-count: 3}
           remove: [Server]
           default: {cache-control: no-store, content-type: text/plain}",
    );
    assert!(p.request.is_empty());
    let mut m = message(&[
        ("server", "nginx"),
        ("x-frame-options", "SAMEORIGIN"),
        ("x-frame-options", "ALLOW"),
        ("link", "</origin>; rel=next"),
        ("content-type", "text/html"),
    ]);
    p.response.apply(&mut m);
    assert_eq!(lines(&m, "strict-transport-security"), ["max-age=31536000"]);
    assert_eq!(lines(&m, "x-frame-options"), ["DENY"], "set replaces every line");
    assert_eq!(lines(&m, "link"), ["</origin>; rel=next", "</a.css>; rel=preload", "</b.js>; rel=preload"]);
    assert_eq!(lines(&m, "x-count"), ["3"]);
    assert!(!m.contains_key("server"));
    assert_eq!(lines(&m, "cache-control"), ["no-store"], "absent: the default");
    assert_eq!(lines(&m, "content-type"), ["text/html"], "present: the response's own");
}

#[test]
fn an_empty_policy_writes_nothing() {
    let p = policy("{}");
    assert!(p.is_empty());
    let mut m = message(&[("server", "x")]);
    p.response.apply(&mut m);
    assert_eq!(m, message(&[("server", "x")]));
}

/// nginx#487: a `location` with an `add_header` of its own dropped all of its parent's. Here a
/// route's own `headers` keeps the listener's other names, and its `set` of a name wins.
#[test]
fn a_route_keeps_the_listener_s_names_and_wins_on_its_own() {
    let listener = policy(
        "response: {set: {strict-transport-security: max-age=1, x-content-type-options: nosniff}, remove: [server]}\n\
         request: {set: {x-edge: listener}}",
    );
    let route = policy("response: {set: {strict-transport-security: max-age=2}, add: {x-route: r}}");
    let merged = listener.then(&route);
    let mut m = message(&[("server", "nginx")]);
    merged.response.apply(&mut m);
    assert_eq!(lines(&m, "strict-transport-security"), ["max-age=2"]);
    assert_eq!(lines(&m, "x-content-type-options"), ["nosniff"]);
    assert_eq!(lines(&m, "x-route"), ["r"]);
    assert!(!m.contains_key("server"));
    let mut q = HeaderMap::new();
    merged.request.apply(&mut q);
    assert_eq!(lines(&q, "x-edge"), ["listener"]);
}

/// Merging is the same as applying the levels in turn, for every pair of what two levels can
/// do with one name, on a message with and without it.
#[test]
fn a_merge_is_the_levels_applied_in_turn() {
    let levels = [
        "{}",
        "response: {set: {x-a: s1}}",
        "response: {add: {x-a: a1}}",
        "response: {remove: [x-a]}",
        "response: {default: {x-a: d1}}",
        "response: {set: {x-a: s1}, add: {x-a: a1}}",
        "response: {remove: [x-a], add: {x-a: a1}}",
        "response: {default: {x-a: d1}, add: {x-a: a1}}",
    ];
    let inner: Vec<String> =
        levels.iter().map(|l| l.replace("s1", "s2").replace("a1", "a2").replace("d1", "d2")).collect();
    for outer in levels {
        for inner in &inner {
            let (o, i) = (policy(outer), policy(inner));
            for start in [message(&[]), message(&[("x-a", "origin")])] {
                let mut in_turn = start.clone();
                o.response.apply(&mut in_turn);
                i.response.apply(&mut in_turn);
                let mut merged = start.clone();
                o.then(&i).response.apply(&mut merged);
                assert_eq!(lines(&merged, "x-a"), lines(&in_turn, "x-a"), "{outer} then {inner} on {start:?}");
            }
        }
    }
}

#[test]
fn merged_shares_a_level_that_is_alone() {
    let (empty, some) = (Arc::new(policy("{}")), Arc::new(policy("response: {set: {x-a: b}}")));
    assert!(Arc::ptr_eq(&HeaderPolicy::merged(&empty, &some), &some));
    assert!(Arc::ptr_eq(&HeaderPolicy::merged(&some, &empty), &some));
}

#[test]
fn framing_hop_by_hop_and_pseudo_headers_are_refused_naming_the_key() {
    let e = refused("response: {set: {Transfer-Encoding: chunked}}");
    assert!(e.starts_with("routes[0].headers.response.set.Transfer-Encoding: "), "{e}");
    assert!(e.contains("framing"), "{e}");
    for (yaml, key) in [
        ("response: {remove: [server, content-length]}", "response.remove[1]"),
        ("request: {add: {connection: close}}", "request.add.connection"),
        ("request: {set: {te: trailers}}", "request.set.te"),
        ("response: {default: {keep-alive: x}}", "response.default.keep-alive"),
        ("response: {set: {upgrade: h2c}}", "response.set.upgrade"),
        ("response: {set: {trailer: x}}", "response.set.trailer"),
        ("request: {set: {proxy-connection: x}}", "request.set.proxy-connection"),
        ("request: {set: {host: a.example}}", "request.set.host"),
        ("response: {set: {host: a.example}}", "response.set.host"),
        ("request: {set: {\":path\": /x}}", "request.set.:path"),
        ("response: {set: {via: 1.1 x}}", "response.set.via"),
        ("response: {set: {alt-svc: clear}}", "response.set.alt-svc"),
        ("request: {set: {early-data: \"1\"}}", "request.set.early-data"),
    ] {
        let e = refused(yaml);
        assert!(e.starts_with(&format!("routes[0].headers.{key}: ")), "{yaml}: {e}");
    }
}

#[test]
fn forwarding_headers_the_edge_owns_are_refused_on_requests() {
    for name in ["x-forwarded-for", "X-Forwarded-Proto", "forwarded", "x-real-ip", "X_Forwarded_Host"] {
        let e = refused(&format!("request: {{set: {{{name}: 10.0.0.1}}}}"));
        assert!(e.starts_with(&format!("routes[0].headers.request.set.{name}: ")), "{e}");
        assert!(e.contains("forward_headers"), "{e}");
        let e = refused(&format!("request: {{remove: [{name}]}}"));
        assert!(e.starts_with("routes[0].headers.request.remove[0]: "), "{e}");
    }
    // On responses they are the application's business.
    policy("response: {set: {x-forwarded-for: nobody}}");
}

#[test]
fn bad_names_values_and_contradictions_are_refused_naming_the_key() {
    let e = refused("response: {set: {\"bad name\": x}}");
    assert!(e.starts_with("routes[0].headers.response.set.bad name: ") && e.contains("not a valid header name"), "{e}");
    let e = refused("response: {add: {x-a: \"line\\nbreak\"}}");
    assert!(e.starts_with("routes[0].headers.response.add.x-a: ") && e.contains("not a valid header value"), "{e}");
    let e = refused("response: {add: {x-a: []}}");
    assert!(e.starts_with("routes[0].headers.response.add.x-a: "), "{e}");
    let e = refused("response: {set: {X-A: one}, remove: [x-a]}");
    assert!(e.starts_with("routes[0].headers.response.remove[0]: ") && e.contains("response.set"), "{e}");
    let e = refused("response: {set: {X-A: one, x-a: two}}");
    assert!(e.starts_with("routes[0].headers.response.set.x-a: "), "{e}");
    let e = refused("request: {default: {x-a: one}}");
    assert!(e.starts_with("routes[0].headers.request.default.x-a: only for responses"), "{e}");
    let e = refused("response: {default: {x-a: one}, set: {x-a: two}}");
    assert!(e.starts_with("routes[0].headers.response.default.x-a: "), "{e}");
}

const ROUTE: &str = "
listeners:
  - listen: 127.0.0.1:8443
    headers: {response: {set: {strict-transport-security: max-age=1}}}
routes:
  - sni: a.example.com
    action: http
    origin: 10.0.0.1:443
    cert: /c.pem
    key: /k.pem
    HEADERS
";

fn load(headers: &str) -> Result<Config, String> {
    let yaml = ROUTE.replace("HEADERS", headers);
    let config = Config::parse(&yaml).map_err(|e| e.to_string())?;
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

#[test]
fn listeners_and_http_routes_take_headers_and_check_refuses_bad_ones() {
    let c = load("headers: {request: {set: {x-edge: \"1\"}}, response: {remove: [server]}}").unwrap();
    assert!(!c.listeners[0].headers.is_empty());
    let crate::config::ActionConfig::Http(h) = &c.routes[0].action else { panic!() };
    assert_eq!(h.headers.request.set["x-edge"], Values(vec!["1".into()]));
    let e = load("headers: {response: {set: {transfer-encoding: chunked}}}").unwrap_err();
    assert!(e.starts_with("routes[0].headers.response.set.transfer-encoding: "), "{e}");
    let e = load("headers: {request: {set: {x-forwarded-for: 1.2.3.4}}}").unwrap_err();
    assert!(e.starts_with("routes[0].headers.request.set.x-forwarded-for: "), "{e}");
    let e = load("headers: {respnse: {}}").unwrap_err();
    assert!(e.contains("routes[0]") && e.contains("respnse"), "{e}");
    let e = load("headers: {response: {add: {x-a: {nested: map}}}}").unwrap_err();
    assert!(e.contains("headers.response.add.x-a"), "{e}");
    let bad_listener = ROUTE.replace("max-age=1", "max-age=1, content-length: \"3\"").replace("HEADERS", "");
    let e = Config::parse(&bad_listener).unwrap().validate().unwrap_err().to_string();
    assert!(e.starts_with("listeners[0].headers.response.set.content-length: "), "{e}");
}

#[test]
fn a_tunnel_route_takes_no_headers() {
    let yaml = "
listeners: [{listen: 127.0.0.1:8443}]
routes:
  - {sni: a.example.com, action: tunnel, origin: 10.0.0.1:443, headers: {response: {set: {x-a: b}}}}
";
    let e = Config::parse(yaml).unwrap().validate().unwrap_err().to_string();
    assert!(e.starts_with("routes[0].headers: only for action http"), "{e}");
}

#[test]
fn listeners_know_their_place_and_compare_without_headers() {
    let yaml = "
listeners:
  - {listen: 127.0.0.1:0}
  - {listen: 127.0.0.1:0, headers: {response: {set: {x-a: b}}}}
routes: [{sni: a.example.com, action: reject}]
";
    let c = Config::parse(yaml).unwrap();
    assert_eq!((c.listeners[0].place, c.listeners[1].place), (0, 1));
    let mut other = c.listeners[1].clone();
    other.headers = HeadersConfig::default();
    assert!(c.listeners[1].same_but_headers(&other));
    other.trust_forwarded = true;
    assert!(!c.listeners[1].same_but_headers(&other));
}
