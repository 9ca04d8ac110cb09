//! `tether run` and `tether bench`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};
use tether_detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};

/// Arguments of `tether run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Input images (PNG or JPEG).
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Print JSON (one document with every input) instead of text.
    #[arg(long)]
    json: bool,
    /// Write an annotated PNG: a file for one input (unless it names an
    /// existing directory), a directory for several (`STEM.annotated.png` each).
    #[arg(long, value_name = "OUT.png")]
    annotate: Option<PathBuf>,
    /// Override the bundle's score threshold.
    #[arg(long)]
    score_threshold: Option<f32>,
    /// Override the bundle's NMS IoU threshold.
    #[arg(long)]
    iou_threshold: Option<f32>,
    /// Where to run: `auto` (a CUDA GPU when this build has a GPU engine and a
    /// device answers, else the CPU), `cpu`, or `cuda` / `cuda:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    device: Device,
}

/// Arguments of `tether bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Input image.
    input: PathBuf,
    /// Timed runs.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Where to run: `auto`, `cpu`, `cuda` / `cuda:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    device: Device,
}

fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "auto" => Ok(Device::Auto),
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("`{s}`: expected auto, cpu, cuda or cuda:N")),
    }
}

/// A decoded image as tightly packed RGB8.
pub struct Rgb {
    /// Pixels.
    pub image: image::RgbImage,
}

impl Rgb {
    /// Decode a PNG/JPEG file to RGB8 (grey replicated, alpha dropped).
    pub fn load(path: &Path) -> Result<Self> {
        let img = image::ImageReader::open(path)
            .with_context(|| format!("opening {}", path.display()))?
            .with_guessed_format()
            .with_context(|| format!("reading {}", path.display()))?
            .decode()
            .with_context(|| format!("decoding {}", path.display()))?;
        Ok(Self {
            image: img.to_rgb8(),
        })
    }

    /// Borrow as an [`ImageView`].
    pub fn view(&self) -> Result<ImageView<'_>> {
        Ok(ImageView::new(
            self.image.as_raw(),
            self.image.width(),
            self.image.height(),
            PixelFormat::Rgb8,
        )?)
    }
}

fn open_detector(
    bundle: &Path,
    device: Device,
    score: Option<f32>,
    iou: Option<f32>,
) -> Result<Detector> {
    Detector::open(
        bundle,
        &DetectorOptions {
            device,
            verify_eagerly: false,
            score_threshold: score,
            iou_threshold: iou,
            ..DetectorOptions::default()
        },
    )
    .with_context(|| format!("loading {}", bundle.display()))
}

fn annotate_path(arg: &Path, input: &Path, many: bool) -> Result<PathBuf> {
    if !many && !arg.is_dir() {
        return Ok(arg.to_path_buf());
    }
    std::fs::create_dir_all(arg).with_context(|| format!("creating {}", arg.display()))?;
    let stem = input
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("image");
    Ok(arg.join(format!("{stem}.annotated.png")))
}

/// Run `tether run`.
pub fn run(a: &RunArgs) -> Result<ExitCode> {
    let mut det = open_detector(&a.bundle, a.device, a.score_threshold, a.iou_threshold)?;
    let many = a.inputs.len() > 1;
    let mut docs = Vec::new();
    for input in &a.inputs {
        let rgb = Rgb::load(input)?;
        let t0 = Instant::now();
        let dets = det
            .detect(&rgb.view()?)
            .with_context(|| format!("detecting in {}", input.display()))?
            .clone();
        let elapsed = t0.elapsed();
        let labels = det.labels();
        let name = |id: u16| labels.get(usize::from(id)).map_or("?", String::as_str);
        if a.json {
            let list: Vec<Value> = dets
                .iter()
                .map(|d| {
                    json!({
                        "class_id": d.class_id,
                        "class_name": name(d.class_id),
                        "score": d.score,
                        "box": [d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2],
                    })
                })
                .collect();
            docs.push(json!({
                "input": input.display().to_string(),
                "image_size": [rgb.image.height(), rgb.image.width()],
                "latency_ms": elapsed.as_secs_f64() * 1e3,
                "detections": list,
            }));
        } else {
            println!(
                "{}: {} detections ({}x{}, {:.1} ms)",
                input.display(),
                dets.len(),
                rgb.image.width(),
                rgb.image.height(),
                elapsed.as_secs_f64() * 1e3
            );
            for d in &dets {
                println!(
                    "  {:<16} {:.3}  [{:7.1}, {:7.1}, {:7.1}, {:7.1}]",
                    name(d.class_id),
                    d.score,
                    d.bbox.x1,
                    d.bbox.y1,
                    d.bbox.x2,
                    d.bbox.y2
                );
            }
        }
        if let Some(out) = &a.annotate {
            let path = annotate_path(out, input, many)?;
            let img = super::annotate::draw(&rgb.image, &dets, labels);
            super::annotate::save(&img, &path)
                .with_context(|| format!("writing {}", path.display()))?;
            if !a.json {
                println!("  annotated image: {}", path.display());
            }
        }
    }
    if a.json {
        let bundle = det.bundle().identity();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bundle": bundle.name,
                "engine": format!("{:?}", det.engine_kind()),
                "results": docs,
            }))?
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Percentile (nearest rank) of sorted durations, in milliseconds.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// Run `tether bench`.
pub fn bench(a: &BenchArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut det = open_detector(&a.bundle, a.device, None, None)?;
    let rgb = Rgb::load(&a.input)?;
    let view = rgb.view()?;
    for _ in 0..a.warmup {
        det.detect(&view)?;
    }
    let mut total = Vec::with_capacity(a.runs);
    let mut pre = Vec::with_capacity(a.runs);
    let mut infer = Vec::with_capacity(a.runs);
    let mut post = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        let t0 = Instant::now();
        det.detect(&view)?;
        total.push(t0.elapsed());
        let s = det.stage_times();
        pre.push(s.preprocess);
        infer.push(s.inference);
        post.push(s.postprocess);
    }
    let mut rows = Vec::new();
    for (name, v) in [
        ("total", &mut total),
        ("preprocess", &mut pre),
        ("inference", &mut infer),
        ("postprocess", &mut post),
    ] {
        v.sort();
        rows.push((
            name,
            pct(v, 50.0),
            pct(v, 99.0),
            v.iter().sum::<Duration>().as_secs_f64() * 1e3 / v.len() as f64,
        ));
    }
    let engine = format!("{:?}", det.engine_kind());
    if a.json {
        let stages: Vec<Value> = rows
            .iter()
            .map(|(n, p50, p99, mean)| json!({"stage": n, "p50_ms": p50, "p99_ms": p99, "mean_ms": mean}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bundle": a.bundle.display().to_string(),
                "input": a.input.display().to_string(),
                "engine": engine,
                "runs": a.runs,
                "warmup": a.warmup,
                "stages": stages,
            }))?
        );
    } else {
        println!(
            "{} on {} ({engine} engine, {} runs after {} warm-up)",
            a.bundle.display(),
            a.input.display(),
            a.runs,
            a.warmup
        );
        println!(
            "  {:<12} {:>9} {:>9} {:>9}",
            "stage", "p50 ms", "p99 ms", "mean ms"
        );
        for (n, p50, p99, mean) in rows {
            println!("  {n:<12} {p50:>9.2} {p99:>9.2} {mean:>9.2}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(pct(&v, 50.0), 50.0);
        assert_eq!(pct(&v, 99.0), 99.0);
        assert_eq!(pct(&v, 100.0), 100.0);
        assert!(pct(&[], 50.0).is_nan());
    }
}
