//! One request stream (RFC 9114 §4.1): its HEADERS read, the request handed to the service,
//! then the response's heads (any 103 first, §4.1), DATA and trailers written back.
//!
//! A response's frames are gathered while the body has more ready: a short answer's HEADERS,
//! DATA and end leave in one write to the QUIC stream. Frame headers, heads and short body
//! chunks are written into the thread's [`arena`]; a longer chunk goes to the stream as the
//! origin's `Bytes`, uncopied.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use edgewarm_h3::RecvStream as _;
use http::{HeaderMap, StatusCode};
use http_body::Body as _;

use edgewarm_h3::arena;
use edgewarm_h3::frame::{self, code, Kind, ReadError, Reader};
use edgewarm_h3::head::{self, Refused};

use super::body::H3Body;
use super::{protocol_error, qpack, write_all, MAX_HEADER_BYTES};
use crate::http::client::alt_svc::{self, AltSvc};
use crate::http::client::{content_length, finish_head};
use crate::http::grpc;
use crate::http::interim::Interims;
use crate::http::respond::plain;
use crate::http::service::Service;
use crate::http::Body;
use crate::metrics::{Fault, HttpError};
use crate::transport::quic_conn::{QuicConn, Recv, Send};

/// Body chunks shorter than this are copied in beside their frame header; longer ones go to
/// the stream as they are. quinn-proto keeps a chunk until it is acknowledged, and with it the
/// buffer the chunk is a slice of (an origin connection's read buffer): only a chunk this long
/// is worth what it may hold.
const COPY_BELOW: usize = 16 * 1024;

/// A response's bytes gathered before they are written, at most (a chunk may take it over).
const GATHER: usize = 64 * 1024;

/// The pieces a write takes at most: arena pieces alternate with long chunks.
const PIECES: usize = 8;

/// The room asked of the arena for a head; a longer one grows it.
const HEAD_ROOM: usize = 256;

/// The largest encoded HEADERS frame read: Huffman coding at its worst makes a string 3.75
/// times longer (30 bits a byte), so a head within the limit is never longer than this.
const MAX_HEADERS_FRAME: u64 = 4 * MAX_HEADER_BYTES as u64;

/// A stream's sending half, written as bytes.
struct Writer {
    send: Send,
    /// Finished or reset.
    done: bool,
}

impl Writer {
    async fn write(&mut self, chunks: &mut [Bytes]) -> Result<(), quinn::WriteError> {
        write_all(&mut self.send, chunks).await
    }

    async fn finish(&mut self) {
        self.done = true;
        self.send.finish();
    }

    fn reset(&mut self, code: u64) {
        self.done = true;
        self.send.reset(code);
    }
}

/// A response cut short (a panic, a failed body, a task dropped at the cut) is reset, never
/// finished: both QUIC layers finish a stream dropped unfinished, and a client would take a
/// response without a Content-Length for whole.
impl Drop for Writer {
    fn drop(&mut self) {
        if !self.done {
            self.send.reset(code::INTERNAL_ERROR);
        }
    }
}

/// Append a HEADERS frame with a response head (`status`) or trailers. The section is encoded
/// in place after a two-byte length, which nearly every head fits (64 bytes to 16 KiB); the
/// rare other one is moved to fit its length.
fn put_headers(out: &mut BytesMut, status: Option<StatusCode>, headers: &HeaderMap) {
    out.put_u8(frame::HEADERS as u8);
    let at = out.len();
    out.put_u16(0);
    qpack::encode(status, headers, out);
    let len = out.len() - at - 2;
    if (64..16384).contains(&len) {
        out[at..at + 2].copy_from_slice(&(0x4000 | len as u16).to_be_bytes());
    } else {
        let section = out[at + 2..].to_vec();
        out.truncate(at);
        frame::put_varint(out, len as u64);
        out.extend_from_slice(&section);
    }
}

/// A HEADERS frame on its own, as a piece of the arena.
fn headers_frame(status: Option<StatusCode>, headers: &HeaderMap) -> Bytes {
    arena::with(|arena| {
        put_headers(arena.room(HEAD_ROOM), status, headers);
        arena.cut().unwrap_or_default()
    })
}

