//! The walk over a decrypted QUIC packet's frames that finds its trailing PADDING: it cuts only
//! a run of padding that ends the packet, keeps one byte of it, and never panics.
#![no_main]

use edgewarm::fuzzing::quic_padding;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = quic_padding(data);
});
