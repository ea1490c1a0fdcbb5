//! One request stream (RFC 9114 §4.1): its HEADERS read, the request handed to the service,
//! then the response's heads (any 103 first, §4.1), DATA and trailers written back.
//!
//! A response's frames are gathered while the body has more ready: a short answer's HEADERS,
//! DATA and end leave in one write to the QUIC stream.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, Bytes};
use h3::quic::{RecvStream, SendStream, SendStreamUnframed, StreamErrorIncoming};
use http::{HeaderMap, StatusCode};
use http_body::Body as _;

use super::body::H3Body;
use super::frame::{self, code, Kind, ReadError, Reader};
use super::head::{self, Refused};
use super::{protocol_error, qpack, write_all, MAX_HEADER_BYTES};
use crate::http::client::quic::QuicConn;
use crate::http::client::{content_length, finish_head};
use crate::http::interim::Interims;
use crate::http::respond::plain;
use crate::http::service::Service;
use crate::http::Body;
use crate::metrics::{Fault, HttpError};

/// Body chunks up to this size are copied in beside their frame header; larger ones are
/// written on their own.
const GATHER: usize = 16 * 1024;

/// The largest encoded HEADERS frame read: Huffman coding at its worst makes a string 3.75
/// times longer (30 bits a byte), so a head within the limit is never longer than this.
const MAX_HEADERS_FRAME: u64 = 4 * MAX_HEADER_BYTES as u64;

/// A stream's sending half, written as bytes.
struct Writer<S: SendStream<Bytes>> {
    send: S,
    /// Finished or reset.
    done: bool,
}

impl<S: SendStreamUnframed<Bytes>> Writer<S> {
    async fn write(&mut self, buf: impl Buf) -> Result<(), StreamErrorIncoming> {
        write_all(&mut self.send, buf).await
    }

    async fn finish(&mut self) {
        self.done = true;
        let _ = poll_fn(|cx| self.send.poll_finish(cx)).await;
    }

    fn reset(&mut self, code: u64) {
        self.done = true;
        self.send.reset(code);
    }
}

/// A response cut short (a panic, a failed body, a task dropped at the cut) is reset, never
/// finished: both QUIC layers finish a stream dropped unfinished, and a client would take a
/// response without a Content-Length for whole.
impl<S: SendStream<Bytes>> Drop for Writer<S> {
    fn drop(&mut self) {
        if !self.done {
            self.send.reset(code::INTERNAL_ERROR);
        }
    }
}

/// Append a HEADERS frame with a response head (`status`) or trailers. The section is encoded
/// in place after a two-byte length, which nearly every head fits (64 bytes to 16 KiB); the
/// rare other one is moved to fit its length.
fn put_headers(out: &mut Vec<u8>, status: Option<StatusCode>, headers: &HeaderMap) {
    out.push(frame::HEADERS as u8);
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    qpack::encode(status, headers, out);
    let len = out.len() - at - 2;
    if (64..16384).contains(&len) {
        out[at..at + 2].copy_from_slice(&(0x4000 | len as u16).to_be_bytes());
    } else {
        let block = out.split_off(at + 2);
        out.truncate(at);
        frame::put_varint(out, len as u64);
        out.extend_from_slice(&block);
    }
}

/// A stream refused both ways with `code`: H3_REQUEST_REJECTED for a request after GOAWAY
/// (the client may send it again, §4.1.1), H3_MESSAGE_ERROR for a malformed one.
pub(super) fn refuse<S: SendStream<Bytes>, R: RecvStream>(send: &mut S, recv: &mut R, code: u64) {
    recv.stop_sending(code);
    send.reset(code);
}

/// The request's HEADERS frame, skipping unknown frames before it; `None` if the stream
/// ended, failed or broke the rules (the connection then closed).
async fn head_block<Q: QuicConn>(
    quic: &Q,
    reader: &mut Reader<Q::Recv>,
    writer: &mut Writer<Q::Send>,
) -> Option<Result<Bytes, u64>> {
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
pub(super) async fn request<Q: QuicConn>(shared: Arc<Service>, quic: Q, stream: Q::Bidi) {
    let (send, recv) = h3::quic::BidiStream::split(stream);
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
            let (mut head, body) = tell.into_parts();
            finish_head(&mut head, &body);
            return respond(&mut writer, head, body).await;
        }
    };
    let length = content_length(req.headers());
    // Boxed: this future is built, then moved into the connection's set of streams, once per
    // request, and the body is moved through every layer of the service.
    let req = req.map(|()| Box::new(H3Body::new(reader, quic, length)));
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
                    let mut out = Vec::new();
                    put_headers(&mut out, Some(head.status()), head.headers());
                    match writer.write(out.as_slice()).await {
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
    finish_head(&mut head, &body);
    respond(&mut writer, head, body).await;
}

/// Write a response: its head, then the body as the stream takes it (a write returns once the
/// QUIC stream has taken the bytes, within its window, so at most one chunk waits here), then
/// the trailers or the stream's end.
async fn respond<S: SendStreamUnframed<Bytes>>(writer: &mut Writer<S>, head: http::response::Parts, mut body: Body) {
    let mut out = Vec::with_capacity(256);
    put_headers(&mut out, Some(head.status), &head.headers);
    loop {
        // What the body has ready joins the bytes gathered so far; they are written once it
        // would wait.
        let frame = match poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if !out.is_empty() && writer.write(out.as_slice()).await.is_err() {
                    return;
                }
                out.clear();
                poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
            }
        };
        match frame {
            None => {
                if writer.write(out.as_slice()).await.is_ok() {
                    writer.finish().await;
                }
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) => {
                    frame::put_header(&mut out, frame::DATA, data.len());
                    if data.len() <= GATHER {
                        out.extend_from_slice(&data);
                        if out.len() < 4 * GATHER {
                            continue;
                        }
                        if writer.write(out.as_slice()).await.is_err() {
                            return;
                        }
                    } else if writer.write(out.as_slice()).await.is_err() || writer.write(data).await.is_err() {
                        // The client stopped the stream: dropping the body frees the origin's.
                        return;
                    }
                    out.clear();
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        put_headers(&mut out, None, &trailers);
                        if writer.write(out.as_slice()).await.is_ok() {
                            writer.finish().await;
                        }
                        return;
                    }
                }
            },
            Some(Err(e)) => {
                // The origin's response failed after its head went out: the client's stream is
                // reset, never finished as if the body were whole.
                tracing::debug!(error = %e, "response body failed; resetting the client's stream");
                writer.reset(code::INTERNAL_ERROR);
                return;
            }
        }
    }
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
                let mut out = vec![9];
                put_headers(&mut out, status, &headers);
                let (t, a) = frame::varint(&out[1..]).unwrap();
                let (len, b) = frame::varint(&out[1 + a..]).unwrap();
                assert_eq!(t, frame::HEADERS);
                assert_eq!(len as usize, out.len() - 1 - a - b, "{n} fields");
                let mut want = Vec::new();
                qpack::encode(status, &headers, &mut want);
                assert_eq!(&out[1 + a + b..], &want[..]);
            }
        }
    }
}
