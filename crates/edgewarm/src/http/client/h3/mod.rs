//! HTTP/3 clients (RFC 9114) over a QUIC connection (quinn's: [`crate::transport::quic_conn`]):
//! as for HTTP/2 ([`super::h2`]), every request stream of a connection runs
//! inside that connection's own task, and each is handed to the one request service. The QUIC
//! handshake, 0-RTT and the UDP socket are the listener's ([`crate::listener::quic`]); this
//! driver sees a connection whose route is already known.
//!
//! The framing is the edge's own, in a crate of its own ([`edgewarm_h3`]: frames, QPACK with
//! the static table only, Huffman, the client's control and QPACK streams, request heads);
//! here are the bodies ([`body`]) and the request streams ([`request`]) that hand requests to
//! the service. h3 0.0.8, which did the framing before, Huffman-coded every string a bit at a
//! time with two allocations each and keeps its framing private: its QPACK and framing were a
//! third of what an HTTP/3 request cost beyond an HTTP/2 one (docs/benchmarks.md). The codec
//! reads QUIC streams through its own trait ([`edgewarm_h3::RecvStream`]), which quinn's
//! streams take in [`crate::transport::quic_conn`].
//!
//! Flow control is QUIC's: a response chunk is handed to the stream only once it has taken the
//! last one, so a slow client slows the origin instead of growing our buffers; a request body
//! is read from the stream as the upload to the origin asks for it.

mod body;
mod request;

use std::future::poll_fn;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use edgewarm_h3::frame::code;
use edgewarm_h3::qpack;
use edgewarm_h3::uni::{self, ConnError, Event, Next, Seen, Uni};

use super::{handler_panicked, stopping, Ended, MAX_HEADER_BYTES};
use crate::http::client::alt_svc::AltSvc;
use crate::http::service::Service;
use crate::transport::quic_conn::{Accept, QuicConn, Recv, Send, H3_NO_ERROR};

/// What the connection brought.
enum Incoming {
    Request(Send, Recv),
    ClientGoAway,
    /// The connection ended, or broke the rules (then closed here).
    Lost(String),
    Broke(ConnError),
}

/// The connection's streams as they come: request streams, and the client's unidirectional
/// streams, read here as they arrive.
struct Streams {
    accept: Accept,
    uni: FuturesUnordered<Next<Recv>>,
    seen: Seen,
}

impl Streams {
    /// Request streams first: a request opened in the same flight as the client's GOAWAY is
    /// accepted before the GOAWAY is read.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Incoming> {
        match self.accept.poll_bi(cx) {
            Poll::Ready(Ok((send, recv))) => return Poll::Ready(Incoming::Request(send, recv)),
            Poll::Ready(Err(e)) => return Poll::Ready(Incoming::Lost(e)),
            Poll::Pending => {}
        }
        while let Poll::Ready(recv) = self.accept.poll_uni(cx) {
            match recv {
                Ok(recv) => self.uni.push(Next::new(Uni::new(recv))),
                Err(e) => return Poll::Ready(Incoming::Lost(e)),
            }
        }
        // Ready(None) once no stream is left.
        while let Poll::Ready(Some((uni, told))) = self.uni.poll_next_unpin(cx) {
            match told {
                // Done with (an unknown type, stopped): dropped.
                Ok(None) => {}
                Ok(Some(Event::Critical(i))) => {
                    if let Err(e) = self.seen.open(i) {
                        return Poll::Ready(Incoming::Broke(e));
                    }
                    self.uni.push(Next::new(uni));
                }
                Ok(Some(Event::GoAway)) => {
                    self.uni.push(Next::new(uni));
                    return Poll::Ready(Incoming::ClientGoAway);
                }
                Err(e) => return Poll::Ready(Incoming::Broke(e)),
            }
        }
        Poll::Pending
    }
}

/// Open the edge's control stream and send its SETTINGS. It is kept open for as long as the
/// connection lives: closing it is a connection error (§6.2.1).
async fn open_control(quic: &QuicConn) -> Result<Send, String> {
    let mut send = quic.open_uni().await?;
    let mut preface = [uni::control_preface(MAX_HEADER_BYTES as u64)];
    write_all(&mut send, &mut preface).await.map_err(|e| e.to_string())?;
    Ok(send)
}

/// Write all of `chunks` to a stream, as its window takes them.
async fn write_all(send: &mut Send, chunks: &mut [Bytes]) -> Result<(), quinn::WriteError> {
    while chunks.iter().any(|c| !c.is_empty()) {
        poll_fn(|cx| send.poll_send_chunks(cx, chunks)).await?;
    }
    Ok(())
}

