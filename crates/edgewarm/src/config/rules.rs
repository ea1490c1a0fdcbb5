//! A rule's match, as written: which path it is for and what else a request must carry. The
//! compiled form, its precedence and its checks are [`crate::route::rules`]; how a path is
//! normalized before any rule sees it is [`crate::route::path`].
//!
//! ```yaml
//! - exact: /healthz                 # or prefix: /api/ (whole segments), or regex: '\.php$'
//!   methods: [GET, POST]            # any of them (HEAD is its own method: list it)
//!   headers:
//!     x-debug: true                 # present (false: absent)
//!     content-type: application/grpc  # equal to this, the whole value
//!     user-agent: {regex: '^curl/'} # a regex found in the value
//!   query:
//!     preview: true                 # present, with or without a value
//!     lang: en                      # equal, after percent-decoding
//! ```
//!
//! A header's value is its field lines joined with `, ` (RFC 9110 §5.3), so one header has one
//! value to compare; a query parameter's is its first occurrence. A regex is searched for, not
//! matched whole: anchor it with `^` and `$` when the whole value is meant. `true` and `false`
//! are the conditions "present" and "absent"; to compare with the text `true`, quote it.
//!
//! What a matched rule does is the rest of its keys ([`answer`]): at most one of `upstream`,
//! `redirect` and `respond`, a rewrite of the path sent on (`strip_prefix`, `replace_prefix`),
//! and overrides of the route's settings for its requests. A rule with none of the three goes
//! to the route's default upstream, with its overrides.

mod answer;

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{CacheConfig, EarlyHintsConfig, HeadersConfig};
use crate::config::limits::RateConfig;
pub use answer::{RedirectConfig, RespondConfig, RuleTimeouts};

/// One entry of a route's `rules`: exactly one of `exact`, `prefix` and `regex`, and conditions.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The whole normalized path.
    #[serde(default)]
    pub exact: Option<String>,
    /// A leading run of whole segments of the path: `/api` and `/api/` both match `/api`,
    /// `/api/` and `/api/x`, and neither matches `/apix`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// A regex searched for in the normalized path (the query is not part of it).
    #[serde(default)]
    pub regex: Option<String>,
    /// The request's method is one of these (any method when empty).
    #[serde(default)]
    pub methods: Vec<String>,
    /// Request headers, by name (any case).
    #[serde(default)]
    pub headers: BTreeMap<String, ValueCondition>,
    /// Query parameters, by name (after percent-decoding).
    #[serde(default)]
    pub query: BTreeMap<String, ValueCondition>,

    /// Its requests go to this upstream (a key of `upstreams:`), not the route's.
    #[serde(default)]
    pub upstream: Option<String>,
    /// Answered with a redirect.
    #[serde(default)]
    pub redirect: Option<RedirectConfig>,
    /// Answered by the edge itself.
    #[serde(default)]
    pub respond: Option<RespondConfig>,
    /// A `prefix` rule: the origin is sent the path without the prefix (`/api/x` → `/x`).
    #[serde(default)]
    pub strip_prefix: bool,
    /// A `prefix` rule: the origin is sent the path with this in place of the prefix.
    #[serde(default)]
    pub replace_prefix: Option<String>,
    /// Overrides of the route's settings for the rule's requests: each, where written, stands
    /// for the route's whole key.
    #[serde(default)]
    pub cache: Option<CacheConfig>,
    #[serde(default)]
    pub limits: Option<RateConfig>,
    #[serde(default)]
    pub early_hints: Option<EarlyHintsConfig>,
    #[serde(default, deserialize_with = "super::size::deserialize_opt")]
    pub max_request_body: Option<u64>,
    #[serde(default)]
    pub timeouts: Option<RuleTimeouts>,
    /// The rule's header policy, the shape of a route's `headers:` (which, on a rule, are the
    /// request headers it matches): merged into the route's, a `set` here of a name winning
    /// over the route's.
    #[serde(default)]
    pub header_policy: Option<HeadersConfig>,
}

impl RuleConfig {
    /// Whether the rule answers requests itself (no origin is asked).
    pub fn answers(&self) -> bool {
        self.redirect.is_some() || self.respond.is_some()
    }

