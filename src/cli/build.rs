//! `tether build`: ONNX + family recipe -> bundle.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tether_detect::recipe::{self, BuildOptions};

/// Model families the build step knows.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Family {
    /// YOLOv8 object detection (Ultralytics export).
    Detect,
}

/// Arguments of `tether build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Model family recipe.
    #[arg(long, value_enum)]
    family: Family,
    /// The ONNX model.
    #[arg(long, value_name = "MODEL.onnx")]
    onnx: PathBuf,
    /// Output bundle path (written atomically).
    #[arg(short, long, value_name = "OUT.bundle")]
    output: PathBuf,
    /// Bundle name (default: the ONNX file stem).
    #[arg(long)]
    name: Option<String>,
    /// Model version recorded in the manifest (default: from the ONNX metadata).
    #[arg(long)]
    model_version: Option<String>,
    /// Network input size for dynamic-size models: `N` (square) or `WxH`, multiples of 32.
    #[arg(long, value_name = "N|WxH", value_parser = parse_size)]
    input_size: Option<(u32, u32)>,
    /// Detection score threshold in [0, 1] (default 0.25).
    #[arg(long)]
    score_threshold: Option<f32>,
    /// NMS IoU threshold in [0, 1] (default 0.7).
    #[arg(long)]
    iou_threshold: Option<f32>,
    /// Maximum detections per image, 1..=300 (default 300).
    #[arg(long)]
    max_detections: Option<u32>,
    /// Reference (golden) output to embed as evidence, e.g. onnxruntime detections as JSON.
    #[arg(long, value_name = "FILE")]
    reference: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let parse = |t: &str| t.trim().parse::<u32>().map_err(|e| format!("`{t}`: {e}"));
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((parse(w)?, parse(h)?)),
        None => {
            let n = parse(s)?;
            Ok((n, n))
        }
    }
}

fn created_unix_s() -> u64 {
    // Reproducible builds: honour SOURCE_DATE_EPOCH (reproducible-builds.org spec).
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
}

/// Run `tether build`.
pub fn run(a: &BuildArgs) -> Result<ExitCode> {
    let onnx = std::fs::read(&a.onnx).with_context(|| format!("reading {}", a.onnx.display()))?;
    let name = match &a.name {
        Some(n) => n.clone(),
        None => a
            .onnx
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model")
            .to_string(),
    };
    let reference = match &a.reference {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let options = BuildOptions {
        name,
        model_version: a.model_version.clone(),
        input_size: a.input_size,
        score_threshold: a.score_threshold,
        iou_threshold: a.iou_threshold,
        max_detections: a.max_detections,
        reference,
        created_unix_s: created_unix_s(),
    };
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("static template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let built = match a.family {
        Family::Detect => {
            recipe::build(&onnx, &options, &mut |msg| bar.set_message(msg.to_string()))
        }
    };
    bar.finish_and_clear();
    let (writer, report) = built.with_context(|| format!("building from {}", a.onnx.display()))?;
    let summary = writer
        .write(&a.output)
        .with_context(|| format!("writing {}", a.output.display()))?;
    let c = &report.config;
    println!(
        "built {} ({} bytes, {} sections)",
        a.output.display(),
        summary.file_len,
        summary.sections
    );
    println!(
        "  family detect: {} classes, input {}x{}{}, {} anchors, score > {}, IoU > {}, max {}",
        c.num_classes,
        c.input_width,
        c.input_height,
        if report.input_is_dynamic {
            " (chosen for a dynamic-size model)"
        } else {
            ""
        },
        c.num_anchors,
        c.score_threshold,
        c.iou_threshold,
        c.max_detections
    );
    if report.labels.is_empty() {
        bail!("no class names were written");
    }
    println!("  classes: {}", report.labels.join(", "));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("320"), Ok((320, 320)));
        assert_eq!(parse_size("640x480"), Ok((640, 480)));
        assert!(parse_size("640x").is_err());
        assert!(parse_size("big").is_err());
    }
}
