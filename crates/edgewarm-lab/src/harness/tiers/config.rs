//! The two tiers' edgewarm configurations: each edge an `http` route with `cache: {}` whose
//! origin is the shield; the shield an `http` route with `cache: {}` whose origin is the lab
//! origin. The protocol between two tiers is one function ([`upstream`]): the hook a new origin
//! kind (HTTP/3) or a new way in (a cleartext listener on the shield) changes.
//!
//! Both tiers serve the one site name [`NAME`]: the edge forwards the client's `:authority`,
//! so the shield must have a route for that name (another name would get 421), and both caches
//! key the same URL. The edge verifies the shield's certificate for that name; the shield
//! verifies the origin's for `origin.test`.

use super::opts::TierProtocol;
use crate::harness::edge_yaml;
use crate::wan::tiers::{edge_front, shield_front, ORIGIN};

/// The site the clients ask for, at every tier.
pub(crate) const NAME: &str = "h.test";
/// The origin's certificate name.
pub(crate) const ORIGIN_NAME: &str = "origin.test";
/// Standing connections each tier holds to the next. Few: one client at a time per edge; the
/// lab waits for them before measuring ([`super::ready`]).
pub(crate) const CONNECTIONS: usize = 2;

/// The origin's port: 443 with TLS, 80 in cleartext.
pub(crate) fn origin_port(p: TierProtocol) -> u16 {
    if p == TierProtocol::H2c {
        80
    } else {
        443
    }
}

/// The route lines that say how to reach the next tier over `p` (its certificate, when there
/// is TLS, verified for `sni` against the lab CA in `d`).
fn upstream(p: TierProtocol, sni: &str, d: &str) -> String {
    let tls = format!("    origin_tls: {{sni: {sni}, ca: {d}/ca.pem}}\n");
    let with = |protocol: &str| format!("    upstream: {{connections: {CONNECTIONS}{protocol}}}\n{tls}");
    match p {
        TierProtocol::H2 => with(""),
        TierProtocol::Http11 => with(", protocol: http/1.1"),
        // No TLS, so no origin_tls (`check` refuses it beside `tls: false`).
        TierProtocol::H2c => format!("    upstream: {{connections: {CONNECTIONS}, tls: false}}\n"),
        // The HTTP/3 origin kind (issue #34): standing QUIC connections to the shield's
        // `http3` listener, verified like TLS. An edgewarm without it refuses this key, and
        // the lab says so before it builds anything.
        TierProtocol::H3 => with(", protocol: h3"),
    }
}

/// Admin listener, upgrade socket (one per process: they share the file system) and the
/// listeners.
fn head(d: &str, process: &str, listeners: &[String]) -> String {
    edge_yaml::head("127.0.0.1:9900", format!("{d}/{process}-upgrade.sock"), listeners)
}

/// One `http` route for [`NAME`] with the cache on, its certificate `{cert}.pem`, then a
/// refusal for every other name.
fn route(d: &str, cert: &str, origin: &str, upstream: &str) -> String {
    let http = edge_yaml::route(NAME, "http", origin, &format!("{d}/{cert}"));
    format!("routes:\n{http}{upstream}    cache: {{}}\n{}", edge_yaml::REJECT_OTHERS)
}

/// Edge `i`'s configuration (run folder `d`, absolute): its clients' listener, the shield as
/// its origin over `tier`.
pub(crate) fn edge(d: &str, i: u8, tier: TierProtocol) -> String {
    let listeners = [format!("listen: \"{}:443\"", edge_front(i))];
    let origin = format!("{}:443", shield_front(i));
    head(d, &format!("edge{i}"), &listeners) + &route(d, "edge", &origin, &upstream(tier, NAME, d))
}

