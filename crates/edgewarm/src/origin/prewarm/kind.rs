//! A prewarm pool as one kind of standing set in the registry ([`crate::origin::registry`]).

use std::sync::Arc;

use super::{Pool, Settings, TlsPool};
use crate::metrics::PoolLabels;
use crate::origin::connect::Transport;
use crate::origin::dial::TlsDial;
use crate::origin::registry::{Shared, Spec, Standing};
use crate::tls::origin::PoolKey;

/// What a `prewarm` route asks the registry for: a pool of TLS connections offering one ALPN.
pub(crate) struct PrewarmSpec {
    pub(crate) dial: TlsDial,
    pub(crate) settings: Settings,
}

impl Spec for PrewarmSpec {
    fn key(&self) -> &PoolKey {
        &self.dial.key
    }

    fn kind(&self) -> &'static str {
        KIND
    }

    fn transport(&self) -> Transport {
        Transport::Tls
    }

    fn start(self: Box<Self>, labels: PoolLabels, shared: &Shared) -> Arc<dyn Standing> {
        TlsPool::start(self.dial, labels, self.settings, shared.metrics.clone())
    }

    fn update(self: Box<Self>, set: &dyn Standing) {
        if let Some(pool) = set.as_any().downcast_ref::<TlsPool>() {
            pool.update(self.settings);
        }
    }
}

/// The kind's name: its sets are retired first at shutdown (no new client will take one).
pub(crate) const KIND: &str = "prewarm";

impl Standing for TlsPool {
    fn retire(&self) {
        Pool::retire(self);
    }

    /// At its minimum.
    fn warm(&self) -> bool {
        let s = Pool::status(self);
        s.ready >= s.min
    }

    fn status(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(Pool::status(self)).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), KIND.into());
            o.insert("transport".into(), serde_json::to_value(Transport::Tls).unwrap_or_default());
        }
        v
    }
}
