//! Which of the servers in service takes a request, by `upstream.balance`. Each way is a pure
//! function of the candidates (and, for round robin, its running counts), so it is tested
//! without a server.

/// A server that may take the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// Its index in the group.
    pub(crate) index: usize,
    /// Its weight now (ramped during slow start).
    pub(crate) share: f64,
    /// Its response-time average (seconds), if it has answered yet.
    pub(crate) latency: Option<f64>,
    pub(crate) in_flight: u64,
    /// A number fixed per server (a hash of its name), for rendezvous hashing.
    pub(crate) seed: u64,
}

/// `latency`: of two servers drawn by weight, the one with the lower in-flight requests ×
/// response-time average per unit of weight (power of two choices: near the best choice's
/// spread, without herding every edge onto the one server that looked fastest). Costs within
/// twice each other are a tie, settled by the draw: servers about as fast share the load by
/// weight, rather than the one a hair faster (or luckier in its last answers) taking it all,
/// and the other, unasked, never showing it is as fast. A brown-out is far beyond twice.
pub(crate) fn latency(c: &[Candidate]) -> usize {
    let cost = costs(c);
    let first = draw(c, None);
    if c.len() == 1 {
        return c[first].index;
    }
    let second = draw(c, Some(first));
    let best = if cost[second] < TIE * cost[first] { second } else { first };
    c[best].index
}

/// A cost below this share of another's is better; above, a tie.
const TIE: f64 = 0.5;

/// Each candidate's cost for `latency` (seconds of waiting per unit of weight): its
/// response-time average × (its requests in flight + 1) ÷ its share. A server that has not
/// answered yet is taken to be as fast as the others' average.
pub(crate) fn costs(c: &[Candidate]) -> Vec<f64> {
    let known: Vec<f64> = c.iter().filter_map(|c| c.latency).collect();
    let guess = if known.is_empty() { 0.001 } else { known.iter().sum::<f64>() / known.len() as f64 };
    c.iter().map(|c| c.latency.unwrap_or(guess).max(1e-6) * (c.in_flight as f64 + 1.0) / c.share).collect()
}

/// One candidate drawn at random by share, `not` left out.
fn draw(c: &[Candidate], not: Option<usize>) -> usize {
    let total: f64 = c.iter().enumerate().filter(|(i, _)| Some(*i) != not).map(|(_, c)| c.share).sum();
    let mut r = fastrand::f64() * total;
    let mut last = 0;
    for (i, cand) in c.iter().enumerate() {
        if Some(i) == not {
            continue;
        }
        last = i;
        if r < cand.share {
            return i;
        }
        r -= cand.share;
    }
    last
}

/// `round_robin`: smooth weighted round robin (each turn every candidate gains its share; the
/// one furthest ahead goes and falls back by the total), so a server of weight 3 beside one of
/// 1 goes three times in four, spread out. `current` is indexed by the group's index.
pub(crate) fn round_robin(c: &[Candidate], current: &mut [f64]) -> usize {
    let total: f64 = c.iter().map(|c| c.share).sum();
    let mut best = 0;
    for (i, cand) in c.iter().enumerate() {
        current[cand.index] += cand.share;
        if current[cand.index] > current[c[best].index] {
            best = i;
        }
    }
    current[c[best].index] -= total;
    c[best].index
}

/// `hash`: rendezvous (highest random weight) hashing of `key`: every edge picks the same
/// server for a key, and when a server leaves only its keys move.
pub(crate) fn hash(c: &[Candidate], key: &[u8]) -> usize {
    let score = |cand: &Candidate| {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, cand.seed);
        // A uniform draw in (0, 1) from the hash; the weighted form of rendezvous hashing.
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        cand.share / -u.ln()
    };
    c.iter().map(|cand| (score(cand), cand.index)).max_by(|a, b| a.0.total_cmp(&b.0)).map_or(0, |(_, i)| i)
}

/// The seed of a server named `name` (its hash).
pub(crate) fn seed(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(shares: &[f64]) -> Vec<Candidate> {
        shares
            .iter()
            .enumerate()
            .map(|(index, &share)| Candidate {
                index,
                share,
                latency: Some(0.01),
                in_flight: 0,
                seed: seed(&format!("s{index}:443")),
            })
            .collect()
    }

    #[test]
    fn round_robin_follows_weights_spread_out() {
        let c = cands(&[3.0, 1.0]);
        let mut current = vec![0.0; 2];
        let picks: Vec<usize> = (0..8).map(|_| round_robin(&c, &mut current)).collect();
        assert_eq!(picks, [0, 0, 1, 0, 0, 0, 1, 0]);
    }

    /// The slower server (or the busier) loses every draw it is in against a fast idle one.
    #[test]
    fn latency_prefers_the_fast_and_the_idle() {
        fastrand::seed(7);
        let mut c = cands(&[1.0, 1.0]);
        c[1].latency = Some(0.2);
        assert!((0..100).all(|_| latency(&c) == 0));
        c[1].latency = Some(0.01);
        c[0].in_flight = 9;
        assert!((0..100).all(|_| latency(&c) == 1));
        // Equal, or a hair apart: both get a share.
        c[0].in_flight = 0;
        let zeros = (0..1000).filter(|_| latency(&c) == 0).count();
        assert!((300..700).contains(&zeros), "{zeros}");
        c[1].latency = Some(0.018);
        let zeros = (0..1000).filter(|_| latency(&c) == 0).count();
        assert!((300..700).contains(&zeros), "{zeros}");
    }

    /// A key goes to the same server every time; with a server gone, only that server's keys
    /// move; shares follow weights.
    #[test]
    fn hash_is_stable_and_moves_only_the_leavers_keys() {
        let all = cands(&[1.0, 1.0, 1.0]);
        let keys: Vec<String> = (0..3000).map(|i| format!("h.test/obj/{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| hash(&all, k.as_bytes())).collect();
        assert_eq!(before, keys.iter().map(|k| hash(&all, k.as_bytes())).collect::<Vec<_>>());
        let per = |s: usize| before.iter().filter(|&&b| b == s).count();
        assert!((0..3).all(|s| (800..1200).contains(&per(s))), "{:?}", (0..3).map(per).collect::<Vec<_>>());
        let two: Vec<Candidate> = all.iter().copied().filter(|c| c.index != 2).collect();
        for (k, b) in keys.iter().zip(&before) {
            let after = hash(&two, k.as_bytes());
            if *b != 2 {
                assert_eq!(after, *b, "{k} moved without its server leaving");
            }
        }
        let heavy = cands(&[3.0, 1.0]);
        let first = keys.iter().filter(|k| hash(&heavy, k.as_bytes()) == 0).count();
        assert!((2000..2500).contains(&first), "{first}");
    }
}
