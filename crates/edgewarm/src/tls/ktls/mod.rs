//! Kernel TLS: once a session's handshake is done here in rustls, its record layer can move into
//! the kernel (`TCP_ULP "tls"`), so the kernel encrypts on write and decrypts on read, and two
//! such sockets can be spliced: plaintext never enters user space.
//!
//! - [`aligned`]: a reader under rustls that never reads past a TLS record boundary, so a
//!   session can be handed to the kernel at any point without losing a partial record.
//! - [`stream`]: a kTLS socket as a byte stream: control records (alerts, tickets, KeyUpdate)
//!   handled, close_notify sent on shutdown.
//! - [`offload`](mod@offload): the hand-off itself, from a tokio-rustls stream to a [`KtlsStream`].
//!
//! This module is the kernel's side of it: which ciphers the running kernel takes ([`support`],
//! probed once) and how rustls's extracted secrets become the kernel's `tls12_crypto_info_*`
//! structures ([`set_keys`]). The setsockopt calls themselves are in
//! [`crate::transport::sockopt`], the one module allowed `unsafe`.

pub mod aligned;
pub mod offload;
pub mod stream;

use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::OnceLock;

use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};

pub use aligned::Aligned;
pub use offload::{offload, Handoff, Offloaded};
pub use stream::KtlsStream;

use crate::transport::sockopt;

/// The ciphers rustls can negotiate that the kernel may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// What the running kernel supports, probed once per process.
#[derive(Debug, Clone, Default)]
pub struct Support {
    /// `TCP_ULP "tls"` works: the kernel has TLS (built in or a loadable module).
    pub ulp: bool,
    /// Ciphers the kernel accepted as `TLS_TX` keys on a test socket.
    pub ciphers: Vec<Cipher>,
    /// Why not, when `ulp` is false.
    pub reason: Option<String>,
}

impl Support {
    pub fn takes(&self, cipher: Cipher) -> bool {
        self.ulp && self.ciphers.contains(&cipher)
    }
}

/// The kernel's kTLS support, probed on first call: a loopback socket pair per cipher, with zero
/// keys installed as `TLS_TX` (never used to send). Logs one line with the outcome.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let s = probe();
        if s.ulp {
            tracing::info!(ciphers = ?s.ciphers, "kernel TLS available");
        } else {
            tracing::info!(
                reason = s.reason.as_deref().unwrap_or("unknown"),
                "kernel TLS unavailable: routes with ktls keep TLS in user space"
            );
        }
        s
    })
}

fn probe() -> Support {
    let mut s = Support::default();
    for cipher in [Cipher::Aes128Gcm, Cipher::Aes256Gcm, Cipher::Chacha20Poly1305] {
        match probe_cipher(cipher) {
            Ok(()) => {
                s.ulp = true;
                s.ciphers.push(cipher);
            }
            Err(Probe::Ulp(e)) => {
                s.reason = Some(format!("TCP_ULP tls: {e}"));
                return s;
            }
            Err(Probe::Cipher) => {}
            Err(Probe::Socket(e)) => {
                s.reason = Some(format!("test socket: {e}"));
                return s;
            }
        }
    }
    s
}

enum Probe {
    Socket(io::Error),
    Ulp(io::Error),
    Cipher,
}

fn probe_cipher(cipher: Cipher) -> Result<(), Probe> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Probe::Socket)?;
    let addr = listener.local_addr().map_err(Probe::Socket)?;
    let client = TcpStream::connect(addr).map_err(Probe::Socket)?;
    let _server = listener.accept().map_err(Probe::Socket)?;
    sockopt::set_ulp_tls(&client).map_err(Probe::Ulp)?;
    let key = [0u8; 32];
    let key = if cipher == Cipher::Aes128Gcm { &key[..16] } else { &key[..] };
    set_key(&client, libc::TLS_TX, ProtocolVersion::TLSv1_3, 0, cipher, key, &[0; 12]).map_err(|_| Probe::Cipher)
}

/// The cipher of a session's secrets, if the kernel could take it at all.
pub fn cipher_of(secrets: &ConnectionTrafficSecrets) -> Option<Cipher> {
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { .. } => Some(Cipher::Aes128Gcm),
        ConnectionTrafficSecrets::Aes256Gcm { .. } => Some(Cipher::Aes256Gcm),
        ConnectionTrafficSecrets::Chacha20Poly1305 { .. } => Some(Cipher::Chacha20Poly1305),
        _ => None,
    }
}

