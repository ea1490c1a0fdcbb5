//! HTTP/3 clients (RFC 9114) on `h3` over a QUIC connection (quinn's, or the listener's own
//! driver's: [`super::quic`]): as for HTTP/2
//! ([`super::h2`]), every request stream of a connection runs inside that connection's own
//! task, and each is handed to the one request service. The QUIC handshake, 0-RTT and the UDP
//! socket are the listener's ([`crate::listener::quic`]); this driver sees a connection whose
//! route is already known.
//!
//! Flow control is QUIC's: a response chunk is handed to quinn only once it has taken the last
//! one, so a slow client slows the origin instead of growing our buffers; a request body is
//! read from the stream as the upload to the origin asks for it.
//!
//! A `103 Early Hints` for a request goes out as a HEADERS frame before the response's: h3's
//! server `RequestStream::send_response` (0.0.8) writes the frame for whatever status it is
//! given and tracks no state, so it is called once per head, the final one last.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use h3::server::{RequestResolver, RequestStream};
use http::Response;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use super::quic::QuicConn;
use super::{content_length, finish_head, handler_panicked, stopping, Ended, MAX_HEADER_BYTES};
use crate::http::interim::Interims;
use crate::http::service::Service;
use crate::http::Body;

/// H3_NO_ERROR (RFC 9114 §8.1): how a connection is closed when all went well.
const H3_NO_ERROR: u32 = 0x100;
/// H3_REQUEST_REJECTED: a request refused unprocessed, which the client may send again.
const H3_REQUEST_REJECTED: u32 = 0x10b;

type Resolver<Q> = RequestResolver<<Q as QuicConn>::H3, Bytes>;
type SendHalf<Q> = RequestStream<<Q as QuicConn>::Send, Bytes>;
type RecvHalf<Q> = RequestStream<<Q as QuicConn>::Recv, Bytes>;

/// Serve one HTTP/3 connection until it ends. `stop` (shutdown, or a reload retiring the
/// route's origin connections) sends GOAWAY and lets the requests in flight finish; `cut` then
/// closes whatever is left.
pub(crate) async fn serve<Q: QuicConn>(
    quic: Q,
    shared: Arc<Service>,
    stop: &CancellationToken,
    retired: &CancellationToken,
    cut: &CancellationToken,
) -> Ended {
    let mut cut_wait = pin!(cut.cancelled());
    let mut builder = h3::server::builder();
    // h3's default is no limit at all.
    builder.max_field_section_size(MAX_HEADER_BYTES as u64);
    let build = builder.build::<_, Bytes>(quic.h3());
    // Even after a stop: the client may have sent its first request already; it gets GOAWAY
    // below and its request is answered.
    let mut conn = tokio::select! {
        r = build => match r {
            Ok(conn) => conn,
            Err(e) => return ended(&quic, e.to_string()),
        },
        () = &mut cut_wait => {
            quic.close(H3_NO_ERROR);
            return Ended::Cut;
        }
    };
    let mut stop_wait = pin!(stopping(stop, retired));
    let mut streams = FuturesUnordered::new();
    let mut closing = false;
    // Whether the next request is to be refused (see the GOAWAY below).
    let mut refuse_next = false;
    // While closing with nothing in flight: datagrams sent and lost as of the last quiet check.
    let mut sent_then = None;
    loop {
        tokio::select! {
            biased;
            () = &mut cut_wait, if closing => {
                quic.close(H3_NO_ERROR);
                return Ended::Cut;
            }
            () = &mut stop_wait, if !closing => {
                closing = true;
                // GOAWAY: requests already accepted finish, later ones are refused unprocessed
                // (H3_REQUEST_REJECTED), and the client may send those again on a new connection
                // (RFC 9114 §5.2). So its ID must be the stream after the last one accepted:
                // h3's `shutdown(n)` announces the last accepted plus n, or stream 0 if none.
                // h3 still accepts the stream it announces and refuses only those after it, so
                // that one is refused here: the client was told it was never processed, and must
                // not find it processed here too.
                refuse_next = true;
                if conn.shutdown(1).await.is_err() {
                    quic.close(H3_NO_ERROR);
                    return Ended::Done;
                }
            }
            Some(done) = streams.next(), if !streams.is_empty() => handler_panicked(&shared, done),
            // Closing with nothing in flight, a request stream can only be at or past the one
            // GOAWAY announced: refused here as it comes, straight from quinn. h3's accept is
            // not polled any more: on a client's GOAWAY it would send one of its own, naming the
            // last request answered as unprocessed.
            straggler = quic.refuse_next(H3_REQUEST_REJECTED), if closing && streams.is_empty() => {
                if let Err(e) = straggler {
                    return ended(&quic, e);
                }
            }
            next = conn.accept(), if !(closing && streams.is_empty()) => match next {
                // A panic is caught per stream, as for HTTP/2: it must not end the connection.
                Ok(Some(resolver)) => {
                    let refused = std::mem::take(&mut refuse_next);
                    streams.push(AssertUnwindSafe(request::<Q>(shared.clone(), resolver, refused)).catch_unwind());
                }
                // The client's GOAWAY, its requests answered.
                Ok(None) => return close_when_delivered(&quic, cut_wait.as_mut()).await,
                Err(e) => return ended(&quic, e.to_string()),
            },
            // After GOAWAY the connection ends once its last response has arrived (h3 would
            // otherwise wait for the client's own GOAWAY, which not every client sends).
            // An async block: select! builds every branch's future on each turn, enabled or
            // not, and a timer (with the RTT read from the connection) for each request would
            // be built and dropped unused.
            () = async { tokio::time::sleep(quiet_period(&quic)).await }, if closing && streams.is_empty() => {
                if delivered(&quic, &mut sent_then) {
                    quic.close(H3_NO_ERROR);
                    return Ended::Done;
                }
            }
        }
    }
}

