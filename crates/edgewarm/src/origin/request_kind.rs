//! The request kinds, the sets an `http` route's requests ride (HTTP/2, HTTP/1.1, HTTP/3), as
//! the registry starts them and the seam sees them: what they share is written here once, and
//! a kind supplies only what differs ([`RequestKind`]: its names, its connector, how it starts
//! and keeps itself up, takes new settings, and sends a request).
//!
//! - [`UpstreamSpec`]: what a route asks the registry for, one registration for every request
//!   kind: the kind's connector, the HTTP/1.1 connector for upgrades, and the route's
//!   `upstream` section.
//! - [`Requests`]: a running set as the registry holds it and as the route's seam
//!   ([`Origin`]): requests go to the kind; a protocol upgrade the kind does not carry its own
//!   way goes as HTTP/1.1 over a connection of its own to the same origin.
//! - [`SetName`]: how each one's entry in `/origins` begins.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::connect::{Connect, Transport};
use super::registry::{Shared, Spec, Standing};
use super::seam::{BoxFuture, Origin, OriginError, Outgoing, SendFailure, Sent, Upgrade, Upgraded};
use super::supervisor::Core;
use super::upgrade;
use crate::config::UpstreamConfig;
use crate::metrics::PoolLabels;
use crate::tls::origin::PoolKey;

/// A kind of set that carries requests, registered by an [`UpstreamSpec`].
pub(crate) trait RequestKind: Standing + Sized {
    /// The kind's name over TLS (or QUIC) and over cleartext.
    const NAMES: (&'static str, &'static str);
    /// What makes its connections: a byte stream's connector, or QUIC's.
    type Dial: Dialer;
    /// Make the set on `core` (inside the runtime); the registration spawns its
    /// [`upkeep`](RequestKind::upkeep) at once.
    fn start(core: Core<Self::Dial>, tuning: Tuning, shared: &Shared) -> Arc<Self>;
    /// The set's upkeep task, for as long as it stands: it opens the first connections at once.
    fn upkeep(self: Arc<Self>) -> impl Future<Output = ()> + Send;
    /// New settings from a reload; connections stay.
    fn update(&self, tuning: Tuning);
    /// Send one attempt of a request ([`Origin::send`]).
    fn send<'a>(self: &'a Arc<Self>, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>>;
    /// Carry an upgrade the kind's own way (HTTP/2: an RFC 8441 extended CONNECT stream), or
    /// give it back to go as HTTP/1.1 over a connection of its own.
    // Handed back whole (a large value, moved once per upgrade, which is rare): boxing it
    // would buy nothing.
    #[expect(clippy::result_large_err)]
    fn upgrade_own<'a>(self: &'a Arc<Self>, up: Upgrade<'a>) -> Result<Upgrading<'a>, Upgrade<'a>> {
        Err(up)
    }
}

/// An upgrade under way ([`Origin::upgrade`]).
pub(crate) type Upgrading<'a> = BoxFuture<'a, Result<Upgraded, OriginError>>;

/// What a request kind's connector tells the registry: the key and the transport that are the
/// set's identity.
pub(crate) trait Dialer: Send + Sync + 'static {
    fn key(&self) -> &PoolKey;
    fn transport(&self) -> Transport;
}

impl Dialer for Arc<dyn Connect> {
    fn key(&self) -> &PoolKey {
        Connect::key(&**self)
    }

    fn transport(&self) -> Transport {
        Connect::transport(&**self)
    }
}

/// What a request kind's set is started with and a reload may change: the route's `upstream`
/// section and the connect timeout.
pub(crate) struct Tuning {
    pub(crate) settings: UpstreamConfig,
    pub(crate) connect_timeout: Duration,
}

/// Which set an `/origins` entry is: how every request kind's entry begins.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SetName {
    pub(crate) route: String,
    pub(crate) origin: String,
    /// The kind's name: `h2`, `h2c` (cleartext, prior knowledge), `http/1.1` or `h3`.
    pub(crate) kind: &'static str,
    /// `tls`, `cleartext` or `quic`.
    pub(crate) transport: Transport,
    pub(crate) sni: String,
    pub(crate) verify: bool,
}

