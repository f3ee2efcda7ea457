//! SVG charts for the evaluation reports (plotters): grouped bars of several measures per
//! variant, and measure-versus-parameter curves for the sweeps.

use std::path::Path;

use plotters::prelude::*;

use crate::core::{Error, Result};

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn plot_error<E: std::error::Error + Send + Sync + 'static>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Chart { path: path.to_owned(), source: Box::new(e) }
}

type Chart<'a> = ChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws the legend and writes the file.
fn finish(path: &Path, mut chart: Chart<'_>, root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<()> {
    let err = plot_error(path);
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)
}

/// Horizontal grouped bars: one band per variant (top to bottom in the given order), one bar
/// per measure; a missing value draws no bar.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    variants: &[String],
    x_desc: &str,
    measures: &[(&str, Vec<Option<f64>>)],
) -> Result<()> {
    let err = plot_error(path);
    let height = 80 + 22 * measures.len().max(1) as u32 * variants.len().max(1) as u32 / 2 + 20 * variants.len() as u32;
    let root = SVGBackend::new(path, (960, height.max(240))).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let n = variants.len().max(1);
    let max = measures.iter().flat_map(|(_, v)| v.iter().flatten()).copied().fold(0.0f64, f64::max).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(190)
        .build_cartesian_2d(0f64..max * 1.05, -0.5f64..n as f64 - 0.5)
        .map_err(&err)?;
    let names = variants.to_vec();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            // Variant i is drawn around y = n − 1 − i.
            let k = y.round();
            if (y - k).abs() < 0.01 && k >= 0.0 {
                names.get(n - 1 - (k as usize).min(n - 1)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x_desc)
        .draw()
        .map_err(&err)?;
    let band = 0.8 / measures.len().max(1) as f64;
    for (m, (name, values)) in measures.iter().enumerate() {
        let color = COLORS[m % COLORS.len()];
        chart
            .draw_series(values.iter().enumerate().filter_map(|(i, v)| {
                let top = (n - 1 - i) as f64 + 0.4 - band * m as f64;
                v.map(|v| Rectangle::new([(0.0, top - band), (v, top)], color.filled()))
            }))
            .map_err(&err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    finish(path, chart, &root)
}

/// Curves of measures against a parameter's values.
pub fn curves(
    path: &Path,
    title: &str,
    parameter: &str,
    y_desc: &str,
    xs: &[f64],
    series: &[(&str, Vec<Option<f64>>)],
) -> Result<()> {
    let err = plot_error(path);
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo, hi) } else { (0.0, 1.0) };
    let top = series.iter().flat_map(|(_, v)| v.iter().flatten()).copied().fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0f64..top)
        .map_err(&err)?;
    chart.configure_mesh().x_desc(parameter).y_desc(y_desc).draw().map_err(&err)?;
    for (k, (name, ys)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let points: Vec<(f64, f64)> = xs.iter().zip(ys).filter_map(|(x, y)| y.map(|y| (*x, y))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(&err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(&err)?;
    }
    finish(path, chart, &root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels() {
        let dir = tempfile::tempdir().unwrap();
        let bars = dir.path().join("bars.svg");
        let variants = vec!["hybrid".to_owned(), "w/o ER+SSC".to_owned()];
        grouped_bars(
            &bars,
            "Strategies",
            &variants,
            "%",
            &[("answer recall", vec![Some(60.0), Some(40.0)]), ("F1", vec![Some(20.0), None])],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&bars).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("w/o ER+SSC") && svg.contains("answer recall"), "{svg}");
        let lines = dir.path().join("lines.svg");
        curves(&lines, "N_EH", "N_EH", "%", &[1.0, 3.0, 7.0], &[("answer recall", vec![Some(30.0), Some(45.0), None])])
            .unwrap();
        let svg = std::fs::read_to_string(&lines).unwrap();
        assert!(svg.contains("<polyline") && svg.contains("N_EH"), "{svg}");
    }
}
