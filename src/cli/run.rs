//! `tether run` and `tether bench`: any family's pipeline on input files.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{ArgMatches, Args};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tether_bundle::{Bundle, Verify};
use tether_family::family::{Family, InputSource, RunOptions, Runner, find, names};

use crate::cli::{OutputError, escape};
use crate::outln;
use tether::families::REGISTRY;

/// Version of the JSON documents `run` and `bench` print (bumped on an incompatible change).
pub const JSON_SCHEMA_VERSION: u32 = 2;

/// Arguments of `tether run` shared by every family (each family adds its own).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Inputs (images for detection; the family says).
    #[arg(value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Literal text inputs, for families that take text.
    #[arg(long, value_name = "TEXT")]
    text: Vec<String>,
    /// Print JSON (one document with every input) instead of text.
    #[arg(long)]
    json: bool,
    /// Write an annotated image per input: a file for one input; a folder for several, or
    /// when the argument ends in `/` (created if missing; `NAME.annotated.png` each).
    #[arg(long, value_name = "OUT.png|DIR/")]
    annotate: Option<PathBuf>,
    /// Where to run: `auto` (a CUDA GPU when one answers, else the CPU), `cpu`, `cuda`, `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
}

/// Arguments of `tether bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The bundle.
    bundle: PathBuf,
    /// The input (decoded once).
    input: PathBuf,
    /// Timed runs (1 to 1,000,000,000; percentiles use a fixed-memory histogram).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    runs: u64,
    /// Stop after this many seconds instead (whichever comes first with --runs).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    duration: Option<u64>,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    warmup: u64,
    /// Open loop at a fixed rate (frames per second): idle between frames, where latency
    /// after idle shows; counts frames that missed the period. Default: back to back.
    #[arg(long, value_name = "HZ", value_parser = parse_rate)]
    rate: Option<f64>,
    /// Print JSON to stdout, or write it to FILE (atomically).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Where to run: `auto`, `cpu`, `cuda`, `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if v.is_finite() && v > 0.0 && v <= 100_000.0 {
        Ok(v)
    } else {
        Err(format!("`{s}`: a rate must be in (0, 100000] Hz"))
    }
}

/// An opened bundle, its family and the family's runner.
type Opened = (Arc<Bundle>, &'static dyn Family, Box<dyn Runner>);

/// Open a bundle and its family's runner.
fn open_runner(
    path: &Path,
    matches: &ArgMatches,
    device: &str,
    step_timing: bool,
) -> Result<Opened> {
    let _: tether_runtime::Device = match device.parse() {
        Ok(d) => d,
        Err(e) => crate::usage!("--device {e}"),
    };
    let bundle = Arc::new(
        Bundle::open(path, Verify::Lazy).with_context(|| format!("loading {}", path.display()))?,
    );
    let fam = bundle.identity().family.to_string();
    let Some(family) = find(REGISTRY, &fam) else {
        anyhow::bail!(
            "{}: family `{}` is not one this tether knows ({})",
            path.display(),
            escape(&fam),
            names(REGISTRY)
        );
    };
    let runner = family
        .open(
            Arc::clone(&bundle),
            matches,
            &RunOptions {
                device: device.to_string(),
                verify_eagerly: false,
                step_timing,
            },
        )
        .with_context(|| format!("loading {}", path.display()))?;
    Ok((bundle, family, runner))
}

/// Write `bytes` to `path` atomically (a temporary file in the same folder, renamed over
/// the destination; only ever a regular file is replaced).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    tether_bundle::files::write_atomic(path, bytes).map_err(|e| {
        let source = match e {
            tether_bundle::files::FileError::Io { source, .. } => source,
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        };
        OutputError {
            path: path.to_path_buf(),
            source,
        }
        .into()
    })
}

/// Where the annotated image of `input` goes (see `--annotate`).
fn annotate_path(arg: &Path, input: &str, index: usize, dir_mode: bool) -> PathBuf {
    if !dir_mode {
        return arg.to_path_buf();
    }
    let stem = Path::new(input)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("input");
    // Two inputs with the same stem must not overwrite each other: number them all.
    arg.join(format!("{index:03}-{stem}.annotated.png"))
}

