//! One certificate from the ACME server (RFC 8555 §7.4), under the account of [`super::account`]:
//! an order for one name, its TLS-ALPN-01 challenge answered by this node's listener,
//! a new key and CSR, the chain. instant-acme speaks the protocol; this file decides.

use std::time::Duration;

use instant_acme::{Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy};

use super::challenge::Challenges;
use super::store::{Store, StoreError};

/// Why an order failed; [`OrderError::retry_floor`] says how long the server asked us to wait.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OrderError {
    #[error("ACME server: {}", chain(.0))]
    Acme(#[from] instant_acme::Error),
    #[error("the ACME server refused the order: {0}")]
    Rejected(String),
    #[error("{0}")]
    Local(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OrderError {
    /// A rate-limit answer: wait at least this long (Let's Encrypt's limits reset hourly or
    /// slower; hammering them only extends the lockout).
    pub(crate) fn retry_floor(&self) -> Option<Duration> {
        match self {
            Self::Acme(instant_acme::Error::Api(p))
                if p.r#type.as_deref().is_some_and(|t| t.ends_with(":rateLimited")) =>
            {
                Some(Duration::from_secs(3600))
            }
            _ => None,
        }
    }

    /// The server refused the account itself (forgotten, deactivated).
    pub(crate) fn account_refused(&self) -> bool {
        matches!(self, Self::Acme(instant_acme::Error::Api(p))
            if p.r#type.as_deref().is_some_and(|t| t.ends_with(":accountDoesNotExist") || t.ends_with(":unauthorized")))
    }

    /// The server said no (as opposed to: could not be reached).
    pub(crate) fn rejected(&self) -> bool {
        matches!(self, Self::Rejected(_) | Self::Acme(instant_acme::Error::Api(_)))
    }
}

/// An error with its causes ("client error (Connect)" alone says nothing).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// A certificate chain and its key, as PEM, the chain first.
pub(crate) struct Issued {
    pub pem: String,
}

/// Order a certificate for `name`, answering its challenge through `challenges` (and, with a
/// shared store, through every node of the fleet: the validation may reach any of them).
pub(crate) async fn issue(
    account: &Account,
    name: &str,
    challenges: &Challenges,
    store: &dyn Store,
) -> Result<Issued, OrderError> {
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    // Answers stay up until the order is ready (dropped on return).
    let mut presented = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(OrderError::Rejected(format!("authorization for {name} is {other:?}"))),
        }
        let mut challenge = authorization
            .challenge(ChallengeType::TlsAlpn01)
            .ok_or_else(|| OrderError::Rejected("the server offers no tls-alpn-01 challenge".into()))?;
        let digest = challenge.key_authorization().digest();
        presented.push(challenges.present(name, digest.as_ref()).map_err(OrderError::Local)?);
        if store.shared() {
            // Stored before the server is told to validate, so every node can answer it.
            store.save(&super::challenge_key(name), digest.as_ref()).await?;
        }
        challenge.set_ready().await?;
    }
    let retries = RetryPolicy::new().timeout(Duration::from_secs(90));
    let status = order.poll_ready(&retries).await;
    drop(presented);
    if store.shared() {
        if let Err(e) = store.remove(&super::challenge_key(name)).await {
            tracing::debug!(name, error = %e, "the shared challenge answer stays until the next order");
        }
    }
    let status = status?;
    if status != OrderStatus::Ready {
        return Err(OrderError::Rejected(format!("order for {name} is {status:?}")));
    }
    let key =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| OrderError::Local(e.to_string()))?;
    let params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| OrderError::Local(e.to_string()))?;
    let csr = params.serialize_request(&key).map_err(|e| OrderError::Local(e.to_string()))?;
    order.finalize_csr(csr.der()).await?;
    let chain = order.poll_certificate(&retries).await?;
    Ok(Issued { pem: format!("{chain}{}", key.serialize_pem()) })
}
