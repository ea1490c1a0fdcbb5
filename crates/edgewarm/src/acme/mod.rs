//! Certificates from an ACME server (RFC 8555) for `cert: acme` routes, kept by the server
//! across reloads: [`certificate`] (one name's certificate, the routes' resolver, swapped in
//! place on renewal), [`challenge`] (TLS-ALPN-01, answered by the listener itself),
//! [`account`] (the one account, registered anew when the server refuses it),
//! [`order`] (one order through instant-acme), [`renew`] (when to order, and the
//! loop that does), [`store`] (account and certificates between runs, behind a trait).
//!
//! A name with a usable stored certificate serves it at once and orders nothing until its
//! renewal time; a name without one orders at start, and its route refuses handshakes (a TLS
//! alert, `connections_closed{reason="no_certificate"}`, a log line) until the certificate
//! arrives: never a self-signed stand-in.

mod account;
pub mod certificate;
pub mod challenge;
mod order;
mod renew;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use crate::config::AcmeConfig;
use crate::metrics::{AcmeAccount, AcmeResult, RouteLabel, RouteName};
use crate::tls::client::{LiveCert, LiveCerts};
use certificate::Managed;
use challenge::Challenges;
use store::{DirStore, Store};

/// What every name's renewal loop shares under one configuration.
pub(crate) struct Shared {
    config: AcmeConfig,
    store: Arc<dyn Store>,
    challenges: Arc<Challenges>,
    metrics: AcmeMetrics,
    /// The one account every name's orders use (made or loaded by the first order, replaced
    /// when the server refuses it: see [`account`]).
    account: tokio::sync::Mutex<Option<instant_acme::Account>>,
}

#[derive(Clone, Default)]
struct AcmeMetrics {
    orders: Family<AcmeResult, Counter>,
    expiry: Family<RouteLabel, Gauge>,
    accounts: Family<AcmeAccount, Counter>,
}

/// A name's renewal loop.
struct Loop {
    task: tokio::task::AbortHandle,
    now_please: Arc<Notify>,
}

/// The server's ACME certificates. `Default` is inert (for `edgewarm check`): it hands out
/// certificates that stay empty and orders nothing.
#[derive(Default)]
pub struct Acme {
    names: Mutex<HashMap<String, Arc<Managed>>>,
    /// The configuration the loops run under, and the loops.
    running: Mutex<(Option<AcmeConfig>, HashMap<String, Loop>)>,
    challenges: Arc<Challenges>,
    metrics: AcmeMetrics,
    /// A fleet's shared store, if the node is in one.
    maker: Mutex<Option<Arc<StoreMaker>>>,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme").finish_non_exhaustive()
    }
}

/// Where a name's certificate and key are stored.
fn cert_key(name: &str) -> String {
    format!("certs/{name}.pem")
}

/// Where a pending challenge answer (the key authorization's digest) is shared in a fleet.
fn challenge_key(name: &str) -> String {
    format!("challenges/{name}")
}

/// Makes the store of one ACME server's entries: given the node's folder for them (its local
/// copy) and the folder's name. Set by a fleet ([`Acme::store_through`]).
pub type StoreMaker = dyn Fn(DirStore, &str) -> Arc<dyn Store> + Send + Sync;

/// Each ACME server's account and certificates in a folder of their own, so a move from a
/// staging directory to the real one never serves the staging certificates.
fn server_folder(directory: &str) -> String {
    let plain: String = directory
        .trim_start_matches("https://")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    plain.trim_matches('_').to_string()
}

impl Acme {
    pub fn new(
        orders: Family<AcmeResult, Counter>,
        expiry: Family<RouteLabel, Gauge>,
        accounts: Family<AcmeAccount, Counter>,
    ) -> Self {
        Self {
            names: Mutex::default(),
            running: Mutex::default(),
            challenges: Arc::default(),
            metrics: AcmeMetrics { orders, expiry, accounts },
            maker: Mutex::default(),
        }
    }

    /// Keep the account, certificates and challenge answers where `maker` says (a fleet's
    /// shared store), from the next [`Acme::sync`] on.
    pub fn store_through(&self, maker: Arc<StoreMaker>) {
        *self.maker.lock().unwrap_or_else(|p| p.into_inner()) = Some(maker);
    }

