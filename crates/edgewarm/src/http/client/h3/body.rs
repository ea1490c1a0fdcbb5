//! A client's request body on HTTP/3: the payloads of its DATA frames as they arrive, then the
//! trailers if any (RFC 9114 §4.1). A body that breaks the frame rules closes the connection
//! (H3_FRAME_UNEXPECTED, H3_FRAME_ERROR); one whose length is not the `Content-Length` it
//! declared is malformed (§4.1.2), and the stream is stopped with H3_MESSAGE_ERROR.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use edgewarm_h3::RecvStream as _;
use http_body::{Frame, SizeHint};

use edgewarm_h3::frame::{self, code, Kind, ReadError, Reader};
use edgewarm_h3::head::{self, Refused};

use super::{protocol_error, MAX_HEADER_BYTES};
use crate::transport::quic_conn::{QuicConn, Recv};

/// Why a request body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request stream failed: {0}")]
    Stream(quinn::ReadError),
    #[error("HTTP/3 protocol error in the request body: {0}")]
    Protocol(&'static str),
}

enum State {
    /// Before the next frame's header.
    Frames,
    /// Inside a DATA frame with this much payload left.
    Data(u64),
    /// Inside a frame to skip.
    Skip(u64),
    /// Trailers (a HEADERS frame of this length) to read.
    Trailers(usize),
}

pub(crate) struct H3Body {
    reader: Reader<Recv>,
    quic: QuicConn,
    state: State,
    /// A frame read ahead by [`H3Body::settle`], given out first.
    peeked: Option<Result<Frame<Bytes>, BodyError>>,
    done: bool,
    /// What is left of the declared `Content-Length`.
    length: Option<u64>,
}

impl H3Body {
    pub(super) fn new(reader: Reader<Recv>, quic: QuicConn, length: Option<u64>) -> Self {
        let mut body = Self { reader, quic, state: State::Frames, peeked: None, done: false, length };
        body.settle();
        body
    }

    /// Find out without waiting whether the stream has already ended. HTTP/3 has no flag on
    /// the request head saying "no body" (HTTP/2's END_STREAM): a GET's end is its stream's FIN,
    /// which nearly always arrived with the head. The early-data gate and the replay decision
    /// need to know that before anything reads the body.
    fn settle(&mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(frame) = self.next_frame(&mut cx) {
            self.peeked = frame;
            if self.peeked.is_none() {
                self.done = true;
            }
        }
    }

    /// A frame-rule breach: the connection is closed with `code` (RFC 9114 §7, §8).
    fn connection_error(&mut self, code: u64, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.done = true;
        protocol_error(&self.quic, code, why);
        Poll::Ready(Some(Err(BodyError::Protocol(why))))
    }

    /// A malformed message: the stream is stopped (§4.1.2).
    fn malformed(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.done = true;
        self.reader.recv.stop_sending(code::MESSAGE_ERROR);
        Poll::Ready(Some(Err(BodyError::Protocol(why))))
    }

    fn read_error(&mut self, e: ReadError<quinn::ReadError>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match e {
            ReadError::Truncated => self.connection_error(code::FRAME_ERROR, "the stream ended inside a frame"),
            ReadError::Stream(e) => {
                self.done = true;
                Poll::Ready(Some(Err(BodyError::Stream(e))))
            }
        }
    }

    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            match self.state {
                State::Data(left) => {
                    let data = match ready!(self.reader.poll_some(cx, left)) {
                        Ok(data) => data,
                        Err(e) => return self.read_error(e),
                    };
                    let left = left - data.len() as u64;
                    self.state = if left == 0 { State::Frames } else { State::Data(left) };
                    if let Some(declared) = self.length.as_mut() {
                        match declared.checked_sub(data.len() as u64) {
                            Some(rest) => *declared = rest,
                            None => return self.malformed("more body than its Content-Length"),
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::Skip(mut left) => {
                    let skipped = self.reader.poll_skip(cx, &mut left);
                    self.state = State::Skip(left);
                    if let Err(e) = ready!(skipped) {
                        return self.read_error(e);
                    }
                    self.state = State::Frames;
                }
                State::Trailers(len) => {
                    let block = match ready!(self.reader.poll_exact(cx, len)) {
                        Ok(block) => block,
                        Err(e) => return self.read_error(e),
                    };
                    self.done = true;
                    if self.length.is_some_and(|left| left > 0) {
                        return self.malformed("less body than its Content-Length");
                    }
                    // Nothing may follow the trailers but the stream's end (§4.1); what does is
                    // not read.
                    return match head::trailers(&block) {
                        Ok(trailers) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                        Err(Refused::Qpack(e)) => self.connection_error(code::QPACK_DECOMPRESSION_FAILED, e.0),
                        Err(Refused::Malformed(why)) => self.malformed(why),
                        Err(Refused::TooLarge) => self.malformed("trailers too large"),
                    };
                }
                State::Frames => {
                    let header = match ready!(self.reader.poll_header(cx)) {
                        Ok(header) => header,
                        Err(e) => return self.read_error(e),
                    };
                    let Some((t, len)) = header else {
                        self.done = true;
                        if self.length.is_some_and(|left| left > 0) {
                            return self.malformed("less body than its Content-Length");
                        }
                        return Poll::Ready(None);
                    };
                    self.state = match (t, frame::kind(t)) {
                        (frame::DATA, _) => State::Data(len),
                        (frame::HEADERS, _) => match usize::try_from(len) {
                            Ok(len) if len <= MAX_HEADER_BYTES => State::Trailers(len),
                            _ => return self.malformed("trailers too large"),
                        },
                        (_, Kind::Unknown) => State::Skip(len),
                        _ => {
                            return self
                                .connection_error(code::FRAME_UNEXPECTED, "a frame a request stream may not carry")
                        }
                    };
                    if matches!(self.state, State::Data(0)) {
                        self.state = State::Frames;
                    }
                }
            }
        }
    }
}

// Nothing in the body is pinned in place: it is only ever polled through `&mut`.
impl Unpin for H3Body {}

impl http_body::Body for H3Body {
    type Data = Bytes;
    type Error = BodyError;

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
