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
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Tunnel => "tunnel",
            Self::TunnelTfo => "tunnel + origin TFO",
            Self::Prewarm => "prewarm",
        }
    }

    /// The formula, for the report.
    pub fn formula(self, tls12: bool) -> &'static str {
        match (self, tls12) {
            (Self::Direct | Self::Tunnel, false) => "3(r+R)",
            (Self::Direct | Self::Tunnel, true) => "4(r+R)",
            (Self::TunnelTfo, false) => "3r+2R",
            (Self::TunnelTfo, true) => "4r+3R",
            (Self::Prewarm, false) => "3r+R",
            (Self::Prewarm, true) => "4r+R",
        }
    }
}

/// Least TTFB for `mode`; `client_tfo` and `zero_rtt` each remove one `r`.
pub fn min_ttfb(mode: Mode, tls12: bool, r: Duration, big_r: Duration, client_tfo: bool, zero_rtt: bool) -> Duration {
    let tls = if tls12 { 2 } else { 1 };
    let (on_r, on_big_r) = match mode {
        Mode::Direct | Mode::Tunnel => (2 + tls, 2 + tls),
        Mode::TunnelTfo => (2 + tls, 1 + tls),
        Mode::Prewarm => (2 + tls, 1),
    };
    let saved = u32::from(client_tfo) + u32::from(zero_rtt && !tls12);
    r * (on_r - saved) + big_r * on_big_r
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
    }

    #[test]
    fn formulas_agree_with_the_numbers() {
        for tls12 in [false, true] {
            for mode in [Mode::Direct, Mode::Tunnel, Mode::TunnelTfo, Mode::Prewarm] {
                // r = 1 ms, R = 1000 ms makes each coefficient readable.
                let d = min_ttfb(mode, tls12, MS, 1000 * MS, false, false).as_millis();
                let (big, small) = (d / 1000, d % 1000);
                let f = mode.formula(tls12);
                let expect = match (small, big) {
                    (s, b) if s == b => format!("{s}(r+R)"),
                    (s, 1) => format!("{s}r+R"),
                    (s, b) => format!("{s}r+{b}R"),
                };
                assert_eq!(f, expect, "{mode:?} tls12={tls12}");
            }
        }
    }
}