    /// The certificate of `name` (made on first use, empty until [`Acme::sync`] loads or orders it).
    pub fn managed(&self, name: &str) -> Arc<Managed> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names
            .entry(name.to_string())
            .or_insert_with(|| {
                let label = RouteLabel { route: RouteName::new(name) };
                Arc::new(Managed::new(name, self.metrics.expiry.get_or_create(&label).clone()))
            })
            .clone()
    }

    /// Keep exactly `names`' certificates under `config`: load stored ones, start a loop for each
    /// new name, stop the loops (and forget the certificates) of names gone. A changed `acme:`
    /// section restarts every loop under it. Inside the tokio runtime.
    pub(crate) fn sync(&self, config: Option<&AcmeConfig>, names: &[String]) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let (current, loops) = &mut *running;
        if current.as_ref() != config {
            for (_, l) in loops.drain() {
                l.task.abort();
            }
            // Another server (or storage): its certificates, not the last one's.
            for managed in self.names.lock().unwrap_or_else(|p| p.into_inner()).values() {
                managed.clear();
            }
            *current = config.cloned();
        }
        let Some(config) = config else {
            self.challenges.share(None);
            return;
        };
        let keep: std::collections::HashSet<&String> = names.iter().collect();
        loops.retain(|name, l| {
            let kept = keep.contains(name);
            if !kept {
                l.task.abort();
            }
            kept
        });
        self.names.lock().unwrap_or_else(|p| p.into_inner()).retain(|name, _| keep.contains(name));
        let folder = server_folder(&config.directory);
        let local = DirStore::new(config.storage.join(&folder));
        let maker = self.maker.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let store: Arc<dyn Store> = match maker {
            Some(make) => make(local.clone(), &folder),
            None => Arc::new(local.clone()),
        };
        self.challenges.share(Some(store.clone()));
        let shared = Arc::new(Shared {
            config: config.clone(),
            store,
            challenges: self.challenges.clone(),
            metrics: self.metrics.clone(),
            account: tokio::sync::Mutex::default(),
        });
        for name in names {
            if loops.contains_key(name) {
                continue;
            }
            let managed = self.managed(name);
            if managed.leaf().is_none() {
                // The local copy, so a stored certificate serves from the first connection (a
                // fleet's newer one is taken by the name's loop).
                load_stored(&managed, &local);
            }
            let now_please = Arc::new(Notify::new());
            let task = tokio::spawn(renew::run(shared.clone(), managed, now_please.clone())).abort_handle();
            loops.insert(name.clone(), Loop { task, now_please });
        }
    }

    /// Order `name`'s certificate now, whatever its renewal time (unless an order is under way:
    /// then that one stands); `false`: no such name.
    pub fn renew_now(&self, name: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.1.get(name).map(|l| l.now_please.notify_waiters()).is_some()
    }

    /// Pending TLS-ALPN-01 answers, for the listener.
    pub(crate) fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    /// `/certificates`' entries for ACME names, replacing what a load's survey said of them:
    /// the certificate now, the next order, the last failure.
    pub fn overlay(&self, list: &mut Vec<serde_json::Value>) {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|e| !e["route"].as_str().is_some_and(|r| names.contains_key(r)));
        let now = renew::unix_now();
        for (name, managed) in names.iter() {
            let mut entry = match managed.leaf() {
                Some(leaf) => {
                    let days = leaf.days_left(now);
                    let mut e = serde_json::to_value(leaf).unwrap_or_default();
                    e["days_left"] = days.into();
                    e
                }
                None => serde_json::json!({ "names": [name] }),
            };
            let status = managed.status();
            entry["route"] = name.clone().into();
            entry["source"] = "acme".into();
            entry["next_order"] = status.next_order.into();
            entry["last_error"] = status.last_error.into();
            list.push(entry);
        }
        list.sort_by_key(|v| v["route"].as_str().unwrap_or_default().to_string());
    }
}

impl LiveCerts for Acme {
    fn certificate(&self, name: &str) -> Arc<dyn LiveCert> {
        self.managed(name)
    }
}

impl Drop for Acme {
    fn drop(&mut self) {
        let running = self.running.get_mut().unwrap_or_else(|p| p.into_inner());
        for l in running.1.values() {
            l.task.abort();
        }
    }
}

/// The stored certificate of `managed`'s name, if it is usable; a damaged or expired one is
/// logged and ordered anew, never a failure to start.
fn load_stored(managed: &Managed, store: &DirStore) {
    let name = managed.name();
    match store.read(&cert_key(name)) {
        Ok(Some(pem)) => match managed.install(&pem, renew::unix_now()) {
            Ok(info) => tracing::info!(name, not_after = info.not_after, "ACME certificate loaded from storage"),
            Err(e) => tracing::warn!(name, error = %e, "stored ACME certificate unusable: ordering a new one"),
        },
        Ok(None) => {}
        Err(e) => tracing::warn!(name, error = %e, "cannot read the stored ACME certificate: ordering a new one"),
    }
}
