//! What a lab run writes before it starts anything: the lab's certificates and the edge's
//! configuration ([`write_pki`]: a CA and certificates for any names, which `cache-tests` uses
//! too).

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::error::LabError;
use crate::harness::edge_yaml::{head, route, REJECT_OTHERS};
use crate::wan::netns::{EDGE_A, ORIGIN};

/// The names clients ask for: the origin's (direct and through tunnels), then the edge's. The
/// browser lab's split page puts its assets on `static.` names.
const ORIGIN_NAMES: [&str; 6] = ["origin.test", "a.test", "t.test", "static.a.test", "c.origin.test", "n.origin.test"];
const EDGE_NAMES: [&str; 11] = [
    "b.test",
    "h.test",
    "z.test",
    "p.test",
    "q.test",
    "static.b.test",
    "static.z.test",
    "c.test",
    "static.c.test",
    "n.test",
    "static.n.test",
];

/// Where the far edge (an edgewarm beside the origin, in its namespace) serves HTTP/3 to the
/// edge's `q.test` route ([`far_edge_config`]).
pub(crate) const FAR_EDGE_PORT: u16 = 8443;

/// A new run folder under `out`, named for the time and `name`, with the run's certificates in
/// it. Absolute: it names the edge's upgrade socket, which must be an absolute path.
pub(crate) fn run_dir(out: &Path, name: &str) -> Result<PathBuf, LabError> {
    let dir = empty_run_dir(out, name)?;
    write_certs(&dir)?;
    Ok(dir)
}

/// A new, empty run folder under `out`, named for the time and `name`; absolute.
pub(crate) fn empty_run_dir(out: &Path, name: &str) -> Result<PathBuf, LabError> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let dir = std::path::absolute(out.join(format!("{stamp}-{name}")))?;
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The edge's configuration for a run in folder `d` (absolute): a route per mode (and per 0-RTT
/// variant), HTTP/3 on the listener too; its upgrade socket in the run folder, not the system's.
pub(crate) fn edge_config(d: &str, page: bool) -> String {
    let alpn = if page { "    alpn: [h2, http/1.1]\n" } else { "" };
    // Page workloads: the browser lab's second host name, through the same kind of route. Each
    // verifies the origin under a name of its own, so its pool is its own (pools are shared by
    // origin key, and the lab's readiness check counts them per route).
    let statics = if page {
        format!(
            "\x20 - {{sni: static.a.test, action: tunnel, origin: \"{ORIGIN}:443\"}}\n\
             \x20 - sni: static.b.test\n    action: prewarm\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
             \x20   origin_tls: {{sni: static.a.test, ca: {d}/ca.pem}}\n{alpn}    pool: {{min: 1, max_idle: 30s, period: 500ms}}\n\
             \x20 - sni: static.z.test\n    action: http\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
             \x20   origin_tls: {{sni: t.test, ca: {d}/ca.pem}}\n    early_data: safe\n{}",
            cache_routes(d)
        )
    } else {
        String::new()
    };
    let listener = format!("listen: \"{EDGE_A}:443\", tcp_fastopen: 256, http3: true");
    head("127.0.0.1:9900", format!("{d}/upgrade.sock"), &[listener])
        + &format!(
            "routes:\n\
         \x20 - {{sni: a.test, action: tunnel, origin: \"{ORIGIN}:443\"}}\n\
         \x20 - {{sni: t.test, action: tunnel, origin: \"{ORIGIN}:443\", origin_tcp_fastopen: true}}\n\
         \x20 - sni: b.test\n    action: prewarm\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: origin.test, ca: {d}/ca.pem}}\n{alpn}    pool: {{min: 4, max_idle: 30s, period: 500ms}}\n\
         \x20 - sni: h.test\n    action: http\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: origin.test, ca: {d}/ca.pem}}\n\
         \x20 - sni: z.test\n    action: http\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: a.test, ca: {d}/ca.pem}}\n    early_data: safe\n\
         \x20 - sni: q.test\n    action: http\n    origin: \"{ORIGIN}:{FAR_EDGE_PORT}\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: q.test, ca: {d}/ca.pem}}\n    upstream: {{protocol: h3, congestion: bbr}}\n\
         \x20 - sni: p.test\n    action: prewarm\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
         \x20   origin_tls: {{sni: t.test, ca: {d}/ca.pem}}\n    pool: {{min: 4, max_idle: 30s, period: 500ms}}\n    early_data: opaque\n\
         {statics}"
        )
        + REJECT_OTHERS
}

