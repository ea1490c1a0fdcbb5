//! The client's unidirectional streams (RFC 9114 §6.2): its control stream, whose SETTINGS and
//! GOAWAY are read here, QPACK's encoder and decoder streams, which carry nothing the edge
//! needs with no dynamic table, and stream types the edge does not know, which it stops (§6.2:
//! "MUST either abort reading ... or discard"). The edge's dynamic table has a capacity of 0, so
//! the one instruction the encoder stream may carry sets that capacity to 0: any other is
//! QPACK_ENCODER_STREAM_ERROR (RFC 9204 §3.2.3, §4.3). The decoder stream speaks of the edge's
//! own sections, which never refer to a table: its bytes are read and dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;

use crate::frame::{self, code, varint, Kind, ReadError, Reader};
use crate::RecvStream;

/// A connection error: the code to close with, and why.
#[derive(Debug)]
pub struct ConnError {
    pub code: u64,
    pub why: &'static str,
}

const fn error(code: u64, why: &'static str) -> ConnError {
    ConnError { code, why }
}

/// What a client's unidirectional stream told.
pub enum Event {
    /// Its type: one of the critical streams (0 control, 1 QPACK encoder, 2 QPACK decoder),
    /// each of which a client may open once ([`Seen`]).
    Critical(usize),
    /// GOAWAY: the client opens no more requests (the ID is of pushes, which the edge never
    /// makes).
    GoAway,
}

const CONTROL: u64 = 0x00;
const PUSH: u64 = 0x01;
const ENCODER: u64 = 0x02;
const DECODER: u64 = 0x03;

/// The largest SETTINGS frame read: a handful of settings, grease among them.
const MAX_SETTINGS: u64 = 4096;

enum State {
    Type,
    Control {
        settings: bool,
    },
    /// Inside a control frame to skip, with this much left.
    Skip(u64),
    /// The encoder stream: checked, then dropped.
    Encoder,
    /// The decoder stream: read to nothing.
    Discard,
}

/// One unidirectional stream of the client's.
pub struct Uni<R> {
    reader: Reader<R>,
    state: State,
}

/// The critical streams already opened: control, encoder, decoder (§6.2.1, RFC 9204 §4.2).
#[derive(Default)]
pub struct Seen([bool; 3]);

impl Seen {
    /// The client opened critical stream `i` ([`Event::Critical`]): a second of one type is a
    /// connection error.
    pub fn open(&mut self, i: usize) -> Result<(), ConnError> {
        match self.0.get_mut(i).map(|seen| std::mem::replace(seen, true)) {
            Some(false) => Ok(()),
            _ => Err(error(code::STREAM_CREATION_ERROR, "a second critical stream of one type")),
        }
    }
}

/// A stream's next event, as a future: the connection keeps them in a set that polls a stream
/// only once the stream has woken it, not on every turn of the connection's task.
pub struct Next<R>(Option<Uni<R>>);

impl<R> Next<R> {
    pub fn new(uni: Uni<R>) -> Self {
        Self(Some(uni))
    }
}

// Nothing in it is pinned in place: the stream is only ever polled through `&mut`.
impl<R> Unpin for Next<R> {}

impl<R: RecvStream> Future for Next<R> {
    /// The stream back (to be waited on again, or dropped) and what it told.
    type Output = (Uni<R>, Result<Option<Event>, ConnError>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(mut uni) = self.0.take() else { return Poll::Pending };
        match uni.poll(cx) {
            Poll::Ready(told) => Poll::Ready((uni, told)),
            Poll::Pending => {
                self.0 = Some(uni);
                Poll::Pending
            }
        }
    }
}

/// Whether encoder-stream bytes are all Set Dynamic Table Capacity with 0 (RFC 9204 §4.3.1: the
/// byte 0x20): every other instruction inserts into, or refers to, a table of no capacity, and a
/// larger capacity exceeds the edge's limit of 0.
fn only_zero_capacity(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0x20)
}

