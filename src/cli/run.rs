//! `tether run`: any family's pipeline on input files (`tether bench` is in `bench.rs`).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{ArgMatches, Args};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tether_bundle::{Bundle, Verify};
use tether_family::family::{Family, InputSource, Precision, RunOptions, Runner, find, names};

use crate::cli::{OutputError, escape};
use crate::outln;
use tether::families::REGISTRY;

/// Version of the JSON documents `run` and `bench` print (bumped on an incompatible change).
pub const JSON_SCHEMA_VERSION: u32 = 5;

/// Arguments of `tether run` shared by every family (each family adds its own).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Inputs: images (detect, ocr), WAV files (vad), text files (embed), prompt files (llm;
    /// `-`: standard input). `tether run BUNDLE --help` says what the bundle's family reads.
    #[arg(value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Literal text inputs, for families that take text.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    text: Vec<String>,
    /// Print JSON (one document with every input) instead of text.
    #[arg(long)]
    json: bool,
    /// Write an annotated image per input: a file for one input (`.png`, or `.jpg` / `.jpeg`
    /// for JPEG); a folder for several, or when the argument ends in `/` (created if missing;
    /// `NNN-NAME.annotated.png` each,
    /// numbered in input order so that two inputs of the same name never collide).
    #[arg(long, value_name = "OUT.png|DIR/")]
    annotate: Option<PathBuf>,
    /// Where to run: `auto` (a CUDA GPU when one answers, else the CPU), `cpu`, `cuda`, `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Arithmetic of the GPU engines that have a choice: `fp32` (default; TF32 off), `tf32`,
    /// `fp16` (fp16 storage, fp32 accumulation). The CPU engine computes in fp32.
    #[arg(long, default_value = "fp32", value_parser = parse_precision)]
    precision: Precision,
    #[command(flatten)]
    threads: ThreadsArg,
}

/// `--threads`, one option with one default for `run` and `bench` (so that their latencies
/// describe the same setup).
#[derive(Args, Debug, Clone, Copy)]
pub struct ThreadsArg {
    /// Threads of the CPU engine, at most the cores this process may run on (more are capped,
    /// with a warning). Default: those cores, or 1 when it runs under a real-time scheduling
    /// policy or only on isolated cores (`isolcpus`).
    #[arg(long = "threads", value_name = "N", allow_negative_numbers = true, value_parser = tether_family::args::whole(1, tether_runtime::MAX_CPU_THREADS as u64))]
    threads: Option<u64>,
}

impl ThreadsArg {
    /// Whether `--threads` was given.
    pub fn given(self) -> bool {
        self.threads.is_some()
    }

    /// The thread count and why (`--threads`, or the reason for the default:
    /// [`super::bench::default_threads`]).
    pub fn resolve(self) -> (usize, &'static str) {
        match self.threads {
            Some(n) => {
                if let Some(cores) = tether_runtime::threads_beyond_cores(n as usize) {
                    log::warn!(
                        "--threads {n} is more than the {cores} cores this process may run on: using {cores} (threads beyond the cores wait on each other at every step)"
                    );
                    return (cores, "--threads capped at the cores available");
                }
                (n as usize, "--threads")
            }
            None => super::bench::default_threads(),
        }
    }
}

pub(crate) fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse::<Precision>()
        .map_err(|e| format!("--precision {e}"))
}

/// An opened bundle, its family and the family's runner.
type Opened = (Arc<Bundle>, &'static dyn Family, Box<dyn Runner>);

/// Open a bundle and its family's runner.
pub(crate) fn open_runner(
    path: &Path,
    matches: &ArgMatches,
    options: &RunOptions,
) -> Result<Opened> {
    if let Err(e) = options.device() {
        crate::usage!("--device {e}");
    }
    let then = if options.step_timing {
        "bench model.bundle INPUT"
    } else {
        "run model.bundle INPUT"
    };
    let bundle = loaded(path, Bundle::open(path, Verify::Lazy), then)?;
    runner_on(bundle, path, matches, options)
}

/// The bundle `Bundle::open(path)` gave, or the error to report: a model file named where a
/// bundle belongs is said to be one (with the command to type), anything else is the
/// bundle's error in the context "loading PATH".
pub(crate) fn loaded(
    path: &Path,
    opened: std::result::Result<Bundle, tether_bundle::BundleError>,
    then: &str,
) -> Result<Arc<Bundle>> {
    match opened {
        Ok(b) => Ok(Arc::new(b)),
        Err(_) if let Some(format) = model_format(path) => {
            Err(model_not_bundle(path, format, then))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("loading {}", path.display()))),
    }
}

