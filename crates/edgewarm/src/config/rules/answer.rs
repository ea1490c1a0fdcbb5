//! A rule's own answers, as written: a redirect (`redirect: {to, status}`) and a fixed response
//! (`respond: {status, body, content_type}`), and the one timeout a rule may override.

use std::time::Duration;

use serde::Deserialize;

/// `redirect:`. On a `prefix` rule, what follows the prefix in the request's path is added to
/// `to` (`prefix: /old/` with `to: /new/` sends `/old/x` to `/new/x`); on an `exact` or
/// `regex` rule, `to` is the whole path. The request's query is kept unless `to` has one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectConfig {
    /// A path (`/new/`) on the same name, or an absolute `https://` or `http://` URL.
    pub to: String,
    /// 301, 302, 303, 307 or 308 (the default: permanent, and the method is kept).
    #[serde(default = "default_redirect")]
    pub status: u16,
}

fn default_redirect() -> u16 {
    308
}

/// `respond:`: the edge answers with this and asks no origin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespondConfig {
    /// 200 to 599.
    pub status: u16,
    #[serde(default)]
    pub body: String,
    /// `text/plain; charset=utf-8` when unset and there is a body.
    #[serde(default)]
    pub content_type: Option<String>,
}

/// `timeouts:` on a rule: only the wait for the origin's response head is the rule's (the
/// others are the connection's or the listener's, settled before a rule is known).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleTimeouts {
    #[serde(with = "crate::config::duration")]
    pub origin_response: Duration,
}
