//! When each name's next order is due, and the loop that places it: at start (no usable
//! certificate), at the renewal time (the server's ARI window, RFC 9773, else two thirds of
//! the lifetime), at once when asked, and after a failure with a backoff that doubles, carries
//! jitter and honours a rate limit.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{Account, CertificateIdentifier};
use tokio::sync::Notify;

use super::account;
use super::certificate::Managed;
use super::order::{self, OrderError};
use super::Shared;
use crate::metrics::{AcmeOutcome, AcmeResult};
use crate::tls::certinfo::CertInfo;

/// The longest wait between failed orders.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

pub(crate) fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Two thirds into the certificate's lifetime (Unix seconds): what certbot and Caddy do
/// without renewal information; with 90-day certificates, 30 days before expiry.
pub(crate) fn two_thirds(leaf: &CertInfo) -> i64 {
    leaf.not_before + (leaf.not_after - leaf.not_before) * 2 / 3
}

/// The wait after the `failures`-th failure in a row: `first`, doubling, at most an hour,
/// each drawn from 80–120 % so a fleet that failed together does not retry together.
pub(crate) fn backoff(first: Duration, failures: u32, draw: f64) -> Duration {
    let doubled = first.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(MAX_BACKOFF).mul_f64(0.8 + 0.4 * draw.clamp(0.0, 1.0))
}

/// A point in the server's suggested window, if it gives one (RFC 9773 §4.2: a random time in
/// the window spreads a fleet's renewals).
async fn suggested(account: &Account, managed: &Managed) -> Option<i64> {
    let der = managed.leaf_der()?;
    let id = CertificateIdentifier::try_from(&der).ok()?;
    match account.renewal_info(&id).await {
        Ok((info, _)) => {
            let (start, end) =
                (info.suggested_window.start.unix_timestamp(), info.suggested_window.end.unix_timestamp());
            Some(start + ((end - start).max(0) as f64 * fastrand::f64()) as i64)
        }
        Err(e) => {
            tracing::debug!(name = managed.name(), error = %e, "no renewal information: renewing at two thirds");
            None
        }
    }
}

/// How long a node's lease on ordering a name lasts unless extended: longer than an order
/// takes (each of its polls gives up after 90 s).
const LEASE: Duration = Duration::from_secs(300);
/// While another node of the fleet orders a name: how often to look for its certificate.
const FOLLOW: Duration = Duration::from_secs(2);
/// In a fleet, how often a node looks for a certificate another node ordered early (an ARI
/// window, an order asked for by hand) even when its own renewal time is far.
const RECHECK: Duration = Duration::from_secs(3600);

/// A certificate in the fleet's store newer than the one serving (another node ordered it):
/// installed, and its details.
async fn adopt(shared: &Shared, managed: &Managed) -> Option<CertInfo> {
    let name = managed.name();
    let pem = match shared.store.load(&super::cert_key(name)).await {
        Ok(pem) => pem?,
        Err(e) => {
            tracing::debug!(name, error = %e, "the fleet's ACME store cannot be read now");
            return None;
        }
    };
    match managed.install_newer(&pem, unix_now()) {
        Ok(None) => None,
        Ok(Some(info)) => {
            tracing::info!(name, not_after = info.not_after, "ACME certificate taken from the fleet");
            managed.set_status(|s| s.last_error = None);
            Some(info)
        }
        Err(e) => {
            tracing::warn!(name, error = %e, "the fleet's stored ACME certificate is unusable");
            None
        }
    }
}

