//! The lab report's parts about impaired links: what the links were told to do, what each
//! dropped per mode, and the page (or TTFB) percentiles per mode and loss rate.

use crate::scenarios::modes::report::{LabReport, ModeResult};
use crate::wan::impair::{pct, LinkCounts, LinkImpair};

fn describe(l: &LinkImpair, losses: &str) -> String {
    let shape = match l.burst {
        Some(b) => format!(" in bursts of {b} packets on average"),
        None => String::new(),
    };
    let jitter = if l.jitter_ms > 0.0 { format!(", jitter up to {} ms", l.jitter_ms) } else { String::new() };
    format!("loss {losses}{shape}{jitter}")
}

impl LabReport {
    /// One paragraph: each link's loss and jitter, and the seed that repeats them.
    pub(crate) fn impair_markdown(&self) -> String {
        let s = &self.scenario;
        if !s.impaired() {
            return String::new();
        }
        let losses: Vec<String> =
            std::iter::once(s.impair.b.loss).chain(s.more_loss.iter().copied()).map(pct).collect();
        format!(
            "Links: A (client↔edge, r) {}; B (edge↔origin, R) {}. Each packet's fate is drawn from a \
             seeded stream (seed {}, `--seed` repeats it); `lost` counts the loss model's drops, \
             `queue drops` the delay box's full queue.\n\n",
            describe(&s.impair.a, &pct(s.impair.a.loss)),
            describe(&s.impair.b, &losses.join(", then ")),
            s.impair.seed
        )
    }

    /// What each link carried and dropped while each mode ran.
    pub(crate) fn links_markdown(&self) -> String {
        if !self.scenario.impaired() && self.results.iter().all(|m| m.link_a.drops + m.link_b.drops == 0) {
            return String::new();
        }
        let mut t = String::from(
            "\nLinks while each mode's measured load ran (both directions, the edge's pool traffic included):\n\n\
             | mode | R ms | loss on R | A packets | A lost | A queue drops | B packets | B lost | B queue drops |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        let cells = |c: LinkCounts| format!("{} | {} | {}", c.packets, c.lost, c.drops);
        for m in &self.results {
            t += &format!(
                "| {} | {} | {} | {} | {} |\n",
                m.label,
                m.big_r_ms,
                pct(m.loss_big_r),
                cells(m.link_a),
                cells(m.link_b)
            );
        }
        t
    }

    /// With several loss rates: p50 / p90 / p99 per mode (rows) and loss (columns), of the page
    /// time with `--page`, else of the TTFB.
    pub(crate) fn by_loss_markdown(&self) -> String {
        let s = &self.scenario;
        if s.more_loss.is_empty() {
            return String::new();
        }
        let page = s.page > 0;
        let what = if page { "Page time" } else { "TTFB" };
        let mut losses: Vec<f64> = Vec::new();
        let mut rows: Vec<(String, f64)> = Vec::new();
        for m in &self.results {
            if !losses.contains(&m.loss_big_r) {
                losses.push(m.loss_big_r);
            }
            if !rows.contains(&(m.label.clone(), m.big_r_ms)) {
                rows.push((m.label.clone(), m.big_r_ms));
            }
        }
        let mut t = format!(
            "\n{what} by loss on link B, p50 / p90 / p99 ms:\n\n| mode | R ms | {} |\n|---|---|{}\n",
            losses.iter().map(|&l| pct(l)).collect::<Vec<_>>().join(" | "),
            "---|".repeat(losses.len())
        );
        let cell = |m: &ModeResult| {
            let p = if page { &m.load.total_ms } else { &m.load.ttfb_ms };
            format!("{:.0} / {:.0} / {:.0}", p.p50, p.p90, p.p99)
        };
        for (label, big_r) in rows {
            let cells: Vec<String> = losses
                .iter()
                .map(|&l| {
                    self.results
                        .iter()
                        .find(|m| m.label == label && m.big_r_ms == big_r && m.loss_big_r == l)
                        .map_or_else(|| "-".into(), cell)
                })
                .collect();
            t += &format!("| {label} | {big_r} | {} |\n", cells.join(" | "));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::pct;

    #[test]
    fn loss_rates_print_as_given() {
        assert_eq!(pct(0.0), "0 %");
        assert_eq!(pct(0.005), "0.5 %");
        assert_eq!(pct(0.02), "2 %");
    }
}
