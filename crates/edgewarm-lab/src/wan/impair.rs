//! Link impairments for the delay box: random or bursty packet loss and jitter, decided by a
//! pure, seeded [`Impairer`] so the decisions can be tested without TUN devices and a run can
//! be repeated with `--seed`.
//!
//! Loss models (per direction, one decision per packet):
//! - random: each packet is lost with probability `loss`, independently;
//! - burst (`burst: B`): the simple Gilbert model, the Gilbert–Elliott model with a good state
//!   that loses nothing and a bad state that loses everything. From the bad state the chain
//!   returns to good with `r = 1/B` per packet, so bursts are geometric with mean `B` packets;
//!   it enters the bad state with `p = loss·r/(1 − loss)`, which makes the long-run share of
//!   packets lost (the bad state's stationary probability `p/(p+r)`) equal to `loss`. Two
//!   numbers a user can reason about (how much is lost, how long a burst lasts) rather than two
//!   transition probabilities.
//!
//! Jitter: each packet waits its one-way delay plus a uniform extra in `[0, jitter]`, but never
//! leaves before the packet in front of it (release = max(previous release, stamp + delay +
//! extra)), as netem's jitter does when told not to reorder. Reordering would make the
//! receiving TCP send duplicate ACKs and the sender fast-retransmit segments that were never
//! lost, and real paths rarely reorder, so letting jitter reorder would measure an artefact.
//! The cost: at high packet rates a large extra holds the packets behind it, so the mean added
//! delay is more than `jitter/2`.

use std::time::{Duration, Instant};

use serde::Serialize;

/// What to do to one link's packets (both directions alike, each with its own random stream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LinkImpair {
    /// Long-run share of packets lost, 0 ≤ loss < 1.
    pub loss: f64,
    /// Mean loss burst in packets (Gilbert model); `None`: independent losses.
    pub burst: Option<f64>,
    /// Largest extra delay added to a packet, ms.
    pub jitter_ms: f64,
}

/// Both links' impairments and the seed their random streams come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Impairments {
    /// Link A: client ↔ edge (r).
    pub a: LinkImpair,
    /// Link B: edge ↔ origin (R).
    pub b: LinkImpair,
    pub seed: u64,
}

/// What one link carried and dropped, both directions summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LinkCounts {
    pub packets: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped because the delay box's queue was full.
    pub drops: u64,
}

