use super::*;

fn norm(target: &str) -> Result<String, PathError> {
    normalize(target.as_bytes(), EncodedSlash::Refuse).map(|n| n.path)
}

fn keep(target: &str) -> Result<String, PathError> {
    normalize(target.as_bytes(), EncodedSlash::Keep).map(|n| n.path)
}

/// The classic bypasses of a `/public/` rule guarding an `/admin` one (issue #59): each reads
/// as the path a careful origin serves, or is refused.
#[test]
fn the_classic_bypasses_normalize_as_origins_read_them_or_are_refused() {
    let cases: &[(&str, Result<&str, PathError>)] = &[
        ("/public/../admin", Ok("/admin")),
        ("/public/%2e%2e/admin", Ok("/admin")),
        ("/public/%2E%2E/admin", Ok("/admin")),
        ("/public/.%2e/admin", Ok("/admin")),
        ("/public/..%2fadmin", Err(PathError::EncodedSlash)),
        ("/public%2f..%2fadmin", Err(PathError::EncodedSlash)),
        ("//admin", Ok("/admin")),
        ("/./admin", Ok("/admin")),
        // A parameter on a named segment is part of it (see the module doc): not `/admin`.
        ("/admin;x", Ok("/admin;x")),
        ("/public/..;/admin", Err(PathError::DotParameters)),
        ("/public/..;x/admin", Err(PathError::DotParameters)),
        ("/public/.;x/admin", Err(PathError::DotParameters)),
        ("/public/%2e%2e;/admin", Err(PathError::DotParameters)),
        ("/public/;x/../admin", Err(PathError::EmptyParameters)),
        ("/%61dmin", Ok("/admin")),
        ("\\admin", Err(PathError::NotAbsolute)),
        ("/\\admin", Err(PathError::Backslash)),
        ("/public/..\\admin", Err(PathError::Backslash)),
        ("/public/..%5cadmin", Err(PathError::Backslash)),
        ("/admin\0", Err(PathError::Nul)),
        ("/admin%00.html", Err(PathError::Nul)),
        ("/public/%c0%ae%c0%ae/admin", Err(PathError::Overlong)),
        ("/%c0%ae%c0%ae", Err(PathError::Overlong)),
        ("/public/%c0%afadmin", Err(PathError::Overlong)),
        ("/public/%e0%80%ae%e0%80%ae/admin", Err(PathError::Overlong)),
        ("/public/%f0%80%80%ae/admin", Err(PathError::Overlong)),
        ("/public/\u{c0}\u{ae}", Ok("/public/%C3%80%C2%AE")),
        ("/..", Err(PathError::AboveRoot)),
        ("/public/../../admin", Err(PathError::AboveRoot)),
        ("/%2e%2e/admin", Err(PathError::AboveRoot)),
    ];
    for (target, want) in cases {
        let got = norm(target);
        assert_eq!(got.as_deref().map_err(|e| *e), *want, "{target:?}");
    }
}

#[test]
fn raw_overlong_bytes_are_refused_like_encoded_ones() {
    assert_eq!(normalize(b"/public/\xc0\xae\xc0\xae/admin", EncodedSlash::Refuse), Err(PathError::Overlong));
    // A lone Latin-1 byte is not an overlong form: it is kept, encoded.
    assert_eq!(norm("/caf%E9"), Ok("/caf%E9".into()));
    assert_eq!(normalize(b"/caf\xe9", EncodedSlash::Refuse).unwrap().path, "/caf%E9");
    assert_eq!(norm("/%C0"), Ok("/%C0".into()));
}

#[test]
fn dot_segments_are_removed_as_rfc_3986_says() {
    for (target, want) in [
        ("/", "/"),
        ("/.", "/"),
        ("/a/..", "/"),
        ("/a/.", "/a/"),
        ("/a/b/..", "/a/"),
        ("/a/b/../c", "/a/c"),
        ("/a/./b/./c", "/a/b/c"),
        ("/a/b/../../c/", "/c/"),
        ("/a/b/", "/a/b/"),
        ("/a//b", "/a/b"),
        ("/a//", "/a/"),
        ("///", "/"),
        ("/a//..", "/"),
        ("/a/.../b", "/a/.../b"),
        ("/a/..b/.c", "/a/..b/.c"),
    ] {
        assert_eq!(norm(target), Ok(want.to_string()), "{target:?}");
    }
}

#[test]
fn percent_encoding_is_decoded_only_for_unreserved_characters() {
    assert_eq!(norm("/%7Euser/%41%2d%5f%2E"), Ok("/~user/A-_.".into()));
    // Reserved or unsafe bytes stay encoded, in upper case; `%25` is never decoded twice.
    assert_eq!(norm("/a%3bb/%3f%23%25%20/%25%32%65"), Ok("/a%3Bb/%3F%23%25%20/%252e".into()));
    assert_eq!(norm("/a%3b/..").unwrap(), "/");
    // Raw bytes a path may not hold are written encoded; sub-delims, `:` and `@` stay raw.
    assert_eq!(norm("/a b/\"{x}\"/[1]"), Ok("/a%20b/%22%7Bx%7D%22/%5B1%5D".into()));
    assert_eq!(norm("/!$&'()*+,;=:@"), Ok("/!$&'()*+,;=:@".into()));
    // Case is kept.
    assert_eq!(norm("/Admin/INDEX.html"), Ok("/Admin/INDEX.html".into()));
}