/// Run `tether run`.
pub fn run(a: &RunArgs, matches: &ArgMatches) -> Result<ExitCode> {
    let count = a.inputs.len() + a.text.len();
    if count == 0 {
        crate::usage!("give at least one INPUT (or --text for text families)");
    }
    // Validate the annotation destination before any work.
    let dir_mode = a
        .annotate
        .as_ref()
        .is_some_and(|p| count > 1 || p.is_dir() || p.as_os_str().to_string_lossy().ends_with('/'));
    if let Some(p) = &a.annotate {
        if dir_mode {
            std::fs::create_dir_all(p).map_err(|source| OutputError {
                path: p.clone(),
                source,
            })?;
        } else {
            let parent = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(OutputError {
                    path: p.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("folder {} does not exist", parent.display()),
                    ),
                }
                .into());
            }
        }
    }
    let (bundle, family, mut runner) = open_runner(&a.bundle, matches, &a.device, false)?;
    let sources: Vec<InputSource<'_>> = a
        .inputs
        .iter()
        .map(|p| InputSource::File(p))
        .chain(a.text.iter().map(|t| InputSource::Text(t)))
        .collect();
    let bar = progress(count as u64, !a.json && count > 1);
    let mut docs = Vec::new();
    let mut failures = 0usize;
    for (i, src) in sources.iter().enumerate() {
        let label = match src {
            InputSource::File(p) => p.display().to_string(),
            InputSource::Text(t) => (*t).to_string(),
        };
        let result = (|| -> Result<(Value, Vec<String>)> {
            let input = runner.load(*src)?;
            let t0 = Instant::now();
            runner.run(input.as_ref())?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let out = runner.outcome(input.as_ref(), a.annotate.is_some())?;
            let mut text = vec![format!(
                "{}: {} ({:.1} ms)",
                escape(input.label()),
                escape(&out.summary),
                ms
            )];
            text.extend(out.lines.iter().map(|l| format!("  {}", escape(l))));
            let mut doc = json!({ "input": input.label(), "latency_ms": ms, "result": out.json });
            if let (Some(arg), Some(img)) = (&a.annotate, &out.annotated) {
                let path = annotate_path(arg, input.label(), i, dir_mode);
                let mut png = Vec::new();
                img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                    .context("encoding the annotated PNG")?;
                write_atomic(&path, &png)?;
                text.push(format!("  annotated image: {}", path.display()));
                doc["annotated"] = json!(path.display().to_string());
            }
            Ok((doc, text))
        })();
        bar.inc(1);
        match result {
            Ok((doc, text)) => {
                if a.json {
                    docs.push(doc);
                } else {
                    bar.suspend(|| -> Result<()> {
                        for l in &text {
                            outln!("{l}")?;
                        }
                        Ok(())
                    })?;
                }
            }
            Err(e) => {
                failures += 1;
                if a.json {
                    docs.push(json!({ "input": label, "error": format!("{e:#}") }));
                } else {
                    bar.suspend(|| {
                        crate::cli::report(&e.context(format!("input {}", escape(&label))))
                    });
                }
            }
        }
    }
    bar.finish_and_clear();
    if a.json {
        let engines: BTreeMap<String, String> = runner.engines().into_iter().collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "run",
                "bundle": { "path": a.bundle.display().to_string(), "name": bundle.identity().name },
                "family": family.name(),
                "engines": engines,
                "results": docs,
            }))?
        )?;
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn progress(len: u64, show: bool) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {per_sec} eta {eta}")
            .expect("static template"),
    );
    bar
}

/// Latency statistics of one stage, from a fixed-memory histogram (nanosecond resolution,
/// three significant digits).
struct Stage {
    hist: Histogram<u64>,
}

impl Stage {
    fn new() -> Self {
        Stage {
            // 1 ns .. 1 hour, 3 significant figures: a fixed few hundred KiB whatever the runs.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds"),
        }
    }
    fn record_ms(&mut self, ms: f64) {
        let ns = (ms * 1e6).round().clamp(1.0, 3.6e12) as u64;
        let _ = self.hist.record(ns);
    }
    fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e6
    }
    fn stats(&self) -> Value {
        let h = &self.hist;
        let mean = h.mean() / 1e6;
        let sd = h.stdev() / 1e6;
        json!({
            "min": h.min() as f64 / 1e6,
            "p50": self.ms(0.50),
            "p90": self.ms(0.90),
            "p99": self.ms(0.99),
            "p99.9": self.ms(0.999),
            "max": h.max() as f64 / 1e6,
            "mean": mean,
            "stddev": sd,
            "cv": if mean > 0.0 { sd / mean } else { 0.0 },
            "count": h.len(),
        })
    }
}