impl LinkCounts {
    /// What happened between two readings.
    pub fn since(self, before: Self) -> Self {
        Self {
            packets: self.packets.saturating_sub(before.packets),
            lost: self.lost.saturating_sub(before.lost),
            drops: self.drops.saturating_sub(before.drops),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImpairError {
    #[error("{0:?}: write the loss as a percentage, e.g. 1% or 0.5%")]
    NotPercent(String),
    #[error("{0:?}: the loss must be at least 0% and below 100%")]
    LossRange(String),
    #[error("{0:?}: the mean burst length is a number of packets, at least 1")]
    Burst(String),
    #[error("{0:?}: the jitter must be at most 10s")]
    Jitter(String),
}

impl LinkImpair {
    /// Whether anything is done to the packets.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0 && self.jitter_ms == 0.0
    }

    /// The same impairment with a mean burst length, checked.
    pub fn with_burst(self, burst: Option<f64>) -> Result<Self, ImpairError> {
        match burst {
            Some(b) if !(b >= 1.0 && b.is_finite()) => Err(ImpairError::Burst(b.to_string())),
            _ => Ok(Self { burst, ..self }),
        }
    }
}

/// Parse a loss rate written as a percentage (`1%`, `0.5 %`) into a fraction in [0, 1).
pub fn parse_loss(text: &str) -> Result<f64, ImpairError> {
    let number = text.trim().strip_suffix('%').ok_or_else(|| ImpairError::NotPercent(text.into()))?;
    let pct: f64 = number.trim().parse().map_err(|_| ImpairError::NotPercent(text.into()))?;
    // `contains` is false for NaN and the infinities too.
    if !(0.0..100.0).contains(&pct) {
        return Err(ImpairError::LossRange(text.into()));
    }
    Ok(pct / 100.0)
}

/// Parse a mean burst length in packets (`4`).
pub fn parse_burst(text: &str) -> Result<f64, ImpairError> {
    let b: f64 = text.trim().parse().map_err(|_| ImpairError::Burst(text.into()))?;
    LinkImpair::default().with_burst(Some(b)).map(|_| b)
}

/// Parse a jitter (`5ms`); more than 10 s is a typo, not a network.
pub fn parse_jitter(text: &str) -> Result<Duration, ImpairError> {
    let d = humantime::parse_duration(text.trim()).map_err(|_| ImpairError::Jitter(text.into()))?;
    if d > Duration::from_secs(10) {
        return Err(ImpairError::Jitter(text.into()));
    }
    Ok(d)
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, fast, statistically sound generator, written
/// here because the lab needs only uniform numbers and no dependency of its own for them. Any
/// seed, zero included, gives a full-period stream.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 53 bits as a double's mantissa.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A distinct seed for each link and direction of each part of a run, from the run's seed:
/// streams that do not mirror each other.
pub fn stream_seed(seed: u64, stream: u64) -> u64 {
    SplitMix64::new(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03)).next_u64()
}

/// One direction's decisions: lost or released when.
#[derive(Debug, Clone)]
pub struct Impairer {
    delay: Duration,
    loss: f64,
    /// Gilbert transitions (good→bad, bad→good) when bursty.
    gilbert: Option<(f64, f64)>,
    bad: bool,
    jitter_ns: u64,
    last_release: Option<Instant>,
    rng: SplitMix64,
}

impl Impairer {
    pub fn new(delay: Duration, impair: LinkImpair, seed: u64) -> Self {
        let gilbert = impair.burst.filter(|_| impair.loss > 0.0).map(|b| {
            let r = 1.0 / b.max(1.0);
            (impair.loss * r / (1.0 - impair.loss), r)
        });
        let jitter_ns = u64::try_from(Duration::from_secs_f64(impair.jitter_ms.max(0.0) / 1e3).as_nanos());
        Self {
            delay,
            loss: impair.loss,
            gilbert,
            bad: false,
            jitter_ns: jitter_ns.unwrap_or(u64::MAX),
            last_release: None,
            rng: SplitMix64::new(seed),
        }
    }

    /// Whether the next packet is lost; advances the loss model by one packet.
    pub fn lose(&mut self) -> bool {
        match self.gilbert {
            None => self.loss > 0.0 && self.rng.next_f64() < self.loss,
            Some((p, r)) => {
                // This packet's fate is its state's; then the chain moves for the next one.
                let lost = self.bad;
                let flip = if self.bad { r } else { p };
                if self.rng.next_f64() < flip {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }

    /// When a packet read at `stamp` (and not lost) is to be written: never before
    /// `stamp + delay`, never before the packet ahead of it.
    pub fn release(&mut self, stamp: Instant) -> Instant {
        let extra = match self.jitter_ns {
            0 => 0,
            j => self.rng.next_u64() % j.saturating_add(1),
        };
        let mut at = stamp + self.delay + Duration::from_nanos(extra);
        if let Some(last) = self.last_release {
            at = at.max(last);
        }
        self.last_release = Some(at);
        at
    }

    /// Both decisions for one packet: `None` if it is lost.
    pub fn admit(&mut self, stamp: Instant) -> Option<Instant> {
        (!self.lose()).then(|| self.release(stamp))
    }
}

/// `1 %`, `0.5 %`: loss rates as the flags take them.
pub(crate) fn pct(fraction: f64) -> String {
    format!("{} %", (fraction * 1e5).round() / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn impairer(loss: f64, burst: Option<f64>, jitter_ms: f64, seed: u64) -> Impairer {
        Impairer::new(Duration::from_millis(50), LinkImpair { loss, burst, jitter_ms }, seed)
    }

    #[test]
    fn random_loss_rate_is_close_to_the_configured_one() {
        for seed in [1, 2, 42] {
            let mut i = impairer(0.01, None, 0.0, seed);
            let lost = (0..100_000).filter(|_| i.lose()).count();
            assert!((800..=1200).contains(&lost), "seed {seed}: {lost} lost of 100000");
        }
        let mut none = impairer(0.0, None, 0.0, 7);
        assert_eq!((0..10_000).filter(|_| none.lose()).count(), 0);
    }

    /// Runs of consecutive losses: their mean length and the overall loss rate.
    fn bursts(i: &mut Impairer, packets: usize) -> (f64, f64) {
        let (mut runs, mut lost, mut current) = (0usize, 0usize, 0usize);
        for _ in 0..packets {
            if i.lose() {
                lost += 1;
                current += 1;
            } else if current > 0 {
                runs += 1;
                current = 0;
            }
        }
        (lost as f64 / runs.max(1) as f64, lost as f64 / packets as f64)
    }

    #[test]
    fn gilbert_bursts_have_the_configured_mean_length_and_rate() {
        for (loss, burst) in [(0.01, 4.0), (0.02, 10.0), (0.05, 2.0)] {
            let mut i = impairer(loss, Some(burst), 0.0, 3);
            let (mean, rate) = bursts(&mut i, 1_000_000);
            assert!((mean - burst).abs() <= 0.2 * burst, "burst {burst}: mean run {mean}");
            assert!((rate - loss).abs() <= 0.2 * loss, "loss {loss}: rate {rate}");
        }
        // Independent losses at 1 % come in runs of ~1: the model really changes the shape.
        let (mean, _) = bursts(&mut impairer(0.01, None, 0.0, 3), 1_000_000);
        assert!(mean < 1.1, "random loss: mean run {mean}");
    }

    #[test]
    fn jitter_never_reorders_and_never_releases_early() {
        let t0 = Instant::now();
        let mut i = impairer(0.0, None, 20.0, 9);
        let mut last = t0;
        let mut extra_seen = Duration::ZERO;
        for n in 0..100_000u64 {
            // Packets 10 µs apart: far closer than the jitter, so ordering is what holds them.
            let stamp = t0 + Duration::from_micros(10 * n);
            let at = i.release(stamp);
            assert!(at >= stamp + Duration::from_millis(50), "packet {n} released early");
            assert!(at >= last, "packet {n} overtook the one before it");
            extra_seen = extra_seen.max(at - stamp - Duration::from_millis(50));
            last = at;
        }
        assert!(extra_seen > Duration::ZERO && extra_seen <= Duration::from_millis(20));
        // Without jitter the delay is exact.
        let mut exact = impairer(0.0, None, 0.0, 9);
        assert_eq!(exact.release(t0), t0 + Duration::from_millis(50));
    }

    #[test]
    fn same_seed_same_decisions() {
        let run = |seed| {
            let mut i = impairer(0.1, Some(3.0), 0.0, seed);
            (0..1000).map(|_| i.lose()).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn bad_values_are_refused() {
        assert_eq!(parse_loss("1%"), Ok(0.01));
        assert_eq!(parse_loss("0.5 %"), Ok(0.005));
        assert_eq!(parse_loss("0%"), Ok(0.0));
        for bad in ["150%", "100%", "-1%", "nan%", "1", "x%", ""] {
            assert!(parse_loss(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_jitter("5ms"), Ok(Duration::from_millis(5)));
        assert!(parse_jitter("11s").is_err() && parse_jitter("fast").is_err());
        assert!(LinkImpair::default().with_burst(Some(0.5)).is_err());
        assert!(LinkImpair::default().with_burst(Some(f64::NAN)).is_err());
        assert!(LinkImpair::default().with_burst(Some(4.0)).is_ok());
        assert_eq!(parse_burst("4"), Ok(4.0));
        assert!(parse_burst("0").is_err() && parse_burst("many").is_err() && parse_burst("inf").is_err());
    }
}