impl<R: RecvStream> Uni<R> {
    pub fn new(recv: R) -> Self {
        Self { reader: Reader::new(recv), state: State::Type }
    }

    fn read_error<E>(e: ReadError<E>) -> ConnError {
        match e {
            ReadError::Truncated => error(code::FRAME_ERROR, "a control frame cut short"),
            // Closing or resetting a critical stream: H3_CLOSED_CRITICAL_STREAM (§6.2.1).
            ReadError::Stream(_) => error(code::CLOSED_CRITICAL_STREAM, "a critical stream reset"),
        }
    }

    /// Read what has arrived. `Ready(Ok(Some))`: an event; `Ready(Ok(None))`: the stream is
    /// done with (an unknown type, stopped).
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Event>, ConnError>> {
        loop {
            match self.state {
                State::Type => {
                    let t = match ready!(self.reader.poll_varint(cx)) {
                        Ok(Some(t)) => t,
                        // Ended or reset before its type: nothing to do with it.
                        Ok(None) | Err(_) => return Poll::Ready(Ok(None)),
                    };
                    let critical = match t {
                        CONTROL => 0,
                        ENCODER => 1,
                        DECODER => 2,
                        PUSH => {
                            return Poll::Ready(Err(error(
                                code::STREAM_CREATION_ERROR,
                                "a push stream from the client",
                            )))
                        }
                        _ => {
                            self.reader.recv.stop_sending(code::STREAM_CREATION_ERROR);
                            return Poll::Ready(Ok(None));
                        }
                    };
                    self.state = match t {
                        CONTROL => State::Control { settings: false },
                        ENCODER => State::Encoder,
                        _ => State::Discard,
                    };
                    return Poll::Ready(Ok(Some(Event::Critical(critical))));
                }
                State::Encoder | State::Discard => match ready!(self.reader.poll_some(cx, u64::MAX)) {
                    Ok(bytes) if matches!(self.state, State::Encoder) && !only_zero_capacity(&bytes) => {
                        return Poll::Ready(Err(error(
                            code::QPACK_ENCODER_STREAM_ERROR,
                            "a dynamic table instruction, with a table capacity of 0",
                        )))
                    }
                    Ok(_) => {}
                    Err(ReadError::Truncated) => {
                        return Poll::Ready(Err(error(code::CLOSED_CRITICAL_STREAM, "a QPACK stream closed")))
                    }
                    Err(e) => return Poll::Ready(Err(Self::read_error(e))),
                },
                State::Skip(mut left) => {
                    let skipped = self.reader.poll_skip(cx, &mut left);
                    self.state = State::Skip(left);
                    ready!(skipped).map_err(Self::read_error)?;
                    self.state = State::Control { settings: true };
                }
                State::Control { settings } => {
                    let Some((t, len)) = ready!(self.reader.poll_header(cx)).map_err(Self::read_error)? else {
                        return Poll::Ready(Err(error(code::CLOSED_CRITICAL_STREAM, "the control stream closed")));
                    };
                    if !settings && t != frame::SETTINGS {
                        return Poll::Ready(Err(error(
                            code::MISSING_SETTINGS,
                            "the control stream began without SETTINGS",
                        )));
                    }
                    match (t, frame::kind(t)) {
                        (frame::SETTINGS, _) if settings => {
                            return Poll::Ready(Err(error(code::FRAME_UNEXPECTED, "a second SETTINGS frame")))
                        }
                        (frame::SETTINGS, _) => {
                            if len > MAX_SETTINGS {
                                return Poll::Ready(Err(error(code::EXCESSIVE_LOAD, "a SETTINGS frame too large")));
                            }
                            let payload = ready!(self.reader.poll_exact(cx, len as usize)).map_err(Self::read_error)?;
                            check_settings(&payload)?;
                            self.state = State::Control { settings: true };
                        }
                        (frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH, _) => {
                            if len > 8 {
                                return Poll::Ready(Err(error(code::FRAME_ERROR, "a control frame too long")));
                            }
                            let payload = ready!(self.reader.poll_exact(cx, len as usize)).map_err(Self::read_error)?;
                            if varint(&payload).map(|(_, n)| n) != Some(payload.len()) {
                                return Poll::Ready(Err(error(code::FRAME_ERROR, "a control frame's ID malformed")));
                            }
                            if t == frame::GOAWAY {
                                return Poll::Ready(Ok(Some(Event::GoAway)));
                            }
                        }
                        (_, Kind::Unknown) => self.state = State::Skip(len),
                        _ => {
                            return Poll::Ready(Err(error(
                                code::FRAME_UNEXPECTED,
                                "a frame the control stream may not carry",
                            )))
                        }
                    }
                }
            }
        }
    }
}

