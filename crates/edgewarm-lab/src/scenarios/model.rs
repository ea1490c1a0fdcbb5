//! The round-trip model: the least time to first byte each mode allows, counted in round trips
//! on each link. `r` is the client↔edge RTT, `R` the edge↔origin RTT.
//!
//! A new connection pays, on the links its handshakes cross: 1 RTT of TCP handshake, 1 RTT of
//! TLS 1.3 handshake (2 for TLS 1.2), then 1 RTT for the request. Per mode:
//!
//! | mode | TCP | TLS 1.3 | request | total (1.3) | total (1.2) |
//! |---|---|---|---|---|---|
//! | direct | r+R | r+R | r+R | 3(r+R) | 4(r+R) |
//! | tunnel | r + R (edge connects after the hello) | r+R | r+R | 3(r+R) | 4(r+R) |
//! | tunnel, origin TFO | r (the hello rides the edge's SYN) | r+R | r+R | 3r+2R | 4r+3R |
//! | prewarm | r | r (terminated at the edge) | r+R | 3r+R | 4r+R |
//! | http | r | r (terminated at the edge) | r+R (a stream on a standing connection) | 3r+R | 4r+R |
//!
//! | http, h3 origin | r | r | r+R (a stream on a standing QUIC connection) | 3r+R | 4r+R |
//! | h3 (HTTP/3 over QUIC) | - | r (QUIC and TLS 1.3 together) | r+R | 2r+R | - |
//!
//! Client TCP Fast Open removes one `r` (the request or hello rides the client's SYN), as does
//! TLS 1.3 0-RTT on a resumed session; with both on a pre-warmed route the floor is `r+R`.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Direct,
    Tunnel,
    TunnelTfo,
    Prewarm,
    Http,
    /// An `http` route over HTTP/3 (QUIC).
    H3,
    /// An `http` route whose origin connections are HTTP/3 (`upstream.protocol: h3`) to an
    /// edgewarm beside the origin: the long link carries QUIC, the client speaks HTTP/2.
    HttpH3Origin,
    /// The browser lab's cached site: an `http` route with the edge cache and learned Early
    /// Hints (`cache: {}`, `early_hints: {}`), the pages' cacheable releases.
    Cache,
    /// The same without `early_hints`: what the 103 is worth.
    CacheNoHints,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Tunnel => "tunnel",
            Self::TunnelTfo => "tunnel + origin TFO",
            Self::Prewarm => "prewarm",
            Self::Http => "http",
            Self::H3 => "h3",
            Self::HttpH3Origin => "http, h3 origin",
            Self::Cache => "cache",
            Self::CacheNoHints => "cache-no-hints",
        }
    }
}

/// Round trips on each link, `(on r, on R)`; `client_tfo` and `zero_rtt` each remove one `r`.
pub fn round_trips(mode: Mode, tls12: bool, client_tfo: bool, zero_rtt: bool) -> (u32, u32) {
    let tls = if tls12 { 2 } else { 1 };
    let (on_r, on_big_r) = match mode {
        Mode::Direct | Mode::Tunnel => (2 + tls, 2 + tls),
        Mode::TunnelTfo => (2 + tls, 1 + tls),
        // (The far edge beside the origin adds no round trip on R: it sits 0 ms from it.)
        // The cached site's HTML is revalidated with the origin on every visit (`no-cache`).
        Mode::Prewarm | Mode::Http | Mode::HttpH3Origin | Mode::Cache | Mode::CacheNoHints => (2 + tls, 1),
        // QUIC: one round trip of handshake (transport and TLS 1.3 together) to the edge, then
        // the request; no TCP, so nothing for Fast Open to save. 0-RTT saves the handshake's.
        Mode::H3 => return (2 - u32::from(zero_rtt), 1),
    };
    let saved = u32::from(client_tfo) + u32::from(zero_rtt && !tls12);
    (on_r - saved, on_big_r)
}

/// Least TTFB for `mode` (see [`round_trips`]).
pub fn min_ttfb(mode: Mode, tls12: bool, r: Duration, big_r: Duration, client_tfo: bool, zero_rtt: bool) -> Duration {
    let (a, b) = round_trips(mode, tls12, client_tfo, zero_rtt);
    r * a + big_r * b
}

/// `3r+R`, `4(r+R)`, … for round trips `(a, b)`.
pub fn formula((a, b): (u32, u32)) -> String {
    match (a, b) {
        (1, 1) => "r+R".into(),
        (a, b) if a == b => format!("{a}(r+R)"),
        (a, 1) => format!("{a}r+R"),
        (a, b) => format!("{a}r+{b}R"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_issue_s_formulas() {
        let (r, big_r) = (20 * MS, 100 * MS);
        assert_eq!(min_ttfb(Mode::Direct, false, r, big_r, false, false), 360 * MS);
        assert_eq!(min_ttfb(Mode::Direct, true, r, big_r, false, false), 480 * MS);
        assert_eq!(min_ttfb(Mode::Tunnel, false, r, big_r, false, false), 360 * MS);
        assert_eq!(min_ttfb(Mode::TunnelTfo, false, r, big_r, false, false), 260 * MS);
        assert_eq!(min_ttfb(Mode::Prewarm, false, r, big_r, false, false), 160 * MS);
        assert_eq!(min_ttfb(Mode::Prewarm, true, r, big_r, false, false), 180 * MS);
        // TFO and 0-RTT on a pre-warmed route: r + R.
        assert_eq!(min_ttfb(Mode::Prewarm, false, r, big_r, true, true), 120 * MS);
        // 0-RTT does not exist in TLS 1.2.
        assert_eq!(min_ttfb(Mode::Prewarm, true, r, big_r, false, true), 180 * MS);
        // The far-origin case: Japan to a UK origin over TLS 1.2, 4 round trips.
        assert_eq!(min_ttfb(Mode::Direct, true, 16 * MS, 265 * MS, false, false), 1124 * MS);
        // http routes cost what prewarm costs: 3r+R (4r+R over TLS 1.2); client TFO takes one r.
        assert_eq!(min_ttfb(Mode::Http, false, r, big_r, false, false), 160 * MS);
        assert_eq!(min_ttfb(Mode::Http, true, 16 * MS, 265 * MS, false, false), 329 * MS);
        assert_eq!(min_ttfb(Mode::Http, false, r, big_r, true, false), 140 * MS);
        // HTTP/3: 2r+R new, r+R with 0-RTT: the floor without Fast Open.
        assert_eq!(min_ttfb(Mode::H3, false, r, big_r, false, false), 140 * MS);
        assert_eq!(min_ttfb(Mode::H3, false, r, big_r, false, true), 120 * MS);
        assert_eq!(formula(round_trips(Mode::H3, false, false, true)), "r+R");
    }

    #[test]
    fn formulas() {
        let f = |mode, tls12, tfo, zero| formula(round_trips(mode, tls12, tfo, zero));
        assert_eq!(f(Mode::Direct, false, false, false), "3(r+R)");
        assert_eq!(f(Mode::Tunnel, true, false, false), "4(r+R)");
        assert_eq!(f(Mode::TunnelTfo, false, false, false), "3r+2R");
        assert_eq!(f(Mode::TunnelTfo, false, true, false), "2(r+R)");
        assert_eq!(f(Mode::Prewarm, false, false, false), "3r+R");
        assert_eq!(f(Mode::Prewarm, true, false, false), "4r+R");
        assert_eq!(f(Mode::Prewarm, false, true, true), "r+R");
    }
}
