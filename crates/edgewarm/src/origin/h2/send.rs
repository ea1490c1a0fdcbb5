//! The HTTP/2 kind at the seam ([`Origin`](crate::origin::seam::Origin)): a request becomes a stream on a standing
//! connection, its body streamed up under flow control while the response is awaited. (A
//! WebSocket becomes an extended CONNECT stream where the origin offers it: [`super::websocket`].)

use std::sync::Arc;

use http::Response;

use super::{informational, H2Upstream};
use crate::h2_stream::{self, Frames};
use crate::origin::body::{OriginBody, Upload};
use crate::origin::seam::{Failure, OriginError, OutBody, Outgoing, SendFailure, Sent};

/// What a request holds until its response has ended: its stream's place on the connection
/// and its upload, if still running.
struct Held {
    _slot: crate::origin::multiplexed::Slot,
    _upload: Option<Upload>,
}

pub(super) async fn send(upstream: &Arc<H2Upstream>, out: Outgoing<'_>) -> Result<Sent, SendFailure> {
    let Outgoing { build, body, up, timeout, affinity, tried: _, interim, began: _, client: _ } = out;
    let end_of_stream = matches!(body, OutBody::Empty);
    let sent = upstream
        .send(build, end_of_stream, affinity)
        .await
        .map_err(|e| SendFailure::fatal(OriginError::NoConnection(e.to_string())))?;
    // The body goes up while we wait for the response: an origin may answer early.
    let upload = match body {
        OutBody::Empty => None,
        body => {
            let (tx, counter, body) = (sent.body, up.clone(), body.boxed());
            Some(Upload(tokio::spawn(h2_stream::send(body, tx, counter)).abort_handle()))
        }
    };
    let response = informational::final_response(sent.response, interim);
    let response = match tokio::time::timeout(timeout, response).await {
        Err(_) => return Err(SendFailure::fatal(OriginError::Timeout)),
        Ok(Err(e)) => {
            let kind = if never_processed(&e) {
                Failure::NotProcessed
            } else if e.is_io() || e.is_go_away() {
                Failure::Lost
            } else {
                Failure::Final
            };
            return Err(SendFailure { kind, error: OriginError::Protocol(e.to_string()) });
        }
        Ok(Ok(response)) => response,
    };
    // The upload, if any, finishes on its own (or fails and resets the stream).
    let (mut parts, recv) = response.into_parts();
    parts.version = http::Version::HTTP_11;
    let held = Box::new(Held { _slot: sent.slot, _upload: upload });
    Ok(Sent {
        response: Response::from_parts(parts, OriginBody::new(Frames::new(recv), held)),
        conn: Some(sent.conn_id),
        reused: sent.reused,
        notes: http::Extensions::new(),
    })
}

/// The origin never acted on the stream: REFUSED_STREAM (RFC 9113 §8.7), or the stream was
/// above the last stream id of a graceful GOAWAY (h2 fails those with the GOAWAY's NO_ERROR;
/// a graceful GOAWAY promises the streams it does not cover were not processed).
fn never_processed(e: &h2::Error) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}