/// The family's runner on an opened bundle (`path`: the file it was opened from, for
/// messages). Options the family does not take are usage errors before any work; the caller
/// has refused a malformed `--device` already (before looking at the bundle).
pub(crate) fn runner_on(
    bundle: Arc<Bundle>,
    path: &Path,
    matches: &ArgMatches,
    options: &RunOptions,
) -> Result<Opened> {
    let fam = bundle.identity().family.to_string();
    let Some(family) = find(REGISTRY, &fam) else {
        anyhow::bail!(
            "{}: family `{}` is not one this tether knows ({})",
            path.display(),
            escape(&fam),
            names(REGISTRY)
        );
    };
    // Options the family does not take are refused before any work, never ignored (its
    // `--help` does not list them: `family_args::for_family`).
    let given = |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    if given("text") && !family.takes_text() {
        crate::usage!(
            "--text: the {} family takes no literal text; its inputs are {}",
            family.name(),
            family.inputs_help()
        );
    }
    // Every --text is checked before the first input runs (a family refuses an empty one
    // as it loads it, and a run stops at a usage error): no request runs before the refusal.
    if let Ok(Some(mut texts)) = matches.try_get_many::<String>("text")
        && let Some(t) = texts.find(|t| t.trim().is_empty())
    {
        crate::usage!("--text {t:?} holds no text");
    }
    if given("precision") && !family.has_precision() {
        crate::usage!(
            "--precision: the {} family's engines have no choice of arithmetic (the option is for the ONNX families' GPU engines)",
            family.name()
        );
    }
    // An option out of range is the command line's fault, not the bundle's: no "loading".
    let runner = match family.open(Arc::clone(&bundle), matches, options) {
        Ok(r) => r,
        Err(e) if e.chain().any(|c| c.is::<crate::cli::UsageError>()) => return Err(e),
        Err(e) => return Err(e.context(format!("loading {}", path.display()))),
    };
    Ok((bundle, family, runner))
}

/// What `path` holds when it is an existing regular file that is a model or an input rather
/// than a bundle: `GGUF` (the magic `GGUF`), an input's kind ([`crate::cli::input_kind`]:
/// `a PNG image`, ...) or `ONNX` (its extension, or a protobuf `ModelProto` start: field 1
/// `ir_version`, a varint, tag byte `0x08`, which no bundle starts with).
pub(crate) fn model_format(path: &Path) -> Option<&'static str> {
    // Only an existing regular file is a model (a missing path keeps its "no such file"
    // error), and only a regular file is read: opening a FIFO or a device would block or
    // consume it.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    // The first 12 bytes (fewer in a shorter file).
    let mut head = Vec::with_capacity(12);
    let _ = std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 12), &mut head));
    // GGUF has a magic: a `.gguf` file without it is neither a GGUF nor a bundle.
    if head.starts_with(b"GGUF") {
        Some("GGUF")
    } else if let Some(kind) = crate::cli::input_kind(&head) {
        Some(kind)
    } else if ext.as_deref() == Some("onnx") || head.first() == Some(&0x08) {
        Some("ONNX")
    } else {
        None
    }
}

/// The usage error for a model file or an input (`format`: [`model_format`]'s) given where a
/// bundle belongs, saying what to do instead (`then`: the command to type with the bundle,
/// e.g. `run model.bundle INPUT`).
pub(crate) fn model_not_bundle(path: &Path, format: &str, then: &str) -> anyhow::Error {
    if format != "GGUF" && format != "ONNX" {
        return anyhow::Error::new(crate::cli::UsageError(format!(
            "{} is {format}, an input, not a tether bundle: a command takes the bundle first (`tether {then}`)",
            path.display(),
        )));
    }
    let family = if format == "GGUF" {
        "llm --gguf"
    } else {
        "NAME --onnx"
    };
    anyhow::Error::new(crate::cli::UsageError(format!(
        "{} is a{} {format} model, not a tether bundle: build a bundle from it first (`tether build --family {family} {} -o model.bundle`; `tether build --help` lists the families), then `tether {then}`",
        path.display(),
        if format == "ONNX" { "n" } else { "" },
        path.display(),
    )))
}

/// Write `bytes` to `path` atomically (a temporary file in the same folder, renamed over
/// the destination; only ever a regular file is replaced).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    tether_bundle::files::write_atomic(path, bytes).map_err(|e| output_error(path, e))
}

/// Check, before any work, that [`write_atomic`] would accept `path` (its folder exists and
/// takes a new file, it is not a folder, device or FIFO, ...): the same error it would give.
pub fn check_destination(path: &Path) -> Result<()> {
    tether_bundle::files::check_writable(path).map_err(|e| output_error(path, e))
}