/// Keep `managed`'s certificate: order when due, install and store what arrives. In a fleet
/// (a shared store), one node orders a name at a time (a lease) and the others take its
/// certificate from the store. Runs until aborted (the name left the configuration, or the
/// server is dropped).
pub(crate) async fn run(shared: Arc<Shared>, managed: Arc<Managed>, now_please: Arc<Notify>) {
    let name = managed.name().to_string();
    let fleet = shared.store.shared();
    let mut failures = 0u32;
    // The lease could not be asked for (NATS away): said once, not every few seconds.
    let mut unreachable = false;
    // When the certificate is to be renewed (`None`: it is needed now), and when to wake.
    let mut renew_at = managed.leaf().map(|leaf| two_thirds(&leaf));
    let mut wake = renew_at;
    loop {
        let mut asked = false;
        if let Some(at) = wake {
            managed.set_status(|s| s.next_order = renew_at.or(Some(at)));
            let wait = Duration::from_secs((at - unix_now()).max(0) as u64);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = now_please.notified() => {
                    tracing::info!(name, "ACME renewal asked for");
                    asked = true;
                }
            }
        }
        let recheck = |renew_at: i64| Some(renew_at.min(unix_now() + RECHECK.as_secs() as i64));
        if fleet {
            if let Some(info) = adopt(&shared, &managed).await {
                failures = 0;
                renew_at = Some(two_thirds(&info));
                wake = recheck(two_thirds(&info));
                continue;
            }
            if let Some(at) = renew_at.filter(|at| !asked && *at > unix_now()) {
                wake = recheck(at);
                continue;
            }
            let lease = shared.store.lease(&name, LEASE).await;
            if lease.is_ok() && std::mem::take(&mut unreachable) {
                tracing::info!(name, "the fleet's ACME lease can be asked for again");
            }
            match lease {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(name, "another node of the fleet orders this certificate");
                    wake = Some(unix_now() + FOLLOW.as_secs() as i64);
                    continue;
                }
                Err(e) => {
                    if !std::mem::replace(&mut unreachable, true) {
                        tracing::warn!(name, error = %e, "the fleet's ACME lease cannot be asked for: not ordering until it can");
                    }
                    wake = Some(unix_now() + FOLLOW.as_secs() as i64);
                    continue;
                }
            }
        }
        let attempt = async {
            let mut account = account::current(&shared).await?;
            let issued = match order::issue(&account, &name, &shared.challenges, &*shared.store).await {
                // The server forgot the account (or it was deactivated): a new one, and the
                // order again at once rather than after a backoff that would meet the same answer.
                Err(e) if e.account_refused() => {
                    account = account::replace(&shared, &account, &e).await?;
                    order::issue(&account, &name, &shared.challenges, &*shared.store).await?
                }
                issued => issued?,
            };
            let info =
                managed.install(issued.pem.as_bytes(), unix_now()).map_err(|e| OrderError::Local(e.to_string()))?;
            // Installed is what counts; a store that refuses the file costs the next restart an
            // order, never a new order now.
            if let Err(e) = shared.store.save(&super::cert_key(&name), issued.pem.as_bytes()).await {
                tracing::error!(name, error = %e, "the ACME certificate serves but could not be stored");
            }
            Ok::<_, OrderError>((info, account))
        };
        match attempt.await {
            Ok((info, account)) => {
                failures = 0;
                shared.metrics.orders.get_or_create(&AcmeResult { result: AcmeOutcome::Valid }).inc();
                managed.set_status(|s| s.last_error = None);
                tracing::info!(name, not_after = info.not_after, issuer = %info.issuer, "ACME certificate installed");
                let at = suggested(&account, &managed).await.unwrap_or_else(|| two_thirds(&info));
                // A window already past (clock skew, a very short certificate) must not become
                // an order a second: at least `retry` between successful orders.
                let at = at.max(unix_now() + shared.config.retry.as_secs().max(1) as i64);
                renew_at = Some(at);
                wake = if fleet { recheck(at) } else { Some(at) };
                shared.store.release(&name).await;
            }
            Err(e) => {
                failures += 1;
                let result = if e.rejected() {
                    AcmeResult { result: AcmeOutcome::Rejected }
                } else {
                    AcmeResult { result: AcmeOutcome::Failed }
                };
                shared.metrics.orders.get_or_create(&result).inc();
                let wait =
                    backoff(shared.config.retry, failures, fastrand::f64()).max(e.retry_floor().unwrap_or_default());
                managed.set_status(|s| s.last_error = Some(e.to_string()));
                let serving = if managed.leaf().is_some() {
                    "the current certificate serves"
                } else {
                    "the route refuses handshakes until one arrives"
                };
                tracing::warn!(name, error = %e, retry_in = ?wait, "ACME order failed: {serving}");
                // The backoff is the fleet's: the lease is kept through it, so no other node
                // retries sooner (if this node dies, the lease lapses and another takes over).
                if fleet {
                    let _ = shared.store.lease(&name, wait + LEASE).await;
                }
                renew_at = Some(unix_now() + wait.as_secs().max(1) as i64);
                wake = renew_at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_two_thirds_in_and_backs_off_doubling_with_jitter_up_to_an_hour() {
        let leaf = CertInfo { names: vec![], issuer: String::new(), not_before: 0, not_after: 90 * 86_400 };
        assert_eq!(two_thirds(&leaf), 60 * 86_400);
        let first = Duration::from_secs(60);
        assert_eq!(backoff(first, 1, 0.5), Duration::from_secs(60));
        assert_eq!(backoff(first, 3, 0.5), Duration::from_secs(240));
        assert_eq!(backoff(first, 40, 0.5), MAX_BACKOFF);
        assert_eq!(backoff(first, 1, 0.0), Duration::from_secs(48));
        assert_eq!(backoff(first, 1, 1.0), Duration::from_secs(72));
    }
}
