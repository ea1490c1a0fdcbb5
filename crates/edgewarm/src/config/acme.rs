//! The top-level `acme:` section: where certificates for `cert: acme` routes come from.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{duration, ConfigError};

/// The value of a route's `cert` that asks for a certificate from the ACME server.
pub(crate) const ACME_CERT: &str = "acme";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    /// The ACME server's directory URL (`https://…/directory`).
    pub directory: String,
    /// Account contacts (`mailto:ops@example.com`), told to the server when the account is made.
    #[serde(default)]
    pub contact: Vec<String>,
    /// Trust for the ACME server's own TLS (a private or test server): a PEM file. Without it the
    /// system's roots.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Account key, certificates and their keys (files 0600, folders 0700).
    #[serde(default = "default_storage")]
    pub storage: PathBuf,
    #[serde(default)]
    pub challenge: Challenge,
    /// The first wait after a failed order; each failure doubles it, up to an hour.
    #[serde(default = "default_retry", with = "duration")]
    pub retry: Duration,
}

/// How the server is shown that this node answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Challenge {
    /// RFC 8737: answered by the TLS listener itself, on the port it already owns (443).
    #[default]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    /// RFC 8555 §8.3: needs a cleartext listener on port 80 (not built yet: refused by `check`).
    #[serde(rename = "http-01")]
    Http01,
}

fn default_storage() -> PathBuf {
    "/var/lib/edgewarm/acme".into()
}

fn default_retry() -> Duration {
    Duration::from_secs(60)
}

impl AcmeConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match self.directory.parse::<http::Uri>() {
            Ok(u) if u.scheme_str() == Some("https") && u.host().is_some() => {}
            _ => {
                return Err(ConfigError::invalid(
                    "acme.directory",
                    format!("{:?} is not an https URL (the ACME server's directory)", self.directory),
                ))
            }
        }
        for (i, c) in self.contact.iter().enumerate() {
            if !c.starts_with("mailto:") || c.len() <= "mailto:".len() {
                return Err(ConfigError::invalid(format!("acme.contact[{i}]"), format!("{c:?}: write mailto:address")));
            }
        }
        if self.challenge == Challenge::Http01 {
            return Err(ConfigError::invalid(
                "acme.challenge",
                "http-01 needs a port-80 listener edgewarm does not have yet: use tls-alpn-01 (the default), \
                 answered on the TLS listener",
            ));
        }
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca)
                .map_err(|e| ConfigError::invalid("acme.ca", format!("cannot read {}: {e}", ca.display())))?;
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem).filter(Result::is_ok).count();
            if certs == 0 {
                return Err(ConfigError::invalid("acme.ca", format!("{}: no CERTIFICATE in file", ca.display())));
            }
        }
        if self.retry.is_zero() {
            return Err(ConfigError::invalid("acme.retry", "must be more than 0s"));
        }
        Ok(())
    }
}

/// Checks a `cert: acme` route's name: an exact host name the ACME server can validate.
pub(super) fn validate_name(sni: &str) -> Result<(), String> {
    if sni.starts_with("*.") {
        return Err("a wildcard name needs the DNS-01 challenge, which edgewarm does not answer: \
                    list each name as a route, or give the route a certificate file"
            .into());
    }
    if sni.is_empty() || sni == "*" || !sni.contains('.') {
        return Err(format!("sni {sni:?} cannot be certified by ACME: it needs a public host name (a.example.com)"));
    }
    if sni.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!("sni {sni:?} is an address: ACME certifies host names here"));
    }
    Ok(())
}
