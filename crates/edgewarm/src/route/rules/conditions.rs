//! What a rule asks of a request besides its path: a method, headers, query parameters. Each
//! is compiled once at load; [`Conditions::hold`] is the per-request check, and
//! [`Conditions::exclusive`] is what lets the compiler prove that two rules on one path never
//! match one request (so their order cannot matter).

use std::borrow::Cow;

use http::{HeaderName, Method};
use regex::bytes::{Regex, RegexBuilder};

use super::Request;
use crate::config::{RuleConfig, ValueCondition};

/// A compiled regex's size bound (the `regex` crate's default is 10 MiB): a rule is a short
/// pattern, and a config's regexes are all kept in memory and run on requests.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A regex as rules use it: searched for, of bounded size; the error says why not.
pub(super) fn regex(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// One rule's conditions, all of which must hold.
#[derive(Debug)]
pub(super) struct Conditions {
    /// Any of these (any method when empty).
    methods: Vec<Method>,
    headers: Vec<(HeaderName, Value)>,
    /// By decoded name.
    query: Vec<(Vec<u8>, Value)>,
}

#[derive(Debug)]
enum Value {
    Present,
    Absent,
    Equals(Vec<u8>),
    Regex(Regex),
}

/// A condition the config cannot hold, with the key under the rule it is about.
#[derive(Debug)]
pub(super) struct Invalid {
    pub(super) key: String,
    pub(super) message: String,
}

fn invalid(key: String, message: impl Into<String>) -> Invalid {
    Invalid { key, message: message.into() }
}

impl Conditions {
    pub(super) fn compile(rule: &RuleConfig) -> Result<Self, Invalid> {
        let mut methods = Vec::with_capacity(rule.methods.len());
        for (i, m) in rule.methods.iter().enumerate() {
            // Methods are case-sensitive (RFC 9110 §9.1): `get` would never meet a GET.
            let method =
                Method::from_bytes(m.as_bytes())
                    .ok()
                    .filter(|_| !m.bytes().any(|b| b.is_ascii_lowercase()))
                    .ok_or_else(|| invalid(format!("methods[{i}]"), format!("{m:?} is not a method in upper case")))?;
            methods.push(method);
        }
        let mut headers = Vec::with_capacity(rule.headers.len());
        for (name, condition) in &rule.headers {
            let key = format!("headers.{name}");
            let header =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid(key.clone(), "is not a header name"))?;
            if headers.iter().any(|(h, _)| *h == header) {
                return Err(invalid(key, "is named twice (header names are not case-sensitive)"));
            }
            headers.push((header, Value::compile(condition).map_err(|m| invalid(key, m))?));
        }
        let mut query = Vec::with_capacity(rule.query.len());
        for (name, condition) in &rule.query {
            let key = format!("query.{name}");
            if name.is_empty() {
                return Err(invalid(key, "is not a parameter name"));
            }
            query.push((name.as_bytes().to_vec(), Value::compile(condition).map_err(|m| invalid(key, m))?));
        }
        Ok(Self { methods, headers, query })
    }

    /// How many conditions (a method list counts one): among rules on one path, more first.
    pub(super) fn count(&self) -> usize {
        usize::from(!self.methods.is_empty()) + self.headers.len() + self.query.len()
    }

    pub(super) fn hold(&self, request: &Request<'_>) -> bool {
        (self.methods.is_empty() || self.methods.contains(request.method))
            && self.headers.iter().all(|(name, value)| value.holds(header(request, name).as_deref()))
            && self.query.iter().all(|(name, value)| value.holds(parameter(request.query, name).as_deref()))
    }

    /// Whether no request can meet both: some condition of one excludes one of the other's.
    /// `false` means they may overlap (not that they must).
    pub(super) fn exclusive(&self, other: &Self) -> bool {
        let methods = !self.methods.is_empty()
            && !other.methods.is_empty()
            && !self.methods.iter().any(|m| other.methods.contains(m));
        let headers = self.headers.iter().any(|(n, v)| other.headers.iter().any(|(m, w)| n == m && v.excludes(w)));
        let query = self.query.iter().any(|(n, v)| other.query.iter().any(|(m, w)| n == m && v.excludes(w)));
        methods || headers || query
    }
}

impl Value {
    fn compile(condition: &ValueCondition) -> Result<Self, String> {
        Ok(match condition {
            ValueCondition::Present => Self::Present,
            ValueCondition::Absent => Self::Absent,
            ValueCondition::Equals(text) => Self::Equals(text.as_bytes().to_vec()),
            ValueCondition::Regex(pattern) => Self::Regex(regex(pattern).map_err(|e| format!("regex: {e}"))?),
        })
    }

    fn holds(&self, value: Option<&[u8]>) -> bool {
        match (self, value) {
            (Self::Absent, v) => v.is_none(),
            (_, None) => false,
            (Self::Present, Some(_)) => true,
            (Self::Equals(want), Some(v)) => v == want.as_slice(),
            (Self::Regex(re), Some(v)) => re.is_match(v),
        }
    }

    /// Whether no one value meets both.
    fn excludes(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Absent, Self::Absent) => false,
            (Self::Absent, _) | (_, Self::Absent) => true,
            (Self::Equals(a), Self::Equals(b)) => a != b,
            (Self::Equals(text), Self::Regex(re)) | (Self::Regex(re), Self::Equals(text)) => !re.is_match(text),
            _ => false,
        }
    }
}

/// A header's value: its field lines joined with `, ` (RFC 9110 §5.3), so that it has one.
fn header<'r>(request: &Request<'r>, name: &HeaderName) -> Option<Cow<'r, [u8]>> {
    let mut lines = request.headers.get_all(name).iter();
    let first = lines.next()?.as_bytes();
    let Some(second) = lines.next() else { return Some(Cow::Borrowed(first)) };
    let mut joined = first.to_vec();
    for line in std::iter::once(second).chain(lines) {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// A query parameter's first value, percent-decoded (`a` and `a=` are both present, empty).
fn parameter<'q>(query: Option<&'q [u8]>, name: &[u8]) -> Option<Cow<'q, [u8]>> {
    query?.split(|&b| b == b'&').find_map(|pair| {
        let (n, v) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &b""[..]),
        };
        (decode(n) == name).then(|| decode(v))
    })
}

/// `%XX` decoded; a `%` not followed by two hex digits is kept as it is. `+` is kept too: it is
/// a space only in form bodies and the origin's reading of it varies.
fn decode(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'%') {
        return Cow::Borrowed(raw);
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match (raw[i], raw.get(i + 1).copied().and_then(hex), raw.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}
