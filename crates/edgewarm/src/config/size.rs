//! Byte sizes written as `512KiB`, `10MiB`, `1GiB`, or a bare number of bytes.
//!
//! Only binary units: `10MB` is refused rather than guessed, since operators coming from nginx
//! (`10m` = 10 MiB) and from disk vendors (10 MB = 10⁷) would read it differently.

use serde::{Deserialize, Deserializer};

/// Parse a size; the error says what to write instead.
pub(crate) fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(format!("invalid size {text:?}; write e.g. 65536, 512KiB, 10MiB, 1GiB")),
    };
    let n: u64 = number.parse().map_err(|_| format!("invalid size {text:?}; write e.g. 65536, 512KiB, 10MiB"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {text:?} is too large"))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Number(u64),
    Text(String),
}

/// Deserialize an optional size.
pub(super) fn deserialize_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Number(n)) => Ok(Some(n)),
        Some(Raw::Text(t)) => parse(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn sizes() {
        assert_eq!(parse("65536"), Ok(65536));
        assert_eq!(parse("512KiB"), Ok(512 * 1024));
        assert_eq!(parse("10 MiB"), Ok(10 << 20));
        assert_eq!(parse("1GiB"), Ok(1 << 30));
        assert!(parse("10MB").unwrap_err().contains("10MiB"));
        assert!(parse("MiB").is_err());
        assert!(parse("-1").is_err());
        assert!(parse("99999999999999GiB").unwrap_err().contains("too large"));
    }
}
