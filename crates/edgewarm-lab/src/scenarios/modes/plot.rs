//! SVG plots of a lab run: the TTFB CDF of every mode, with each mode's theoretical minimum as a
//! dashed vertical line in the same colour.

use std::path::Path;

use plotters::prelude::*;

use crate::scenarios::modes::report::LabReport;

pub fn ttfb_cdf(report: &LabReport, path: &Path) -> Result<(), String> {
    let max = report.results.iter().flat_map(|m| m.load.ttfb_samples.iter().copied()).fold(0.0f64, f64::max);
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let s = &report.scenario;
    let title = format!("TTFB of new connections, r = {} ms, R = {} ms", s.r_ms, s.big_r_ms);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..(max * 1.1).max(1.0), 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time to first byte (ms)")
        .y_desc("fraction of connections")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, m) in report.results.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let mut v = m.load.ttfb_samples.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        let points: Vec<(f64, f64)> = v.iter().enumerate().map(|(k, &x)| (x, (k + 1) as f64 / n)).collect();
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(if report.scenario.impaired() {
                let loss = crate::wan::impair::pct(m.loss_big_r);
                format!("{}, loss {loss} (min {} = {:.0} ms)", m.label, m.formula, m.min_ms)
            } else {
                format!("{} (min {} = {:.0} ms)", m.label, m.formula, m.min_ms)
            })
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        let dashes = (0..20).map(|k| {
            let y0 = k as f64 / 20.0;
            PathElement::new(vec![(m.min_ms, y0), (m.min_ms, y0 + 0.025)], colour.stroke_width(1))
        });
        chart.draw_series(dashes).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// One sampling interval of a ramp.
struct Row {
    t: f64,
    arrivals: f64,
    target: f64,
    ready: f64,
    hit: f64,
}

/// A ramp: arrivals per second, the pool's target and ready connections, and the hit rate per
/// sampling interval, over time.
pub fn pool_timeline(report: &LabReport, path: &Path) -> Result<(), String> {
    let t = &report.timeline;
    let mut rows = Vec::new();
    for w in t.windows(2) {
        let dt = (w[1].t_s - w[0].t_s).max(1e-3);
        let (hits, misses) = (w[1].hits - w[0].hits, w[1].misses - w[0].misses);
        let arrivals = hits + misses;
        let hit = if arrivals > 0.0 { 100.0 * hits / arrivals } else { 100.0 };
        rows.push(Row { t: w[1].t_s, arrivals: arrivals / dt, target: w[1].target, ready: w[1].ready, hit });
    }
    let t_max = rows.last().map_or(1.0, |r| r.t);
    let y_max = rows.iter().map(|r| r.arrivals.max(r.target).max(r.ready)).fold(1.0f64, f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(360);
    let mut chart = ChartBuilder::on(&top)
        .caption("Pool following demand (prewarm route)", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().y_desc("per second / connections").draw().map_err(|e| e.to_string())?;
    let line = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.t, f(r))).collect::<Vec<_>>();
    let series = [
        ("arrivals/s", BLUE, line(|r| r.arrivals)),
        ("pool target", RED, line(|r| r.target)),
        ("pool ready", GREEN, line(|r| r.ready)),
    ];
    for (name, colour, points) in series {
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    let mut hits = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_max, 0.0..100.0)
        .map_err(|e| e.to_string())?;
    hits.configure_mesh().x_desc("seconds").y_desc("hit rate %").draw().map_err(|e| e.to_string())?;
    hits.draw_series(LineSeries::new(rows.iter().map(|r| (r.t, r.hit)), BLACK.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
