//! The HTTP/3 kind at the seam ([`Origin`](crate::origin::seam::Origin)): a request becomes a QUIC stream of its own on a
//! standing connection, its body streamed up while the response is awaited. (A protocol upgrade,
//! WebSocket, goes over HTTP/1.1 on a TCP connection of its own to the same origin:
//! [`crate::origin::request_kind::Requests`].)

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h3::client::RequestStream;
use h3::error::{Code, StreamError};
use http::{Method, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use super::conn::Conn;
use super::H3Upstream;
use crate::metrics::HintSource;
use crate::origin::body::{OriginBody, Upload};
use crate::origin::multiplexed::Slot;
use crate::origin::seam::{Failure, OriginError, OutBody, Outgoing, SendFailure, Sent};
use crate::origin::BoxedBody;

/// What a request holds until its response has ended.
struct Held {
    _slot: Slot,
    _upload: Option<Upload>,
}

pub(super) async fn send(set: &Arc<H3Upstream>, out: Outgoing<'_>) -> Result<Sent, SendFailure> {
    let Outgoing { build, body, up, timeout, affinity: _, tried: _, interim, began, client: _ } = out;
    let mut request = build();
    // Only what may be replayed rides a connection still in 0-RTT (RFC 8470 §4: a safe
    // method, no body); the origin may see it twice if an attacker replays the packets.
    let early_ok =
        matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) && matches!(body, OutBody::Empty);
    // A connection whose origin has said GOAWAY refuses the request before sending it (h3 marks
    // it closing as it reads the frame, and does not tell us otherwise): the request is placed
    // again on another, or on the replacement `pick` waits for, not spent as one of its
    // attempts. An upgrading origin says GOAWAY on every connection at once, and those refusals
    // used to spend all of a request's attempts (a 502). Bounded: each refusal retires the
    // connection that gave it, and wakes the upkeep to replace it.
    let mut refused = 0;
    let (conn, stream, slot, reused) = loop {
        let (conn, mut handle, slot, reused) = set
            .pick(early_ok, began)
            .await
            // It waited `timeouts.connect` for a connection already: another attempt would only
            // wait again (as the other kinds, not retried).
            .map_err(|e| SendFailure::fatal(OriginError::NoConnection(e)))?;
        match handle.send_request(request).await {
            Ok(stream) => break (conn, stream, slot, reused),
            Err(StreamError::RemoteClosing { .. }) if refused < MAX_GOAWAY_REFUSALS => {
                // Retired here, once: a GOAWAY is counted by the request that found it first.
                if conn.retire() {
                    set.replace_retired();
                }
                refused += 1;
                request = build();
            }
            Err(e) => return Err(failure(&e, &conn, true)),
        }
    };
    let (mut tx, mut rx) = stream.split();
    let upload = match body {
        OutBody::Empty => {
            tx.finish().await.map_err(|e| failure(&e, &conn, true))?;
            None
        }
        body => Some(Upload(tokio::spawn(upload(body.boxed(), tx, up.clone())).abort_handle())),
    };
    let response = loop {
        let response = match tokio::time::timeout(timeout, rx.recv_response()).await {
            Err(_) => return Err(SendFailure::fatal(OriginError::Timeout)),
            Ok(result) => result.map_err(|e| failure(&e, &conn, false))?,
        };
        // An interim response (100 Continue, 103 Early Hints) precedes the final one; the
        // client's end decides what of it goes on.
        if !response.status().is_informational() {
            break response;
        }
        if let Some(interim) = interim {
            interim.send(response, HintSource::Origin);
        }
    };
    let (mut parts, ()) = response.into_parts();
    parts.version = http::Version::HTTP_11;
    let held = Box::new(Held { _slot: slot, _upload: upload });
    let body = ResponseBody { rx: Mutex::new(rx), data_done: false, done: false };
    Ok(Sent {
        response: Response::from_parts(parts, OriginBody::new(body, held)),
        conn: Some(conn.id),
        reused,
        notes: http::Extensions::new(),
    })
}

/// How many connections that have said GOAWAY one request passes over before it fails as
/// never processed: more than a set holds, fewer than would hide a loop.
const MAX_GOAWAY_REFUSALS: usize = 8;

/// How a failed request is retried. `sending`: it failed while its head was being sent.
fn failure(e: &StreamError, conn: &Conn, sending: bool) -> SendFailure {
    let kind = match e {
        // The origin's GOAWAY came first: this request was never sent (RFC 9114 §5.2).
        StreamError::RemoteClosing { .. } => Failure::NotProcessed,
        // Refused before any processing (RFC 9114 §4.1.1).
        StreamError::RemoteTerminate { code, .. } if *code == Code::H3_REQUEST_REJECTED => Failure::NotProcessed,
        // Sent in 0-RTT the origin threw away: it never saw it.
        _ if conn.early_rejected() => Failure::NotProcessed,
        StreamError::ConnectionError { .. } | StreamError::Undefined { .. } => Failure::Lost,
        _ if sending => Failure::Lost,
        _ => Failure::Final,
    };
    if matches!(e, StreamError::RemoteClosing { .. } | StreamError::ConnectionError { .. }) {
        // Nothing more goes on a closing or broken connection; the set replaces it.
        conn.retire();
    }
    SendFailure { kind, error: OriginError::Protocol(format!("HTTP/3 origin: {e}")) }
}

/// Copy the request body up the stream, counting into `sent`; a body that fails resets it.
async fn upload(
    mut body: BoxedBody,
    mut tx: RequestStream<h3_quinn::SendStream<Bytes>, Bytes>,
    sent: Arc<AtomicU64>,
) -> Result<(), StreamError> {
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            tx.stop_stream(Code::H3_REQUEST_CANCELLED);
            return Ok(());
        };
        match frame.into_data() {
            Ok(data) => {
                let n = data.len() as u64;
                tx.send_data(data).await?;
                sent.fetch_add(n, Ordering::Relaxed);
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tx.send_trailers(trailers).await?;
                }
            }
        }
    }
    tx.finish().await
}

/// The response body as h3 reads it: DATA, then trailers if any. (A mutex makes h3's stream,
/// which is `Send` but not `Sync`, fit the seam's body; it is never contended.)
struct ResponseBody {
    rx: Mutex<RequestStream<h3_quinn::RecvStream, Bytes>>,
    data_done: bool,
    done: bool,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = StreamError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let rx = this.rx.get_mut().unwrap_or_else(|p| p.into_inner());
        if !this.data_done {
            match ready!(rx.poll_recv_data(cx)) {
                Ok(Some(mut buf)) => return Poll::Ready(Some(Ok(Frame::data(buf.copy_to_bytes(buf.remaining()))))),
                Ok(None) => this.data_done = true,
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
        let trailers = ready!(rx.poll_recv_trailers(cx));
        this.done = true;
        Poll::Ready(match trailers {
            Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
