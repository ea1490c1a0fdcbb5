//! The browser lab's pictures: page load time per page and mode (one chart per setting), and a
//! news-page waterfall per mode (each resource a bar: waiting, then receiving).

use std::path::Path;

use plotters::prelude::*;

use crate::scenarios::pages::report::{PageResult, PagesReport, Setting};
use crate::tools::browse::Load;
use crate::tools::browse::ResourceTiming;

/// Grouped bars: per page and visit, one bar per mode (p50 PLT).
pub fn plt_bars(cells: &[&PageResult], s: Setting, path: &Path) -> Result<(), String> {
    let mut groups: Vec<(String, String)> = Vec::new();
    let mut modes = Vec::new();
    for c in cells.iter().filter(|c| c.error.is_none()) {
        let g = (c.page.clone(), c.visit.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
        if !modes.contains(&c.mode) {
            modes.push(c.mode);
        }
    }
    let max = cells.iter().map(|c| c.plt_ms.p50).fold(0.0, f64::max).max(1.0);
    let root = SVGBackend::new(path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Chromium page load time (p50), r = {} ms, R = {} ms", s.r_ms, s.big_r_ms), ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n, 0.0..max * 1.15)
        .map_err(|e| e.to_string())?;
    let labels = groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            match labels.get(i) {
                Some((page, visit)) if (x - x.floor() - 0.5).abs() < 0.01 => format!("{page} ({visit})"),
                _ => String::new(),
            }
        })
        .y_desc("page load time (ms)")
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / modes.len().max(1) as f64;
    for (k, mode) in modes.iter().enumerate() {
        let colour = Palette99::pick(k).to_rgba();
        let bars = groups.iter().enumerate().filter_map(|(i, (page, visit))| {
            let c = cells.iter().find(|c| c.mode == *mode && &c.page == page && &c.visit == visit)?;
            let x0 = i as f64 + 0.1 + k as f64 * width;
            Some(Rectangle::new([(x0, 0.0), (x0 + width * 0.9, c.plt_ms.p50)], colour.filled()))
        });
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(mode.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// One row per resource, document first: light from request to first byte, dark while the
/// body arrives; a line at the load event.
pub fn waterfall(load: &Load, title: &str, path: &Path) -> Result<(), String> {
    let rows = load.resources.len() + 1;
    let end = load.resources.iter().map(|r| r.end_ms).fold(load.plt_ms, f64::max).max(1.0);
    let root = SVGBackend::new(path, (1000, 140 + 9 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..end * 1.05, rows as f64..0.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("ms from the navigation's start")
        .draw()
        .map_err(|e| e.to_string())?;
    let wait = RGBColor(150, 190, 230);
    let body = RGBColor(30, 90, 170);
    let doc = (0.0, load.ttfb_ms, load.ttfb_ms);
    let bars = std::iter::once(doc).chain(load.resources.iter().map(bar));
    for (i, (start, first, done)) in bars.enumerate() {
        let y = i as f64;
        chart
            .draw_series([
                Rectangle::new([(start, y + 0.15), (first, y + 0.85)], wait.filled()),
                Rectangle::new([(first, y + 0.15), (done.max(first + end / 500.0), y + 0.85)], body.filled()),
            ])
            .map_err(|e| e.to_string())?;
    }
    let load_event = load.load_event_ms;
    chart
        .draw_series([PathElement::new(vec![(load_event, 0.0), (load_event, rows as f64)], RED.stroke_width(1))])
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Every chart of a pages run, in its folder: the page load bars of each setting and the news
/// page's waterfalls. A chart that cannot be drawn is a warning; the report stands without it.
pub(crate) fn draw(report: &PagesReport, dir: &std::path::Path) {
    for s in report.settings() {
        let tag = format!("r{}-R{}", s.r_ms, s.big_r_ms);
        let cells: Vec<&PageResult> = report.results.iter().filter(|r| r.setting() == s).collect();
        if let Err(e) = plt_bars(&cells, s, &dir.join(format!("plt-{tag}.svg"))) {
            tracing::warn!(error = %e, "could not draw the page load chart");
        }
        for r in cells.iter().filter(|r| r.page == "news" && r.visit == "first") {
            let Some(load) = r.median() else { continue };
            let path = dir.join(format!("waterfall-news-{}-{tag}.svg", r.mode.label()));
            if let Err(e) = waterfall(
                load,
                &format!("news page through {}, first visit, r = {} ms, R = {} ms", r.mode.label(), s.r_ms, s.big_r_ms),
                &path,
            ) {
                tracing::warn!(error = %e, "could not draw the waterfall");
            }
        }
    }
}

/// A resource's bar in a waterfall: start, first byte, end (ms from the navigation's start).
pub(crate) fn bar(r: &ResourceTiming) -> (f64, f64, f64) {
    (r.start_ms, r.response_start_ms.max(r.start_ms), r.end_ms.max(r.start_ms))
}