/// How long a connection must send nothing before all it sent is taken to have arrived: QUIC's
/// CONNECTION_CLOSE discards whatever is unacknowledged, which would cut the end off the last
/// response, and quinn does not say when a stream is acknowledged. But a connection with
/// something unacknowledged sends a probe within its probe timeout (RFC 9002 §6.2: the smoothed
/// RTT, four RTT variations and the peer's ACK delay), a timeout that doubles with each probe
/// unanswered. A second beyond three RTTs covers a few of those doublings on any path a client
/// could still be served on; a loss declared meanwhile restarts the wait.
fn quiet_period(quic: &impl QuicConn) -> Duration {
    quic.rtt() * 3 + Duration::from_secs(1)
}

/// Whether the connection has sent nothing, and declared nothing lost, since the last check
/// (`then`, updated).
fn delivered(quic: &impl QuicConn, then: &mut Option<(u64, u64)>) -> bool {
    let now = quic.sent_and_lost();
    let quiet = *then == Some(now);
    *then = Some(now);
    quiet
}

/// Close a connection whose requests are all answered once what it sent has arrived
/// ([`quiet_period`]), or the client closes, or the cut.
async fn close_when_delivered(quic: &impl QuicConn, mut cut: Pin<&mut impl Future<Output = ()>>) -> Ended {
    let mut sent_then = None;
    loop {
        tokio::select! {
            () = quic.closed() => return Ended::Done,
            () = &mut cut => break,
            () = tokio::time::sleep(quiet_period(quic)) => {
                if delivered(quic, &mut sent_then) {
                    break;
                }
            }
        }
    }
    quic.close(H3_NO_ERROR);
    Ended::Done
}

/// How a connection whose h3 layer failed ended: a close by the client (any code: aioquic
/// closes with 0, browsers with H3_NO_ERROR) or the idle timeout is a normal end.
fn ended(quic: &impl QuicConn, error: String) -> Ended {
    if quic.ended_normally() {
        Ended::Done
    } else {
        Ended::Failed(error)
    }
}

