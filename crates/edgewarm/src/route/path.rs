//! A request's path, normalized once, before any rule reads it: the rule matches it, the cache
//! keys it, and the origin is sent exactly it, so the edge and the origin never disagree on
//! which path was asked (Envoy GHSA-xcx5-93pw-jw2w: `/info/../private` passed an `/info/` rule
//! and the backend served `/private`).
//!
//! It is read as the common origins read a path (nginx, Apache, Tomcat):
//!
//! - `%XX` of an unreserved character (`A-Z a-z 0-9 - . _ ~`) is decoded, so `%2e` is a `.` and
//!   `/%61dmin` is `/admin`; any other `%XX` is kept as it is, its hex in upper case (`%3B` stays
//!   an encoded `;`, not a parameter; `%25` stays `%25`, never decoded twice);
//! - a raw byte a path may not hold (a space, `"`, `{`, a byte above 0x7F, …) is written `%XX`:
//!   an origin decodes both alike, and the path that leaves is plain ASCII;
//! - repeated slashes are merged, then `.` and `..` segments are removed (RFC 3986 §5.2.4), so
//!   `/a//b/../c` is `/a/c`; a trailing slash stays; case is kept (paths are case-sensitive);
//! - the query is not touched: it is handed back as received, beside the path.
//!
//! What origins read differently is refused, with a reason for the log ([`PathError`]): `%2F`
//! (a separator to some, a byte to others) unless the route keeps it ([`EncodedSlash::Keep`]:
//! then it is one opaque byte of its segment, never a separator); a backslash raw or `%5C` (a
//! separator on Windows and to some frameworks); a NUL, raw or `%00`; other control bytes; bad
//! percent-encoding; overlong UTF-8 (`%C0%AE`, which old decoders read as `.`); a dot segment
//! with path parameters (`..;x`, `.;`), and a parameter on an empty segment (`/;x/`): Tomcat
//! drops parameters before it resolves dots, so it would climb where the edge did not; a path
//! that climbs above the root; a fragment; a target that is neither origin-form nor
//! absolute-form (`*` and CONNECT's authority-form are the caller's to handle first).
//!
//! A parameter on a named segment is kept: `/admin;x` stays `/admin;x`. RFC 3986 makes `;` a
//! plain byte of its segment, nginx, Apache and Envoy match `/admin;x` as a path other than
//! `/admin`, and applications use it (`;jsessionid=…`, matrix parameters), so refusing it would
//! break them and stripping it would change what every other origin receives. Only Tomcat-style
//! origins read it as `/admin`: a rule guarding one must not rely on `exact: /admin` alone.

use crate::config::EncodedSlash;

/// A normalized request target: the path in normal form, and the query as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized<'a> {
    /// Starts with `/`; has no `//`, no `.` or `..` segment; ASCII only.
    pub path: String,
    /// What followed the first `?`, untouched (`None` when there was no `?`).
    pub query: Option<&'a [u8]>,
}

/// Why a path was refused: the `Display` text is for the log, [`PathError::reason`] for a
/// metric label or a log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the target is neither an absolute path nor an absolute URI")]
    NotAbsolute,
    #[error("an encoded slash (%2F) in the path")]
    EncodedSlash,
    #[error("a backslash (raw or %5C) in the path")]
    Backslash,
    #[error("a NUL (raw or %00) in the path")]
    Nul,
    #[error("a control character in the path")]
    Control,
    #[error("a '%' not followed by two hex digits")]
    BadPercent,
    #[error("an overlong UTF-8 encoding in the path")]
    Overlong,
    #[error("a dot segment with path parameters (..; or .;)")]
    DotParameters,
    #[error("path parameters on an empty segment (/;)")]
    EmptyParameters,
    #[error("the path climbs above the root")]
    AboveRoot,
    #[error("a fragment (#) in the request target")]
    Fragment,
}

impl PathError {
    /// A short fixed name, for a metric label or a log field.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotAbsolute => "not_absolute",
            Self::EncodedSlash => "encoded_slash",
            Self::Backslash => "backslash",
            Self::Nul => "nul",
            Self::Control => "control",
            Self::BadPercent => "bad_percent",
            Self::Overlong => "overlong_utf8",
            Self::DotParameters => "dot_parameters",
            Self::EmptyParameters => "empty_parameters",
            Self::AboveRoot => "above_root",
            Self::Fragment => "fragment",
        }
    }
}