/// Serve one HTTP/3 connection until it ends. `stop` (shutdown, or a reload retiring the
/// route's origin connections) sends GOAWAY and lets the requests in flight finish; `cut` then
/// closes whatever is left.
pub(crate) async fn serve(
    quic: QuicConn,
    shared: Arc<Service>,
    alt_svc: AltSvc,
    stop: &CancellationToken,
    retired: &CancellationToken,
    cut: &CancellationToken,
) -> Ended {
    let mut cut_wait = pin!(cut.cancelled());
    // Even after a stop: the client may have sent its first request already; it gets GOAWAY
    // below and its request is answered.
    let mut control = tokio::select! {
        r = open_control(&quic) => match r {
            Ok(control) => control,
            Err(e) => return ended(&quic, e),
        },
        () = &mut cut_wait => {
            quic.close(H3_NO_ERROR);
            return Ended::Cut;
        }
    };
    let mut incoming = Streams { accept: quic.accept(), uni: FuturesUnordered::new(), seen: Seen::default() };
    let mut stop_wait = pin!(stopping(stop, retired));
    let mut streams = FuturesUnordered::new();
    // The GOAWAY sent: requests on streams from this ID on are refused unprocessed.
    let mut goaway: Option<u64> = None;
    // GOAWAY's bytes the control stream has not taken yet: written as its window allows while
    // the connection's requests go on (a client that gives that stream no more credit must not
    // freeze them, nor the cut).
    let mut unsent = Bytes::new();
    // The stream ID after the last request accepted (client-initiated bidirectional streams
    // are 0, 4, 8, …).
    let mut next_id = 0;
    // While closing with nothing in flight: datagrams sent and lost as of the last quiet check.
    let mut sent_then = None;
    loop {
        let closing = goaway.is_some();
        tokio::select! {
            biased;
            () = &mut cut_wait, if closing => {
                quic.close(H3_NO_ERROR);
                return Ended::Cut;
            }
            Some(done) = streams.next(), if !streams.is_empty() => handler_panicked(&shared, done),
            // Before the stop: a request that has arrived is accepted, and answered, before
            // GOAWAY is announced.
            next = poll_fn(|cx| incoming.poll(cx)) => match next {
                Incoming::Request(mut send, mut recv) => {
                    let id = send.id();
                    if goaway.is_some_and(|g| id >= g) {
                        request::refuse(&mut send, &mut recv, code::REQUEST_REJECTED);
                        continue;
                    }
                    next_id = next_id.max(id + 4);
                    // A panic is caught per stream, as for HTTP/2: it must not end the connection.
                    let serving = request::request(shared.clone(), alt_svc.clone(), quic.clone(), send, recv);
                    streams.push(AssertUnwindSafe(serving).catch_unwind());
                }
                // The client's GOAWAY: it is going away, so the edge answers what it has asked
                // and announces its own, which refuses anything after.
                Incoming::ClientGoAway => {
                    if goaway.is_none() {
                        goaway = Some(next_id);
                        unsent = uni::goaway(next_id);
                    }
                }
                Incoming::Lost(e) => return ended(&quic, e),
                Incoming::Broke(e) => return broke(&quic, e.code, e.why),
            },
            () = &mut stop_wait, if !closing => {
                // GOAWAY: requests already accepted finish, later ones are refused unprocessed
                // (H3_REQUEST_REJECTED), and the client may send those again on a new
                // connection (RFC 9114 §5.2): the ID is the stream after the last accepted.
                goaway = Some(next_id);
                unsent = uni::goaway(next_id);
            }
            written = poll_fn(|cx| control.poll_send_chunks(cx, std::slice::from_mut(&mut unsent))), if !unsent.is_empty() => {
                if written.is_err() {
                    // The client stopped the edge's control stream (§6.2.1).
                    return broke(&quic, code::CLOSED_CRITICAL_STREAM, "the control stream stopped");
                }
            }
            // After GOAWAY the connection ends once its last response has arrived (the client's
            // own GOAWAY is not waited for: not every client sends one).
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

/// A client that broke HTTP/3's rules, on any of its streams: logged, and its connection
/// closed with the RFC's `code` (every HTTP/3 and QPACK code fits 32 bits).
fn protocol_error(quic: &QuicConn, code: u64, why: &'static str) {
    tracing::debug!(why, "HTTP/3 client broke the protocol; closing its connection");
    quic.close(u32::try_from(code).unwrap_or(code::GENERAL_PROTOCOL_ERROR as u32));
}

/// A connection whose client broke the protocol: closed with `code`, unless it had already
/// ended.
fn broke(quic: &QuicConn, code: u64, why: &'static str) -> Ended {
    if quic.ended_normally() {
        return Ended::Done;
    }
    protocol_error(quic, code, why);
    Ended::Failed(format!("HTTP/3 protocol error: {why}"))
}

/// How long a connection must send nothing before all it sent is taken to have arrived: QUIC's
/// CONNECTION_CLOSE discards whatever is unacknowledged, which would cut the end off the last
/// response, and quinn does not say when a stream is acknowledged. But a connection with
/// something unacknowledged sends a probe within its probe timeout (RFC 9002 §6.2: the smoothed
/// RTT, four RTT variations and the peer's ACK delay), a timeout that doubles with each probe
/// unanswered. A second beyond three RTTs covers a few of those doublings on any path a client
/// could still be served on; a loss declared meanwhile restarts the wait.
fn quiet_period(quic: &QuicConn) -> Duration {
    quic.rtt() * 3 + Duration::from_secs(1)
}

/// Whether the connection has sent nothing, and declared nothing lost, since the last check
/// (`then`, updated).
fn delivered(quic: &QuicConn, then: &mut Option<(u64, u64)>) -> bool {
    let now = quic.sent_and_lost();
    let quiet = *then == Some(now);
    *then = Some(now);
    quiet
}

/// How a connection whose HTTP/3 layer failed ended: a close by the client (any code: aioquic
/// closes with 0, browsers with H3_NO_ERROR) or the idle timeout is a normal end.
fn ended(quic: &QuicConn, error: String) -> Ended {
    if quic.ended_normally() {
        Ended::Done
    } else {
        Ended::Failed(error)
    }
}
