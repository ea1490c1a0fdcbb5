//! The one ACME account every name's orders use: loaded from the store, or registered (then
//! stored) when there is none; registered anew when the server refuses the stored one (a
//! server that forgot its accounts, a CA reset, a deactivated account), so an account loss
//! costs one registration and the order is placed again at once, not a renewal failing until
//! someone deletes `account.json`. In a fleet the account is shared: one node registers (a
//! lease, as for a name's order) and the others take its account from the store.

use std::time::Duration;

use instant_acme::{Account, AccountCredentials, NewAccount};

use super::order::OrderError;
use super::Shared;
use crate::metrics::{AcmeAccount, AcmeAccountReason};

/// The store entry of the account's credentials (its private key among them).
const ACCOUNT: &str = "account.json";

/// The fleet's lease on registering the account (a name's leases are DNS names: an
/// underscore keeps this one apart).
const LEASE_NAME: &str = "_account";
/// How long that lease holds unless given up: a registration is one request, so a holder that
/// died mid-way blocks the others this long at most.
const LEASE: Duration = Duration::from_secs(60);
/// While another node registers: how often to look for its account in the store.
const FOLLOW: Duration = Duration::from_secs(1);

/// The account the store holds, unless it is `refused` (its key the one the server refused).
enum Stored {
    Usable(Account),
    /// Nothing stored (or only the refused account).
    Missing,
    /// Stored but unparsable.
    Unreadable,
}

fn builder(shared: &Shared) -> Result<instant_acme::AccountBuilder, OrderError> {
    Ok(match &shared.config.ca {
        Some(ca) => Account::builder_with_root(ca)?,
        None => Account::builder()?,
    })
}

async fn stored(shared: &Shared, refused: Option<&str>) -> Result<Stored, OrderError> {
    let Some(bytes) = shared.store.load(ACCOUNT).await? else { return Ok(Stored::Missing) };
    let credentials = match serde_json::from_slice::<AccountCredentials>(&bytes) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "the stored ACME account does not parse: making a new one");
            return Ok(Stored::Unreadable);
        }
    };
    // Built to compare its key: the credentials keep theirs private (costs a directory fetch).
    let account = builder(shared)?.from_credentials(credentials).await?;
    if refused.is_some_and(|thumb| account.key_thumbprint() == thumb) {
        return Ok(Stored::Missing);
    }
    Ok(Stored::Usable(account))
}

/// The account every order uses: the one held, else the stored one, else a new one.
pub(crate) async fn current(shared: &Shared) -> Result<Account, OrderError> {
    let mut held = shared.account.lock().await;
    if let Some(account) = &*held {
        return Ok(account.clone());
    }
    let account = obtain(shared, None).await?;
    Ok(held.insert(account).clone())
}

/// The server refused `refused` (`why`): the account to order with now. Another name's loop
/// (or, in a fleet, another node) may have replaced it already: then that one; else a new
/// account with the same contact, stored in place of the refused one.
pub(crate) async fn replace(shared: &Shared, refused: &Account, why: &OrderError) -> Result<Account, OrderError> {
    let mut held = shared.account.lock().await;
    if let Some(account) = held.as_ref().filter(|a| a.key_thumbprint() != refused.key_thumbprint()) {
        return Ok(account.clone());
    }
    // On a failure below the refused account stays held: the next attempt is refused again and
    // replaces it then (after the order's backoff).
    let account = obtain(shared, Some((refused.key_thumbprint(), why))).await?;
    Ok(held.insert(account).clone())
}

/// The stored account unless it is `refused`, else one registered: by this node alone, or in a
/// fleet by the node holding the registration lease, the others waiting for it in the store.
async fn obtain(shared: &Shared, refused: Option<(&str, &OrderError)>) -> Result<Account, OrderError> {
    let fleet = shared.store.shared();
    let (thumb, why) = (refused.map(|r| r.0), refused.map(|r| r.1));
    // Bounded: a holder that died lets the lease lapse after `LEASE`; two more looks to take it.
    for _ in 0..LEASE.as_secs() / FOLLOW.as_secs() + 2 {
        let reason = match stored(shared, thumb).await? {
            Stored::Usable(account) => return Ok(account),
            Stored::Unreadable => AcmeAccountReason::Unreadable,
            Stored::Missing if thumb.is_some() => AcmeAccountReason::Refused,
            Stored::Missing => AcmeAccountReason::Missing,
        };
        if !fleet {
            return register(shared, reason, why).await;
        }
        if shared.store.lease(LEASE_NAME, LEASE).await? {
            // Looked at again under the lease: the node that held it stored its account before
            // giving the lease up, so this never registers a second one.
            let result = match stored(shared, thumb).await {
                Ok(Stored::Usable(account)) => Ok(account),
                Ok(_) => register(shared, reason, why).await,
                Err(e) => Err(e),
            };
            shared.store.release(LEASE_NAME).await;
            return result;
        }
        tracing::debug!("another node of the fleet registers the ACME account");
        tokio::time::sleep(FOLLOW).await;
    }
    Err(OrderError::Local("another node of the fleet holds the ACME account's registration and stored none".into()))
}

/// A new account with the configured contact, stored (replacing the entry whole); `why`: the
/// server's refusal of the last one.
async fn register(shared: &Shared, reason: AcmeAccountReason, why: Option<&OrderError>) -> Result<Account, OrderError> {
    let config = &shared.config;
    let contact: Vec<&str> = config.contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, credentials) = builder(shared)?.create(&new, config.directory.clone(), None).await?;
    shared.metrics.accounts.get_or_create(&AcmeAccount { reason }).inc();
    let bytes = serde_json::to_vec(&credentials).map_err(|e| OrderError::Local(e.to_string()))?;
    // Registered is what counts: a store that refuses the file costs a registration at the next
    // start (or on another node), never this order.
    let saved = shared.store.save(ACCOUNT, &bytes).await.err().map(|e| e.to_string());
    let (directory, refusal) = (&config.directory, why.map(ToString::to_string));
    match (reason, saved) {
        (_, Some(error)) => {
            tracing::error!(directory, reason = reason.label(), refusal, error, "ACME account made but not stored")
        }
        (AcmeAccountReason::Missing, None) => tracing::info!(directory, "ACME account made"),
        (_, None) => tracing::warn!(
            directory,
            reason = reason.label(),
            refusal,
            "ACME account made anew (the stored one was refused or unreadable): ordering again"
        ),
    }
    Ok(account)
}