/// The path of a request target (origin-form `/a?q`, or absolute-form `https://host/a?q`, whose
/// authority is the caller's to check), normalized; or why not.
pub fn normalize(target: &[u8], encoded_slash: EncodedSlash) -> Result<Normalized<'_>, PathError> {
    if target.contains(&b'#') {
        return Err(PathError::Fragment);
    }
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(at) => (&target[..at], Some(&target[at + 1..])),
        None => (target, None),
    };
    let path = origin_form(path)?;
    let mut out = String::with_capacity(path.len());
    let mut segment = String::new();
    let mut unit = OverlongCheck::default();
    // The root's own slash: every kept segment is written as `/name`.
    let mut raw = path[1..].split(|&b| b == b'/').peekable();
    let mut trailing = false;
    while let Some(bytes) = raw.next() {
        segment.clear();
        let parameters = read_segment(bytes, encoded_slash, &mut segment, &mut unit)?;
        let name = &segment[..parameters.unwrap_or(segment.len())];
        if parameters.is_some() {
            match name {
                "." | ".." => return Err(PathError::DotParameters),
                "" => return Err(PathError::EmptyParameters),
                _ => {}
            }
        }
        let last = raw.peek().is_none();
        match segment.as_str() {
            // An empty segment is a repeated slash, merged (or the trailing slash, kept below).
            "" | "." => trailing = last,
            ".." => {
                let parent = out.rfind('/').ok_or(PathError::AboveRoot)?;
                out.truncate(parent);
                trailing = last;
            }
            _ => {
                out.push('/');
                out.push_str(&segment);
            }
        }
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(Normalized { path: out, query })
}

/// The path of an origin-form or absolute-form target (without its query).
fn origin_form(path: &[u8]) -> Result<&[u8], PathError> {
    if path.first() == Some(&b'/') {
        return Ok(path);
    }
    // scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then "://" and the authority.
    let colon = path.iter().position(|&b| b == b':').ok_or(PathError::NotAbsolute)?;
    let (scheme, rest) = path.split_at(colon);
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let after = rest.strip_prefix(b"://").filter(|_| scheme_ok).ok_or(PathError::NotAbsolute)?;
    match after.iter().position(|&b| b == b'/') {
        Some(at) => Ok(&after[at..]),
        // `http://host` asks for `/` (RFC 9112 §3.2.2).
        None => Ok(b"/"),
    }
}

/// The byte read last (a raw byte, or the one a `%XX` stands for), for the overlong check of
/// the next one.
#[derive(Default)]
struct OverlongCheck {
    previous: u8,
}

impl OverlongCheck {
    /// Refuses `value` when, after the byte before it, the pair can only begin an overlong
    /// encoding (a character written in more bytes than UTF-8 allows, which a lax decoder
    /// reads as `.` or `/`). Checking pairs refuses every overlong form and leaves a lone
    /// Latin-1 `%C0` alone.
    fn next(&mut self, value: u8) -> Result<(), PathError> {
        let overlong = match self.previous {
            0xC0 | 0xC1 | 0xF8..=0xFF => (0x80..=0xBF).contains(&value),
            0xE0 => (0x80..=0x9F).contains(&value),
            0xF0 => (0x80..=0x8F).contains(&value),
            _ => false,
        };
        self.previous = value;
        if overlong {
            return Err(PathError::Overlong);
        }
        Ok(())
    }
}

/// Decodes one raw segment into `out` (in normal form); where its first raw `;` is, if any.
fn read_segment(
    bytes: &[u8],
    encoded_slash: EncodedSlash,
    out: &mut String,
    unit: &mut OverlongCheck,
) -> Result<Option<usize>, PathError> {
    let mut parameters = None;
    let mut i = 0;
    // A segment boundary is a raw '/', which begins no overlong pair.
    unit.next(b'/')?;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let value = bytes.get(i + 1..i + 3).and_then(hex).ok_or(PathError::BadPercent)?;
            unit.next(value)?;
            match value {
                0 => return Err(PathError::Nul),
                b'/' if encoded_slash == EncodedSlash::Refuse => return Err(PathError::EncodedSlash),
                b'\\' => return Err(PathError::Backslash),
                v if unreserved(v) => out.push(char::from(v)),
                v => encode(v, out),
            }
            i += 3;
            continue;
        }
        unit.next(b)?;
        match b {
            0 => return Err(PathError::Nul),
            b'\\' => return Err(PathError::Backslash),
            0x01..=0x1F | 0x7F => return Err(PathError::Control),
            b';' => {
                parameters.get_or_insert(out.len());
                out.push(';');
            }
            b if unreserved(b) || sub_delim_or_colon_at(b) => out.push(char::from(b)),
            b => encode(b, out),
        }
        i += 1;
    }
    Ok(parameters)
}

/// `ALPHA / DIGIT / "-" / "." / "_" / "~"` (RFC 3986 §2.3): the same byte encoded or not.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The rest of `pchar` (RFC 3986 §3.3): sub-delims, `:` and `@`, kept raw as received.
fn sub_delim_or_colon_at(b: u8) -> bool {
    matches!(b, b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@')
}

fn hex(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16);
    Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
}

fn encode(b: u8, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xF)]));
}

#[cfg(test)]
mod tests;
