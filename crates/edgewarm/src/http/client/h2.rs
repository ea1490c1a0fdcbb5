//! HTTP/2 clients, served on the `h2` crate directly: every stream of a connection is run
//! inside that connection's own task.
//!
//! Why not hyper's server here (it still serves HTTP/1.1): hyper spawns a task per HTTP/2
//! stream, so each request was two task polls on top of the connection's, and each response
//! woke the connection from another task, which then wrote once per wake-up. Here the
//! connection's task first runs every stream that is ready, then drives the connection once:
//! the responses that became ready together leave in one write, and a request costs no task
//! of its own. The price is that one client's streams share one thread, as in an event-loop
//! proxy; different clients still spread over the runtime's threads.
//!
//! What hyper did for us and is done here instead: the window and frame settings (hyper's
//! defaults), the request body as an [`http_body::Body`] whose window is given back as it is
//! read, a `Date` on the responses edgewarm writes itself, `Content-Length` from a body of known
//! size, and the response body piped under the client's flow control: a chunk is handed to h2
//! only when the stream has window for it, so a slow client slows the origin instead of
//! growing our buffers. A client's RST_STREAM drops the stream's work (and so resets its origin
//! stream). A `103 Early Hints` for the request goes out as a HEADERS frame of its own before
//! the response's (`SendResponse::send_informational`, h2 0.4.13 on).

use std::future::poll_fn;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::{
    content_length, finish_head, handler_panicked, stopping, Ended, FIRST_REQUEST_GRACE, MAX_CLIENT_STREAMS,
    MAX_HEADER_BYTES,
};
use crate::h2_stream::Frames;
use crate::http::client::alt_svc::{self, AltSvc};
use crate::http::interim::Interims;
use crate::http::service::Service;
use crate::http::Body;

/// hyper's HTTP/2 server defaults, kept: windows large enough for a fast client over a long
/// path, frames of the protocol's default size, and a bounded send buffer.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONN_WINDOW: u32 = 1024 * 1024;
const MAX_FRAME: u32 = 16 * 1024;
const MAX_SEND_BUFFER: usize = 400 * 1024;

/// Serve one HTTP/2 client connection until it ends. `stop` (shutdown, or a reload retiring
/// the route's origin connections) sends GOAWAY and lets the streams in flight finish (on a
/// connection with no request yet, after its first, within [`FIRST_REQUEST_GRACE`]); `cut`
/// then ends whatever is left.
pub(crate) async fn serve<T>(
    io: T,
    shared: Arc<Service>,
    alt_svc: AltSvc,
    stop: &CancellationToken,
    retired: &CancellationToken,
    cut: &CancellationToken,
) -> Ended
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_concurrent_streams(MAX_CLIENT_STREAMS)
        .max_header_list_size(u32::try_from(MAX_HEADER_BYTES).unwrap_or(u32::MAX))
        // Rapid reset (CVE-2023-44487): h2 refuses a client that resets streams faster than
        // this before we accept them, and one that makes us reset too many.
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(Some(256));
    let mut cut_wait = pin!(cut.cancelled());
    let mut conn = tokio::select! {
        r = builder.handshake::<_, Bytes>(io) => match r {
            Ok(conn) => conn,
            Err(e) => return Ended::Failed(e.to_string()),
        },
        () = &mut cut_wait => return Ended::Cut,
    };
    let mut stop_wait = pin!(stopping(stop, retired));
    let mut streams = FuturesUnordered::new();
    let mut closing = false;
    // Asked to finish before the client's first request: GOAWAY waits for that request, at most
    // FIRST_REQUEST_GRACE (a client sends it right after the preface; one that saw GOAWAY first
    // would have to send it again elsewhere, and not every client does).
    let mut accepted_any = false;
    let mut first_wait = pin!(tokio::time::sleep(FIRST_REQUEST_GRACE));
    let mut deferred = false;
    loop {
        tokio::select! {
            biased;
            () = &mut cut_wait, if closing || deferred => return Ended::Cut,
            () = &mut stop_wait, if !closing && !deferred => {
                if accepted_any || shared.conn.reclaimed() {
                    conn.graceful_shutdown();
                    closing = true;
                } else {
                    first_wait.as_mut().reset(tokio::time::Instant::now() + FIRST_REQUEST_GRACE);
                    deferred = true;
                }
            }
            () = &mut first_wait, if deferred => {
                conn.graceful_shutdown();
                (closing, deferred) = (true, false);
            }
            // Every ready stream runs before the connection is driven (below), so responses
            // that became ready together are written together.
            Some(done) = streams.next(), if !streams.is_empty() => handler_panicked(&shared, done),
            next = conn.accept() => match next {
                // A panic is caught per stream: with every stream in this one task, it would
                // otherwise end the client's whole connection (hyper's task per stream
                // contained it; this keeps that).
                Some(Ok((req, respond))) => {
                    accepted_any = true;
                    streams.push(AssertUnwindSafe(stream(shared.clone(), alt_svc.clone(), req, respond)).catch_unwind());
                    // Every request already read is taken before any of them runs. Taken one
                    // at a time, each would run (a cache hit completes at once) and be written
                    // by the next accept's drive of the connection: one write per response.
                    loop {
                        match poll_fn(|cx| Poll::Ready(conn.poll_accept(cx))).await {
                            Poll::Ready(Some(Ok((req, respond)))) => {
                                streams.push(AssertUnwindSafe(stream(shared.clone(), alt_svc.clone(), req, respond)).catch_unwind());
                            }
                            Poll::Ready(Some(Err(e))) => return Ended::Failed(e.to_string()),
                            Poll::Ready(None) => return Ended::Done,
                            Poll::Pending => break,
                        }
                    }
                    if deferred {
                        // Everything the client sent with its first request is taken: GOAWAY now.
                        conn.graceful_shutdown();
                        (closing, deferred) = (true, false);
                    }
                }
                Some(Err(e)) => return Ended::Failed(e.to_string()),
                // Closed (by the client, or after GOAWAY once every stream was done).
                None => return Ended::Done,
            },
        }
    }
}