/// A SETTINGS payload (§7.2.4): identifier and value pairs, each identifier at most once, none
/// of HTTP/2's. The edge needs none of the client's values: it sends no dynamic table
/// references, and its response heads are far below any field section limit a client sets.
fn check_settings(mut payload: &[u8]) -> Result<(), ConnError> {
    let mut ids: Vec<u64> = Vec::new();
    while !payload.is_empty() {
        let bad = || error(code::FRAME_ERROR, "a SETTINGS frame malformed");
        let (id, n) = varint(payload).ok_or_else(bad)?;
        let (_, m) = varint(&payload[n..]).ok_or_else(bad)?;
        payload = &payload[n + m..];
        if matches!(id, 0x02..=0x05) {
            return Err(error(code::SETTINGS_ERROR, "an HTTP/2 setting"));
        }
        if ids.contains(&id) {
            return Err(error(code::SETTINGS_ERROR, "a setting twice"));
        }
        ids.push(id);
    }
    Ok(())
}

/// The edge's control stream's first bytes: its type, and SETTINGS announcing the largest
/// request head taken. QPACK's table capacity and blocked streams stay at their default, 0.
pub fn control_preface(max_field_section: u64) -> Bytes {
    let mut settings = Vec::new();
    frame::put_varint(&mut settings, frame::MAX_FIELD_SECTION_SIZE);
    frame::put_varint(&mut settings, max_field_section);
    let mut out = vec![CONTROL as u8];
    frame::put_header(&mut out, frame::SETTINGS, settings.len());
    out.extend_from_slice(&settings);
    Bytes::from(out)
}

/// A GOAWAY frame naming `id` (§5.2).
pub fn goaway(id: u64) -> Bytes {
    let mut payload = Vec::new();
    frame::put_varint(&mut payload, id);
    let mut out = Vec::new();
    frame::put_header(&mut out, frame::GOAWAY, payload.len());
    out.extend_from_slice(&payload);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(check_settings(&[]).is_ok());
        assert!(check_settings(&[0x06, 0x44, 0x00, 0x21, 0x00]).is_ok());
        assert_eq!(check_settings(&[0x06, 0x01, 0x06, 0x02]).unwrap_err().code, code::SETTINGS_ERROR);
        assert_eq!(check_settings(&[0x04, 0x01]).unwrap_err().code, code::SETTINGS_ERROR);
        assert_eq!(check_settings(&[0x06]).unwrap_err().code, code::FRAME_ERROR);
    }

    #[test]
    fn each_critical_stream_opens_once() {
        let mut seen = Seen::default();
        assert!(seen.open(0).is_ok() && seen.open(2).is_ok());
        assert_eq!(seen.open(0).unwrap_err().code, code::STREAM_CREATION_ERROR);
        assert!(seen.open(3).is_err());
    }

    #[test]
    fn the_preface_and_goaway_are_frames() {
        let preface = control_preface(65_536);
        assert_eq!(preface[..3], [0x00, 0x04, 0x05]);
        assert_eq!(varint(&preface[3..]), Some((frame::MAX_FIELD_SECTION_SIZE, 1)));
        assert_eq!(goaway(8)[..], [0x07, 0x01, 0x08]);
    }
}
