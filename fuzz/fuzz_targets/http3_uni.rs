//! A client's HTTP/3 unidirectional stream (control: SETTINGS, GOAWAY and the rest; QPACK
//! encoder and decoder; unknown types): it ends, errs with an HTTP/3 or QPACK code, or is put
//! aside, never panics or hangs.
#![no_main]

use edgewarm::fuzzing::http3_uni;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = http3_uni(data);
});
