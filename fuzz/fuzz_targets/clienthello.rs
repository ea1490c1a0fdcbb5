//! The ClientHello parser on arbitrary bytes: it must never panic, and whatever it accepts must
//! be self-consistent (every accessor works, records_len within the input).
#![no_main]

use edgewarm::peek::clienthello::{parse, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Parsed::Complete(h)) = parse(data) {
        assert!(h.records_len() <= data.len());
        let _ = h.sni().map(str::len);
        assert!(h.alpn().all(|p| !p.is_empty()));
        let _ = h.supported_versions().count();
        let _ = (h.legacy_version(), h.record_version(), h.ech_offered());
        // Parsing is a function of the hello's records alone.
        let again = parse(&data[..h.records_len()]);
        assert!(matches!(again, Ok(Parsed::Complete(_))));
    }
});
