//! Entry points for the fuzz targets (`fuzz/`): parsers inside the crate that read bytes a
//! client chose, reachable from outside it only through here. Not an API to build on.

/// An HTTP/3 request head's field section (QPACK with the static table only), read as the edge
/// reads one off a client's HEADERS frame, and the same bytes as trailers: whether each was
/// accepted. Every string that decodes is also checked to come back through the edge's own
/// encoder unchanged.
pub fn http3_field_section(block: &[u8]) -> (bool, bool) {
    edgewarm_h3::fuzz::field_section(block)
}

/// A stream of HTTP/3 frames (the input's first bytes say where the stream is cut into
/// chunks): read to its end, every payload as sent, every integer back through the encoder.
/// The frames read whole, or `None` where the stream ended inside one.
pub fn http3_frames(input: &[u8]) -> Option<usize> {
    edgewarm_h3::fuzz::frames(input)
}

/// One of a client's HTTP/3 unidirectional streams (control, QPACK encoder or decoder, or
/// another type; cut into chunks as [`http3_frames`]) read until it ends or errs: the events
/// it told, and the connection error's code, if any.
pub fn http3_uni(input: &[u8]) -> (usize, Option<u64>) {
    edgewarm_h3::fuzz::uni(input)
}

/// Where a decrypted QUIC packet's trailing PADDING would be cut, checked to cut padding only.
pub fn quic_padding(payload: &[u8]) -> Option<usize> {
    crate::listener::quic::padding::fuzz_padded_to(payload)
}