/// One request stream: its head read, the request handled, the response sent (head, then the
/// body as quinn takes it). `refused`: reset with H3_REQUEST_REJECTED instead, unprocessed.
async fn request<Q: QuicConn>(shared: Arc<Service>, resolver: Resolver<Q>, refused: bool) {
    let (req, mut stream) = match resolver.resolve_request().await {
        Ok(r) => r,
        Err(e) => {
            // A malformed head is refused by h3 itself (stream error); nothing reached us.
            tracing::debug!(error = %e, "HTTP/3 request head not read");
            return;
        }
    };
    if refused {
        // Both directions, with the code that tells the client it may send the request again
        // (RFC 9114 §4.1.1), as h3 refuses the streams after the one announced. Nothing is
        // being read from the stream yet, so h3-quinn can stop it with a code of our choosing.
        stream.stop_sending(h3::error::Code::H3_REQUEST_REJECTED);
        stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
        return;
    }
    let (mut send, recv) = stream.split();
    let length = content_length(req.headers());
    // Boxed, both: this future is built, then moved into the connection's set of streams, once
    // per request, and h3's body (288 bytes) is moved through every layer of the service. At
    // 10 KiB those copies were a tenth of an HTTP/3 request's instructions
    // (scripts/bench-h3-ins.sh; the figures are in docs/benchmarks.md).
    let req = req.map(|()| Box::new(H3Body::<Q>::new(recv, length)));
    let interims = Interims::new();
    let response = {
        let to_client = interims.to_client();
        let mut handled = Box::pin(shared.handle(req, Some(&to_client)));
        loop {
            tokio::select! {
                biased;
                response = &mut handled => break response,
                // h3's `send_response` writes one HEADERS frame and keeps no state, so a 103's
                // head can go first and the final response's after it (RFC 9114 §4.1).
                (head, source) = interims.next() => match send.send_response(head).await {
                    Ok(()) => interims.sent(source),
                    Err(e) => tracing::debug!(error = %e, "HTTP/3 informational head not sent"),
                },
            }
        }
    };
    // Whatever is still queued would come after the response: dropped.
    drop(interims);
    let (mut head, body) = response.into_parts();
    finish_head(&mut head, &body);
    if let Err(e) = send.send_response(Response::from_parts(head, ())).await {
        tracing::debug!(error = %e, "HTTP/3 response head not sent");
        return;
    }
    pipe::<Q>(body, send).await;
}

/// Copy a response body to the client's stream; `send_data` returns once quinn has taken the
/// chunk (its stream window), so at most one chunk waits here.
async fn pipe<Q: QuicConn>(mut body: Body, mut send: SendHalf<Q>) {
    loop {
        match body.frame().await {
            None => {
                let _ = send.finish().await;
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if !data.is_empty() && send.send_data(data).await.is_err() {
                        // The client stopped the stream: dropping the body frees the origin's.
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        if send.send_trailers(trailers).await.is_ok() {
                            let _ = send.finish().await;
                        }
                        return;
                    }
                }
            },
            Some(Err(e)) => {
                // The origin's response failed after its head went out: the client's stream is
                // reset, never finished as if the body were whole.
                tracing::debug!(error = %e, "response body failed; resetting the client's stream");
                send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
        }
    }
}

/// A client's request body on HTTP/3: DATA frames as they arrive, then the trailers if any.
pub(crate) struct H3Body<Q: QuicConn> {
    recv: RecvHalf<Q>,
    /// A frame read ahead by [`H3Body::settle`], given out first.
    peeked: Option<Result<Frame<Bytes>, h3::error::StreamError>>,
    data_done: bool,
    done: bool,
    /// What is left of the declared `Content-Length`.
    length: Option<u64>,
}

impl<Q: QuicConn> H3Body<Q> {
    fn new(recv: RecvHalf<Q>, length: Option<u64>) -> Self {
        let mut body = Self { recv, peeked: None, data_done: false, done: false, length };
        body.settle();
        body
    }

    /// Find out without waiting whether the stream has already ended. HTTP/3 has no flag on
    /// the request head saying "no body" (HTTP/2's END_STREAM): a GET's end is its stream's FIN,
    /// which nearly always arrived with the head. The early-data gate and the replay decision
    /// need to know that before anything reads the body.
    fn settle(&mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(frame) = http_body::Body::poll_frame(Pin::new(&mut *self), &mut cx) {
            self.peeked = frame;
            if self.peeked.is_none() {
                self.done = true;
            }
        }
    }

    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h3::error::StreamError>>> {
        if !self.data_done {
            match ready!(self.recv.poll_recv_data(cx)) {
                Ok(Some(mut chunk)) => {
                    let data = chunk.copy_to_bytes(chunk.remaining());
                    if let Some(left) = self.length.as_mut() {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(None) => self.data_done = true,
                Err(e) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
        let trailers = ready!(self.recv.poll_recv_trailers(cx));
        self.done = true;
        self.length = Some(0);
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }
}

impl<Q: QuicConn> http_body::Body for H3Body<Q> {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.peeked.take() {
            return Poll::Ready(Some(frame));
        }
        if self.done {
            return Poll::Ready(None);
        }
        self.next_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.peeked.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.length.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}
