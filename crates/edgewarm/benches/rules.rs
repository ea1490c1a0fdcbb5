//! A route's rules: the cost of finding a request's rule at 10, 100 and 1,000 exact and prefix
//! rules (the match being the last one written, and a miss), and of normalizing a path first.
//! Envoy's linear route list costs 42 ns per route scanned (envoy PR #37086).
//! Run: `cargo bench --bench rules`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use edgewarm::config::{EncodedSlash, RuleConfig};
use edgewarm::route::path::normalize;
use edgewarm::route::rules::{Request, Rules};
use http::{HeaderMap, Method};

/// `n` rules, exact and prefix in turn, each for its own path under `/site/`, as a site's
/// many locations would be; the last one written is the prefix `/site/p{n-1}/`.
fn written(n: usize) -> Vec<RuleConfig> {
    (0..n)
        .map(|i| {
            let mut rule = RuleConfig::default();
            if i % 2 == 0 {
                rule.exact = Some(format!("/site/e{i}/index.html"));
            } else {
                rule.prefix = Some(format!("/site/p{i}/"));
            }
            rule
        })
        .collect()
}

fn lookup(c: &mut Criterion) {
    let headers = HeaderMap::new();
    let mut g = c.benchmark_group("rules_find");
    for n in [10, 100, 1_000] {
        let written = written(n);
        let rules = Rules::compile(written.iter().map(|r| (r, ()))).unwrap();
        let last_prefix = format!("/site/p{}/assets/app.js", n - 1);
        let last_exact = format!("/site/e{}/index.html", n - 2);
        for (case, path, hits) in [
            ("last_prefix", last_prefix.as_str(), true),
            ("last_exact", last_exact.as_str(), true),
            ("miss", "/site/none/assets/app.js", false),
        ] {
            let request = Request { path, method: &Method::GET, headers: &headers, query: None };
            assert_eq!(rules.find(&request).is_some(), hits, "{case}");
            g.bench_with_input(BenchmarkId::new(case, n), &request, |b, request| {
                b.iter(|| rules.find(std::hint::black_box(request)).map(|h| h.index))
            });
        }
    }
    g.finish();
}

fn normalization(c: &mut Criterion) {
    let mut g = c.benchmark_group("path_normalize");
    for (case, target) in [
        ("typical", &b"/api/v1/users/12345/profile?fields=name,email"[..]),
        ("dots_and_escapes", &b"/static/./css/../img/%7Euser/logo%20big.png?v=3"[..]),
    ] {
        g.bench_function(case, |b| b.iter(|| normalize(std::hint::black_box(target), EncodedSlash::Refuse)));
    }
    g.finish();
}

criterion_group!(benches, lookup, normalization);
criterion_main!(benches);
