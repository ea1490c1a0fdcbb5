//! QUIC congestion control by name, for both ends a QUIC connection can have here: the
//! listener's connections to clients (`listeners[].quic_congestion`) and the HTTP/3 origin
//! kind's (`upstream.congestion` with `protocol: h3`). quinn runs it in user space, so the
//! kernel's list does not apply; the names are checked at load
//! (`QUIC_CONGESTION` in the configuration's route module).
//!
//! Why it is a setting: under random loss on a long link a loss-based controller (cubic, reno)
//! shrinks its window at every loss, and at 1–2 % loss its throughput falls to a fraction of
//! the link; BBR paces to the measured bandwidth and round trip instead.

use std::sync::Arc;

use quinn::congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig};

/// The controller factory for `name` (`bbr`, `cubic`, `reno`); quinn's default (cubic) for
/// `None`.
pub(crate) fn controller(name: Option<&str>) -> Arc<dyn ControllerFactory + Send + Sync> {
    match name {
        Some("bbr") => Arc::new(BbrConfig::default()),
        Some("reno") => Arc::new(NewRenoConfig::default()),
        Some(_) | None => Arc::new(CubicConfig::default()),
    }
}