/// The browser lab's cached site: `c.test` with the edge cache and learned Early Hints,
/// `n.test` with the cache only, each with its `static.` twin. Each verifies the origin under
/// a name of its own, so its origin connections are its own, not the `http` mode's.
fn cache_routes(d: &str) -> String {
    let route = |name: &str, origin_sni: &str, hints: bool| {
        let hints = if hints { "    early_hints: {}\n" } else { "" };
        format!(
            "\x20 - sni: {name}\n    action: http\n    origin: \"{ORIGIN}:443\"\n    cert: {d}/edge.pem\n    key: {d}/edge.key\n\
             \x20   origin_tls: {{sni: {origin_sni}, ca: {d}/ca.pem}}\n    cache: {{}}\n{hints}"
        )
    };
    ["c", "n"]
        .iter()
        .flat_map(|k| {
            let hints = *k == "c";
            [
                route(&format!("{k}.test"), &format!("{k}.origin.test"), hints),
                route(&format!("static.{k}.test"), &format!("{k}.origin.test"), hints),
            ]
        })
        .collect()
}

/// The far edge: an edgewarm beside the origin (0 ms from it, in its namespace) with an
/// `http3` listener, in front of the origin over HTTP/2: the other end of the edge's `q.test`
/// route, so the long link carries QUIC (`upstream.protocol: h3`). Its admin and upgrade
/// socket are its own.
pub(crate) fn far_edge_config(d: &str) -> String {
    let listener = format!("listen: \"{ORIGIN}:{FAR_EDGE_PORT}\", http3: true, quic_congestion: bbr");
    head("127.0.0.1:9901", format!("{d}/far-upgrade.sock"), &[listener])
        + "routes:\n"
        + &route("q.test", "http", format!("{ORIGIN}:443"), &format!("{d}/edge"))
        + &format!("    origin_tls: {{sni: origin.test, ca: {d}/ca.pem}}\n    early_data: safe\n")
        + REJECT_OTHERS
}

/// One lab CA; the origin's certificate covers the names clients use directly and through
/// the tunnel, the edge's the prewarm and http names.
pub(crate) fn write_certs(dir: &Path) -> Result<(), LabError> {
    write_pki(dir, &[("origin", &ORIGIN_NAMES), ("edge", &EDGE_NAMES)])
}

/// A new CA (`ca.pem`) and, for each `(file, names)`, a certificate for those names signed by
/// it: `{file}.pem`, `{file}.key`, `{file}.spki` and `{file}.bundle.pem`.
pub(crate) fn write_pki(dir: &Path, certs: &[(&str, &[&str])]) -> Result<(), LabError> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "edgewarm lab CA");
    let ca = ca_params.self_signed(&ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    for &(file, names) in certs {
        let key = rcgen::KeyPair::generate()?;
        let cert = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?
            .signed_by(&key, &issuer)?;
        std::fs::write(dir.join(format!("{file}.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem())?;
        // What Chromium is told to trust (the browser lab): the key's SHA-256, base64.
        let spki =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &rcgen::PublicKeyData::subject_public_key_info(&key));
        std::fs::write(dir.join(format!("{file}.spki")), base64::engine::general_purpose::STANDARD.encode(spki))?;
        // Certificate and key in one file, as HAProxy's `crt` wants them.
        std::fs::write(dir.join(format!("{file}.bundle.pem")), cert.pem() + &key.serialize_pem())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The page workloads' configuration is one edgewarm accepts, its cached site included.
    #[test]
    fn the_page_configuration_parses_with_its_cached_site() {
        let text = super::edge_config("/run/x", true);
        edgewarm::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(text.matches("    cache: {}\n").count(), 4, "{text}");
        assert_eq!(text.matches("    early_hints: {}\n").count(), 2, "{text}");
        edgewarm::config::Config::parse(&super::edge_config("/run/x", false)).unwrap();
    }
}
