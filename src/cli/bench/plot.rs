//! The latency plot, drawn so that stages and variants can be compared at a glance:
//!
//! - a header naming the bundle, the input, the mode, and the setup the numbers belong to
//!   (device, engine, threads, run count);
//! - every stage's CDF on one shared logarithmic latency axis (to the maximum), every
//!   variant overlaid (graph solid, eager dashed), with a legend column beside it giving
//!   each line's p50 / p99 / p99.9 / max;
//! - the total's histogram (the body, up to p99.9; frames above in the last bin);
//! - each stage's p50-p99 range as a bar with its p99.9 and maximum marked, on the same
//!   logarithmic axis as the CDFs.
//!
//! Text never leaves its box: legend lines are cut to the column's width.

mod mono;

use std::path::Path;

use super::stats::Stage;
use super::timing::Variant;
use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::ShapeStyle;

const WIDTH: u32 = 1400;
const HEADER: u32 = 64;
const CDF_ROW: u32 = 440;
const LOWER_ROW: u32 = 330;
/// Width of the legend column right of the CDFs.
const LEGEND: u32 = 470;
const BINS: usize = 60;
/// Matplotlib's `tab10`, the colours plots in this field are read with.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// What the header says: `title` (bundle, input, mode) and `setup` (device, engine,
/// threads, runs).
pub(super) struct Header<'a> {
    pub(super) title: &'a str,
    pub(super) setup: &'a str,
}

/// Render the plot as SVG or PNG bytes.
pub(super) fn render(
    header: &Header<'_>,
    variants: &[Variant],
    format: PlotFormat,
) -> Result<Vec<u8>> {
    let lines = lines(variants);
    let height = HEADER + CDF_ROW + LOWER_ROW;
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
                draw(&root, header, &lines).map_err(|e| anyhow!("{e}"))?;
                root.present().map_err(|e| anyhow!("{e}"))?;
            }
            Ok(svg.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![255u8; (WIDTH * height * 3) as usize];
            {
                let root = mono::MonoText(BitMapBackend::with_buffer(&mut rgb, (WIDTH, height)))
                    .into_drawing_area();
                draw(&root, header, &lines).map_err(|e| anyhow!("{e}"))?;
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

/// One drawn line: the stage (`name (clock)`), its colour index (one per stage), the
/// variant, whether it is the variant drawn dashed, and its measurements.
struct Line<'a> {
    stage: String,
    colour: usize,
    variant: &'static str,
    dashed: bool,
    s: &'a Stage,
}

fn lines(variants: &[Variant]) -> Vec<Line<'_>> {
    let mut stages: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (vi, v) in variants.iter().enumerate() {
        let units = v
            .units
            .as_ref()
            .map(|u| (format!("per {}", u.name), "host", &u.time));
        for (name, clock, s) in v.rows().into_iter().chain(units) {
            // Paired differences (`beyond-floor`) are not latencies: not drawn.
            if s.hist.is_empty() || s.offset_ns != 0 {
                continue;
            }
            let stage = format!("{name} ({clock})");
            let colour = match stages.iter().position(|n| *n == stage) {
                Some(i) => i,
                None => {
                    stages.push(stage.clone());
                    stages.len() - 1
                }
            };
            out.push(Line {
                stage,
                colour,
                variant: v.name,
                dashed: vi > 0,
                s,
            });
        }
    }
    out
}

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

