//! `tether build`: a model and its family recipe -> bundle (optionally with TensorRT plans).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{ArgMatches, Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tether_build::trtexec::{ProfileShape, TrtexecOptions, build_plan_with_trtexec};
use tether_family::family::{BuildCommon, Family, PlanSource, find, names};
use tether_runtime::tensorrt::HardwareCompatibility;

use crate::outln;
use tether::families::REGISTRY;

/// Arguments of `tether build` shared by every family (each family adds its own).
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Model family recipe (`tether build --family NAME --help` lists its arguments).
    #[arg(long, value_name = "NAME", value_parser = family_names())]
    family: String,
    /// Output bundle path (written atomically; only a regular file is ever replaced).
    #[arg(short, long, value_name = "OUT.bundle")]
    output: PathBuf,
    /// Bundle name, 1 to 255 bytes (default: the model file's stem).
    #[arg(long, value_parser = bundle_string(false))]
    name: Option<String>,
    /// Model version recorded in the manifest, at most 255 bytes (default: from the model's
    /// metadata).
    #[arg(long, value_parser = bundle_string(true))]
    model_version: Option<String>,
    /// Engines to put in the bundle: `portable` (the ONNX networks, run by tether's engines)
    /// or `tensorrt` (also a TensorRT plan per network for this machine's GPU, by `trtexec`).
    #[arg(long, value_enum, default_value = "portable")]
    engine: EngineChoice,
    /// The `trtexec` to run (default: $TETHER_TRTEXEC, PATH, the JetPack/TensorRT locations).
    #[arg(long, value_name = "PATH")]
    trtexec: Option<PathBuf>,
    /// Build FP32 kernels only (default: FP16 where the TensorRT version allows `--fp16`).
    #[arg(long)]
    no_fp16: bool,
    /// Builder workspace limit in MiB.
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = tether_family::args::whole(1, 1 << 20))]
    workspace_mib: u64,
    /// Build version-compatible plans (run on later TensorRT versions; need host code allowed).
    #[arg(long)]
    version_compatible: bool,
    /// Hardware-compatibility level of the plans.
    #[arg(long, value_enum, default_value = "none")]
    hardware_compat: HwCompat,
}

