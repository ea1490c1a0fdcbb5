//! Durations written as `150ms`, `10s`, `5m`, `1h30m` (humantime syntax).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Deserialize a human-readable duration. A bare number is refused on purpose: `timeout: 10`
/// would silently mean seconds to some readers and milliseconds to others.
pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration {text:?} ({e}); write e.g. 150ms, 10s, 5m")))
}
