//! TLS 1.3's HKDF (RFC 5869) with each pseudorandom key's HMAC keyed once.
//!
//! rustls's aws-lc-rs suites expand through aws-lc's one-shot `HKDF_expand`, which keys the HMAC
//! again on every call: two SHA-256 blocks of pads before the one or two the output needs. A TLS
//! 1.3 key schedule expands the same secret several times (a key, an IV and, for QUIC, a
//! header-protection key from each traffic secret), and QUIC has four of those levels where
//! TCP's TLS has two: SHA-256 was 15 % of an HTTP/3 request's instructions at 31 requests a
//! connection, twice HTTP/2's (docs/benchmarks.md). rustls's own HMAC-based expansion
//! ([`HkdfUsingHmac`]) keys an HMAC once per secret and clones its state for each expansion; it
//! is given aws-lc-rs's HMAC here. The extract is done here ([`KeyedHkdf`]): rustls's leaves the
//! pseudorandom key in a buffer freed unwiped, and its suite would not report aws-lc's FIPS
//! mode. The outputs are the same bytes (tested against aws-lc's).

use std::sync::{Arc, LazyLock};

use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::{Hkdf, HkdfExpander, HkdfUsingHmac, OkmBlock};
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};

/// aws-lc-rs's HMAC with one of its hashes.
struct AwsLcHmac(&'static aws_lc_rs::hmac::Algorithm);

impl Hmac for AwsLcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(Keyed(aws_lc_rs::hmac::Key::new(*self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }

    fn fips(&self) -> bool {
        aws_lc_rs::try_fips_mode().is_ok()
    }
}

/// An HMAC keyed once: each signature starts from a copy of the keyed state.
struct Keyed(aws_lc_rs::hmac::Key);

impl Key for Keyed {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&self.0);
        ctx.update(first);
        for m in middle {
            ctx.update(m);
        }
        ctx.update(last);
        Tag::new(ctx.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

static SHA256: AwsLcHmac = AwsLcHmac(&aws_lc_rs::hmac::HMAC_SHA256);
static SHA384: AwsLcHmac = AwsLcHmac(&aws_lc_rs::hmac::HMAC_SHA384);
static HKDF_SHA256: KeyedHkdf = KeyedHkdf(&SHA256);
static HKDF_SHA384: KeyedHkdf = KeyedHkdf(&SHA384);

/// HKDF (RFC 5869) for one hash: the extract here, its key held only in blocks wiped on drop
/// ([`OkmBlock`], [`Tag`]); the expansion rustls's, on an HMAC keyed once.
struct KeyedHkdf(&'static AwsLcHmac);

impl Hkdf for KeyedHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        let zeroes = [0u8; OkmBlock::MAX_LEN];
        self.extract_from_secret(salt, &zeroes[..self.0.hash_output_len()])
    }

    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        // No salt is a string of zeros as long as the hash (RFC 5869 §2.2).
        let zeroes = [0u8; OkmBlock::MAX_LEN];
        let salt = salt.unwrap_or(&zeroes[..self.0.hash_output_len()]);
        let prk = OkmBlock::new(self.0.with_key(salt).sign(&[secret]).as_ref());
        self.expander_for_okm(&prk)
    }

    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        HkdfUsingHmac(self.0).expander_for_okm(okm)
    }

    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> Tag {
        self.0.with_key(key.as_ref()).sign(&[message])
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }
}

/// `suites` with each TLS 1.3 suite's HKDF replaced by the one above (same hash); TLS 1.2's
/// suites, and a TLS 1.3 suite on a hash without one here, as they are.
fn rekeyed(suites: &[SupportedCipherSuite]) -> Vec<SupportedCipherSuite> {
    suites
        .iter()
        .map(|suite| match suite {
            SupportedCipherSuite::Tls13(s) => {
                let hkdf: &'static KeyedHkdf = match s.common.hash_provider.output_len() {
                    32 => &HKDF_SHA256,
                    48 => &HKDF_SHA384,
                    _ => return *suite,
                };
                // Made once per process (see `provider`), so leaking it is a fixed few bytes.
                SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
                    common: CipherSuiteCommon {
                        suite: s.common.suite,
                        hash_provider: s.common.hash_provider,
                        confidentiality_limit: s.common.confidentiality_limit,
                    },
                    hkdf_provider: hkdf,
                    aead_alg: s.aead_alg,
                    quic: s.quic,
                })))
            }
            other => *other,
        })
        .collect()
}

/// aws-lc-rs's default provider with [`rekeyed`] suites, made once.
pub(super) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites = rekeyed(&provider.cipher_suites);
        Arc::new(provider)
    });
    PROVIDER.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every TLS 1.3 suite's HKDF here and aws-lc's own, on the same inputs.
    #[test]
    fn the_rekeyed_hkdf_gives_aws_lc_s_bytes() {
        let theirs = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
        let ours = rekeyed(&theirs);
        let mut compared = 0;
        for (a, b) in theirs.iter().zip(&ours) {
            let (SupportedCipherSuite::Tls13(a), SupportedCipherSuite::Tls13(b)) = (a, b) else {
                continue;
            };
            assert_eq!(a.common.suite, b.common.suite);
            let (a, b) = (a.hkdf_provider, b.hkdf_provider);
            let secret: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37)).collect();
            let info: [&[u8]; 3] = [b"\x00\x10", b"tls13 quic key", b""];
            for salt in [None, Some(&b"a salt"[..])] {
                let (ea, eb) = (a.extract_from_secret(salt, &secret), b.extract_from_secret(salt, &secret));
                assert_eq!(ea.expand_block(&info).as_ref(), eb.expand_block(&info).as_ref());
                // One output byte, one block and a bit, many blocks.
                for len in [1, 33, 255] {
                    let (mut oa, mut ob) = (vec![0; len], vec![0; len]);
                    ea.expand_slice(&info, &mut oa).unwrap();
                    eb.expand_slice(&info, &mut ob).unwrap();
                    assert_eq!(oa, ob, "{len} bytes");
                }
                let (za, zb) = (a.extract_from_zero_ikm(salt), b.extract_from_zero_ikm(salt));
                assert_eq!(za.expand_block(&info).as_ref(), zb.expand_block(&info).as_ref());
            }
            let okm = OkmBlock::new(&secret[..a.extract_from_zero_ikm(None).hash_len()]);
            let (fa, fb) = (a.expander_for_okm(&okm), b.expander_for_okm(&okm));
            assert_eq!(fa.expand_block(&info).as_ref(), fb.expand_block(&info).as_ref());
            assert_eq!(a.hmac_sign(&okm, b"finished").as_ref(), b.hmac_sign(&okm, b"finished").as_ref());
            assert_eq!(a.fips(), b.fips(), "the same FIPS status as aws-lc's own");
            compared += 1;
        }
        assert_eq!(compared, 3, "TLS 1.3's three suites");
    }
}
