//! The parser on real captured ClientHellos (testdata/clienthello, see its README), on every
//! prefix of each, re-cut into several TLS records, and on malformed input.

use std::borrow::Cow;

use super::*;

fn capture(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/clienthello/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every capture with what it must parse to: (file, sni, alpn, max supported version).
const CAPTURES: &[(&str, Option<&str>, &[&str], u16)] = &[
    ("rustls-pq-alpn.bin", Some("a.test"), &["h2", "http/1.1"], 0x0304),
    ("rustls-no-sni.bin", None, &[], 0x0304),
    ("openssl-s_client-alpn.bin", Some("a.test"), &["h2", "http/1.1"], 0x0304),
    ("openssl-s_client-tls12.bin", Some("a.test"), &[], 0),
    ("curl.bin", Some("a.test"), &["h2", "http/1.1"], 0x0304),
];

use super::split_into_records as refragment;

fn check(bytes: &[u8], sni: Option<&str>, alpn: &[&str], max_version: u16, what: &str) {
    for i in 0..bytes.len() {
        match parse(&bytes[..i]) {
            Ok(Parsed::NeedMore) => {}
            other => panic!("{what}: prefix of {i} bytes gave {other:?}"),
        }
    }
    let mut with_trailer = bytes.to_vec();
    with_trailer.extend_from_slice(b"\x17\x03\x03\x00\x05early");
    for buf in [bytes, &with_trailer[..]] {
        let Ok(Parsed::Complete(h)) = parse(buf) else { panic!("{what}: not complete") };
        assert_eq!(h.sni(), sni, "{what}");
        let offered: Vec<_> = h.alpn().map(|p| String::from_utf8(p.to_vec()).unwrap()).collect();
        assert_eq!(offered, alpn, "{what}");
        assert_eq!(h.supported_versions().max().unwrap_or(0), max_version, "{what}");
        assert_eq!(h.legacy_version(), 0x0303, "{what}");
        assert_eq!(h.records_len(), bytes.len(), "{what}");
        assert!(!h.ech_offered());
    }
}

#[test]
fn captures_every_prefix() {
    for &(file, sni, alpn, v) in CAPTURES {
        check(&capture(file), sni, alpn, v, file);
    }
}

#[test]
fn captures_split_across_records() {
    for &(file, sni, alpn, v) in CAPTURES {
        let hello = capture(file);
        for size in [1, 7, 100, 512] {
            check(&refragment(&hello, size), sni, alpn, v, &format!("{file} in {size}-byte records"));
        }
    }
}

#[test]
fn post_quantum_hello_is_large_and_zero_copy() {
    let hello = capture("rustls-pq-alpn.bin");
    assert!(hello.len() > 1200, "X25519MLKEM768 key share expected: {} bytes", hello.len());
    let Ok(Parsed::Complete(h)) = parse(&hello) else { panic!() };
    assert!(matches!(h.body_for_tests(), Cow::Borrowed(_)), "single record must not copy");
    let split = refragment(&hello, 100);
    let Ok(Parsed::Complete(h)) = parse(&split) else { panic!() };
    assert!(matches!(h.body_for_tests(), Cow::Owned(_)));
}

/// Append an extension to a single-record hello, fixing every length.
fn with_extension(hello: &[u8], ty: u16, data: &[u8]) -> Vec<u8> {
    let mut h = hello.to_vec();
    let mut ext = ty.to_be_bytes().to_vec();
    ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
    ext.extend_from_slice(data);
    h.extend_from_slice(&ext);
    let add = ext.len();
    let bump16 = |h: &mut Vec<u8>, at: usize| {
        let v = u16::from_be_bytes([h[at], h[at + 1]]) as usize + add;
        h[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
    };
    bump16(&mut h, 3);
    let hs = (usize::from(h[6]) << 16 | usize::from(h[7]) << 8 | usize::from(h[8])) + add;
    h[6..9].copy_from_slice(&(hs as u32).to_be_bytes()[1..]);
    // Walk to the extensions length: header 9, version 2, random 32, session id, suites, compression.
    let mut at = 9 + 2 + 32;
    at += 1 + usize::from(h[at]);
    at += 2 + usize::from(u16::from_be_bytes([h[at], h[at + 1]]));
    at += 1 + usize::from(h[at]);
    bump16(&mut h, at);
    h
}

#[test]
fn ech_is_seen_and_the_outer_sni_routes() {
    let hello = with_extension(&capture("rustls-pq-alpn.bin"), 0xfe0d, &[0, 1, 2, 3]);
    let Ok(Parsed::Complete(h)) = parse(&hello) else { panic!() };
    assert!(h.ech_offered());
    assert_eq!(h.sni(), Some("a.test"));
    let split = refragment(&hello, 300);
    let Ok(Parsed::Complete(h)) = parse(&split) else { panic!() };
    assert!(h.ech_offered());
    assert_eq!(h.sni(), Some("a.test"));
}

#[test]
fn ech_check_helper_ignores_flag() {
    // `check` asserts no ECH; keep the ECH case's prefix coverage separate.
    let hello = with_extension(&capture("curl.bin"), 0xfe0d, &[9]);
    for i in 0..hello.len() {
        assert!(matches!(parse(&hello[..i]), Ok(Parsed::NeedMore)));
    }
}

fn err(bytes: &[u8]) -> HelloError {
    match parse(bytes) {
        Err(e) => e,
        Ok(p) => panic!("accepted {bytes:02x?}: {p:?}"),
    }
}

#[test]
fn decided_from_the_first_bytes() {
    assert_eq!(err(b"G"), HelloError::PlainHttp);
    assert_eq!(err(b"GET / HTTP/1.1\r\n"), HelloError::PlainHttp);
    assert_eq!(err(b"PRI * HTTP/2.0\r\n"), HelloError::PlainHttp);
    assert_eq!(err(&[0x00, 0xff]), HelloError::NotTls);
    assert_eq!(err(b"\x16\x04\x01"), HelloError::NotTls);
    assert_eq!(err(&[0x80, 0x2e, 0x01, 0x00, 0x02]), HelloError::SslV2);
    assert_eq!(err(&[0x15, 3, 3, 0, 2, 2, 40]), HelloError::NotTls, "an alert first");
    // A handshake header announcing more than 64 KiB: refused before the bytes arrive.
    assert_eq!(err(&[0x16, 3, 1, 0x40, 0, 1, 0x01, 0, 0]), HelloError::TooLarge);
    assert_eq!(err(&[0x16, 3, 1, 0, 4, 2]), HelloError::NotClientHello);
}

#[test]
fn malformed_structure() {
    let hello = capture("rustls-pq-alpn.bin");
    assert_eq!(err(&[0x16, 3, 1, 0, 0]), HelloError::Malformed("empty handshake record"));
    assert_eq!(err(&[0x16, 3, 1, 0x40, 0x01]), HelloError::Malformed("record longer than 2^14"));
    // A change_cipher_spec record between two fragments of the hello.
    let split = refragment(&hello, 100);
    let mut interleaved = split[..105].to_vec();
    interleaved.extend_from_slice(&[0x14, 3, 3, 0, 1, 1]);
    assert_eq!(err(&interleaved), HelloError::Malformed("non-handshake record inside the hello"));
    // The record claims completeness but the extension block is cut short.
    let mut truncated_ext = hello.clone();
    truncated_ext.truncate(hello.len() - 3);
    let shrink = 3u16;
    let rl = u16::from_be_bytes([truncated_ext[3], truncated_ext[4]]) - shrink;
    truncated_ext[3..5].copy_from_slice(&rl.to_be_bytes());
    let hs = u32::from_be_bytes([0, truncated_ext[6], truncated_ext[7], truncated_ext[8]]) - u32::from(shrink);
    truncated_ext[6..9].copy_from_slice(&hs.to_be_bytes()[1..]);
    assert!(matches!(err(&truncated_ext), HelloError::Malformed(_)));
    // Repeated extension, bad host name, two host names.
    assert_eq!(err(&with_extension(&hello, 16, &[0, 3, 2, b'h', b'2'])), HelloError::Malformed("repeated extension"));
    let bad_sni = with_extension(&capture("openssl-s_client-tls12.bin"), 0xff00, &[]);
    assert!(matches!(parse(&bad_sni), Ok(Parsed::Complete(_))), "unknown extensions are skipped");
    // A repeat among the types numbered 64 and up (kept in a list, not the bitset).
    let twice = with_extension(&with_extension(&hello, 0xff00, &[]), 0xff00, &[]);
    assert_eq!(err(&twice), HelloError::Malformed("repeated extension"));
    // Up to 32 distinct such types are fine (real hellos carry about five); more are refused.
    let many = |n: u16| (0..n).fold(hello.clone(), |h, i| with_extension(&h, 0xa000 + i, &[]));
    assert!(matches!(parse(&many(20)), Ok(Parsed::Complete(_))));
    assert_eq!(err(&many(40)), HelloError::Malformed("too many extensions"));
}

#[test]
fn host_name_validation() {
    // A minimal TLS 1.2-style hello with only a server_name extension.
    let hello_with = |sni: &[u8]| {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        let mut ext = vec![0, 0];
        let entry_len = sni.len() + 3;
        ext.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(entry_len as u16).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        ext.extend_from_slice(sni);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
        rec.extend_from_slice(&msg);
        rec
    };
    let good = hello_with(b"Shop.Example.COM");
    let Ok(Parsed::Complete(h)) = parse(&good) else { panic!() };
    assert_eq!(h.sni(), Some("Shop.Example.COM"));
    assert_eq!(h.supported_versions().count(), 0);
    for bad in [&b""[..], b"a b", b"a\0b", "ünï".as_bytes(), &[b'a'; 256]] {
        assert_eq!(err(&hello_with(bad)), HelloError::Malformed("host name"), "{bad:?}");
    }
}

/// Regenerates the rustls captures. `cargo test --lib -- --ignored capture_rustls`
#[test]
#[ignore = "rewrites testdata; run by hand"]
fn capture_rustls() {
    use std::sync::Arc;
    let write = |name: &str, server: &str, alpn: Vec<Vec<u8>>| {
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        let name_ = rustls::pki_types::ServerName::try_from(server.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name_).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        std::fs::write(format!("{}/testdata/clienthello/{name}", env!("CARGO_MANIFEST_DIR")), out).unwrap();
    };
    write("rustls-pq-alpn.bin", "a.test", vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    write("rustls-no-sni.bin", "127.0.0.1", vec![]);
}
