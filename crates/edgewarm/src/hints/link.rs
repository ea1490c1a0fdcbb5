//! The `Link` entries (RFC 8288) a `103 Early Hints` carries: those whose `rel` names
//! `preload` or `preconnect`, what browsers act on in a 103. Entries are kept as the origin
//! wrote them, in its order, up to a byte budget; one that does not fit is left out whole,
//! never cut.

use http::header::{HeaderMap, HeaderValue, LINK};

/// The hint-worthy entries of `headers`' `Link` fields, joined into one value of at most `max`
/// bytes; `None` when there are none.
pub(crate) fn hints(headers: &HeaderMap, max: usize) -> Option<HeaderValue> {
    let mut out = String::new();
    for value in headers.get_all(LINK) {
        // A value that is not visible ASCII is not one a 103 should repeat.
        let Ok(text) = value.to_str() else { continue };
        for entry in split_outside(text, ',').map(str::trim).filter(|e| hint_worthy(e)) {
            let sep = if out.is_empty() { 0 } else { 2 };
            if out.len() + sep + entry.len() > max {
                continue;
            }
            if sep > 0 {
                out.push_str(", ");
            }
            out.push_str(entry);
        }
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::from_str(&out).ok()
}

/// `<uri>; …; rel="… preload …"` or `preconnect`.
fn hint_worthy(entry: &str) -> bool {
    let Some(rest) = entry.strip_prefix('<') else { return false };
    let Some((_, params)) = rest.split_once('>') else { return false };
    split_outside(params, ';').skip(1).any(|param| {
        let Some((name, value)) = param.split_once('=') else { return false };
        if !name.trim().eq_ignore_ascii_case("rel") {
            return false;
        }
        let value = value.trim();
        let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
        value
            .split_ascii_whitespace()
            .any(|rel| rel.eq_ignore_ascii_case("preload") || rel.eq_ignore_ascii_case("preconnect"))
    })
}

/// `text` split at `sep`, except inside `<…>` (a URI may hold commas and semicolons) and
/// quoted strings (with their `\` escapes).
fn split_outside(text: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let (mut angle, mut quoted, mut escaped) = (false, false, false);
    let mut cuts = Vec::new();
    for (i, c) in text.char_indices() {
        if quoted {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '<' => angle = true,
            '>' => angle = false,
            '"' if !angle => quoted = true,
            c if c == sep && !angle => {
                cuts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    cuts.push(&text[start..]);
    cuts.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(values: &[&'static str], max: usize) -> Option<String> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(LINK, HeaderValue::from_static(v));
        }
        hints(&h, max).map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn preload_and_preconnect_kept_others_left_out() {
        let got = links(
            &[
                "</a.css>; rel=preload; as=style, </next>; rel=next",
                "<https://cdn.test>; rel=\"dns-prefetch preconnect\"; crossorigin",
                "</b,c.js>; REL=Preload; as=script; title=\"x, y; z\"",
                "</d.js>; rel=modulepreload, not a link; rel=preload",
            ],
            2048,
        );
        assert_eq!(
            got.as_deref(),
            Some(
                "</a.css>; rel=preload; as=style, <https://cdn.test>; rel=\"dns-prefetch preconnect\"; crossorigin, \
                 </b,c.js>; REL=Preload; as=script; title=\"x, y; z\""
            )
        );
        assert_eq!(links(&["</n>; rel=next", "</s.css>; rel=stylesheet"], 2048), None);
        assert_eq!(links(&[], 2048), None);
    }

    #[test]
    fn the_budget_leaves_whole_entries_out() {
        let a = "</aaaaaaaaaa.css>; rel=preload; as=style";
        let b = "</b.js>; rel=preload; as=script";
        let both = format!("{a}, {b}");
        assert_eq!(links(&[a, b], both.len()).as_deref(), Some(both.as_str()));
        // One byte short of both: the first stays whole, the second is left out.
        assert_eq!(links(&[a, b], both.len() - 1).as_deref(), Some(a));
        // Too small for the first: the second, which fits, is kept.
        assert_eq!(links(&[a, b], b.len()).as_deref(), Some(b));
        assert_eq!(links(&[a], 10), None);
    }
}