fn style(l: &Line<'_>) -> ShapeStyle {
    colour(l.colour).stroke_width(if l.dashed { 1 } else { 2 })
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    header: &Header<'_>,
    lines: &[Line<'_>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(HEADER);
    head.draw(&Text::new(
        header.title.to_string(),
        (12, 10),
        ("sans-serif", 20).into_font().color(&BLACK),
    ))?;
    head.draw(&Text::new(
        fit(header.setup, WIDTH - 24, 14.0),
        (12, 38),
        ("sans-serif", 14).into_font().color(&BLACK.mix(0.75)),
    ))?;
    if lines.is_empty() {
        return Ok(());
    }
    let (upper, lower) = body.split_vertically(CDF_ROW);
    let (cdf_area, legend_area) = upper.split_horizontally(WIDTH - LEGEND);
    let (lo, hi) = log_range(lines);
    cdf(&cdf_area, lines, lo, hi)?;
    legend(&legend_area, lines)?;
    let (hist_area, bars_area) = lower.split_horizontally(WIDTH / 2 - 60);
    let totals: Vec<&Line<'_>> = lines
        .iter()
        .filter(|l| l.stage.starts_with("total "))
        .collect();
    histogram(&hist_area, &totals)?;
    bars(&bars_area, lines, lo, hi)?;
    Ok(())
}

/// A shared logarithmic latency range covering every line from its minimum to its maximum.
fn log_range(lines: &[Line<'_>]) -> (f64, f64) {
    let lo = lines
        .iter()
        .map(|l| l.s.min())
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    let hi = lines.iter().map(|l| l.s.max()).fold(0.0, f64::max);
    let lo = if lo == f64::MAX { 1e-4 } else { lo.max(1e-6) };
    let hi = hi.max(lo * 1.5);
    (lo / 1.3, hi * 1.3)
}

/// Labels of a logarithmic axis from `lo` to `hi`: 1, 2 and 5 of each decade, or every
/// integer multiple when that leaves fewer than four inside (a range under a decade).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let within = |steps: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    };
    let coarse = within(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 4 {
        coarse
    } else {
        within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

/// `text` cut (with an ellipsis) to what fits `width` pixels at a font of `size` (the
/// width plotters' layout assumes: 0.7 em a character, an em being `size / 1.24^2`).
fn fit(text: &str, width: u32, size: f64) -> String {
    let per = (size / (1.24 * 1.24) * 0.7).max(1.0);
    let max = (f64::from(width) / per) as usize;
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

fn cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[Line<'_>],
    lo: f64,
    hi: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(
            "every stage on one axis: CDF of the latency (log scale, to the maximum)",
            ("sans-serif", 15),
        )
        .margin(10)
        .margin_right(34)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            0.0..1.0,
        )?;
    chart
        .configure_mesh()
        .x_desc("latency, ms (log scale)")
        .y_desc("fraction at or below")
        .x_label_formatter(&|v| tick(*v))
        .y_labels(6)
        .draw()?;
    for l in lines {
        let total = l.s.hist.len().max(1) as f64;
        let mut seen = 0u64;
        let mut points = vec![(l.s.min().max(lo), 0.0)];
        for v in l.s.hist.iter_recorded() {
            seen += v.count_at_value();
            let ms = (v.value_iterated_to() as f64 / 1e6).max(lo);
            points.push((ms, seen as f64 / total));
        }
        if l.dashed {
            chart.draw_series(DashedLineSeries::new(points, 6, 4, style(l)))?;
        } else {
            chart.draw_series(LineSeries::new(points, style(l)))?;
        }
    }
    Ok(())
}

/// The legend column: per line a swatch, the stage and variant, then its percentiles.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[Line<'_>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let size = 13.0;
    let text_width = LEGEND - 44;
    let font = ("sans-serif", size).into_font().color(&BLACK);
    let dim = ("sans-serif", size).into_font().color(&BLACK.mix(0.7));
    let row = 34;
    let several = lines.iter().any(|l| l.dashed);
    let mut y = 40;
    for l in lines {
        if y + row > CDF_ROW as i32 - 8 {
            area.draw(&Text::new(
                format!("... {} more", lines.len()),
                (10, y),
                font.clone(),
            ))?;
            break;
        }
        let mid = y + 7;
        if l.dashed {
            area.draw(&PathElement::new(vec![(8, mid), (16, mid)], style(l)))?;
            area.draw(&PathElement::new(vec![(22, mid), (30, mid)], style(l)))?;
        } else {
            area.draw(&PathElement::new(vec![(8, mid), (30, mid)], style(l)))?;
        }
        let name = if several {
            format!("{} [{}]", l.stage, l.variant)
        } else {
            l.stage.clone()
        };
        area.draw(&Text::new(
            fit(&name, text_width, size),
            (38, y),
            font.clone(),
        ))?;
        let stats = format!(
            "p50 {}  p99 {}  p99.9 {}  max {} ms",
            short(l.s.ms(0.5)),
            short(l.s.ms(0.99)),
            short(l.s.ms(0.999)),
            short(l.s.max())
        );
        area.draw(&Text::new(
            fit(&stats, text_width, size),
            (38, y + 15),
            dim.clone(),
        ))?;
        y += row;
    }
    Ok(())
}

fn histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    totals: &[&Line<'_>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if totals.is_empty() {
        return Ok(());
    }
    let lo = totals.iter().map(|l| l.s.min()).fold(f64::MAX, f64::min);
    let hi = totals.iter().map(|l| l.s.ms(0.999)).fold(0.0, f64::max);
    let span = (hi - lo).max(hi.abs() * 1e-3).max(1e-6);
    let (lo, hi) = ((lo - span * 0.02).max(0.0), hi + span * 0.02);
    let width = (hi - lo) / BINS as f64;
    let mut all = Vec::new();
    let mut top: f64 = 0.0;
    for l in totals {
        let mut bins = vec![0.0f64; BINS];
        let total = l.s.hist.len().max(1) as f64;
        for v in l.s.hist.iter_recorded() {
            let ms = v.value_iterated_to() as f64 / 1e6;
            let b = (((ms - lo) / width).floor().max(0.0) as usize).min(BINS - 1);
            bins[b] += v.count_at_value() as f64 * 100.0 / total;
        }
        top = bins.iter().copied().fold(top, f64::max);
        all.push((*l, bins));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(
            "total per run: histogram (runs above p99.9 in the last bin)",
            ("sans-serif", 15),
        )
        .margin(10)
        .margin_right(34)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(lo..hi, 0.0..(top * 1.08).max(1e-3))?;
    chart
        .configure_mesh()
        .x_desc("latency, ms")
        .y_desc("% of runs")
        .x_labels(7)
        .x_label_formatter(&|v| tick(*v))
        .y_labels(5)
        .draw()?;
    for (i, (l, bins)) in all.iter().enumerate() {
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
            .label(l.variant)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if all.len() > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// Per line, the p50-p99 range as a bar, p99.9 as a tick and the maximum as a dot, on the
/// CDFs' logarithmic axis.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[Line<'_>],
    lo: f64,
    hi: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let n = lines.len();
    let several = lines.iter().any(|l| l.dashed);
    let labels: Vec<String> = lines
        .iter()
        .map(|l| {
            let s = l
                .stage
                .trim_end_matches(" (host)")
                .trim_end_matches(" (gpu)");
            if several {
                fit(&format!("{s} [{}]", l.variant), 130, 12.0)
            } else {
                fit(s, 130, 12.0)
            }
        })
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "p50 to p99 (bar), p99.9 (tick), maximum (dot); same axis as the CDFs",
            ("sans-serif", 15),
        )
        .margin(10)
        .margin_right(34)
        .x_label_area_size(40)
        .y_label_area_size(140)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            -0.5..(n as f64 - 0.5),
        )?;
    chart
        .configure_mesh()
        .x_desc("latency, ms (log scale)")
        .x_label_formatter(&|v| tick(*v))
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                // Top to bottom in pipeline order.
                labels[labels.len() - 1 - i as usize].clone()
            } else {
                String::new()
            }
        })
        .disable_y_mesh()
        .draw()?;
    for (i, l) in lines.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let c = colour(l.colour);
        let (p50, p99) = (l.s.ms(0.5).max(lo), l.s.ms(0.99).max(lo));
        let fill = if l.dashed {
            c.mix(0.35).filled()
        } else {
            c.mix(0.8).filled()
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(p50, y - 0.3), (p99.max(p50 * 1.002), y + 0.3)],
            fill,
        )))?;
        let p999 = l.s.ms(0.999).max(lo);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(p999, y - 0.35), (p999, y + 0.35)],
            c.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(Circle::new(
            (l.s.max().max(lo), y),
            3,
            c.filled(),
        )))?;
    }
    Ok(())
}

/// An axis label: at most three significant digits, no trailing zeros (`0.001`, `2.5`,
/// `100`).
fn tick(v: f64) -> String {
    let digits = if v > 0.0 {
        (2 - v.abs().log10().floor() as i32).clamp(0, 8) as usize
    } else {
        1
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
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

    #[test]
    fn axis_labels_are_short_and_text_fits() {
        assert_eq!(tick(0.001), "0.001");
        assert_eq!(tick(100.0), "100");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.0123456), "0.0123");
        let long = "x".repeat(500);
        let cut = fit(&long, 100, 13.0);
        assert!(cut.chars().count() < 30 && cut.ends_with('…'), "{cut}");
        assert_eq!(fit("short", 100, 13.0), "short");
        assert_eq!(log_ticks(0.0009, 150.0).len(), 16); // 0.001, 0.002, 0.005, ... 50, 100
        assert_eq!(log_ticks(4.2, 7.7), vec![5.0, 6.0, 7.0]);
    }
}
