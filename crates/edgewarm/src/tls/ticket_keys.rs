//! Session-ticket keys from a file (`tls.ticket_keys`), so a fleet of edges behind one name
//! resumes each other's sessions.
//!
//! The file holds one key per line: 48 random bytes in base64 (`openssl rand -base64 48`);
//! blank lines and `#` comments are ignored. The **first** key encrypts new tickets; every key
//! decrypts, so rotation is: put a new key first, keep the old ones below it for as long as
//! tickets issued under them should still resume (the ticket lifetime, 12 h), push the file to
//! every node, and SIGHUP each. The file is read at start and at every reload.
//!
//! Each key is 16 bytes of name (written in every ticket, to find the key again) and 32 bytes
//! of secret. A route never uses the secret directly: its AES-256-GCM key is derived with
//! HKDF-SHA256 from the secret and the route's name, so a ticket issued under one route's
//! certificate still never resumes on another's, as with the per-route random keys used when
//! there is no file.
//!
//! Routes that accept 0-RTT ignore the file: rustls offers early data only with stateful
//! sessions, which live in one node's memory.

use std::sync::Arc;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
use base64::Engine;
use rustls::server::ProducesTickets;

/// Tickets say they are good for this long (RFC 8446 caps it at 7 days).
const LIFETIME_SECS: u32 = 12 * 3600;
const NAME_LEN: usize = 16;

/// The keys of one file, in the file's order.
#[derive(Clone)]
pub struct TicketKeys {
    keys: Vec<([u8; NAME_LEN], [u8; 32])>,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKeys").field("keys", &self.keys.len()).finish()
    }
}

impl TicketKeys {
    /// Parse the file's text; the error says which line is wrong and how.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(line)
                .map_err(|e| format!("line {}: not base64 ({e})", i + 1))?;
            let Ok(bytes) = <[u8; 48]>::try_from(bytes.as_slice()) else {
                return Err(format!(
                    "line {}: a key is 48 bytes ({} here); make one with `openssl rand -base64 48`",
                    i + 1,
                    bytes.len()
                ));
            };
            let (name, secret) = bytes.split_at(NAME_LEN);
            let name: [u8; NAME_LEN] = name.try_into().expect("16 bytes");
            if keys.iter().any(|(n, _)| *n == name) {
                return Err(format!("line {}: the same key twice", i + 1));
            }
            keys.push((name, secret.try_into().expect("32 bytes")));
        }
        if keys.is_empty() {
            return Err("no key in the file; make one with `openssl rand -base64 48`".into());
        }
        Ok(Self { keys })
    }

    /// Keys as they are: 16 bytes of name, 32 of secret each (the process's own, see
    /// [`super::process_keys`]).
    pub(crate) fn from_raw(keys: &[[u8; 48]]) -> Self {
        let keys = keys
            .iter()
            .map(|k| {
                let (name, secret) = k.split_at(NAME_LEN);
                (name.try_into().expect("16 bytes"), secret.try_into().expect("32 bytes"))
            })
            .collect();
        Self { keys }
    }

    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text)
    }

    /// The secret the QUIC listener's stateless-reset and connection-ID keys are derived from
    /// (with the host's identity: they are shared by one host's processes, not the fleet's):
    /// the file's last key's. A rotation adds its key first and removes the oldest later, so
    /// this changes only at that removal; a process started after a crash across one derives
    /// other keys, and the dead process's connections end by silence instead of a reset.
    /// Never used as it is: each use derives its own with HKDF.
    pub fn quic_secret(&self) -> &[u8; 32] {
        &self.keys.last().expect("a file has at least one key").1
    }

    /// The ticketer of one route: its keys derived from the file's for `route`.
    pub fn for_route(&self, route: &str) -> Arc<dyn ProducesTickets> {
        let salt = Salt::new(HKDF_SHA256, b"edgewarm session tickets");
        let keys = self
            .keys
            .iter()
            .map(|(name, secret)| {
                let mut derived = [0u8; 32];
                salt.extract(secret)
                    .expand(&[route.as_bytes()], HKDF_SHA256)
                    .and_then(|okm| okm.fill(&mut derived))
                    .expect("32 bytes is a valid HKDF-SHA256 output length");
                let key = UnboundKey::new(&AES_256_GCM, &derived).expect("a 32-byte AES-256 key");
                (*name, LessSafeKey::new(key))
            })
            .collect();
        Arc::new(FileTicketer { keys })
    }
}

struct FileTicketer {
    /// The first encrypts; all decrypt.
    keys: Vec<([u8; NAME_LEN], LessSafeKey)>,
}

impl std::fmt::Debug for FileTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTicketer").field("keys", &self.keys.len()).finish()
    }
}

impl ProducesTickets for FileTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        LIFETIME_SECS
    }

    /// `name ‖ nonce ‖ AES-256-GCM(plain, aad = name)`.
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let (name, key) = self.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut sealed = plain.to_vec();
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(name), &mut sealed).ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + NONCE_LEN + sealed.len());
        ticket.extend_from_slice(name);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + NONCE_LEN {
            return None;
        }
        let (name, rest) = ticket.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let (_, key) = self.keys.iter().find(|(n, _)| n == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = key.open_in_place(nonce, Aad::from(name), &mut buf).ok()?;
        Some(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([b; 48])
    }

    #[test]
    fn the_first_key_encrypts_and_every_key_decrypts() {
        let old = TicketKeys::parse(&key(1)).unwrap().for_route("a.example");
        let ticket = old.encrypt(b"session").unwrap();
        let rotated =
            TicketKeys::parse(&format!("# rotated\n{}\n\n{}\n", key(2), key(1))).unwrap().for_route("a.example");
        assert_eq!(rotated.decrypt(&ticket).as_deref(), Some(&b"session"[..]), "the old key still decrypts");
        let fresh = rotated.encrypt(b"next").unwrap();
        assert_eq!(&fresh[..16], &[2u8; 16], "the first key encrypts");
        assert_eq!(old.decrypt(&fresh), None, "a node without the new key cannot read its tickets");
        let dropped = TicketKeys::parse(&key(2)).unwrap().for_route("a.example");
        assert_eq!(dropped.decrypt(&ticket), None, "a key removed from the file no longer resumes");
    }

    #[test]
    fn routes_do_not_share_tickets() {
        let keys = TicketKeys::parse(&key(3)).unwrap();
        let ticket = keys.for_route("a.example").encrypt(b"s").unwrap();
        assert_eq!(keys.for_route("b.example").decrypt(&ticket), None);
        let mut tampered = ticket.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(keys.for_route("a.example").decrypt(&tampered), None);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert!(TicketKeys::parse("").unwrap_err().contains("no key"));
        assert!(TicketKeys::parse("not base64!").unwrap_err().starts_with("line 1: not base64"));
        assert!(TicketKeys::parse("# c\nAAAA").unwrap_err().starts_with("line 2: a key is 48 bytes (3 here)"));
        assert!(TicketKeys::parse(&format!("{}\n{}", key(4), key(4))).unwrap_err().contains("same key twice"));
    }
}
