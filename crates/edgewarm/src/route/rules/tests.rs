use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::*;
use crate::config::RuleConfig;

/// Rules from YAML, each rule's payload its own name (`r3` for `rules[3]`).
fn rules(yaml: &str) -> Result<Rules<String>, RuleError> {
    let written: Vec<RuleConfig> = serde_norway::from_str(yaml).unwrap();
    Rules::compile(written.iter().enumerate().map(|(i, r)| (r, format!("r{i}"))))
}

struct Ask<'a> {
    method: Method,
    path: &'a str,
    headers: HeaderMap,
    query: Option<&'a str>,
}

fn get(path: &str) -> Ask<'_> {
    Ask { method: Method::GET, path, headers: HeaderMap::new(), query: None }
}

impl<'a> Ask<'a> {
    fn method(mut self, m: &str) -> Self {
        self.method = Method::from_bytes(m.as_bytes()).unwrap();
        self
    }
    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        self
    }
    fn query(mut self, q: &'a str) -> Self {
        self.query = Some(q);
        self
    }
    /// The payload of the rule met, or `-` for none.
    fn on(&self, rules: &Rules<String>) -> String {
        let request = Request {
            path: self.path,
            method: &self.method,
            headers: &self.headers,
            query: self.query.map(str::as_bytes),
        };
        let hit = rules.find(&request);
        if let Some(hit) = hit {
            assert_eq!(*hit.payload, format!("r{}", hit.index));
        }
        hit.map_or_else(|| "-".to_string(), |h| h.payload.clone())
    }
}

#[test]
fn exact_wins_over_the_longest_prefix_which_wins_over_regexes_in_their_order() {
    let r = rules(
        "[{regex: '^/api/'}, {regex: 'x'}, {prefix: /}, {prefix: /api}, {prefix: /api/v1/}, {exact: /api/v1/x}, \
         {regex: '.'}]",
    )
    .unwrap();
    assert_eq!(r.len(), 7);
    assert_eq!(get("/api/v1/x").on(&r), "r5");
    assert_eq!(get("/api/v1/x/").on(&r), "r4", "an exact path is the whole path");
    assert_eq!(get("/api/v1/y").on(&r), "r4");
    assert_eq!(get("/api/v1").on(&r), "r4");
    assert_eq!(get("/api/v2").on(&r), "r3");
    assert_eq!(get("/other").on(&r), "r2");
    let regexes_only = rules("[{regex: '^/api/'}, {regex: 'x'}, {exact: /a}]").unwrap();
    assert_eq!(get("/api/x").on(&regexes_only), "r0", "in the order written");
    assert_eq!(get("/box").on(&regexes_only), "r1");
    assert_eq!(get("/b").on(&regexes_only), "-");
}

#[test]
fn a_prefix_matches_whole_segments_and_its_trailing_slash_does_not_matter() {
    for prefix in ["/api", "/api/"] {
        let r = rules(&format!("[{{prefix: {prefix}}}, {{prefix: /admin/}}]")).unwrap();
        for hit in ["/api", "/api/", "/api/x", "/api/x/y/"] {
            assert_eq!(get(hit).on(&r), "r0", "{prefix} {hit}");
        }
        for miss in ["/apix", "/ap", "/", "/x/api", "/api;x", "/administrator", "/admi"] {
            assert_eq!(get(miss).on(&r), "-", "{prefix} {miss}");
        }
        assert_eq!(get("/admin").on(&r), "r1");
    }
}

#[test]
fn among_rules_of_one_path_the_one_with_more_conditions_is_tried_first() {
    let r = rules(
        "[{prefix: /api}, {prefix: /api/, methods: [POST]}, \
          {prefix: /api, methods: [POST], headers: {content-type: application/grpc}}]",
    )
    .unwrap();
    assert_eq!(get("/api/x").on(&r), "r0");
    assert_eq!(get("/api/x").method("POST").on(&r), "r1");
    assert_eq!(get("/api/x").method("POST").header("content-type", "application/grpc").on(&r), "r2");
    assert_eq!(get("/api/x").header("content-type", "application/grpc").on(&r), "r0");
}

