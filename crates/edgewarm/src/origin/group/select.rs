//! Which server of a group takes an attempt: the tiers (primaries in service, backups in
//! service, all), the request's tried servers, the client's sticky server, then `balance`
//! over the candidates ([`super::choose`]).

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::choose::{self, Candidate};
use super::{Group, Member};
use crate::config::Balance;
use crate::origin::seam::{Affinity, Outgoing};

impl Group {
    /// The server for an attempt: the request's client's last server while it is in service,
    /// else one by `balance`, from the primaries in service, else the backups in service, else
    /// (panic: better a try than a refusal) every server; one the request already tried only
    /// when it tried them all.
    pub(super) fn choose(&self, out: &mut Outgoing<'_>, now: Instant) -> Option<usize> {
        let tried = out.tried.load(Ordering::Relaxed);
        let serving = self.observe(now);
        let untried = |i: usize| tried & (1 << i) == 0;
        let pick = |want: &dyn Fn(&Member, bool) -> bool| -> Vec<usize> {
            (0..self.members.len()).filter(|&i| untried(i) && want(&self.members[i], serving[i])).collect()
        };
        let mut tier = pick(&|m, serving| serving && !m.backup);
        if tier.is_empty() {
            tier = pick(&|m, serving| serving && m.backup);
        }
        if tier.is_empty() {
            tier = pick(&|_, _| true);
        }
        if tier.is_empty() {
            // Every server was tried: the retry policy still allows an attempt, so it goes
            // where one server's would (a 425's replay, a refused stream on a lone server).
            tier = (0..self.members.len()).collect();
        }
        if tier.len() == 1 {
            return Some(tier[0]);
        }
        let floor = self.members.iter().filter_map(|m| m.state.latency(now, f64::MAX)).fold(f64::MAX, f64::min);
        let candidates: Vec<Candidate> = tier
            .iter()
            .map(|&i| {
                let m = &self.members[i];
                Candidate {
                    index: i,
                    share: m.state.share(m.weight, self.slow_start, now),
                    latency: m.state.latency(now, floor),
                    in_flight: m.state.in_flight(),
                    seed: m.seed,
                }
            })
            .collect();
        if self.balance != Balance::Hash {
            if let Some(c) = self.sticky(out.affinity).and_then(|i| candidates.iter().find(|c| c.index == i)) {
                // With `latency`, a client stays while its server is not clearly the worse (at
                // most twice the best cost): a server whose requests pile up or slow down loses
                // its clients at once, before many have waited on it.
                let costs = choose::costs(&candidates);
                let best = costs.iter().copied().fold(f64::MAX, f64::min);
                let mine = costs[candidates.iter().position(|x| x.index == c.index).unwrap_or(0)];
                if self.balance != Balance::Latency || mine <= 2.0 * best {
                    return Some(c.index);
                }
            }
        }
        Some(match self.balance {
            Balance::Latency => choose::latency(&candidates),
            Balance::RoundRobin => {
                choose::round_robin(&candidates, &mut self.turns.lock().unwrap_or_else(|p| p.into_inner()))
            }
            Balance::Hash => {
                // The cache key's parts that name the object: authority, path and query.
                let head = (out.build)();
                let authority = head.uri().authority().map_or("", |a| a.as_str());
                let path = head.uri().path_and_query().map_or("/", |p| p.as_str());
                choose::hash(&candidates, format!("{authority}{path}").as_bytes())
            }
        })
    }

    /// The client connection's server in this group, if it has one.
    fn sticky(&self, affinity: &Affinity) -> Option<usize> {
        let pinned = affinity.server.load(Ordering::Relaxed);
        (pinned >> 32 == self.id & 0xffff_ffff).then_some((pinned & 0xffff_ffff) as usize)
    }

    /// Note that the client connection's requests go to member `i` of this group.
    pub(super) fn stick(&self, affinity: &Affinity, i: usize) {
        affinity.server.store((self.id & 0xffff_ffff) << 32 | i as u64, Ordering::Relaxed);
    }
}
