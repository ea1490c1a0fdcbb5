//! Entry points for the fuzz targets (`fuzz/`): parsers inside the crate that read bytes a
//! client chose, reachable from outside it only through here. Not an API to build on.

/// An HTTP/3 request head's field section (QPACK with the static table only), read as the edge
/// reads one off a client's HEADERS frame, and the same bytes as trailers: whether each was
/// accepted. Every string that decodes is also checked to come back through the edge's own
/// encoder unchanged.
pub fn http3_field_section(block: &[u8]) -> (bool, bool) {
    crate::http::client::h3::fuzz_field_section(block)
}
