//! Other proxies measured in the same run as edgewarm: `--proxy NAME[:MODE]=COMMAND`, and the
//! shipped set `--peers` (nginx and HAProxy, each as a blind SNI tunnel and as an HTTPS reverse
//! proxy with origin connection reuse; Apache Traffic Server as a blind tunnel and, with a
//! fixed build, with its own TLS pre-warm; configs in examples/peers/).
//!
//! A peer declares which minimum it is held to (`tunnel` 3(r+R), `prewarm` or `http` 3r+R), so a
//! peer that keeps origin connections is judged against what its design allows, like edgewarm's
//! own modes. Its client connects with a name its certificate covers: `a.test` (the origin's) for
//! tunnels, `b.test`/`h.test` (the edge's) for proxies that terminate TLS.

use crate::scenarios::model::Mode;

/// A proxy to measure beside edgewarm.
#[derive(Debug, Clone)]
pub struct Peer {
    pub name: String,
    /// The minimum it is held to.
    pub mode: Mode,
    /// Shell command; `{listen}`, `{origin}` and `{dir}` are filled in.
    pub command: String,
    /// A config file written to the run folder first (its name, its template).
    pub config: Option<(&'static str, &'static str)>,
    /// Where its pool counters can be read, inside the edge namespace, when it exposes them
    /// (ATS: its stats_over_http plugin): see [`ats_pool_counts`].
    pub stats_url: Option<&'static str>,
}

impl Peer {
    /// `NAME=COMMAND` or `NAME:MODE=COMMAND` (MODE: tunnel, prewarm, http).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad =
            || format!("--proxy {text:?}: expected NAME=COMMAND or NAME:MODE=COMMAND (MODE: tunnel, prewarm, http)");
        let (head, command) = text.split_once('=').ok_or_else(bad)?;
        let (name, mode) = match head.split_once(':') {
            None => (head, Mode::Tunnel),
            Some((name, "tunnel")) => (name, Mode::Tunnel),
            Some((name, "prewarm")) => (name, Mode::Prewarm),
            Some((name, "http")) => (name, Mode::Http),
            Some(_) => return Err(bad()),
        };
        if name.is_empty() || command.trim().is_empty() {
            return Err(bad());
        }
        Ok(Self { name: name.into(), mode, command: command.into(), config: None, stats_url: None })
    }

    /// The name the client asks for: one the peer's certificate covers.
    pub fn server_name(&self) -> &'static str {
        match self.mode {
            Mode::Prewarm => "b.test",
            Mode::Http => "h.test",
            _ => "a.test",
        }
    }
}

/// The shipped peers whose programs are installed; one line on stderr for each one skipped.
pub fn shipped() -> Vec<Peer> {
    let all = [
        (
            "nginx-stream",
            Mode::Tunnel,
            "nginx",
            Some("/usr/lib/nginx/modules/ngx_stream_module.so"),
            ("nginx-stream.conf", include_str!("../../../../../examples/peers/nginx-stream.conf")),
            "nginx -c {dir}/nginx-stream.conf",
        ),
        (
            "nginx-https",
            Mode::Http,
            "nginx",
            None,
            ("nginx-https.conf", include_str!("../../../../../examples/peers/nginx-https.conf")),
            "mkdir -p {dir}/nginx-tmp && nginx -c {dir}/nginx-https.conf",
        ),
        (
            "haproxy-tcp",
            Mode::Tunnel,
            "haproxy",
            None,
            ("haproxy-tcp.cfg", include_str!("../../../../../examples/peers/haproxy-tcp.cfg")),
            "haproxy -db -f {dir}/haproxy-tcp.cfg",
        ),
        (
            "haproxy-http",
            Mode::Http,
            "haproxy",
            None,
            ("haproxy-http.cfg", include_str!("../../../../../examples/peers/haproxy-http.cfg")),
            "haproxy -db -f {dir}/haproxy-http.cfg",
        ),
        (
            "ats-tunnel",
            Mode::Tunnel,
            "traffic_server",
            None,
            ("ats-peer.sh", ATS_PEER),
            "bash {dir}/ats-peer.sh tunnel {listen} {origin} {dir}/ats-tunnel {dir}/edge.pem {dir}/edge.key {dir}/ca.pem",
        ),
    ];
    let mut peers = Vec::new();
    for (name, mode, program, needs, config, command) in all {
        let installed = on_path(program) && needs.is_none_or(|f| std::path::Path::new(f).exists());
        if !installed {
            eprintln!("edgewarm-lab: peer {name} skipped: {program} (or its module) is not installed");
            continue;
        }
        peers.push(Peer { name: name.into(), mode, command: command.into(), config: Some(config), stats_url: None });
    }
    // ATS's own pre-warm (partial_blind_route + tunnel_prewarm): every 9.2 release aborts at
    // start once pre-warming is on (a thread assertion in PreWarmManager, fixed upstream in
    // apache/trafficserver#9692, only in 10.x), so it runs only with a fixed build named by
    // ATS_SERVER (the script reads it).
    match std::env::var_os("ATS_SERVER") {
        Some(server) if std::path::Path::new(&server).is_file() => peers.push(Peer {
            name: "ats-prewarm".into(),
            mode: Mode::Prewarm,
            command: format!(
                "ATS_STATS_PORT={ATS_STATS_PORT} bash {{dir}}/ats-peer.sh prewarm {{listen}} {{origin}} {{dir}}/ats-prewarm \
                 {{dir}}/edge.pem {{dir}}/edge.key {{dir}}/ca.pem"
            ),
            config: Some(("ats-peer.sh", ATS_PEER)),
            stats_url: Some(ATS_STATS_URL),
        }),
        _ => eprintln!(
            "edgewarm-lab: peer ats-prewarm skipped: Debian's traffic_server 9.2 aborts when tunnel pre-warming is on \
             (apache/trafficserver#9692, fixed in 10.x only); set ATS_SERVER to a traffic_server with the fix"
        ),
    }
    peers
}

