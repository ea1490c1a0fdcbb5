//! SVG plots of a lab run: the TTFB CDF of every mode, with each mode's theoretical minimum as a
//! dashed vertical line in the same colour.

use std::path::Path;

use plotters::prelude::*;

use super::run::LabReport;

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
            .label(format!("{} (min {} = {:.0} ms)", m.label, m.formula, m.min_ms))
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
