//! What a route's certificate says about itself: the names it covers, who issued it and when
//! it expires. Read once per load, for `edgewarm_tls_certificate_expiry_seconds` and
//! `/certificates`: an expiring certificate file is an outage waiting to happen, and the edge
//! is where it shows first.

use rustls::pki_types::CertificateDer;
use serde::Serialize;

/// A warning at every load once a certificate has fewer than this many days left.
pub(crate) const WARN_DAYS: i64 = 30;

/// The leaf certificate of a chain, as `/certificates` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CertInfo {
    /// Its subject alternative names (DNS names and addresses).
    pub names: Vec<String>,
    pub issuer: String,
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
}

impl CertInfo {
    /// Read the leaf (`der`): `None` for a certificate that does not parse (rustls accepted it,
    /// so this only loses the numbers, never the route).
    pub fn of(der: &CertificateDer<'_>) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        let names = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                        x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                            4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).ok()?).to_string()),
                            16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).ok()?).to_string()),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let validity = cert.validity();
        Some(Self {
            names,
            issuer: cert.issuer().to_string(),
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
        })
    }

    /// Whole days left at `now` (Unix seconds); negative once expired.
    pub fn days_left(&self, now: i64) -> i64 {
        (self.not_after - now).div_euclid(86_400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names, issuer and validity as rcgen wrote them.
    #[test]
    fn reads_names_issuer_and_validity() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string(), "b.example".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "a.example");
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2026, 4, 1);
        let cert = params.self_signed(&key).unwrap();
        let info = CertInfo::of(cert.der()).unwrap();
        assert_eq!(info.names, ["a.example", "b.example"]);
        assert!(info.issuer.contains("a.example"), "{}", info.issuer);
        assert_eq!(info.not_after - info.not_before, 90 * 86_400);
        assert_eq!(info.days_left(info.not_after - 86_400 * 10 - 5), 10);
        assert_eq!(info.days_left(info.not_after + 1), -1);
        assert!(CertInfo::of(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).is_none());
    }
}