/// Starts ATS with a private runroot in a folder of the run (examples/peers/ats-peer.sh).
const ATS_PEER: &str = include_str!("../../../../../examples/peers/ats-peer.sh");

/// ats-prewarm's metrics as JSON (stats_over_http), on loopback in the edge namespace.
const ATS_STATS_PORT: u16 = 9950;
const ATS_STATS_URL: &str = "http://127.0.0.1:9950/_stats";

/// ATS's pre-warm pool counters, summed over its pools (one per origin, SNI and ALPN): hits,
/// misses and origin TLS handshakes (`proxy.process.tunnel.prewarm.<pool>.total_hit`,
/// `total_miss`, `total_handshake_count`). stats_over_http prints every value as a string.
pub fn ats_pool_counts(stats_json: &str) -> Option<[f64; 3]> {
    let v: serde_json::Value = serde_json::from_str(stats_json).ok()?;
    let global = v.get("global")?.as_object()?;
    let sum = |suffix: &str| -> f64 {
        global
            .iter()
            .filter(|(k, _)| k.starts_with("proxy.process.tunnel.prewarm.") && k.ends_with(suffix))
            .filter_map(|(_, v)| v.as_str().and_then(|s| s.parse::<f64>().ok()).or_else(|| v.as_f64()))
            .sum()
    };
    Some([sum(".total_hit"), sum(".total_miss"), sum(".total_handshake_count")])
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Fill in a template.
pub fn render(template: &str, listen: &str, origin: &str, dir: &str) -> String {
    template.replace("{listen}", listen).replace("{origin}", origin).replace("{dir}", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_declare_their_minimum() {
        let p = Peer::parse("hap:http=haproxy -f x").unwrap();
        assert_eq!((p.name.as_str(), p.mode, p.command.as_str()), ("hap", Mode::Http, "haproxy -f x"));
        assert_eq!(p.server_name(), "h.test");
        assert_eq!(Peer::parse("plain=cmd a=b").unwrap().mode, Mode::Tunnel, "= in the command is kept");
        assert_eq!(Peer::parse("plain=cmd a=b").unwrap().command, "cmd a=b");
        for bad in ["noequals", "=cmd", "x:fast=cmd", "x= "] {
            assert!(Peer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ats_pool_counters_are_summed_over_its_pools() {
        let json = r#"{ "global": {
            "proxy.process.tunnel.prewarm.origin.test:443.tls.http1_1.total_hit": "10",
            "proxy.process.tunnel.prewarm.origin.test:443.tls.http1_1.total_miss": "1",
            "proxy.process.tunnel.prewarm.origin.test:443.tls.http1_1.total_handshake_count": "14",
            "proxy.process.tunnel.prewarm.origin.test:443.tls.total_hit": "2",
            "proxy.process.tunnel.prewarm.origin.test:443.tls.total_handshake_count": "4",
            "proxy.process.http.total_incoming_connections": "99"
        } }"#;
        assert_eq!(ats_pool_counts(json), Some([12.0, 1.0, 18.0]));
        assert_eq!(ats_pool_counts("not json"), None);
    }

    #[test]
    fn shipped_configs_are_templates_of_the_lab_addresses() {
        for (file, text) in [
            ("nginx-stream", include_str!("../../../../../examples/peers/nginx-stream.conf")),
            ("nginx-https", include_str!("../../../../../examples/peers/nginx-https.conf")),
            ("haproxy-tcp", include_str!("../../../../../examples/peers/haproxy-tcp.cfg")),
            ("haproxy-http", include_str!("../../../../../examples/peers/haproxy-http.cfg")),
        ] {
            assert!(text.contains("{listen}") && text.contains("{origin}"), "{file}");
            let r = render(text, "10.77.1.2:8443", "10.77.2.2:443", "/run");
            assert!(!r.contains("{listen}") && r.contains("10.77.1.2:8443"), "{file}");
        }
    }
}
