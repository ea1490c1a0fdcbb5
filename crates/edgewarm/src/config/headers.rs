//! Header policy (`listeners[].headers`, `routes[].headers`): fields set, added and removed on
//! the requests an `http` route sends to its origin and on every response the edge sends, as
//! the file writes them; the names no policy may touch; and the compiled form they become at
//! load ([`ready`]), in which levels merge from the outside in.
//!
//! A name is refused, naming its key, when the field is the connection's rather than the
//! message's (hop-by-hop), frames the message (the edge writes `Content-Length` from the body it
//! sends), is a pseudo-header, or is one the edge owns: on requests the forwarding headers
//! (`forward_headers`, and the rest of the family a client cannot set: a policy writing a fixed
//! `X-Forwarded-For` would be a lie the origin believes) and `Early-Data`; `Via` both ways; on
//! responses `Alt-Svc` (the listener's `http3` says where the edge serves HTTP/3; one written by
//! hand could send clients round it).

mod ready;

use std::collections::{BTreeMap, HashMap};

use http::{HeaderName, HeaderValue};
use serde::Deserialize;

pub use ready::{Edits, HeaderPolicy};

use super::forward::is_client_claim;
use super::ConfigError;

/// `headers:` on a listener (its routes' defaults) or an `http` route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadersConfig {
    /// What goes to the origin (no `default`: a request has no origin's value to keep).
    #[serde(default)]
    pub request: FieldEdits,
    /// What the client gets, whoever answered.
    #[serde(default)]
    pub response: FieldEdits,
}

/// One side's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldEdits {
    /// Replace whatever the message carries under the name.
    #[serde(default)]
    pub set: BTreeMap<String, Values>,
    /// Append a field line (or several) under the name.
    #[serde(default)]
    pub add: BTreeMap<String, Values>,
    /// Remove every line under the name.
    #[serde(default)]
    pub remove: Vec<String>,
    /// Set only where the response lacks the name (an origin's own value is kept).
    #[serde(default)]
    pub default: BTreeMap<String, Values>,
}