/// A stream refused both ways with `code`: H3_REQUEST_REJECTED for a request after GOAWAY
/// (the client may send it again, §4.1.1), H3_MESSAGE_ERROR for a malformed one.
pub(super) fn refuse(send: &mut Send, recv: &mut Recv, code: u64) {
    recv.stop_sending(code);
    send.reset(code);
}

/// The request's HEADERS frame, skipping unknown frames before it; `None` if the stream
/// ended, failed or broke the rules (the connection then closed).
async fn head_block(quic: &QuicConn, reader: &mut Reader<Recv>, writer: &mut Writer) -> Option<Result<Bytes, u64>> {
    let truncated = || {
        protocol_error(quic, code::FRAME_ERROR, "a request stream ended inside a frame");
        None
    };
    loop {
        let header = match poll_fn(|cx| reader.poll_header(cx)).await {
            Ok(Some(header)) => header,
            // Ended before a head: H3_REQUEST_INCOMPLETE (§4.1.2).
            Ok(None) => {
                writer.reset(code::REQUEST_INCOMPLETE);
                return None;
            }
            Err(ReadError::Stream(_)) => return None,
            Err(ReadError::Truncated) => return truncated(),
        };
        match header {
            (frame::HEADERS, len) if len > MAX_HEADERS_FRAME => return Some(Err(len)),
            (frame::HEADERS, len) => {
                return match poll_fn(|cx| reader.poll_exact(cx, len as usize)).await {
                    Ok(block) => Some(Ok(block)),
                    Err(ReadError::Stream(_)) => None,
                    Err(ReadError::Truncated) => truncated(),
                };
            }
            (t, len) if matches!(frame::kind(t), Kind::Unknown) => {
                let mut left = len;
                match poll_fn(|cx| reader.poll_skip(cx, &mut left)).await {
                    Ok(()) => {}
                    Err(ReadError::Stream(_)) => return None,
                    Err(ReadError::Truncated) => return truncated(),
                }
            }
            _ => {
                protocol_error(quic, code::FRAME_UNEXPECTED, "a request stream not opened by HEADERS");
                return None;
            }
        }
    }
}