#[test]
fn a_rule_whose_conditions_fail_falls_through_to_the_next_candidate() {
    let r = rules(
        "[{exact: /a/b, methods: [DELETE]}, {prefix: /a/b, headers: {x-beta: true}}, {prefix: /a}, \
          {regex: '^/z', query: {debug: '1'}}, {regex: 'z'}]",
    )
    .unwrap();
    assert_eq!(get("/a/b").method("DELETE").on(&r), "r0");
    // The exact rule's method fails: the longest prefix, whose header fails: a shorter one.
    assert_eq!(get("/a/b").header("x-beta", "").on(&r), "r1");
    assert_eq!(get("/a/b").on(&r), "r2");
    // No prefix at all: the regexes in order, a failing one skipped.
    assert_eq!(get("/zz").query("debug=1").on(&r), "r3");
    assert_eq!(get("/zz").query("debug=2").on(&r), "r4");
    assert_eq!(get("/y").on(&r), "-");
}

#[test]
fn headers_are_present_absent_equal_or_a_regex_found_in_their_value() {
    let r = rules(
        "[{exact: /p, headers: {x-a: true}}, {exact: /n, headers: {x-a: false}}, {exact: /e, headers: {X-A: v}}, \
          {exact: /r, headers: {x-a: {regex: '^cu?rl/'}}}]",
    )
    .unwrap();
    assert_eq!(get("/p").header("x-a", "").on(&r), "r0");
    assert_eq!(get("/p").on(&r), "-");
    assert_eq!(get("/n").on(&r), "r1");
    assert_eq!(get("/n").header("x-a", "1").on(&r), "-");
    assert_eq!(get("/e").header("x-a", "v").on(&r), "r2");
    assert_eq!(get("/e").header("x-a", "V").on(&r), "-", "values are compared as they are");
    // Two field lines are one value, joined (RFC 9110 §5.3): neither alone is it.
    assert_eq!(get("/e").header("x-a", "v").header("x-a", "w").on(&r), "-");
    assert_eq!(get("/r").header("x-a", "curl/8").on(&r), "r3");
    assert_eq!(get("/r").header("x-a", "xcurl/8").on(&r), "-");
}

#[test]
fn query_parameters_are_read_decoded_first_occurrence_first() {
    let r = rules("[{exact: /q, query: {lang: en, preview: true}}, {exact: /n, query: {a b: 'c&d'}}]").unwrap();
    assert_eq!(get("/q").query("preview&lang=en").on(&r), "r0");
    assert_eq!(get("/q").query("lang=%65n&preview=").on(&r), "r0");
    assert_eq!(get("/q").query("lang=fr&lang=en&preview").on(&r), "-");
    assert_eq!(get("/q").query("lang=en").on(&r), "-");
    assert_eq!(get("/q").on(&r), "-");
    assert_eq!(get("/n").query("a%20b=c%26d").on(&r), "r1");
    assert_eq!(get("/n").query("a+b=c%26d").on(&r), "-", "`+` is not a space in a query");
}

#[test]
fn two_rules_no_order_can_settle_are_refused_naming_both() {
    let e = rules(
        "[{exact: /a}, {prefix: /b}, {prefix: /c, methods: [GET]}, {prefix: /api, methods: [GET]}, {exact: /api}, \
          {regex: x}, {regex: x}, {prefix: /api/, headers: {x-beta: true}}]",
    )
    .unwrap_err();
    assert_eq!(e.key, "rules[7]");
    assert!(e.message.contains("rules[3]") && e.message.contains("prefix /api"), "{e}");
    // The same rule twice, with a trailing slash or not.
    let e = rules("[{prefix: /api}, {prefix: /api/}]").unwrap_err();
    assert_eq!((e.key.as_str(), e.message.contains("rules[0]")), ("rules[1]", true), "{e}");
    let e = rules("[{exact: /a, methods: [GET, PUT]}, {exact: /a, methods: [PUT, POST]}]").unwrap_err();
    assert_eq!(e.key, "rules[1]");
    let e = rules("[{exact: /a, headers: {x: {regex: '^a'}}}, {exact: /a, headers: {x: abc}}]").unwrap_err();
    assert_eq!(e.key, "rules[1]");
    let e = rules("[{exact: /a, headers: {x: true}}, {exact: /a, headers: {x: abc}}]").unwrap_err();
    assert_eq!(e.key, "rules[1]");
}