fn output_error(path: &Path, e: tether_bundle::files::FileError) -> anyhow::Error {
    let source = match e {
        // The OS error's kind (for the hint) with what was being done when it came.
        tether_bundle::files::FileError::Io { source, op, .. } => {
            std::io::Error::new(source.kind(), format!("{op} it: {source}"))
        }
        other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
    };
    OutputError {
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// The image format an annotated image named `path` is written in: PNG for `.png`, JPEG for
/// `.jpg` / `.jpeg` (any case); `None` for another name.
fn annotate_format(path: &Path) -> Option<image::ImageFormat> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => Some(image::ImageFormat::Png),
        Some("jpg" | "jpeg") => Some(image::ImageFormat::Jpeg),
        _ => None,
    }
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
    // Standard input can be read once: a second `-` would find it empty.
    if a.inputs.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        crate::usage!("- (standard input) is given more than once: it can be read only once");
    }
    // A malformed --device is a usage error before the bundle is looked at.
    if let Err(e) = a.device.parse::<tether_runtime::Device>() {
        crate::usage!("--device {e}");
    }
    let count = a.inputs.len() + a.text.len();
    // Without INPUTs the family may take its input from its own options (`--prompt`): known
    // only once the bundle opens (a bundle that does not open is its own error, below).
    // The bundle is opened once (mapped, lazy): its family answers the checks below, and
    // the runner is made on it.
    let opened = Bundle::open(&a.bundle, Verify::Lazy);
    // Without INPUTs a bundle that does not open is the error to report (truncated,
    // corrupt, missing, a folder or a device): not that an input is missing, since the family
    // may take its input from `--prompt`.
    if count == 0
        && let Err(e) = opened
    {
        if let Some(f) = model_format(&a.bundle) {
            return Err(model_not_bundle(&a.bundle, f, "run model.bundle ..."));
        }
        return Err(anyhow::Error::new(e).context(format!("loading {}", a.bundle.display())));
    }
    // A family without images has nothing to annotate: refuse the option, never ignore it
    // (the family is read from the mapped manifest; the runner comes later).
    if a.annotate.is_some()
        && let Ok(b) = &opened
        && let Some(f) = find(REGISTRY, b.identity().family)
        && !f.annotates()
    {
        crate::usage!(
            "--annotate: the {} family has no image to annotate",
            f.name()
        );
    }
    // Validate the annotation destination before any work.
    let ends_in_slash = |p: &Path| p.as_os_str().to_string_lossy().ends_with('/');
    let dir_mode = a
        .annotate
        .as_ref()
        .is_some_and(|p| count > 1 || p.is_dir() || ends_in_slash(p));
    // An annotated image never replaces an input, its own or a later one (`run b x.png
    // --annotate x.png`; `run b a.png out/000-a.annotated.png --annotate out/`), nor the
    // bundle; checked before a folder is made, by device and inode (links, other spellings).
    if let Some(arg) = &a.annotate {
        use crate::cli::file_id;
        let inputs: std::collections::HashMap<(u64, u64), &PathBuf> = a
            .inputs
            .iter()
            .chain(std::iter::once(&a.bundle))
            .filter_map(|p| file_id(p).map(|k| (k, p)))
            .collect();
        for (i, p) in a.inputs.iter().enumerate() {
            let out = annotate_path(arg, &p.to_string_lossy(), i, dir_mode);
            if let Some(hit) = file_id(&out).and_then(|k| inputs.get(&k)) {
                let what = if **hit == a.bundle { "BUNDLE" } else { "INPUT" };
                crate::cli::refuse_output_over_input("--annotate", &out, what, hit)?;
            }
        }
    }
    if let Some(p) = &a.annotate {
        // (`Path::extension` ignores a trailing `/`: `shots.png/` is a folder.)
        let format = annotate_format(p).filter(|_| !ends_in_slash(p));
        if count > 1 && format.is_some() && !p.is_dir() {
            crate::usage!(
                "--annotate {}: {count} inputs write one image each: give a folder (end the argument with `/`)",
                p.display()
            );
        }
        if !dir_mode && format.is_none() {
            crate::usage!(
                "--annotate {}: an annotated image is a PNG or JPEG file: name it .png, .jpg or .jpeg (or end the argument with `/` for a folder)",
                p.display()
            );
        }
        if dir_mode {
            // `notadir/` naming an existing file: say so (mkdir's "File exists" does not).
            if std::fs::metadata(p.components().as_path()).is_ok_and(|m| !m.is_dir()) {
                return Err(OutputError {
                    path: p.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        "a folder of annotated images was asked for, and the path is an existing file, not a folder",
                    ),
                }
                .into());
            }
            std::fs::create_dir_all(p).map_err(|source| OutputError {
                path: p.clone(),
                source,
            })?;
            // A folder that takes no new file (`/sys/...`): refused now, not after every
            // input has run.
            if let Some(first) = a.inputs.first() {
                check_destination(&annotate_path(p, &first.to_string_lossy(), 0, true))?;
            }
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
            // Writable there (not a folder, device or FIFO; the folder takes a new file).
            check_destination(p)?;
        }
    }
    let (threads, threads_why) = a.threads.resolve();
    let options = RunOptions {
        device: a.device.clone(),
        precision: a.precision,
        threads: Some(threads),
        ..RunOptions::default()
    };
    let (bundle, family, mut runner) = runner_on(
        loaded(&a.bundle, opened, "run model.bundle INPUT")?,
        &a.bundle,
        matches,
        &options,
    )?;
    let mut arg_inputs = runner.arg_inputs()?.into_iter();
    let count = count + arg_inputs.len();
    if count == 0 {
        // What this family takes: INPUT, and --text or its own input options where it has
        // them.
        let ways: Vec<String> = std::iter::once("INPUT".to_string())
            .chain(family.takes_text().then(|| "--text".to_string()))
            .chain(family.input_args().iter().map(|id| format!("--{id}")))
            .collect();
        let ways = match ways.as_slice() {
            [one] => one.clone(),
            [head @ .., last] => format!("{} or {last}", head.join(", ")),
            [] => unreachable!("INPUT is always there"),
        };
        crate::usage!(
            "give at least one {ways} (`tether run {} --help` describes them)",
            a.bundle.display()
        );
    }
    let sources: Vec<Option<InputSource<'_>>> = a
        .inputs
        .iter()
        .map(|p| Some(InputSource::File(p)))
        .chain(a.text.iter().map(|t| Some(InputSource::Text(t))))
        .chain((0..arg_inputs.len()).map(|_| None))
        .collect();
    if !a.json {
        eprintln!("CPU engine threads: {threads} ({threads_why})");
    }
    // Ctrl-C: no input after the one in flight starts, a cancellable run (a VAD's chunks, a
    // text generator's tokens) ends early with what it produced, and what was done is
    // reported (exit 130); a second Ctrl-C ends the process at once.
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let cancel = runner.canceller();
        let flag = Arc::clone(&interrupted);
        // One handler per process; when one is already set (tests), Ctrl-C keeps it.
        let _ = ctrlc::set_handler(move || {
            crate::cli::ctrl_c(&flag);
            if let Some(cancel) = &cancel {
                cancel();
            }
        });
    }
    // Streamed output (a text generator's tokens) goes to stdout as it comes, one input at
    // a time; the summary line then follows on stderr.
    let stream = !a.json;
    let bar = progress(count as u64, !a.json && count > 1);
    let mut docs = Vec::new();
    let mut failures = 0usize;
    // Inputs whose run ended (done or failed): fewer than given after Ctrl-C.
    let mut ran = 0usize;
    // An input refused for how the command was given (`--all-pairs` over too many texts):
    // the exit status is the usage error's, as when the refusal comes before any input.
    let mut usage_failure = false;
    for (i, src) in sources.iter().enumerate() {
        if interrupted.load(Ordering::SeqCst) {
            break;
        }
        let mut from_args = None;
        // A literal text is its own label: the text output shows a long one shortened. So
        // may an input of the family's own options be (llm's `--prompt` text).
        let is_text = matches!(src, Some(InputSource::Text(_)) | None);
        let label = match src {
            Some(InputSource::File(p)) => p.display().to_string(),
            Some(InputSource::Text(t)) => (*t).to_string(),
            None => {
                let input = arg_inputs.next().expect("one per remaining source");
                let l = input.label().to_string();
                from_args = Some(input);
                l
            }
        };
        let result = (|| -> Result<(Value, Vec<String>)> {
            let input = match (from_args, src) {
                (Some(input), _) => input,
                (None, Some(s)) => runner.load(*s)?,
                (None, None) => unreachable!("an argument input is taken above"),
            };
            let t0 = Instant::now();
            let streamed = if stream {
                let mut wrote = false;
                let mut sink = |piece: &str| {
                    wrote |= !piece.is_empty();
                    write_piece(piece)
                };
                match runner.run_streaming(input.as_ref(), &mut sink) {
                    Some(r) => {
                        // End the streamed text's line whatever happened after it began (a
                        // request refused before its first piece leaves stdout empty).
                        if wrote {
                            outln!()?;
                        }
                        r?;
                        true
                    }
                    None => false,
                }
            } else {
                false
            };
            if !streamed {
                runner.run(input.as_ref())?;
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let out = runner.outcome(input.as_ref(), a.annotate.is_some())?;
            let mut text = Vec::new();
            let summary = format!(
                "{}: {} ({:.1} ms)",
                if is_text {
                    shortened(input.label())
                } else {
                    escape(input.label()).into_owned()
                },
                escape(&out.summary),
                ms
            );
            if streamed {
                // The output is on stdout already: the summary goes to stderr.
                eprintln!("[{summary}]");
            } else {
                text.push(summary);
                text.extend(out.lines.iter().map(|l| format!("  {}", escape(l))));
            }
            let mut doc = json!({ "input": input.label(), "latency_ms": ms, "result": out.json });
            if let (Some(arg), Some(img)) = (&a.annotate, &out.annotated) {
                let path = annotate_path(arg, input.label(), i, dir_mode);
                let format = annotate_format(&path).unwrap_or(image::ImageFormat::Png);
                let mut bytes = Vec::new();
                img.write_to(&mut std::io::Cursor::new(&mut bytes), format)
                    .with_context(|| format!("encoding the annotated image as {format:?}"))?;
                write_atomic(&path, &bytes)?;
                text.push(format!("  annotated image: {}", path.display()));
                doc["annotated"] = json!(path.display().to_string());
            }
            Ok((doc, text))
        })();
        bar.inc(1);
        ran += 1;
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
                usage_failure |= e
                    .chain()
                    .any(|c| c.downcast_ref::<crate::cli::UsageError>().is_some());
                if a.json {
                    docs.push(json!({ "input": label, "error": crate::cli::message(&e) }));
                } else {
                    bar.suspend(|| {
                        crate::cli::report(&e.context(if is_text && label.is_empty() {
                            // An empty literal text: the error names the option itself.
                            "input --text".to_string()
                        } else {
                            format!(
                                "input {}",
                                if is_text {
                                    shortened(&label)
                                } else {
                                    escape(&label).into_owned()
                                }
                            )
                        }))
                    });
                }
            }
        }
    }
    bar.finish_and_clear();
    if !a.json && interrupted.load(Ordering::SeqCst) {
        // What was done is listed above; say that the rest did not run.
        eprintln!(
            "interrupted by Ctrl-C after {ran} of {} inputs",
            sources.len()
        );
    }
    if a.json {
        let engines: BTreeMap<String, String> = runner.engines().into_iter().collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&crate::cli::tidy(json!({
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "run",
                "bundle": { "path": a.bundle.display().to_string(), "name": bundle.identity().name },
                "family": family.name(),
                "engines": engines,
                "cpu_threads": threads,
                "cpu_threads_why": threads_why,
                "interrupted": interrupted.load(Ordering::SeqCst),
                "results": docs,
            })))?
        )?;
    }
    Ok(if interrupted.load(Ordering::SeqCst) {
        ExitCode::from(crate::cli::EXIT_INTERRUPTED)
    } else if failures == 0 {
        ExitCode::SUCCESS
    } else if usage_failure {
        ExitCode::from(crate::cli::EXIT_USAGE)
    } else {
        ExitCode::from(1)
    })
}

/// A literal text input as the text output names it: escaped, and one longer than 60
/// characters cut there with `…` and its length (the JSON's `input` keeps it whole).
fn shortened(text: &str) -> String {
    const SHOWN_CHARS: usize = 60;
    let n = text.chars().count();
    if n <= SHOWN_CHARS {
        escape(text).to_string()
    } else {
        let head: String = text.chars().take(SHOWN_CHARS).collect();
        format!("{}… ({n} characters)", escape(&head))
    }
}

/// Write one streamed piece of output text to stdout and flush it: line breaks and tabs as
/// they are, every other control character escaped (model output is untrusted text).
fn write_piece(piece: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let r = if piece
        .chars()
        .any(|c| c != '\n' && c != '\t' && crate::cli::text::needs_escape(c))
    {
        let mut s = String::with_capacity(piece.len() + 8);
        for c in piece.chars() {
            if c == '\n' || c == '\t' {
                s.push(c);
            } else {
                s.push_str(&escape(c.encode_utf8(&mut [0; 4])));
            }
        }
        out.write_all(s.as_bytes())
    } else {
        out.write_all(piece.as_bytes())
    };
    r.and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("writing to stdout: {e}"))
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
