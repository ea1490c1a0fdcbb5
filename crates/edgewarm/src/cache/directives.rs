//! How the cache reads a response's caching headers before RFC 9111's rules see them: a
//! valid `CDN-Cache-Control` (RFC 9213) stands in for `Cache-Control` and `Expires`, and one
//! that is not a valid Structured Field dictionary is ignored (§2.1); directive names are
//! matched case-insensitively; `Age` is its first value (a list or a second line is not a
//! younger age); an `Expires` that is not an HTTP date means already expired (RFC 9111 §5.3).

use http::header::{HeaderMap, HeaderName, HeaderValue, AGE, CACHE_CONTROL, EXPIRES, SET_COOKIE};

const CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// Directives whose value must be an integer (a string there makes the targeted field invalid).
const INTEGER: [&str; 4] = ["max-age", "s-maxage", "stale-while-revalidate", "stale-if-error"];

/// The response headers the cache's decisions read (never what a client is sent).
pub(crate) fn read(headers: &HeaderMap) -> HeaderMap {
    let mut out = headers.clone();
    let cdn: Vec<&HeaderValue> = headers.get_all(&CDN_CACHE_CONTROL).iter().collect();
    if !cdn.is_empty() && cdn.iter().all(|v| v.to_str().is_ok_and(valid_dictionary)) {
        out.remove(CACHE_CONTROL);
        out.remove(EXPIRES);
        for v in cdn {
            out.append(CACHE_CONTROL, v.clone());
        }
    }
    let lowered: Vec<HeaderValue> = out
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| HeaderValue::from_str(&lower_names(v.to_str().ok()?)).ok())
        .collect();
    out.remove(CACHE_CONTROL);
    for v in lowered {
        out.append(CACHE_CONTROL, v);
    }
    let age = headers.get(AGE).and_then(|v| v.to_str().ok()?.split(',').next()?.trim().parse::<u64>().ok());
    out.remove(AGE);
    if let Some(age) = age {
        out.insert(AGE, HeaderValue::from(age));
    }
    if out.contains_key(EXPIRES) {
        // Any of HTTP's three date forms, in any case, rewritten as the one the rules parse.
        let date = out.get(EXPIRES).and_then(|v| http_date(v.to_str().ok()?));
        let single = out.get_all(EXPIRES).iter().count() == 1;
        let value = match date {
            Some(date) if single => HeaderValue::from_str(&httpdate::fmt_http_date(date)).ok(),
            _ => None,
        };
        out.insert(EXPIRES, value.unwrap_or(HeaderValue::from_static("0")));
    }
    // What is stored never carries Set-Cookie, so it is judged without it.
    out.remove(SET_COOKIE);
    out
}

/// `must-understand` (RFC 9111 §5.2.2.3): a cache that understands the status code may
/// store the response in spite of the `no-store` beside it (which is there for caches that
/// do not).
pub(crate) fn must_understand(read: &mut HeaderMap, status: http::StatusCode) {
    const UNDERSTOOD: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];
    let cc: Vec<String> =
        read.get_all(CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok().map(str::to_string)).collect();
    let all = cc.join(", ");
    if !all.split(',').any(|d| d.trim() == "must-understand") || !UNDERSTOOD.contains(&status.as_u16()) {
        return;
    }
    let kept: Vec<&str> = all.split(',').map(str::trim).filter(|d| *d != "no-store").collect();
    if let Ok(v) = HeaderValue::from_str(&kept.join(", ")) {
        read.insert(CACHE_CONTROL, v);
    }
}

/// An HTTP date (IMF-fixdate, RFC 850 or asctime), its names in any case.
fn http_date(text: &str) -> Option<std::time::SystemTime> {
    httpdate::parse_http_date(text).ok().or_else(|| {
        let fixed: Vec<String> = text
            .split(' ')
            .map(|w| {
                if w.eq_ignore_ascii_case("gmt") {
                    return "GMT".to_string();
                }
                let mut chars = w.chars();
                match chars.next() {
                    Some(c) if c.is_ascii_alphabetic() => {
                        c.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
                    }
                    _ => w.to_string(),
                }
            })
            .collect();
        httpdate::parse_http_date(&fixed.join(" ")).ok()
    })
}

/// `No-Cache, Max-Age=5` → `no-cache, max-age=5` (values untouched).
fn lower_names(value: &str) -> String {
    value
        .split(',')
        .map(|d| match d.split_once('=') {
            Some((name, v)) => format!("{}={v}", name.trim().to_ascii_lowercase()),
            None => d.trim().to_ascii_lowercase(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A Structured Field dictionary (RFC 8941) as far as a cache reads one: `key` or
/// `key=item` members, the item an integer, decimal, token, string or boolean, with
/// parameters; the freshness directives integers.
fn valid_dictionary(value: &str) -> bool {
    value.split(',').map(str::trim).all(|member| {
        let mut parts = member.split(';').map(str::trim);
        let Some(first) = parts.next() else { return false };
        let (key, item) = match first.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (first, None),
        };
        let params_ok = parts.all(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, "?1"));
            valid_key(k) && valid_item(v)
        });
        let item_ok = match item {
            None => true,
            Some(v) if INTEGER.contains(&key) => valid_integer(v),
            Some(v) => valid_item(v),
        };
        valid_key(key) && item_ok && params_ok
    })
}

fn valid_key(k: &str) -> bool {
    let mut chars = k.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '*')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c))
}

fn valid_integer(v: &str) -> bool {
    let digits = v.strip_prefix('-').unwrap_or(v);
    !digits.is_empty() && digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit())
}

fn valid_item(v: &str) -> bool {
    if valid_integer(v) || v == "?0" || v == "?1" {
        return true;
    }
    if let Some(inner) = v.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        return !inner.contains('"') || inner.contains("\\\"");
    }
    if let Some((a, b)) = v.split_once('.') {
        if valid_integer(a) && !b.is_empty() && b.len() <= 3 && b.bytes().all(|c| c.is_ascii_digit()) {
            return true;
        }
    }
    let mut chars = v.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '*')
        && chars.all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~:/".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_one(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        read(&h)
    }

    #[test]
    fn cdn_cache_control_only_when_valid() {
        let ok = read_one(&[("cdn-cache-control", "max-age=60"), ("cache-control", "no-store")]);
        assert_eq!(ok[CACHE_CONTROL], "max-age=60");
        for bad in ["max-age=10000, &&&&&", "max-age=\"10000\"", "Max-Age=5"] {
            let h = read_one(&[("cdn-cache-control", bad), ("cache-control", "no-store")]);
            assert_eq!(h[CACHE_CONTROL], "no-store", "{bad}");
        }
    }

    #[test]
    fn names_ages_and_dates() {
        assert_eq!(read_one(&[("cache-control", "Max-Age=5, No-CaChE")])[CACHE_CONTROL], "max-age=5, no-cache");
        assert_eq!(read_one(&[("age", "7200, 0")])[AGE], "7200");
        assert!(!read_one(&[("age", "soon")]).contains_key(AGE));
        assert_eq!(read_one(&[("expires", "Thu,  01 Dec 2094 16:00:00 GMT")])[EXPIRES], "0");
        let good = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(read_one(&[("expires", good)])[EXPIRES], good);
        assert_eq!(read_one(&[("expires", "Sunday, 06-Nov-94 08:49:37 GMT")])[EXPIRES], good);
        assert_eq!(read_one(&[("expires", "sun, 06 nov 1994 08:49:37 gmt")])[EXPIRES], good);
        assert!(!read_one(&[("set-cookie", "a=1")]).contains_key(SET_COOKIE));
    }
}