/// The shield's configuration: a listener toward each of `edges` edges, speaking `tier`, and
/// the origin over `to_origin`. `Err` for what the lab cannot set up (said before anything is
/// built).
pub(crate) fn shield(d: &str, edges: u8, tier: TierProtocol, to_origin: TierProtocol) -> Result<String, String> {
    let extra = match tier {
        TierProtocol::H2 | TierProtocol::Http11 => "",
        // QUIC on the same address and port as the TCP listener.
        TierProtocol::H3 => ", http3: true",
        // The hook for a shield that accepts cleartext: its listener would be written here.
        TierProtocol::H2c => {
            return Err("--tier-protocol h2c: the shield would have to accept cleartext HTTP/2, and edgewarm's \
                        listeners terminate TLS only (no cleartext listener yet); between tiers use h2 \
                        (the default) or http1.1 over TLS"
                .into())
        }
    };
    if to_origin == TierProtocol::H3 {
        return Err("--origin-protocol h3: the lab origin serves no HTTP/3; use h2, http1.1 or h2c".into());
    }
    let listeners: Vec<String> = (0..edges).map(|i| format!("listen: \"{}:443\"{extra}", shield_front(i))).collect();
    let origin = format!("{ORIGIN}:{}", origin_port(to_origin));
    Ok(head(d, "shield", &listeners) + &route(d, "shield", &origin, &upstream(to_origin, ORIGIN_NAME, d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(text: &str) {
        let config = edgewarm::config::Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    }

    /// Every protocol edgewarm has today makes configurations it accepts, with the cache on at
    /// both tiers and a listener per edge on the shield.
    #[test]
    fn the_tiers_configurations_are_ones_edgewarm_accepts() {
        for tier in [TierProtocol::H2, TierProtocol::Http11] {
            for i in 0..3 {
                valid(&edge("/run/lab", i, tier));
            }
            for to_origin in [TierProtocol::H2, TierProtocol::Http11, TierProtocol::H2c] {
                let shield = shield("/run/lab", 3, tier, to_origin).unwrap();
                valid(&shield);
                assert_eq!(shield.matches("    cache: {}\n").count(), 1, "{shield}");
                assert_eq!(shield.matches(":443\"}").count(), 3, "{shield}");
            }
        }
        let e = edge("/run/lab", 1, TierProtocol::H2);
        assert!(e.contains("listen: \"10.77.11.2:443\"") && e.contains("origin: \"10.77.21.2:443\""), "{e}");
        assert!(e.contains("origin_tls: {sni: h.test, ca: /run/lab/ca.pem}"), "{e}");
        assert!(e.contains("upgrade: {socket: /run/lab/edge1-upgrade.sock}"), "{e}");
        let s = shield("/run/lab", 2, TierProtocol::H2, TierProtocol::H2c).unwrap();
        assert!(
            s.contains("origin: \"10.77.30.2:80\"") && s.contains("tls: false") && !s.contains("origin_tls"),
            "{s}"
        );
    }

    /// h3 writes the HTTP/3 origin kind's key and an `http3` shield listener; h2c is refused
    /// with the reason (the shield has no cleartext listener), as is an HTTP/3 lab origin.
    #[test]
    fn the_hooks_ask_for_what_is_not_there_yet() {
        let e = edge("/run/lab", 0, TierProtocol::H3);
        assert!(e.contains("upstream: {connections: 2, protocol: h3}\n    origin_tls: {sni: h.test"), "{e}");
        let s = shield("/run/lab", 2, TierProtocol::H3, TierProtocol::H2).unwrap();
        assert_eq!(s.matches("http3: true").count(), 2, "{s}");
        valid(&s);
        let h2c = shield("/run/lab", 2, TierProtocol::H2c, TierProtocol::H2).unwrap_err();
        assert!(h2c.contains("cleartext"), "{h2c}");
        assert!(shield("/run/lab", 2, TierProtocol::H2, TierProtocol::H3).is_err());
        assert!(edge("/run/lab", 0, TierProtocol::H2c).contains("upstream: {connections: 2, tls: false}\n    cache"));
    }
}
