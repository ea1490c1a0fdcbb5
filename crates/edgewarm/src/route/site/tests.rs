use super::*;
use crate::acme::Acme;
use crate::route::{RouteAction, RouteTable};
use crate::tls::client::Resumption;

/// The site of the one http route of a configuration with `rules` (YAML flow list).
fn site(rules: &str) -> (RouteTable, String) {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path();
    let cert = rcgen::generate_simple_self_signed(vec!["b.test".to_string()]).unwrap();
    std::fs::write(pki.join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(pki.join("key.pem"), cert.signing_key.serialize_pem()).unwrap();
    let p = pki.display();
    let yaml = format!(
        "listeners: [{{listen: 127.0.0.1:1}}]\nupstreams:\n  assets: {{origin: 127.0.0.1:2, protocol: http/1.1, tls: false}}\n\
         routes:\n- {{sni: b.test, action: http, origin: 127.0.0.1:3, cert: {p}/cert.pem, key: {p}/key.pem, rules: {rules}}}\n"
    );
    let config = crate::config::Config::parse(&yaml).unwrap();
    (RouteTable::new(&config, &Resumption::default(), &Acme::default()).unwrap(), yaml)
}

fn chosen(t: &RouteTable, method: &str, target: &str) -> Result<(String, Option<String>), PathError> {
    let RouteAction::Http(h) = &t.lookup(Some("b.test")).unwrap().action else { panic!() };
    let site = h.site.as_ref().unwrap();
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let c = site.choose(target.as_bytes(), &method, &HeaderMap::new())?;
    let rule = c.rule.map(|r| {
        let path = c.normal.path.clone();
        match &r.action {
            Action::Forward(f) => format!("{} {} {}", r.name, f.upstream(), f.path(r, path)),
            Action::Redirect(d) => {
                let to = d.location(r, &path, c.normal.query).unwrap();
                format!("{} {} {}", r.name, d.status().as_u16(), to.to_str().unwrap())
            }
            Action::Respond(o) => format!("{} {}", r.name, o.status().as_u16()),
        }
    });
    Ok((c.normal.path, rule))
}

#[test]
fn rules_choose_rewrite_and_redirect() {
    let (t, _) = site(
        "[{prefix: /static/, upstream: assets, strip_prefix: true}, {exact: /healthz, respond: {status: 200, body: ok}}, \
         {prefix: /old/, redirect: {to: /new/}}, {prefix: /v1, replace_prefix: /v2/}, \
         {exact: /moved, redirect: {to: 'https://elsewhere.test/x?k=1', status: 301}}]",
    );
    let rule = |m: &str, p: &str| chosen(&t, m, p).unwrap().1;
    assert_eq!(rule("GET", "/static/a.css").unwrap(), "rules[0] assets /a.css");
    assert_eq!(rule("GET", "/static").unwrap(), "rules[0] assets /");
    assert_eq!(rule("GET", "/staticx"), None, "whole segments only");
    assert_eq!(rule("GET", "/api/../static/x").unwrap(), "rules[0] assets /x", "normalized first");
    assert_eq!(rule("GET", "/static/../api/x"), None, "/api/x: the route's default");
    assert_eq!(rule("GET", "/healthz").unwrap(), "rules[1] 200");
    assert_eq!(rule("GET", "/old/x?q=1").unwrap(), "rules[2] 308 /new/x?q=1");
    assert_eq!(rule("GET", "/old").unwrap(), "rules[2] 308 /new/");
    assert_eq!(rule("GET", "/v1/a/b").unwrap(), "rules[3] b.test /v2/a/b");
    assert_eq!(rule("GET", "/v1").unwrap(), "rules[3] b.test /v2/", "the slash written in the replacement");
    assert_eq!(rule("GET", "/moved?q=2").unwrap(), "rules[4] 301 https://elsewhere.test/x?k=1", "to's own query");
    assert_eq!(chosen(&t, "GET", "/static/%2fx").unwrap_err(), PathError::EncodedSlash);
    // A redirect never takes a host from the request: the rest of a normalized path cannot
    // start with `//`.
    assert_eq!(rule("GET", "/old//evil.test/x").unwrap(), "rules[2] 308 /new/evil.test/x");
}

#[test]
fn the_listing_is_in_precedence_order_with_hits() {
    let (t, _) = site("[{regex: '\\.php$', respond: {status: 403}}, {prefix: /a/, respond: {status: 404}}, \
                       {prefix: /a/b/, respond: {status: 410}}, {exact: /a/b/c, respond: {status: 200}}, {prefix: /s, upstream: assets}]");
    chosen(&t, "GET", "/a/b/x").unwrap();
    let RouteAction::Http(h) = &t.lookup(Some("b.test")).unwrap().action else { panic!() };
    let list = h.site.as_ref().unwrap().listing();
    let order: Vec<_> = list.iter().map(|r| r["rule"].as_str().unwrap().to_string()).collect();
    assert_eq!(order, ["rules[3]", "rules[2]", "rules[1]", "rules[4]", "rules[0]"]);
    assert_eq!(list[1]["hits"], 1);
    assert_eq!(list[1]["match"], "prefix /a/b");
}

#[test]
fn join_keeps_one_slash() {
    assert_eq!(join("/new/", "/x"), "/new/x");
    assert_eq!(join("/new/", ""), "/new/");
    assert_eq!(join("/new", ""), "/new");
    assert_eq!(join("/", ""), "/");
    assert_eq!(join("/", "/x/"), "/x/");
}