impl SetName {
    pub(crate) fn of<D: Dialer>(core: &Core<D>) -> Self {
        let k = core.dial.key();
        Self {
            route: core.labels.route.to_string(),
            origin: k.origin.to_string(),
            kind: core.kind,
            transport: core.dial.transport(),
            sni: k.sni().to_owned(),
            verify: k.verified(),
        }
    }
}

/// What an `http` route asks the registry for: a set of kind `K` under its connector's key.
pub(crate) struct UpstreamSpec<K: RequestKind> {
    dial: K::Dial,
    /// The same origin over TCP, offering no ALPN: where upgrades go as HTTP/1.1.
    http1: Arc<dyn Connect>,
    tuning: Tuning,
}

impl<K: RequestKind> UpstreamSpec<K> {
    pub(crate) fn new(
        dial: K::Dial,
        http1: Arc<dyn Connect>,
        settings: UpstreamConfig,
        connect_timeout: Duration,
    ) -> Self {
        Self { dial, http1, tuning: Tuning { settings, connect_timeout } }
    }
}

impl<K: RequestKind> Spec for UpstreamSpec<K> {
    fn key(&self) -> &PoolKey {
        self.dial.key()
    }

    fn kind(&self) -> &'static str {
        kind_name::<K>(self.dial.transport())
    }

    fn transport(&self) -> Transport {
        self.dial.transport()
    }

    fn start(self: Box<Self>, mut labels: PoolLabels, shared: &Shared) -> Arc<dyn Standing> {
        let kind = self.kind();
        labels.alpn = kind.into();
        let core = Core::new(self.dial, labels, kind, shared.metrics.clone());
        let retired = core.retired.clone();
        let set = K::start(core, self.tuning, shared);
        tokio::spawn(set.clone().upkeep());
        Arc::new(Requests { set, http1: self.http1, retired })
    }

    fn update(self: Box<Self>, set: &dyn Standing) {
        // The kind is part of the id: a set only ever gets its own kind's settings.
        if let Some(running) = set.as_any().downcast_ref::<Requests<K>>() {
            running.set.update(self.tuning);
        }
    }
}

/// A request kind's name over `transport`.
fn kind_name<K: RequestKind>(transport: Transport) -> &'static str {
    if transport == Transport::Cleartext {
        K::NAMES.1
    } else {
        K::NAMES.0
    }
}

/// A running set of a request kind, as the registry holds it and the route's seam.
pub(crate) struct Requests<K> {
    set: Arc<K>,
    /// Where the upgrades the kind does not carry go (see [`UpstreamSpec`]).
    http1: Arc<dyn Connect>,
    /// The set's retirement (its core's token).
    retired: CancellationToken,
}

impl<K: RequestKind> Origin for Requests<K> {
    fn send<'a>(&'a self, out: Outgoing<'a>) -> BoxFuture<'a, Result<Sent, SendFailure>> {
        self.set.send(out)
    }

    fn upgrade<'a>(&'a self, up: Upgrade<'a>) -> Upgrading<'a> {
        let up = match self.set.upgrade_own(up) {
            Ok(own) => return own,
            Err(up) => up,
        };
        Box::pin(async move {
            // Not a standing connection: after a `101` it is the client's for as long as it lives.
            let io = self.http1.connect(up.timeout, None).await;
            let io = io.map_err(|e| OriginError::Upgrade(format!("origin connection for the upgrade: {e}")))?;
            upgrade::over_h1(io, up).await
        })
    }

    fn retired(&self) -> &CancellationToken {
        &self.retired
    }
}

/// The set's own answers; its seam is this handle.
impl<K: RequestKind> Standing for Requests<K> {
    fn retire(&self) {
        self.set.retire();
    }

    fn warm(&self) -> bool {
        self.set.warm()
    }

    fn status(&self) -> serde_json::Value {
        self.set.status()
    }

    fn up(&self) -> bool {
        self.set.up()
    }

    fn origin(self: Arc<Self>) -> Option<Arc<dyn Origin>> {
        Some(self)
    }
}
