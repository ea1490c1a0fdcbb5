//! A scenario's impaired links: loss, bursts and jitter from a scenario file's keys and from
//! the command line, and the parts (RTT × loss) they make a run of.

use std::time::Duration;

use super::{Scenario, ScenarioFile};
use crate::scenarios::opts::LabOpts;
use crate::wan::impair::{parse_jitter, parse_loss, ImpairError, Impairments};

/// The file's link keys: both links' impairments and link B's losses, the first included.
pub(super) fn from_file(f: &ScenarioFile) -> Result<(Impairments, Vec<f64>), String> {
    let field = |name: &'static str| move |e: ImpairError| format!("{name}: {e}");
    let loss = f.loss.iter().map(|l| parse_loss(l).map_err(field("loss"))).collect::<Result<Vec<_>, _>>()?;
    let mut impair = Impairments { seed: f.seed.unwrap_or_else(clock_seed), ..Impairments::default() };
    impair.b.loss = loss.first().copied().unwrap_or(0.0);
    impair.b = impair.b.with_burst(f.burst).map_err(field("burst"))?;
    impair.a = impair.a.with_burst(f.burst_r).map_err(field("burst_r"))?;
    if let Some(l) = &f.loss_r {
        impair.a.loss = parse_loss(l).map_err(field("loss_r"))?;
    }
    if let Some(j) = &f.jitter {
        impair.b.jitter_ms = ms(parse_jitter(j).map_err(field("jitter"))?);
    }
    if let Some(j) = &f.jitter_r {
        impair.a.jitter_ms = ms(parse_jitter(j).map_err(field("jitter_r"))?);
    }
    Ok((impair, loss))
}

impl Scenario {
    /// The command line's impairments over the scenario's: `--loss` replaces the scenario's
    /// losses on link B, the others replace one value each.
    pub fn impair_from(&mut self, opts: &LabOpts) {
        if let Some((&first, rest)) = opts.loss.split_first() {
            self.impair.b.loss = first;
            self.more_loss = rest.to_vec();
        }
        let (a, b) = (&mut self.impair.a, &mut self.impair.b);
        a.loss = opts.loss_r.unwrap_or(a.loss);
        b.jitter_ms = opts.jitter.map_or(b.jitter_ms, ms);
        a.jitter_ms = opts.jitter_r.map_or(a.jitter_ms, ms);
        // Checked by their parsers (`parse_burst`) already.
        b.burst = opts.burst.or(b.burst);
        a.burst = opts.burst_r.or(a.burst);
        self.impair.seed = opts.seed.unwrap_or(self.impair.seed);
    }

    /// Every (edge↔origin RTT, link B loss) the scenario measures, each on a topology of its own.
    pub fn parts(&self) -> Vec<(f64, f64)> {
        let big_r = std::iter::once(self.big_r_ms).chain(self.more_big_r_ms.iter().copied());
        let losses: Vec<f64> = std::iter::once(self.impair.b.loss).chain(self.more_loss.iter().copied()).collect();
        big_r.flat_map(|r| losses.iter().map(move |&l| (r, l))).collect()
    }

    /// Whether any link is impaired, in any part.
    pub fn impaired(&self) -> bool {
        !(self.impair.a.is_none() && self.impair.b.is_none() && self.more_loss.iter().all(|&l| l == 0.0))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A seed for runs that name none: the clock's nanoseconds (the report records it).
pub(super) fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
