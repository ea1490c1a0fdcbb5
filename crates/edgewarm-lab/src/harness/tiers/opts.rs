//! The two-tier lab's options (`lab --scenario two-tier`): how many edges share the shield, and
//! what each tier speaks to the next. A file of their own so that the lab's options
//! ([`crate::scenarios::opts::LabOpts`]) can hold them without importing the run.

use serde::Serialize;

#[derive(Debug, Clone, clap::Args)]
pub struct TierOpts {
    /// `two-tier` and `fleet`: edges sharing the one shield, each with clients of its own (1 to 8).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub edges: u8,
    /// `two-tier` and `fleet`: what the edges speak to the shield: h2 (HTTP/2 over TLS), http1.1
    /// (HTTP/1.1 over TLS), h2c (HTTP/2 in cleartext, `upstream.tls: false`: for a private
    /// network; needs a shield that accepts cleartext, which edgewarm's listeners do not yet),
    /// h3 (`upstream.protocol: h3` to the shield's `http3` listener: needs edgewarm's HTTP/3
    /// origin kind).
    #[arg(long, value_enum, default_value_t = TierProtocol::H2)]
    pub tier_protocol: TierProtocol,
    /// `two-tier` and `fleet`: what the shield speaks to the origin: h2 (HTTP/2 over TLS), http1.1
    /// (over TLS) or h2c (cleartext: the origin on the shield's own network).
    #[arg(long, value_enum, default_value_t = TierProtocol::H2)]
    pub origin_protocol: TierProtocol,
}

/// How one tier reaches the next: an `http` route's `upstream` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum TierProtocol {
    /// HTTP/2 over TLS: standing multiplexed connections (`upstream.protocol: h2`, the default).
    #[serde(rename = "h2")]
    H2,
    /// HTTP/1.1 over TLS: a keep-alive pool (`upstream.protocol: http/1.1`).
    #[value(name = "http1.1")]
    #[serde(rename = "http/1.1")]
    Http11,
    /// HTTP/2 in cleartext with prior knowledge (`upstream.tls: false`).
    #[serde(rename = "h2c")]
    H2c,
    /// HTTP/3 over QUIC (`upstream.protocol: h3`).
    #[serde(rename = "h3")]
    H3,
}

impl TierProtocol {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::H2 => "h2",
            Self::Http11 => "http1.1",
            Self::H2c => "h2c",
            Self::H3 => "h3",
        }
    }

    /// What the report calls it.
    pub fn label(self) -> &'static str {
        match self {
            Self::H2 => "HTTP/2 over TLS",
            Self::Http11 => "HTTP/1.1 over TLS",
            Self::H2c => "HTTP/2 cleartext (h2c)",
            Self::H3 => "HTTP/3",
        }
    }
}