/// Serve one request stream.
pub(super) async fn request(shared: Arc<Service>, alt_svc: AltSvc, quic: QuicConn, send: Send, recv: Recv) {
    let mut writer = Writer { send, done: false };
    let mut reader = Reader::new(recv);
    let Some(block) = head_block(&quic, &mut reader, &mut writer).await else { return };
    let client_error = |why: &str| {
        shared.conn.metrics.error(&shared.route, HttpError::BadRequest, Fault::Client);
        tracing::debug!(route = %shared.route, client = %shared.conn.client, why, "HTTP/3 request refused");
    };
    let req = match block.as_ref().map(head::request) {
        Ok(Ok(req)) => req,
        Ok(Err(Refused::Qpack(e))) => {
            client_error(e.0);
            return protocol_error(&quic, code::QPACK_DECOMPRESSION_FAILED, e.0);
        }
        Ok(Err(Refused::Malformed(why))) => {
            client_error(why);
            writer.done = true;
            return refuse(&mut writer.send, &mut reader.recv, code::MESSAGE_ERROR);
        }
        Ok(Err(Refused::TooLarge)) | Err(_) => {
            client_error("request head too large");
            // Answered without reading the rest: the client is asked to stop sending it (§4.1).
            reader.recv.stop_sending(code::NO_ERROR);
            let tell = plain(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "request header fields too large\n");
            let to_grpc = block.as_ref().is_ok_and(grpc::in_qpack_block);
            let tell = grpc::answer(to_grpc, tell, "request header fields too large");
            let (mut head, body) = tell.into_parts();
            // Before its route is known: the listener's header policy.
            shared.unrouted_headers(&mut head.headers);
            finish_head(&mut head, &body);
            return respond(&mut writer, head, body).await;
        }
    };
    let length = content_length(req.headers());
    // Boxed: this future is built, then moved into the connection's set of streams, once per
    // request, and the body is moved through every layer of the service.
    let req = req.map(|()| Box::new(H3Body::new(reader, quic, length)));
    let alt = alt_svc.for_request(&req);
    let interims = Interims::new();
    let response = {
        let to_client = interims.to_client();
        let mut handled = Box::pin(shared.handle(req, Some(&to_client)));
        loop {
            tokio::select! {
                biased;
                response = &mut handled => break response,
                // A 103's head goes first, in a HEADERS frame of its own (§4.1).
                (head, source) = interims.next() => {
                    let mut frame = [headers_frame(Some(head.status()), head.headers())];
                    match writer.write(&mut frame).await {
                        Ok(()) => interims.sent(source),
                        Err(e) => tracing::debug!(error = %e, "HTTP/3 informational head not sent"),
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
    respond(&mut writer, head, body).await;
}

/// Write a response: its head, then the body as the stream takes it (a write returns once the
/// QUIC stream has taken the bytes, within its window, so at most one gathering waits here),
/// then the trailers or the stream's end.
async fn respond(writer: &mut Writer, head: http::response::Parts, mut body: Body) {
    let mut head = Some(head);
    loop {
        let mut frames = Frames::default();
        let after = poll_fn(|cx| gather(cx, &mut body, &mut head, &mut frames)).await;
        if let After::Failed = after {
            // The origin's response failed after its head: the client's stream is reset,
            // never finished as if the body were whole.
            writer.reset(code::INTERNAL_ERROR);
            return;
        }
        if writer.write(&mut frames.pieces[..frames.n]).await.is_err() {
            // The client stopped the stream: dropping the body frees the origin's.
            return;
        }
        if let After::End = after {
            writer.finish().await;
            return;
        }
    }
}

/// What a response has ready to write, in order.
#[derive(Default)]
struct Frames {
    pieces: [Bytes; PIECES],
    n: usize,
    /// Their bytes.
    len: usize,
}

impl Frames {
    fn push(&mut self, piece: Option<Bytes>) {
        if let Some(piece) = piece {
            self.len += piece.len();
            self.pieces[self.n] = piece;
            self.n += 1;
        }
    }
}

/// What comes after the frames gathered.
enum After {
    /// The body has more ready.
    More,
    /// The body has nothing ready yet.
    Wait,
    /// The response is whole: the stream ends after these frames.
    End,
    /// The body failed.
    Failed,
}

/// Gather `head` (once) and what the body has ready, as far as [`GATHER`] and [`PIECES`] go.
/// `Pending` only when there is nothing to write and the body has nothing ready.
fn gather(
    cx: &mut Context<'_>,
    body: &mut Body,
    head: &mut Option<http::response::Parts>,
    frames: &mut Frames,
) -> Poll<After> {
    arena::with(|arena| {
        if let Some(head) = head.take() {
            put_headers(arena.room(HEAD_ROOM), Some(head.status), &head.headers);
        }
        let after = loop {
            // Room for a piece and a chunk, and the piece after them.
            if frames.n + 3 > PIECES || frames.len + arena.len() >= GATHER {
                break After::More;
            }
            let frame = match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => break After::Wait,
                Poll::Ready(None) => break After::End,
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "response body failed; resetting the client's stream");
                    break After::Failed;
                }
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) if data.len() < COPY_BELOW => {
                    let out = arena.room(frame::MAX_HEADER + data.len());
                    frame::put_header(out, frame::DATA, data.len());
                    out.extend_from_slice(&data);
                }
                Ok(data) => {
                    frame::put_header(arena.room(frame::MAX_HEADER), frame::DATA, data.len());
                    frames.push(arena.cut());
                    frames.push(Some(data));
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        put_headers(arena.room(HEAD_ROOM), None, &trailers);
                        break After::End;
                    }
                }
            }
        };
        frames.push(arena.cut());
        if frames.n == 0 && matches!(after, After::Wait) {
            Poll::Pending
        } else {
            Poll::Ready(after)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn a_headers_frame_s_length_is_its_section_s_at_every_size() {
        for n in [0, 1, 3, 20, 800, 3000] {
            let mut headers = HeaderMap::new();
            for i in 0..n {
                headers.append("x-n", HeaderValue::from(i));
            }
            for status in [None, Some(StatusCode::OK)] {
                let mut out = BytesMut::from(&[9u8][..]);
                put_headers(&mut out, status, &headers);
                let (t, a) = frame::varint(&out[1..]).unwrap();
                let (len, b) = frame::varint(&out[1 + a..]).unwrap();
                assert_eq!(t, frame::HEADERS);
                assert_eq!(len as usize, out.len() - 1 - a - b, "{n} fields");
                let mut want = BytesMut::new();
                qpack::encode(status, &headers, &mut want);
                assert_eq!(&out[1 + a + b..], &want[..]);
            }
        }
    }
}