/// The cipher a negotiated suite will extract as, before extracting (extraction consumes the
/// session, so what the kernel cannot take must be known first).
pub fn cipher_of_suite(suite: rustls::SupportedCipherSuite) -> Option<Cipher> {
    use rustls::CipherSuite as S;
    match suite.suite() {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(Cipher::Aes128Gcm),
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(Cipher::Aes256Gcm),
        S::TLS13_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(Cipher::Chacha20Poly1305),
        _ => None,
    }
}

/// Give a socket's record layer to the kernel: the transmit and receive keys with their record
/// sequence numbers, on a socket that already has `TCP_ULP "tls"`. The caller guarantees the
/// session is at a record boundary both ways (nothing buffered to send, no partial record read).
pub fn set_keys(sock: &impl std::os::fd::AsFd, version: ProtocolVersion, secrets: ExtractedSecrets) -> io::Result<()> {
    let (tx_seq, tx) = secrets.tx;
    let (rx_seq, rx) = secrets.rx;
    set_secret(sock, libc::TLS_TX, version, tx_seq, &tx)?;
    set_secret(sock, libc::TLS_RX, version, rx_seq, &rx)
}

/// One direction's key as the kernel's crypto_info.
fn set_secret(
    sock: &impl std::os::fd::AsFd,
    direction: libc::c_int,
    version: ProtocolVersion,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> io::Result<()> {
    let unsupported = || io::Error::new(io::ErrorKind::Unsupported, "cipher not supported by kernel TLS");
    let cipher = cipher_of(secrets).ok_or_else(unsupported)?;
    let (key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key.as_ref(), iv.as_ref()),
        _ => return Err(unsupported()),
    };
    set_key(sock, direction, version, seq, cipher, key, iv)
}

/// For the AES-GCM suites rustls's 12-byte IV is the kernel's 4-byte salt followed by its
/// 8-byte IV; ChaCha20-Poly1305 takes all 12 as IV.
fn set_key(
    sock: &impl std::os::fd::AsFd,
    direction: libc::c_int,
    version: ProtocolVersion,
    seq: u64,
    cipher: Cipher,
    key: &[u8],
    iv: &[u8],
) -> io::Result<()> {
    let version = match version {
        ProtocolVersion::TLSv1_2 => libc::TLS_1_2_VERSION,
        ProtocolVersion::TLSv1_3 => libc::TLS_1_3_VERSION,
        _ => return Err(io::Error::new(io::ErrorKind::Unsupported, "kernel TLS takes TLS 1.2 and 1.3 only")),
    };
    let rec_seq = seq.to_be_bytes();
    match cipher {
        Cipher::Aes128Gcm => {
            let (salt, iv) = iv.split_at(4);
            let info = libc::tls12_crypto_info_aes_gcm_128 {
                info: libc::tls_crypto_info { version, cipher_type: libc::TLS_CIPHER_AES_GCM_128 },
                iv: array(iv)?,
                key: array(key)?,
                salt: array(salt)?,
                rec_seq,
            };
            sockopt::setsockopt(sock, libc::SOL_TLS, direction, &info)
        }
        Cipher::Aes256Gcm => {
            let (salt, iv) = iv.split_at(4);
            let info = libc::tls12_crypto_info_aes_gcm_256 {
                info: libc::tls_crypto_info { version, cipher_type: libc::TLS_CIPHER_AES_GCM_256 },
                iv: array(iv)?,
                key: array(key)?,
                salt: array(salt)?,
                rec_seq,
            };
            sockopt::setsockopt(sock, libc::SOL_TLS, direction, &info)
        }
        Cipher::Chacha20Poly1305 => {
            let info = libc::tls12_crypto_info_chacha20_poly1305 {
                info: libc::tls_crypto_info { version, cipher_type: libc::TLS_CIPHER_CHACHA20_POLY1305 },
                iv: array(iv)?,
                key: array(key)?,
                salt: [],
                rec_seq,
            };
            sockopt::setsockopt(sock, libc::SOL_TLS, direction, &info)
        }
    }
}

fn array<const N: usize>(bytes: &[u8]) -> io::Result<[u8; N]> {
    bytes.try_into().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "unexpected key or IV length"))
}
