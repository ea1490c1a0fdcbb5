//! The ClientHello parser on real captures: the cost of the peek per connection.
//! Run: `cargo bench --bench clienthello`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgewarm::peek::clienthello::{parse, split_into_records as refragment, Parsed};

fn capture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/clienthello/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn bench(c: &mut Criterion) {
    let rustls = capture("rustls-pq-alpn.bin");
    let cases = [
        ("rustls_pq_1481B", rustls.clone()),
        ("openssl_330B", capture("openssl-s_client-alpn.bin")),
        ("curl_517B", capture("curl.bin")),
        ("rustls_pq_in_100B_records", refragment(&rustls, 100)),
    ];
    let mut g = c.benchmark_group("clienthello_parse");
    for (name, bytes) in &cases {
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(*name, |b| {
            b.iter(|| match parse(std::hint::black_box(bytes)) {
                Ok(Parsed::Complete(h)) => h.sni().map_or(0, str::len),
                _ => unreachable!(),
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
