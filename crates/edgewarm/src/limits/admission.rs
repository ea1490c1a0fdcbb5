//! Who a listener lets in: its `allow`/`deny` and `max_connections_per_client`, checked by one
//! type for its TCP accept loop and its QUIC endpoints alike, each refusal counted once in
//! `edgewarm_limited_total{scope="listener"}`; and a tunnel's or prewarm route's lists, checked
//! on accept too ([`route_refuses`]). An http route's lists answer 403 per request, in its
//! layer ([`super::layer`]).

use std::net::IpAddr;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::clients::{client_key, ClientCounts, ClientSlot};
use crate::config::limits::AccessList;
use crate::config::ListenerConfig;
use crate::metrics::{LimitReason, LimitedLabel};

pub(crate) struct Admission {
    /// The listener's address, as the refusals' label names it.
    name: String,
    access: AccessList,
    cap: Option<usize>,
    prefix: u8,
    clients: Arc<ClientCounts>,
    limited: Family<LimitedLabel, Counter>,
}

impl Admission {
    /// The listener `config`'s admission, counting its clients' connections in `clients`
    /// (shared by its TCP and QUIC sides) and its refusals in `limited`.
    pub(crate) fn new(
        config: &ListenerConfig,
        clients: Arc<ClientCounts>,
        limited: Family<LimitedLabel, Counter>,
    ) -> Self {
        Self {
            name: config.listen.to_string(),
            access: config.access(),
            cap: config.client_cap(),
            prefix: config.ipv6_prefix,
            clients,
            limited,
        }
    }

    /// Whether a client at `ip` may connect: its place in the per-client count (none without
    /// a cap), held for the connection's life, or why it is refused (counted).
    pub(crate) fn check(&self, ip: IpAddr) -> Result<Option<ClientSlot>, LimitReason> {
        let refused = |reason| {
            let label = LimitedLabel { scope: "listener", name: self.name.clone(), reason };
            self.limited.get_or_create(&label).inc();
            Err(reason)
        };
        if !self.access.admits(ip) {
            return refused(LimitReason::Denied);
        }
        let Some(cap) = self.cap else { return Ok(None) };
        match self.clients.enter(client_key(ip, self.prefix), cap) {
            Some(place) => Ok(Some(place)),
            None => refused(LimitReason::ClientConnections),
        }
    }
}

/// Whether a tunnel's or prewarm route's `allow`/`deny` (`access`) refuse a client at `ip`
/// (counted under the route's `name`): such a route has no request to answer 403 to.
pub(crate) fn route_refuses(
    name: &str,
    access: &AccessList,
    ip: IpAddr,
    limited: &Family<LimitedLabel, Counter>,
) -> bool {
    if access.admits(ip) {
        return false;
    }
    let label = LimitedLabel { scope: "route", name: name.to_string(), reason: LimitReason::Denied };
    limited.get_or_create(&label).inc();
    true
}
