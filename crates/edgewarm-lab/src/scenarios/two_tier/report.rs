//! What a two-tier run found: per visit kind and edge, the clients' TTFB (and page time)
//! against the round trips the visit must cross, and what each tier did meanwhile (the
//! origin's requests, the shield's and the edge's cache results); JSON rows and a Markdown
//! table.

use std::path::PathBuf;

use serde::Serialize;

use crate::harness::tiers::opts::TierProtocol;
use crate::scenarios::spec::Scenario;
use crate::tools::load::LoadReport;

/// What the caches held when a visit came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Visit {
    /// Nothing cached: the edge asks the shield, the shield asks the origin.
    Cold,
    /// The shield has it (another edge asked for it), this edge does not.
    WarmShield,
    /// This edge has it.
    WarmEdge,
}

impl Visit {
    pub fn label(self) -> &'static str {
        match self {
            Self::Cold => "cold",
            Self::WarmShield => "warm shield",
            Self::WarmEdge => "warm edge",
        }
    }

    /// The links a request crosses beyond the client's own (R, O).
    fn depth(self) -> (bool, bool) {
        match self {
            Self::Cold => (true, true),
            Self::WarmShield => (true, false),
            Self::WarmEdge => (false, false),
        }
    }

    /// Round trips of r before the response can start: the TCP and TLS handshakes (TLS 1.2
    /// takes one more), then the request.
    fn client_rounds(tls12: bool) -> u32 {
        if tls12 {
            4
        } else {
            3
        }
    }

    /// The TTFB minimum as a formula: `3r+R+O` for a cold visit over TLS 1.3.
    pub fn formula(self, tls12: bool) -> String {
        let (big_r, o) = self.depth();
        format!("{}r{}{}", Self::client_rounds(tls12), if big_r { "+R" } else { "" }, if o { "+O" } else { "" })
    }

    /// One round trip as deep as the visit goes: what each further request on the connection
    /// costs at least (a page's sub-resources).
    fn round_trip_ms(self, r: f64, big_r: f64, o: f64) -> f64 {
        let (with_r, with_o) = self.depth();
        r + if with_r { big_r } else { 0.0 } + if with_o { o } else { 0.0 }
    }

    /// The TTFB minimum, ms.
    pub fn min_ms(self, tls12: bool, r: f64, big_r: f64, o: f64) -> f64 {
        f64::from(Self::client_rounds(tls12) - 1) * r + self.round_trip_ms(r, big_r, o)
    }

    /// A page's minimum (`--page`): its first byte, then one more round trip as deep for the
    /// sub-resources, all asked at once and in the same cache state as the page.
    pub fn page_min_ms(self, tls12: bool, r: f64, big_r: f64, o: f64) -> f64 {
        self.min_ms(tls12, r, big_r, o) + self.round_trip_ms(r, big_r, o)
    }
}

/// What one cache did, from its `edgewarm_cache_requests_total` counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheCounts {
    pub hit: f64,
    pub miss: f64,
    /// Stale, revalidated, collapsed and bypassed requests: none in a run that works.
    pub other: f64,
}

impl CacheCounts {
    /// The counters of route `route` in an OpenMetrics text.
    pub(crate) fn from_metrics(text: &str, route: &str) -> Self {
        let get = |result| {
            edgewarm::metrics::sample(text, "edgewarm_cache_requests_total", &[("route", route), ("result", result)])
                .unwrap_or(0.0)
        };
        let other = ["stale", "revalidated", "collapsed", "bypass"].into_iter().map(get).sum();
        Self { hit: get("hit"), miss: get("miss"), other }
    }

    /// What happened between `before` and now.
    pub(crate) fn since(self, before: Self) -> Self {
        Self { hit: self.hit - before.hit, miss: self.miss - before.miss, other: self.other - before.other }
    }

    /// Requests the cache saw.
    pub fn total(self) -> f64 {
        self.hit + self.miss + self.other
    }

    fn cell(self) -> String {
        let other = if self.other > 0.0 { format!(" (+{} other)", self.other) } else { String::new() };
        format!("{} / {}{other}", self.hit, self.miss)
    }
}

/// One edge's clients asking for every object once, in one cache state.
#[derive(Debug, Clone, Serialize)]
pub struct VisitRow {
    pub visit: Visit,
    pub label: &'static str,
    pub edge: u8,
    pub formula: String,
    pub min_ms: f64,
    pub ratio_p50: f64,
    /// With `--page`: the page time's minimum (one more round trip as deep as the visit).
    pub page_min_ms: Option<f64>,
    /// Requests that reached the origin while this visit ran.
    pub origin_requests: u64,
    /// What the shield's cache and this edge's cache did meanwhile.
    pub shield: CacheCounts,
    pub edge_cache: CacheCounts,
    pub load: LoadReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct TwoTierReport {
    pub scenario: Scenario,
    pub edges: u8,
    /// Pages (or single objects) each visit asks for: one new connection each.
    pub visits_per_row: usize,
    /// Distinct objects: `visits_per_row` × (1 + sub-resources per page).
    pub objects: usize,
    pub tier_protocol: TierProtocol,
    pub origin_protocol: TierProtocol,
    /// The shield↔origin round trip (O).
    pub origin_rtt_ms: f64,
    pub rows: Vec<VisitRow>,
    /// Object requests the origin answered in the whole run (its access log), how many
    /// distinct objects they were for, and the most any one object was asked for.
    pub origin_requests: u64,
    pub origin_objects: usize,
    pub origin_max_per_object: u64,
    pub delay_box_max_late_us: u64,
    pub run_dir: PathBuf,
}

impl crate::harness::report::Report for TwoTierReport {
    fn markdown(&self) -> String {
        TwoTierReport::markdown(self)
    }

    fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    fn failed(&self) -> usize {
        TwoTierReport::failed(self)
    }
}

impl TwoTierReport {
    /// Requests that failed, in every row.
    pub fn failed(&self) -> usize {
        self.rows.iter().map(|r| r.load.errors.values().sum::<usize>()).sum()
    }

    /// Requests each edge's cache served, over every visit.
    pub fn edge_totals(&self) -> Vec<f64> {
        (0..self.edges).map(|e| self.rows.iter().filter(|r| r.edge == e).map(|r| r.edge_cache.total()).sum()).collect()
    }

    pub fn markdown(&self) -> String {
        let s = &self.scenario;
        let tls = if s.tls12 { "TLS 1.2" } else { "TLS 1.3" };
        let page = s.page > 0;
        let mut out = format!(
            "## two-tier: r = {} ms, R = {} ms, O = {} ms, {tls}\n\n\
             {} edge(s), one shield. Edges → shield: {}; shield → origin: {}. Each visit: {} {}, \
             each on a new connection (TCP + TLS to the edge).\n\n",
            s.r_ms,
            s.big_r_ms,
            self.origin_rtt_ms,
            self.edges,
            self.tier_protocol.label(),
            self.origin_protocol.label(),
            self.visits_per_row,
            if page { format!("pages of 1 + {} objects", s.page) } else { "objects".into() },
        );
        let page_head = if page { " page p50 | page min |" } else { "" };
        out += &format!(
            "| visit | edge | ok | TTFB p50 | p90 | p99 | minimum | p50 / min |{page_head} origin requests | shield hit / miss | edge hit / miss |\n\
             |---|---:|---:|---:|---:|---:|---|---:|{}---:|---|---|\n",
            if page { "---:|---:|" } else { "" }
        );
        for r in &self.rows {
            let t = &r.load.ttfb_ms;
            let page_cells = match r.page_min_ms {
                Some(min) => format!(" {:.1} | {min:.1} |", r.load.total_ms.p50),
                None => String::new(),
            };
            out += &format!(
                "| {} | {} | {}/{} | {:.1} | {:.1} | {:.1} | {:.1} ({}) | {:.2} |{page_cells} {} | {} | {} |\n",
                r.label,
                r.edge,
                r.load.ok,
                r.load.requests,
                t.p50,
                t.p90,
                t.p99,
                r.min_ms,
                r.formula,
                r.ratio_p50,
                r.origin_requests,
                r.shield.cell(),
                r.edge_cache.cell(),
            );
        }
        let edges = self.edge_totals();
        let each: Vec<String> = edges.iter().enumerate().map(|(i, n)| format!("edge {i}: {n}")).collect();
        let shield: f64 = self.rows.iter().map(|r| r.shield.total()).sum();
        let once = if self.origin_max_per_object <= 1 && self.origin_objects == self.objects {
            "every object exactly once: one request per object per shield, not per edge".to_string()
        } else {
            format!("at most {} for one object", self.origin_max_per_object)
        };
        out += &format!(
            "\n**The origin answered {} requests for {} objects** ({once}), while the edges served {} \
             ({}) and the shield {}.\n\nO: the shield↔origin round trip. Delay box worst lateness: {} µs.\n",
            self.origin_requests,
            self.objects,
            edges.iter().sum::<f64>(),
            each.join(", "),
            shield,
            self.delay_box_max_late_us,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_visit_kind_pays_the_links_it_crosses() {
        let (r, big_r, o) = (20.0, 100.0, 1.0);
        assert_eq!(Visit::Cold.min_ms(false, r, big_r, o), 161.0);
        assert_eq!(Visit::WarmShield.min_ms(false, r, big_r, o), 160.0);
        assert_eq!(Visit::WarmEdge.min_ms(false, r, big_r, o), 60.0);
        assert_eq!(Visit::WarmEdge.min_ms(true, r, big_r, o), 80.0);
        assert_eq!(Visit::Cold.formula(false), "3r+R+O");
        assert_eq!(Visit::WarmShield.formula(true), "4r+R");
        assert_eq!(Visit::WarmEdge.formula(false), "3r");
        assert_eq!(Visit::WarmShield.page_min_ms(false, r, big_r, o), 280.0);
        assert_eq!(Visit::Cold.page_min_ms(false, r, big_r, o), 282.0);
    }

    #[test]
    fn cache_counts_come_from_the_route_s_counters() {
        let text = "# TYPE edgewarm_cache_requests counter\n\
            edgewarm_cache_requests_total{route=\"h.test\",result=\"hit\"} 3\n\
            edgewarm_cache_requests_total{route=\"h.test\",result=\"miss\"} 5\n\
            edgewarm_cache_requests_total{route=\"h.test\",result=\"collapsed\"} 1\n\
            edgewarm_cache_requests_total{route=\"other\",result=\"hit\"} 7\n";
        let now = CacheCounts::from_metrics(text, "h.test");
        assert_eq!(now, CacheCounts { hit: 3.0, miss: 5.0, other: 1.0 });
        let before = CacheCounts { hit: 1.0, miss: 5.0, other: 0.0 };
        assert_eq!(now.since(before), CacheCounts { hit: 2.0, miss: 0.0, other: 1.0 });
        assert_eq!(now.total(), 9.0);
        assert_eq!(CacheCounts::default(), CacheCounts::from_metrics("", "h.test"));
    }
}
