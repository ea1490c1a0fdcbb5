//! The running process's session-ticket keys, used when no `tls.ticket_keys` file is
//! configured: random, rotated every 6 hours (tickets live 12, so the previous key is kept to
//! decrypt), and handed to the next process at an upgrade ([`crate::upgrade`]), so a returning
//! client still resumes after the binary changed. Each route derives its own keys from them
//! (as from the file's), so a ticket never resumes on another route. In a fleet the keys
//! follow the fleet's ([`ProcessKeys::follow`], from [`crate::fleet`]) and the fleet rotates
//! them, once for every node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine;
use rustls::server::ProducesTickets;

use super::ticket_keys::TicketKeys;

/// How often a new key starts encrypting.
pub const ROTATION: std::time::Duration = std::time::Duration::from_secs(6 * 3600);

type Key = [u8; 48];

pub struct ProcessKeys {
    /// The first encrypts; all decrypt.
    keys: Mutex<Vec<Key>>,
    routes: Mutex<HashMap<String, Arc<Rotating>>>,
    /// The fleet's keys are followed: the fleet rotates them, this process does not.
    following: std::sync::atomic::AtomicBool,
    /// When it began following: (the key this process encrypted with, the fleet's first). The
    /// own key decrypts for as long as that first fleet key does.
    joined: Mutex<Option<(Key, Key)>>,
}

impl Default for ProcessKeys {
    fn default() -> Self {
        Self {
            keys: Mutex::new(vec![fresh()]),
            routes: Mutex::default(),
            following: Default::default(),
            joined: Mutex::default(),
        }
    }
}

impl ProcessKeys {
    /// The ticketer of one route; it follows rotations and adoptions.
    pub fn for_route(&self, route: &str) -> Arc<dyn ProducesTickets> {
        let keys = self.current();
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .entry(route.to_string())
            .or_insert_with(|| Arc::new(Rotating { inner: RwLock::new(keys.for_route(route)) }))
            .clone()
    }

    /// A new key encrypts from now on; the previous one still decrypts, older ones go. Not
    /// while the fleet's keys are followed (the fleet rotates those).
    pub fn rotate(&self) {
        if self.following.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        self.replace(|old| std::iter::once(fresh()).chain(old.iter().copied().take(1)).collect());
    }

    /// The keys, one base64 line each, for the next process.
    pub fn export(&self) -> String {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter().map(|k| base64::engine::general_purpose::STANDARD.encode(k) + "\n").collect()
    }

    /// Take over the previous process's keys (its [`ProcessKeys::export`]): they decrypt the
    /// tickets it issued; a key of this process's own encrypts.
    pub fn adopt(&self, exported: &str) -> Result<(), String> {
        TicketKeys::parse(exported)?;
        let handed: Vec<Key> = decode(exported).into_iter().take(2).collect();
        self.replace(|_| std::iter::once(fresh()).chain(handed.iter().copied()).collect());
        Ok(())
    }

    /// Use the fleet's keys (base64 lines, the first encrypts) from now on. The first key this
    /// process used before stays as a decrypting one, so tickets it issued before it joined
    /// (or its predecessor's, handed over at an upgrade) still resume here.
    pub fn follow(&self, shared: &str) -> Result<(), String> {
        TicketKeys::parse(shared)?;
        let handed: Vec<Key> = decode(shared).into_iter().take(2).collect();
        if handed.is_empty() {
            return Err("no key".into());
        }
        self.following.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        self.replace(|old| {
            let (own, first) = *joined.get_or_insert((old.first().copied().unwrap_or(handed[0]), handed[0]));
            let keep_own = handed.contains(&first) && !handed.contains(&own);
            handed.iter().copied().chain(keep_own.then_some(own)).collect()
        });
        Ok(())
    }

    /// Whether the fleet's keys are followed.
    pub fn following(&self) -> bool {
        self.following.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn current(&self) -> TicketKeys {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        TicketKeys::from_raw(&keys)
    }

    fn replace(&self, next: impl FnOnce(&[Key]) -> Vec<Key>) {
        let keys = {
            let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            *keys = next(&keys);
            TicketKeys::from_raw(&keys)
        };
        for (route, ticketer) in self.routes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            *ticketer.inner.write().unwrap_or_else(|p| p.into_inner()) = keys.for_route(route);
        }
    }
}