/// One value, or a list of them (each a field line of its own: `Set-Cookie`, `Link`). A number
/// or a boolean is taken as its text (`x-frame-count: 3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Values(pub Vec<String>);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Values;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a header value (text) or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Values, E> {
                Ok(Values(vec![v.to_string()]))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Values, E> {
                Ok(Values(vec![v.to_string()]))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Values, E> {
                Ok(Values(vec![v.to_string()]))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Values, E> {
                Ok(Values(vec![v.to_string()]))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Values, E> {
                Ok(Values(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Values, A::Error> {
                let mut all = Vec::new();
                while let Some(one) = seq.next_element::<String>()? {
                    all.push(one);
                }
                Ok(Values(all))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Hop-by-hop fields (the connection's, removed at every hop), the framing the edge writes
/// itself from the body it sends, and HTTP/2's upgrade token: refused on either side.
const HOP_AND_FRAMING: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "http2-settings",
];

/// Why a name is refused on requests (`Some(why)`), or `None`.
fn refused_on_request(name: &str) -> Option<&'static str> {
    if is_client_claim(name) {
        return Some(
            "a forwarding header the edge owns (forward_headers; docs/config.md, \"Headers a client cannot set\"): \
             a fixed value would tell the origin something untrue about the client",
        );
    }
    match name {
        "early-data" => Some("the edge's (RFC 8470: it marks the requests it forwards from early data)"),
        "host" => Some("carried as the request's :authority; a policy does not change where a request goes"),
        _ => refused_both(name),
    }
}

/// Why a name is refused on responses, or `None`.
fn refused_on_response(name: &str) -> Option<&'static str> {
    match name {
        "alt-svc" => Some("the edge's own (listeners[].http3): one written here could send clients around the edge"),
        "host" => Some("a request's field: a response has none"),
        _ => refused_both(name),
    }
}

fn refused_both(name: &str) -> Option<&'static str> {
    if name.starts_with(':') {
        return Some("a pseudo-header: the protocol's, not a field a policy can write");
    }
    if name == "via" {
        return Some("the edge's hop (forward_headers says whether it is added)");
    }
    HOP_AND_FRAMING
        .contains(&name)
        .then_some("a hop-by-hop or framing field: the connection's, or written by the edge from the body it sends")
}

impl HeadersConfig {
    /// Whether no level of the policy is written.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The ready form, or the first problem, naming its key under `key` (`routes[2].headers`).
    pub fn compile(&self, key: &str) -> Result<HeaderPolicy, ConfigError> {
        if let Some(name) = self.request.default.keys().next() {
            return Err(ConfigError::invalid(
                format!("{key}.request.default.{name}"),
                "only for responses (an origin's value to keep): a request's is the client's; use set or add",
            ));
        }
        let request = Side { key: format!("{key}.request"), refused: refused_on_request }.compile(&self.request)?;
        let response = Side { key: format!("{key}.response"), refused: refused_on_response }.compile(&self.response)?;
        Ok(HeaderPolicy { request, response })
    }
}

/// One side of a policy being compiled: where its keys are, which names it refuses.
struct Side {
    key: String,
    refused: fn(&str) -> Option<&'static str>,
}

impl Side {
    fn compile(&self, fields: &FieldEdits) -> Result<Edits, ConfigError> {
        let FieldEdits { set, add, remove, default } = fields;
        let mut edits = Edits::default();
        // Set, remove and default each decide what becomes of the name at this level: two of
        // them for one name would contradict each other.
        let mut decided: HashMap<HeaderName, String> = HashMap::new();
        let mut decide = |name: &HeaderName, key: &str, section: &str| match decided.get(name) {
            Some(earlier) => Err(ConfigError::invalid(
                key,
                format!("{name} is also in {earlier}: one level sets, removes or defaults a name, not two of these"),
            )),
            None => {
                decided.insert(name.clone(), format!("{}.{section}", self.key));
                Ok(())
            }
        };
        for (raw, values) in set {
            let key = format!("{}.set.{raw}", self.key);
            let name = self.name(raw, &key)?;
            decide(&name, &key, "set")?;
            edits.set(name, self.values(values, &key)?);
        }
        for (raw, values) in default {
            let key = format!("{}.default.{raw}", self.key);
            let name = self.name(raw, &key)?;
            decide(&name, &key, "default")?;
            edits.default_to(name, self.values(values, &key)?);
        }
        for (i, raw) in remove.iter().enumerate() {
            let key = format!("{}.remove[{i}]", self.key);
            let name = self.name(raw, &key)?;
            decide(&name, &key, "remove")?;
            edits.remove(name);
        }
        for (raw, values) in add {
            let key = format!("{}.add.{raw}", self.key);
            let name = self.name(raw, &key)?;
            edits.add(name, self.values(values, &key)?);
        }
        Ok(edits)
    }

    /// A field name: valid, and not one the side refuses.
    fn name(&self, raw: &str, key: &str) -> Result<HeaderName, ConfigError> {
        let lower = raw.to_ascii_lowercase();
        if let Some(why) = (self.refused)(&lower) {
            return Err(ConfigError::invalid(key, format!("{raw} cannot be written by a header policy: {why}")));
        }
        HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| ConfigError::invalid(key, format!("{raw:?} is not a valid header name")))
    }

    fn values(&self, values: &Values, key: &str) -> Result<Vec<HeaderValue>, ConfigError> {
        if values.0.is_empty() {
            return Err(ConfigError::invalid(key, "at least one value (to take the field away: remove)"));
        }
        values
            .0
            .iter()
            .map(|v| {
                HeaderValue::from_str(v).map_err(|_| {
                    ConfigError::invalid(
                        key,
                        format!("{v:?} is not a valid header value (visible ASCII, spaces, tabs)"),
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
