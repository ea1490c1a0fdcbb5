//! The application-level probe (`upstream.health.path`): a GET of the path every `interval` to
//! each server of a group, on its own standing connections (no connection of its own, no
//! handshake), for the server that accepts connections and answers PINGs but serves errors or
//! a maintenance page. A wrong answer (another status, a failure, no answer within the
//! interval) takes the server out until a right one.

use std::sync::Weak;

use http::uri::Authority;
use http::{Method, Request, Uri};
use tokio_util::sync::CancellationToken;

use super::Group;
use crate::config::HealthConfig;
use crate::metrics::ServerFault;
use crate::origin::seam::OwnRequest;

/// Probe member `i` of `group` until the group goes (`gone`).
pub(super) async fn run(
    group: Weak<Group>,
    i: usize,
    authority: Authority,
    health: HealthConfig,
    gone: CancellationToken,
) {
    let Some(path) = health.path.clone() else { return };
    let Ok(uri) = Uri::builder().scheme("https").authority(authority).path_and_query(path.as_str()).build() else {
        return;
    };
    let mut every = tokio::time::interval(health.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = gone.cancelled() => return,
        }
        let Some(group) = group.upgrade() else { return };
        let m = &group.members[i];
        let mut build = || {
            let mut head = Request::new(());
            *head.method_mut() = Method::GET;
            *head.uri_mut() = uri.clone();
            head.headers_mut().insert(http::header::USER_AGENT, http::HeaderValue::from_static("edgewarm-health"));
            head
        };
        let own = OwnRequest::default();
        let out = own.outgoing(&mut build, health.interval);
        let answer = match m.seam.send(out).await {
            Ok(sent) => Ok(sent.response.status().as_u16()),
            Err(f) => Err(f.error.to_string()),
        };
        let right = answer == Ok(health.status);
        if m.state.probed(right) {
            if right {
                tracing::info!(route = %group.route, server = %m.state.name, "origin server answers its health probe again");
            } else {
                group.count_ejection(m, ServerFault::Probe);
                tracing::warn!(route = %group.route, server = %m.state.name, path, want = health.status, got = ?answer, "origin server failed its health probe: out until it answers right");
            }
        }
    }
}