fn decode(lines: &str) -> Vec<Key> {
    lines
        .lines()
        .filter_map(|l| base64::engine::general_purpose::STANDARD.decode(l.trim()).ok())
        .filter_map(|b| Key::try_from(b.as_slice()).ok())
        .collect()
}

/// A new random key as one base64 line (what the fleet shares).
pub fn fresh_line() -> String {
    base64::engine::general_purpose::STANDARD.encode(fresh())
}

fn fresh() -> Key {
    let mut key = [0u8; 48];
    // aws-lc's generator does not fail on Linux; an all-zero key would still be per-process
    // unique in name only, so a failure is not papered over silently.
    aws_lc_rs::rand::fill(&mut key).expect("the system's random generator");
    key
}

/// A route's ticketer whose keys can change under it.
struct Rotating {
    inner: RwLock<Arc<dyn ProducesTickets>>,
}

impl std::fmt::Debug for Rotating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotating").finish_non_exhaustive()
    }
}

impl Rotating {
    fn get(&self) -> Arc<dyn ProducesTickets> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ProducesTickets for Rotating {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.get().lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.get().encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.get().decrypt(cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_survives_one_rotation_and_an_upgrade_but_not_two_rotations() {
        let old = ProcessKeys::default();
        let route = old.for_route("a.example");
        let ticket = route.encrypt(b"session").unwrap();
        old.rotate();
        assert_eq!(route.decrypt(&ticket).as_deref(), Some(&b"session"[..]), "the previous key still decrypts");
        let after_rotation = route.encrypt(b"newer").unwrap();
        assert_ne!(after_rotation[..16], ticket[..16], "a new key encrypts");

        let new = ProcessKeys::default();
        new.adopt(&old.export()).unwrap();
        let taken_over = new.for_route("a.example");
        assert_eq!(taken_over.decrypt(&ticket).as_deref(), Some(&b"session"[..]));
        assert_eq!(taken_over.decrypt(&after_rotation).as_deref(), Some(&b"newer"[..]));
        assert_eq!(new.for_route("b.example").decrypt(&ticket), None, "routes do not share tickets");

        old.rotate();
        assert_eq!(route.decrypt(&ticket), None, "two rotations later the key is gone");
        assert!(new.adopt("not a key").is_err());
    }

    #[test]
    fn following_the_fleet_keeps_the_own_key_to_decrypt_and_stops_local_rotation() {
        let node = ProcessKeys::default();
        let route = node.for_route("a.example");
        let own = route.encrypt(b"before").unwrap();
        let (one, two) = (fresh_line(), fresh_line());
        node.follow(&one).unwrap();
        let under_one = route.encrypt(b"fleet").unwrap();
        assert_eq!(route.decrypt(&own).as_deref(), Some(&b"before"[..]), "issued before joining");
        let other = ProcessKeys::default();
        other.follow(&one).unwrap();
        assert_eq!(other.for_route("a.example").decrypt(&under_one).as_deref(), Some(&b"fleet"[..]));
        node.rotate();
        assert_eq!(other.for_route("a.example").decrypt(&route.encrypt(b"x").unwrap()).as_deref(), Some(&b"x"[..]));
        node.follow(&one).unwrap();
        assert_eq!(route.decrypt(&own).as_deref(), Some(&b"before"[..]), "the same keys again (a reconnection)");
        assert!(node.follow("garbage").is_err());
        assert_eq!(route.decrypt(&under_one).as_deref(), Some(&b"fleet"[..]), "garbage changes nothing");
        // The fleet rotated: the new key encrypts, the previous still decrypts.
        node.follow(&format!("{two}\n{one}\n")).unwrap();
        assert_eq!(route.decrypt(&under_one).as_deref(), Some(&b"fleet"[..]));
        assert_eq!(route.decrypt(&own).as_deref(), Some(&b"before"[..]), "while the first fleet key decrypts");
        node.follow(&format!("{}\n{two}\n", fresh_line())).unwrap();
        assert_eq!(route.decrypt(&under_one), None, "two rotations later");
        assert_eq!(route.decrypt(&own), None);
    }
}
