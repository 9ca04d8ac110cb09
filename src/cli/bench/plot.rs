//! The latency plot: per stage, a histogram (the body, up to p99.9) and the CDF (up to the
//! maximum), every variant overlaid.

mod mono;

use std::path::Path;

use super::stats::Stage;
use super::timing::Variant;
use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 1400;
const ROW: u32 = 240;
const TITLE: u32 = 44;
const BINS: usize = 60;
const COLOURS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14)];

/// Render the plot as SVG or PNG bytes.
pub(super) fn render(title: &str, variants: &[Variant], format: PlotFormat) -> Result<Vec<u8>> {
    let rows = rows(variants);
    let height = TITLE + ROW * rows.len().max(1) as u32;
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
                draw(&root, title, &rows).map_err(|e| anyhow!("{e}"))?;
                root.present().map_err(|e| anyhow!("{e}"))?;
            }
            Ok(svg.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![255u8; (WIDTH * height * 3) as usize];
            {
                let root = mono::MonoText(BitMapBackend::with_buffer(&mut rgb, (WIDTH, height)))
                    .into_drawing_area();
                draw(&root, title, &rows).map_err(|e| anyhow!("{e}"))?;
                root.present().map_err(|e| anyhow!("{e}"))?;
            }
            let img = image::RgbImage::from_raw(WIDTH, height, rgb)
                .ok_or_else(|| anyhow!("the bitmap has the wrong size"))?;
            let mut png = Vec::new();
            img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
            Ok(png)
        }
    }
}

/// One row per stage name (in first-seen order): `(name, [(variant, stage)])`.
type Row<'a> = (String, Vec<(&'static str, &'a Stage)>);

fn rows(variants: &[Variant]) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    for v in variants {
        for (name, clock, s) in v.rows() {
            // Paired differences (`beyond-floor`) are not latencies: not drawn.
            if s.hist.is_empty() || s.offset_ns != 0 {
                continue;
            }
            let label = format!("{name} ({clock})");
            match rows.iter_mut().find(|(n, _)| *n == label) {
                Some((_, list)) => list.push((v.name, s)),
                None => rows.push((label, vec![(v.name, s)])),
            }
        }
    }
    rows
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    rows: &[Row<'_>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(TITLE);
    head.draw(&Text::new(
        title.to_string(),
        (12, 12),
        ("sans-serif", 20).into_font().color(&BLACK),
    ))?;
    if rows.is_empty() {
        return Ok(());
    }
    let cells = body.split_evenly((rows.len(), 2));
    for (i, (name, list)) in rows.iter().enumerate() {
        histogram(&cells[2 * i], name, list)?;
        cdf(&cells[2 * i + 1], name, list)?;
    }
    Ok(())
}

fn range(list: &[(&'static str, &Stage)], hi_q: Option<f64>) -> (f64, f64) {
    let lo = list.iter().map(|(_, s)| s.min()).fold(f64::MAX, f64::min);
    let hi = list
        .iter()
        .map(|(_, s)| match hi_q {
            Some(q) => s.ms(q),
            None => s.max(),
        })
        .fold(0.0, f64::max);
    let span = (hi - lo).max(hi.abs() * 1e-3).max(1e-6);
    ((lo - span * 0.02).max(0.0), hi + span * 0.02)
}

fn histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    list: &[(&'static str, &Stage)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (lo, hi) = range(list, Some(0.999));
    let width = (hi - lo) / BINS as f64;
    let mut all: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut top: f64 = 0.0;
    for (variant, s) in list {
        let mut bins = vec![0.0f64; BINS];
        let total = s.hist.len().max(1) as f64;
        for v in s.hist.iter_recorded() {
            let ms = v.value_iterated_to() as f64 / 1e6;
            let b = (((ms - lo) / width).floor().max(0.0) as usize).min(BINS - 1);
            bins[b] += v.count_at_value() as f64 * 100.0 / total;
        }
        top = bins.iter().copied().fold(top, f64::max);
        all.push((variant, bins));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{name}: histogram (frames above p99.9 in the last bin)"),
            ("sans-serif", 15),
        )
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(52)
        .build_cartesian_2d(lo..hi, 0.0..(top * 1.08).max(1e-3))?;
    chart
        .configure_mesh()
        .x_desc("latency, ms")
        .y_desc("% of frames")
        .x_labels(8)
        .y_labels(5)
        .draw()?;
    for (i, (variant, bins)) in all.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(
                bins.iter()
                    .enumerate()
                    .filter(|(_, h)| **h > 0.0)
                    .map(|(b, h)| {
                        let x0 = lo + width * b as f64;
                        Rectangle::new([(x0, 0.0), (x0 + width, *h)], c.mix(0.55).filled())
                    }),
            )?
            .label(*variant)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if all.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

fn cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    list: &[(&'static str, &Stage)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (lo, hi) = range(list, None);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{name}: CDF (to the maximum)"), ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(52)
        .build_cartesian_2d(lo..hi, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("latency, ms")
        .y_desc("fraction of frames")
        .x_labels(8)
        .y_labels(6)
        .draw()?;
    for (i, (variant, s)) in list.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let total = s.hist.len().max(1) as f64;
        let mut seen = 0u64;
        let mut points = vec![(s.min(), 0.0)];
        for v in s.hist.iter_recorded() {
            seen += v.count_at_value();
            points.push((v.value_iterated_to() as f64 / 1e6, seen as f64 / total));
        }
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(format!(
                "{variant}: p50 {}, p99 {}, p99.9 {} ms",
                short(s.ms(0.5)),
                short(s.ms(0.99)),
                short(s.ms(0.999))
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// `v` with four significant digits (`56.33`, `0.04512`).
fn short(v: f64) -> String {
    let digits = if v > 0.0 {
        (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize
    } else {
        1
    };
    format!("{v:.digits$}")
}

/// The file format of `--plot`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PlotFormat {
    Svg,
    Png,
}

/// The format `--plot`'s file name asks for: `.svg` or `.png` (any case).
pub(super) fn plot_format(path: &Path) -> Option<PlotFormat> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Some(PlotFormat::Svg),
        Some("png") => Some(PlotFormat::Png),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn plot_formats_follow_the_extension() {
        assert!(plot_format(Path::new("a.svg")) == Some(PlotFormat::Svg));
        assert!(plot_format(Path::new("a.PNG")) == Some(PlotFormat::Png));
        assert!(plot_format(Path::new("a.jpg")).is_none());
        assert!(plot_format(Path::new("a")).is_none());
    }
}
