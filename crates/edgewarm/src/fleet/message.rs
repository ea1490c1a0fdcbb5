//! A purge as the stream carries it: one JSON object, `{"url": …}`, `{"prefix": …}` or
//! `{"tag": …}`. Anything else is refused by [`PurgeMessage::parse`] (and skipped by the
//! consumer): the stream is shared, and a newer node may write kinds this one does not know.

use serde::{Deserialize, Serialize};

use crate::cache::Purge;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum PurgeMessage {
    Url(String),
    Prefix(String),
    Tag(String),
}

impl From<&Purge> for PurgeMessage {
    fn from(p: &Purge) -> Self {
        match p {
            Purge::Url(u) => Self::Url(u.clone()),
            Purge::Prefix(p) => Self::Prefix(p.clone()),
            Purge::Tag(t) => Self::Tag(t.clone()),
        }
    }
}

impl PurgeMessage {
    pub(super) fn parse(bytes: &[u8]) -> Result<Purge, String> {
        let message: Self = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let (purge, value) = match message {
            Self::Url(u) => (Purge::Url(u.clone()), u),
            Self::Prefix(p) => (Purge::Prefix(p.clone()), p),
            Self::Tag(t) => (Purge::Tag(t.clone()), t),
        };
        if value.is_empty() {
            return Err("an empty purge target".into());
        }
        Ok(purge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_round_trip_and_garbage_is_refused() {
        for p in
            [Purge::Url("https://b.test/a".into()), Purge::Prefix("https://b.test/".into()), Purge::Tag("t".into())]
        {
            let bytes = serde_json::to_vec(&PurgeMessage::from(&p)).unwrap();
            assert_eq!(format!("{:?}", PurgeMessage::parse(&bytes).unwrap()), format!("{p:?}"));
        }
        assert_eq!(serde_json::to_string(&PurgeMessage::Url("u".into())).unwrap(), r#"{"url":"u"}"#);
        for bad in [&b"not json"[..], br#"{"everything": "x"}"#, br#"{"url": ""}"#, br#"{"url": 5}"#, b""] {
            assert!(PurgeMessage::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
