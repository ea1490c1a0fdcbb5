//! When each node applied each purge: its log's `fleet purge applied seq=N` lines, stamped by
//! edgewarm's logger (RFC 3339, µs) on the clock every namespace shares with the lab.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// Sequence → when it was applied, ms after `t0` (the run's start), from an edgewarm log.
pub(crate) fn applied_at(log: &str, t0: SystemTime) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Some((_, fields)) = line.split_once("fleet purge applied") else { continue };
        let Some(stamp) = line.split_whitespace().next().and_then(|t| humantime::parse_rfc3339(t).ok()) else {
            continue;
        };
        let seq = fields.split_whitespace().find_map(|f| f.strip_prefix("seq=")).and_then(|s| s.parse().ok());
        if let Some(seq) = seq {
            out.entry(seq).or_insert_with(|| ms_since(t0, stamp));
        }
    }
    out
}

/// `at` in ms after `t0` (negative if before).
pub(crate) fn ms_since(t0: SystemTime, at: SystemTime) -> f64 {
    match at.duration_since(t0) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_tells_when_each_purge_was_applied() {
        let t0 = humantime::parse_rfc3339("2026-11-29T11:20:00Z").unwrap();
        let log = "2026-11-29T11:20:00.100000Z  INFO edgewarm::fleet: fleet: connected to NATS\n\
                   2026-11-29T11:20:01.250500Z  INFO edgewarm::fleet: fleet purge applied seq=3 what=Url(\"https://h.test/obj/1\") purged=1\n\
                   2026-11-29T11:20:02.000000Z  INFO edgewarm::fleet: fleet purge applied seq=4 what=Url(\"x\") purged=0\n\
                   garbage fleet purge applied seq=5\n";
        let at = applied_at(log, t0);
        assert_eq!(at.len(), 2, "{at:?}");
        assert!((at[&3] - 1250.5).abs() < 1e-6, "{at:?}");
        assert!((at[&4] - 2000.0).abs() < 1e-6);
        assert!((ms_since(t0, humantime::parse_rfc3339("2026-11-29T11:19:59Z").unwrap()) + 1000.0).abs() < 1e-6);
    }
}