/// One stream: the request handled, its response sent (head, then body under flow control);
/// informational heads (`103 Early Hints`, [`Interims`]) go out while it is awaited.
async fn stream(shared: Arc<Service>, alt_svc: AltSvc, req: Request<RecvStream>, mut respond: SendResponse<Bytes>) {
    let length = content_length(req.headers());
    let req = req.map(|recv| H2Body::new(recv, length));
    let alt = alt_svc.for_request(&req);
    let interims = Interims::new();
    let response = {
        let to_client = interims.to_client();
        let mut handled = pin!(shared.handle(req, Some(&to_client)));
        loop {
            tokio::select! {
                biased;
                response = &mut handled => break response,
                // The client reset the stream: dropping the request's work resets its origin
                // stream too.
                _ = poll_fn(|cx| respond.poll_reset(cx)) => return,
                (head, source) = interims.next() => {
                    // h2 queues the frame; the connection's task writes it when next driven.
                    match respond.send_informational(head) {
                        Ok(()) => interims.sent(source),
                        Err(e) => tracing::debug!(error = %e, "HTTP/2 informational head not sent"),
                    }
                }
            }
        }
    };
    // Whatever is still queued would come after the response: dropped.
    drop(interims);
    let (mut head, body) = response.into_parts();
    alt_svc::add(&mut head.headers, alt);
    finish_head(&mut head, &body);
    let end = body.is_end_stream();
    match respond.send_response(Response::from_parts(head, ()), end) {
        Ok(tx) if !end => pipe(body, tx).await,
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(error = %e, "HTTP/2 response head not sent");
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
        }
    }
}

/// Copy a response body to the client's stream, a chunk at a time, each once the stream has
/// window for it. Ends early (resetting the stream) if the body fails or the client resets.
async fn pipe(mut body: Body, mut tx: SendStream<Bytes>) {
    loop {
        let frame = {
            let next = body.frame();
            tokio::select! {
                biased;
                _ = poll_fn(|cx| tx.poll_reset(cx)) => return,
                frame = next => frame,
            }
        };
        let frame = match frame {
            None => {
                let _ = tx.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                // The origin's stream failed after its response head: the client's gets the
                // origin's reason (CANCEL...), but never one that says the request was not
                // processed (REFUSED_STREAM) or that all is well (NO_ERROR): the head went out,
                // and a client told otherwise might send a POST again.
                let reason = e
                    .downcast_ref::<h2::Error>()
                    .and_then(h2::Error::reason)
                    .filter(|r| *r != h2::Reason::REFUSED_STREAM && *r != h2::Reason::NO_ERROR);
                tracing::debug!(error = %e, "response body failed; resetting the client's stream");
                tx.send_reset(reason.unwrap_or(h2::Reason::INTERNAL_ERROR));
                return;
            }
        };
        match frame.into_data() {
            Ok(data) => {
                let end = body.is_end_stream();
                // A claim of one byte, raised by h2 to the chunk's size as it sends: claiming
                // the whole chunk would pin connection window that other streams could use.
                if !data.is_empty() {
                    tx.reserve_capacity(1);
                    while tx.capacity() == 0 {
                        match poll_fn(|cx| tx.poll_capacity(cx)).await {
                            Some(Ok(_)) => {}
                            // Reset or closed meanwhile.
                            _ => return,
                        }
                    }
                }
                if tx.send_data(data, end).is_err() || end {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tx.reserve_capacity(0);
                    let _ = tx.send_trailers(trailers);
                    return;
                }
            }
        }
    }
}

/// A client's request body on HTTP/2. Its window is given back as each chunk is read; the
/// reader (the upload to the origin) reads the next only once the origin has room, so a slow
/// origin slows the client.
pub(crate) struct H2Body {
    frames: Frames,
    /// What is left of the declared `Content-Length` (h2 checks the data against it); 0 once
    /// the stream has ended.
    length: Option<u64>,
}

impl H2Body {
    fn new(recv: RecvStream, length: Option<u64>) -> Self {
        let length = if recv.is_end_stream() { Some(0) } else { length };
        Self { frames: Frames::new(recv), length }
    }
}

impl http_body::Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let frame = ready!(self.frames.poll_frame(cx));
        // What is left of the declared length (h2 refuses a body that runs past it).
        if let (Some(Ok(f)), Some(left)) = (&frame, self.length.as_mut()) {
            *left = left.saturating_sub(f.data_ref().map_or(0, |d| d.len() as u64));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.length.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}