/// Run `tether bench`.
pub fn bench(a: &BenchArgs, matches: &ArgMatches) -> Result<ExitCode> {
    if let Some(p) = a.json.as_ref().filter(|p| p.as_os_str() != "-") {
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(OutputError {
                path: p.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "folder does not exist"),
            }
            .into());
        }
    }
    let (bundle, family, mut runner) = open_runner(&a.bundle, matches, &a.device, true)?;
    let input = runner.load(InputSource::File(&a.input))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        // A second handler cannot be installed in one process; ignore that case (tests).
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    for _ in 0..a.warmup {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        runner.run(input.as_ref())?;
    }
    let mut total = Stage::new();
    let mut stages: Vec<(String, Stage)> = Vec::new();
    let bar = progress(a.runs, a.json.is_none());
    let deadline = a.duration.map(|s| Instant::now() + Duration::from_secs(s));
    let period = a.rate.map(|hz| Duration::from_secs_f64(1.0 / hz));
    let mut missed = 0u64;
    let mut next = Instant::now();
    let started = Instant::now();
    let mut done = 0u64;
    while done < a.runs {
        if stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if let Some(p) = period {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += p;
        }
        let t0 = Instant::now();
        runner.run(input.as_ref())?;
        let dt = t0.elapsed();
        if let Some(p) = period
            && dt > p
        {
            missed += 1;
        }
        total.record_ms(dt.as_secs_f64() * 1e3);
        for (name, ms) in runner.stage_times() {
            match stages.iter_mut().find(|(n, _)| *n == name) {
                Some((_, s)) => s.record_ms(ms),
                None => {
                    let mut s = Stage::new();
                    s.record_ms(ms);
                    stages.push((name, s));
                }
            }
        }
        done += 1;
        if done.is_multiple_of(16) {
            bar.set_position(done);
        }
    }
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let interrupted = done < a.runs && stop.load(Ordering::SeqCst);
    let engines: BTreeMap<String, String> = runner.engines().into_iter().collect();
    let doc = json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "bench",
        "bundle": { "path": a.bundle.display().to_string(), "name": bundle.identity().name },
        "family": family.name(),
        "input": input.label(),
        "engines": engines,
        "runs": done,
        "warmup": a.warmup,
        "mode": if a.rate.is_some() { "open-loop" } else { "closed-loop" },
        "rate_hz": a.rate,
        "missed_deadlines": a.rate.map(|_| missed),
        "throughput_fps": if wall > 0.0 { done as f64 / wall } else { 0.0 },
        "interrupted": interrupted,
        "total_ms": total.stats(),
        "stages_ms": stages.iter().map(|(n, s)| json!({ "stage": n, "stats": s.stats() })).collect::<Vec<_>>(),
    });
    match &a.json {
        Some(p) if p.as_os_str() != "-" => {
            write_atomic(p, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        }
        Some(_) => outln!("{}", serde_json::to_string_pretty(&doc)?)?,
        None => {}
    }
    if a.json.as_ref().is_none_or(|p| p.as_os_str() != "-") {
        outln!(
            "{} on {} ({} runs{}, {} warm-up; {})",
            a.bundle.display(),
            escape(input.label()),
            done,
            if interrupted { ", interrupted" } else { "" },
            a.warmup,
            engines
                .iter()
                .map(|(n, e)| format!("{n}: {e}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        outln!(
            "  {:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "stage",
            "min ms",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "mean ms"
        )?;
        for (name, s) in std::iter::once(("total".to_string(), &total))
            .chain(stages.iter().map(|(n, s)| (n.clone(), s)))
        {
            let h = &s.hist;
            outln!(
                "  {:<14} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                name,
                h.min() as f64 / 1e6,
                s.ms(0.5),
                s.ms(0.99),
                s.ms(0.999),
                h.max() as f64 / 1e6,
                h.mean() / 1e6
            )?;
        }
        let cv = if total.hist.mean() > 0.0 {
            total.hist.stdev() / total.hist.mean()
        } else {
            0.0
        };
        if cv > 0.025 {
            outln!(
                "  warning: the total's coefficient of variation is {:.1} % (> 2.5 %): the figures are noisy",
                cv * 100.0
            )?;
        }
        if let Some(hz) = a.rate {
            outln!("  rate {hz} Hz: {missed} of {done} frames missed their period")?;
        }
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}