#[test]
fn bad_percent_encoding_and_control_bytes_are_refused() {
    for target in ["/a%zz", "/a%4", "/a%", "/a%g0/b", "/%%41"] {
        assert_eq!(norm(target), Err(PathError::BadPercent), "{target:?}");
    }
    for target in ["/a\tb", "/a\r\nb", "/a\x7f"] {
        assert_eq!(norm(target), Err(PathError::Control), "{target:?}");
    }
    assert_eq!(norm("/a#frag"), Err(PathError::Fragment));
}

#[test]
fn the_query_is_kept_apart_and_untouched() {
    let n = normalize(b"/a/../b?x=%2e%2e/../&y=/%2F", EncodedSlash::Refuse).unwrap();
    assert_eq!(n.path, "/b");
    assert_eq!(n.query, Some(&b"x=%2e%2e/../&y=/%2F"[..]));
    assert_eq!(normalize(b"/b?", EncodedSlash::Refuse).unwrap().query, Some(&b""[..]));
    assert_eq!(normalize(b"/b", EncodedSlash::Refuse).unwrap().query, None);
}

#[test]
fn an_absolute_form_target_is_read_for_its_path() {
    let n = normalize(b"http://other.example:8080/public/../admin?q=1", EncodedSlash::Refuse).unwrap();
    assert_eq!((n.path.as_str(), n.query), ("/admin", Some(&b"q=1"[..])));
    assert_eq!(norm("https://h"), Ok("/".into()));
    assert_eq!(norm("https://h?x"), Ok("/".into()));
    for target in ["*", "example.com:443", "h/a", "1http://h/a", "ht_p://h/a", "http:/h/a", ""] {
        assert_eq!(norm(target), Err(PathError::NotAbsolute), "{target:?}");
    }
}

#[test]
fn a_kept_encoded_slash_is_an_opaque_byte_of_its_segment() {
    assert_eq!(keep("/a%2fb"), Ok("/a%2Fb".into()));
    // It splits no segment: `..%2F` is a name, and `%2F..` does not climb.
    assert_eq!(keep("/public/..%2fadmin"), Ok("/public/..%2Fadmin".into()));
    assert_eq!(keep("/public%2f..%2fadmin"), Ok("/public%2F..%2Fadmin".into()));
    assert_eq!(keep("/a%2Fb/.."), Ok("/".into()));
    // Everything else is refused as without it.
    assert_eq!(keep("/a%5Cb"), Err(PathError::Backslash));
}

#[test]
fn every_error_has_a_reason_and_a_message() {
    let all = [
        PathError::NotAbsolute,
        PathError::EncodedSlash,
        PathError::Backslash,
        PathError::Nul,
        PathError::Control,
        PathError::BadPercent,
        PathError::Overlong,
        PathError::DotParameters,
        PathError::EmptyParameters,
        PathError::AboveRoot,
        PathError::Fragment,
    ];
    let reasons: std::collections::BTreeSet<_> = all.iter().map(PathError::reason).collect();
    assert_eq!(reasons.len(), all.len());
    assert!(all.iter().all(|e| !e.to_string().is_empty()));
}

/// Generated paths built from the pieces bypasses are made of, with a fixed seed: whatever is
/// accepted is in normal form, and normalizing it again changes nothing.
#[test]
fn normalizing_is_idempotent_and_leaves_no_dot_segments_or_double_slashes() {
    const PIECES: &[&str] = &[
        "/", "/", "/", "//", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "%00", "%41", "%7e", "%7E", "%25", "%3b",
        ";", ";x", "a", "b", "admin", "~", "-", "%c0", "%ae", "%e0%80", "%C3%A9", "\u{e9}", " ", "%", "%z", "\\", "?",
        "#", "+", "@", ":", "\t",
    ];
    let mut rng = fastrand::Rng::with_seed(59);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let mut target = String::from(if rng.u8(..) < 230 { "/" } else { "" });
        for _ in 0..rng.usize(0..12) {
            target.push_str(PIECES[rng.usize(..PIECES.len())]);
        }
        for slash in [EncodedSlash::Refuse, EncodedSlash::Keep] {
            let Ok(once) = normalize(target.as_bytes(), slash) else {
                refused += 1;
                continue;
            };
            accepted += 1;
            let p = &once.path;
            assert!(p.starts_with('/') && p.is_ascii(), "{target:?} -> {p:?}");
            for bad in ["//", "/./", "/../"] {
                assert!(!p.contains(bad), "{target:?} -> {p:?}");
            }
            assert!(!p.ends_with("/.") && !p.ends_with("/.."), "{target:?} -> {p:?}");
            let twice = normalize(p.as_bytes(), slash).unwrap_or_else(|e| panic!("{target:?} -> {p:?}: {e}"));
            assert_eq!(&twice.path, p, "{target:?}");
        }
    }
    // The generator reaches both sides.
    assert!(accepted > 5_000 && refused > 5_000, "{accepted} accepted, {refused} refused");
}
