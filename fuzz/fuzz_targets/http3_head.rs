//! An HTTP/3 request head's QPACK field section on arbitrary bytes: never panics (the decoded
//! text goes into `http`'s types, some of whose constructors panic on what they refuse), and
//! every string decoded comes back through the Huffman coder unchanged.
#![no_main]

use edgewarm::fuzzing::http3_field_section;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = http3_field_section(data);
});
