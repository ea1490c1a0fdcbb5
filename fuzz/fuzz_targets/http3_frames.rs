//! HTTP/3 frames on a client's stream, cut into chunks where the input says: never a panic or a
//! hang, every payload read as it was sent, every byte of a stream that ends between frames
//! read once, every integer back through the encoder.
#![no_main]

use edgewarm::fuzzing::http3_frames;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = http3_frames(data);
});
