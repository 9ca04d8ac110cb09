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
    /// Engines to put in the bundle: `portable` (the ONNX network, run by tract)
    /// or `tensorrt` (also a TensorRT plan for this machine's GPU, built by `trtexec`).
    #[arg(long, value_enum, default_value = "portable")]
    engine: EngineChoice,
    /// The `trtexec` to run (default: $TETHER_TRTEXEC, PATH, the JetPack/TensorRT locations).
    #[arg(long, value_name = "PATH")]
    trtexec: Option<PathBuf>,
    /// Build FP32 kernels only (default: FP16 where the TensorRT version allows `--fp16`).
    #[arg(long)]
    no_fp16: bool,
    /// Builder workspace limit in MiB.
    #[arg(long, default_value_t = 1024)]
    workspace_mib: u64,
    /// Build a version-compatible plan (runs on later TensorRT versions, needs host code allowed).
    #[arg(long)]
    version_compatible: bool,
    /// Hardware-compatibility level of the plan.
    #[arg(long, value_enum, default_value = "none")]
    hardware_compat: HwCompat,
}

/// Which engines `tether build` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// The ONNX network only (tract on the CPU or the GPU).
    Portable,
    /// The ONNX network plus a TensorRT plan for this machine.
    Tensorrt,
}

/// TensorRT hardware-compatibility levels (`--hardwareCompatibilityLevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HwCompat {
    /// Only the GPU model the plan was built on.
    None,
    /// Ampere (sm_80) and later.
    #[value(name = "ampere+")]
    AmperePlus,
    /// GPUs of the same compute capability (TensorRT 10.9+).
    #[value(name = "same-cc")]
    SameCc,
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
    let (mut writer, report) =
        built.with_context(|| format!("building from {}", a.onnx.display()))?;
    if a.engine == EngineChoice::Tensorrt {
        add_tensorrt_plan(a, &mut writer, &report)?;
    }
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

/// Build a TensorRT plan with `trtexec` and add it with its target record.
fn add_tensorrt_plan(
    a: &BuildArgs,
    writer: &mut tether_bundle::BundleWriter,
    report: &recipe::BuildReport,
) -> Result<()> {
    use tether_bundle::{CpuArch, EngineKind, IoMode, Layout, SectionKind, TargetDesc, TensorDesc};
    use tether_runtime::tensorrt::{
        HardwareCompatibility, ProfileShape, TrtexecOptions, build_plan_with_trtexec,
    };
    let c = &report.config;
    let (Some(input), Some(output)) = (report.onnx.inputs.first(), report.onnx.outputs.first())
    else {
        bail!("the network has no input or output");
    };
    let in_shape = vec![1, 3, i64::from(c.input_height), i64::from(c.input_width)];
    let out_shape = vec![1, 4 + i64::from(c.num_classes), i64::from(c.num_anchors)];
    let plan_path = a.output.with_extension("plan.tmp");
    let mut opts = TrtexecOptions::new(&a.onnx, &plan_path);
    opts.trtexec = a.trtexec.clone();
    opts.fp16 = !a.no_fp16;
    opts.workspace_mib = a.workspace_mib;
    opts.version_compatible = a.version_compatible;
    opts.hardware_compatibility = match a.hardware_compat {
        HwCompat::None => HardwareCompatibility::None,
        HwCompat::AmperePlus => HardwareCompatibility::AmperePlus,
        HwCompat::SameCc => HardwareCompatibility::SameComputeCapability,
    };
    if report.input_is_dynamic {
        opts.profile.push(ProfileShape {
            name: input.name.clone(),
            min: in_shape.clone(),
            opt: in_shape.clone(),
            max: in_shape.clone(),
        });
    }
    eprintln!("building a TensorRT plan with trtexec (this can take minutes)...");
    let built = build_plan_with_trtexec(&opts).context("building the TensorRT plan")?;
    let plan = std::fs::read(&built.plan_path)
        .with_context(|| format!("reading {}", built.plan_path.display()));
    let _ = std::fs::remove_file(&built.plan_path);
    let plan = plan?;
    let t = built.target;
    let v = t.tensorrt_version;
    let sm =
        t.sm.map_or("any".to_string(), |(ma, mi)| format!("sm{ma}{mi}"));
    let name = format!("{sm}-trt{}.{}", v / 10000, v / 100 % 100);
    let arch = if cfg!(target_arch = "aarch64") {
        CpuArch::Aarch64
    } else {
        CpuArch::X86_64
    };
    let target = writer.add_target(TargetDesc {
        name: name.clone(),
        arch,
        sm: t.sm,
        engine: EngineKind::TensorRt,
        tensorrt_version: v,
        hardware_compat: t.hardware_compat,
        flags: t.flags,
    })?;
    let section = writer.add_section(
        SectionKind::TensorRtPlan,
        &format!("detect/plan.{name}"),
        Some(target),
        plan,
    )?;
    for (t, mode, dims) in [
        (input, IoMode::Input, in_shape),
        (output, IoMode::Output, out_shape),
    ] {
        writer.add_tensor(
            section,
            TensorDesc {
                name: t.name.clone(),
                mode,
                dtype: t.dtype,
                layout: if mode == IoMode::Input {
                    Layout::Nchw
                } else {
                    Layout::Unspecified
                },
                dims,
            },
        )?;
    }
    println!(
        "  TensorRT plan `{name}` ({} bytes) from {}{}",
        built.plan_bytes,
        built.device_name.as_deref().unwrap_or("an unnamed GPU"),
        if built.fp16_applied { ", fp16" } else { "" }
    );
    Ok(())
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