#[test]
fn rules_that_exclude_each_other_or_differ_in_conditions_are_ordered() {
    for ok in [
        "[{exact: /a, methods: [GET]}, {exact: /a, methods: [POST]}]",
        "[{exact: /a, headers: {x: a}}, {exact: /a, headers: {x: b}}]",
        "[{exact: /a, headers: {x: {regex: '^a'}}}, {exact: /a, headers: {x: b}}]",
        "[{exact: /a, headers: {x: true}}, {exact: /a, headers: {x: false}}]",
        "[{exact: /a, query: {v: '1'}, methods: [GET]}, {exact: /a, query: {v: false}, headers: {y: true}}]",
        "[{prefix: /a}, {prefix: /a, methods: [GET]}, {exact: /a}, {regex: a}, {regex: a}]",
    ] {
        rules(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn a_rule_the_config_cannot_hold_is_refused_by_key() {
    for (yaml, key, says) in [
        ("[{exact: /a}, {methods: [GET]}]", "rules[1]", "needs one of"),
        ("[{exact: /a, prefix: /a}]", "rules[0]", "more than one"),
        ("[{exact: a}]", "rules[0].exact", "must start with /"),
        ("[{exact: 'http://h/a'}]", "rules[0].exact", "must start with /"),
        ("[{prefix: /a//b}]", "rules[0].prefix", "write /a/b"),
        ("[{exact: /a/../b}]", "rules[0].exact", "write /b"),
        ("[{exact: /%7euser}]", "rules[0].exact", "write /~user"),
        ("[{exact: '/a?b=1'}]", "rules[0].exact", "query"),
        ("[{prefix: /a%2e%2e/../..}]", "rules[0].prefix", "climbs above the root"),
        ("[{regex: '('}]", "rules[0].regex", "unclosed group"),
        (r"[{regex: '\w{10000}'}]", "rules[0].regex", "size limit"),
        ("[{exact: /a, methods: [get]}]", "rules[0].methods[0]", "upper case"),
        ("[{exact: /a, headers: {'bad name': true}}]", "rules[0].headers.bad name", "not a header name"),
        ("[{exact: /a, headers: {X: true, x: false}}]", "rules[0].headers.x", "named twice"),
        ("[{exact: /a, headers: {x: {regex: '['}}}]", "rules[0].headers.x", "regex"),
        ("[{exact: /a, query: {'': true}}]", "rules[0].query.", "not a parameter name"),
    ] {
        let e = rules(yaml).unwrap_err();
        assert_eq!(e.key, key, "{yaml}: {e}");
        assert!(e.message.contains(says), "{yaml}: {e}");
    }
}

/// Payloads are the caller's: here, the index of the action a rule names.
#[test]
fn a_hit_names_the_rules_index_and_payload() {
    let written: Vec<RuleConfig> = serde_norway::from_str("[{prefix: /a}, {exact: /a/b}]").unwrap();
    let r = Rules::compile(written.iter().zip([10u8, 20])).unwrap();
    let headers = HeaderMap::new();
    let ask = |path| r.find(&Request { path, method: &Method::GET, headers: &headers, query: None });
    assert_eq!(ask("/a/b"), Some(Hit { index: 1, payload: &20 }));
    assert_eq!(ask("/a/c"), Some(Hit { index: 0, payload: &10 }));
    assert!(!r.is_empty() && Rules::<()>::compile([]).unwrap().is_empty());
}