    /// Whether its requests need a seam of their own (another upstream, or a layer's settings
    /// of their own), rather than the route's.
    pub fn own_seam(&self) -> bool {
        self.upstream.is_some() || self.cache.is_some() || self.limits.is_some() || self.early_hints.is_some()
    }
}

/// What a header or a query parameter must be: `true` (present), `false` (absent), a string
/// (equal to it), or `{regex: ".."}` (the regex found in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueCondition {
    Present,
    Absent,
    Equals(String),
    Regex(String),
}

impl<'de> Deserialize<'de> for ValueCondition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ConditionVisitor)
    }
}

/// By hand rather than `#[serde(untagged)]`, whose one error ("did not match any variant")
/// would not say which shapes are allowed.
struct ConditionVisitor;

const SHAPES: &str = "true (present), false (absent), a string (equal), or {regex: \"..\"}";

impl<'de> Visitor<'de> for ConditionVisitor {
    type Value = ValueCondition;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SHAPES)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(if v { ValueCondition::Present } else { ValueCondition::Absent })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ValueCondition::Equals(v.to_string()))
    }

    // `version: 2` means the text "2", as a header or a query carries it.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(ValueCondition::Equals(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(ValueCondition::Equals(v.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut regex = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "regex" if regex.is_none() => regex = Some(map.next_value::<String>()?),
                "regex" => return Err(de::Error::duplicate_field("regex")),
                other => return Err(de::Error::unknown_field(other, &["regex"])),
            }
        }
        regex.map(ValueCondition::Regex).ok_or_else(|| de::Error::missing_field("regex"))
    }
}

/// What a route does with `%2F` in a request's path (`encoded_slash`). Origins disagree on it
/// (some decode it into a separator, some keep it), so by default a path holding one is
/// refused; `keep` passes it on as an opaque byte of its segment, safe only when the origin
/// treats it so too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EncodedSlash {
    #[default]
    Refuse,
    Keep,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(yaml: &str) -> Result<RuleConfig, String> {
        serde_norway::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn conditions_read_in_each_shape() {
        let r = rule(
            "{prefix: /api/, methods: [GET], headers: {x-debug: true, x-old: false, ct: text/html, \
             ua: {regex: '^curl/'}, v: 2, t: 'true'}, query: {lang: en, preview: true}}",
        )
        .unwrap();
        assert_eq!(r.prefix.as_deref(), Some("/api/"));
        assert_eq!(r.methods, ["GET"]);
        assert_eq!(r.headers["x-debug"], ValueCondition::Present);
        assert_eq!(r.headers["x-old"], ValueCondition::Absent);
        assert_eq!(r.headers["ct"], ValueCondition::Equals("text/html".into()));
        assert_eq!(r.headers["ua"], ValueCondition::Regex("^curl/".into()));
        assert_eq!(r.headers["v"], ValueCondition::Equals("2".into()));
        assert_eq!(r.headers["t"], ValueCondition::Equals("true".into()));
        assert_eq!(r.query["lang"], ValueCondition::Equals("en".into()));
        assert_eq!(r.query["preview"], ValueCondition::Present);
    }

    #[test]
    fn unknown_keys_and_shapes_are_refused_by_name() {
        assert!(rule("{exact: /a, method: [GET]}").unwrap_err().contains("unknown field `method`"));
        let e = rule("{exact: /a, headers: {x: {regexp: a}}}").unwrap_err();
        assert!(e.contains("unknown field `regexp`"), "{e}");
        let e = rule("{exact: /a, headers: {x: [a]}}").unwrap_err();
        assert!(e.contains("true (present)"), "{e}");
    }

    #[test]
    fn encoded_slash_reads_refuse_or_keep() {
        assert_eq!(serde_norway::from_str::<EncodedSlash>("keep").unwrap(), EncodedSlash::Keep);
        assert_eq!(serde_norway::from_str::<EncodedSlash>("refuse").unwrap(), EncodedSlash::Refuse);
        assert!(serde_norway::from_str::<EncodedSlash>("decode").is_err());
    }
}