/// A name or version the manifest stores: at most `MAX_NAME_LEN` (255) bytes of UTF-8, and
/// not empty unless `may_be_empty` (the bundle writer's rules, checked before any work so that
/// a bad value is a usage error, not a failure after the model was read): [`tether_bundle::check_name`].
fn bundle_string(may_be_empty: bool) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |s: &str| {
        let max = tether_bundle::MAX_NAME_LEN;
        // The bundle writer's own rule, told in the command line's words.
        match tether_bundle::check_name("bundle name", s, !may_be_empty) {
            Ok(()) => Ok(s.to_owned()),
            Err(tether_bundle::BundleError::EmptyName { .. }) => {
                Err(format!("empty: a bundle name has 1 to {max} bytes"))
            }
            Err(tether_bundle::BundleError::NameTooLong { len, .. }) => {
                Err(format!("{len} bytes, more than the {max} a bundle stores"))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The families `--family` accepts (every family of the registry): an unknown name is
/// refused naming the known ones, before any family argument is parsed, and `--help` lists
/// them.
fn family_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        REGISTRY
            .iter()
            .map(|f| clap::builder::PossibleValue::new(f.name()).help(f.about())),
    )
}

/// Which engines `tether build` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// The ONNX networks only.
    Portable,
    /// The ONNX networks plus TensorRT plans for this machine.
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

/// `tether build`'s options of the TensorRT plans beside `--engine` (flag, clap id): refused
/// without `--engine tensorrt`, left out of the help of families without plans
/// (`family_args::augment`).
pub const TRT_PLAN_OPTIONS: [(&str, &str); 5] = [
    ("--trtexec", "trtexec"),
    ("--no-fp16", "no_fp16"),
    ("--workspace-mib", "workspace_mib"),
    ("--version-compatible", "version_compatible"),
    ("--hardware-compat", "hardware_compat"),
];

/// Run `tether build`.
pub fn run(a: &BuildArgs, matches: &ArgMatches) -> Result<ExitCode> {
    let Some(family) = find(REGISTRY, &a.family) else {
        crate::usage!("unknown family `{}` (known: {})", a.family, names(REGISTRY));
    };
    // TensorRT's options are refused where no plan will be built, not ignored: without
    // `--engine tensorrt`, or for a family with no networks for it (llm).
    let given = |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    let trt_options: Vec<&str> = TRT_PLAN_OPTIONS
        .into_iter()
        .filter_map(|(name, id)| given(id).then_some(name))
        .collect();
    if a.engine == EngineChoice::Tensorrt
        && let Some(why) = family.no_tensorrt_plans()
    {
        crate::usage!(
            "--engine tensorrt: the {} family's bundles carry no TensorRT plans ({why})",
            family.name()
        );
    }
    if !trt_options.is_empty()
        && let Some(why) = family.no_tensorrt_plans()
    {
        crate::usage!(
            "{}: options of TensorRT plans, which the {} family's bundles do not carry ({why})",
            trt_options.join(", "),
            family.name()
        );
    }
    if a.engine != EngineChoice::Tensorrt && !trt_options.is_empty() {
        crate::usage!(
            "{}: options of the TensorRT plans, which only --engine tensorrt builds",
            trt_options.join(", ")
        );
    }
    // Refuse an output that cannot be written (a device, a FIFO, a missing folder, a folder
    // that takes no new file) before any work.
    tether_bundle::files::check_writable(&a.output)?;
    // A GGUF given as an ONNX model (a text generator for a vision or audio family) is named
    // as such, not left to the ONNX parser's wire-type error.
    if let Ok(Some(onnx)) = matches.try_get_raw("onnx") {
        for v in onnx {
            let p = std::path::Path::new(v);
            if crate::cli::run::model_format(p) == Some("GGUF") {
                crate::usage!(
                    "--onnx {}: the file is a GGUF model, not ONNX; a GGUF is built with `tether build --family llm --gguf {} -o model.bundle`",
                    p.display(),
                    p.display()
                );
            }
        }
    }
    // Nor one that is an input of the build (`--onnx m.onnx -o m.onnx`): any path option,
    // the family's own included (declared with a `PathBuf` parser), that names the output's
    // file. Other values (`--name`, `--family`) are not paths, whatever files share their
    // spelling.
    for id in matches.ids().filter(|id| id.as_str() != "output") {
        let Ok(Some(values)) = matches.try_get_many::<PathBuf>(id.as_str()) else {
            continue;
        };
        for v in values {
            crate::cli::refuse_output_over_input(
                "-o",
                &a.output,
                &format!("--{}", id.as_str().replace('_', "-")),
                v,
            )?;
        }
    }
    let common = BuildCommon {
        name: a.name.clone(),
        model_version: a.model_version.clone(),
        created_unix_s: created_unix_s(),
    };
    let bar = spinner();
    let built = family.build(matches, &common, &mut |msg| {
        bar.set_message(msg.to_string())
    });
    bar.finish_and_clear();
    let mut built = built?;
    let mut plan_lines = Vec::new();
    if a.engine == EngineChoice::Tensorrt {
        for net in &built.networks {
            plan_lines.push(add_tensorrt_plan(a, family, &mut built.writer, net)?);
        }
    }
    let summary = built
        .writer
        .write(&a.output)
        .with_context(|| format!("writing {}", a.output.display()))?;
    outln!(
        "built {} ({} bytes, {} sections)",
        a.output.display(),
        summary.file_len,
        summary.sections
    )?;
    for l in built.summary.iter().chain(&plan_lines) {
        outln!("  {}", crate::cli::escape(l))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn spinner() -> ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("static template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Build a TensorRT plan for one network with `trtexec` and add it with its target record.
fn add_tensorrt_plan(
    a: &BuildArgs,
    family: &dyn Family,
    writer: &mut tether_bundle::BundleWriter,
    net: &PlanSource,
) -> Result<String> {
    let plan_path = a.output.with_extension(format!("{}.plan.tmp", net.network));
    let mut opts = TrtexecOptions::new(&net.onnx, &plan_path);
    opts.trtexec = a.trtexec.clone();
    opts.fp16 = !a.no_fp16;
    opts.workspace_mib = a.workspace_mib;
    opts.version_compatible = a.version_compatible;
    opts.hardware_compatibility = match a.hardware_compat {
        HwCompat::None => HardwareCompatibility::None,
        HwCompat::AmperePlus => HardwareCompatibility::AmperePlus,
        HwCompat::SameCc => HardwareCompatibility::SameComputeCapability,
    };
    for t in net
        .tensors
        .iter()
        .filter(|t| net.dynamic_inputs.contains(&t.name))
    {
        opts.profile.push(ProfileShape {
            name: t.name.clone(),
            min: t.dims.clone(),
            opt: t.dims.clone(),
            max: t.dims.clone(),
        });
    }
    eprintln!(
        "building a TensorRT plan for `{}` with trtexec (this can take minutes)...",
        net.network
    );
    let built = build_plan_with_trtexec(&opts).context("building the TensorRT plan")?;
    let plan = std::fs::read(&built.plan_path)
        .with_context(|| format!("reading {}", built.plan_path.display()));
    let _ = std::fs::remove_file(&built.plan_path);
    let plan = plan?;
    let bytes = plan.len();
    let section = tether_build::plan::add_plan(
        writer,
        family.name(),
        &net.network,
        &built,
        plan,
        &net.tensors,
    )?;
    Ok(format!(
        "TensorRT plan `{section}` ({bytes} bytes) from {}{}",
        built.device_name.as_deref().unwrap_or("an unnamed GPU"),
        if built.fp16_applied { ", fp16" } else { "" }
    ))
}
