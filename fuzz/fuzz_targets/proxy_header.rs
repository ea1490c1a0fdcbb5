//! The PROXY protocol header framing on arbitrary bytes: never panics, never claims more bytes
//! than it was given.
#![no_main]

use edgewarm::peek::proxy::{parse, ProxyHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let ProxyHeader::Complete { len, .. } = parse(data) {
        assert!(len <= data.len());
    }
});
