//! `tether bench`: the latency of any family's pipeline on one input, closed loop (back to
//! back) or open loop at a fixed rate, CUDA graphs against eager launches, with the
//! statistics a control loop is judged by, per stage, and a plot.
//!
//! Percentiles come from fixed-memory histograms (`hdrhistogram`, 1 ns to 1 h at three
//! significant digits: a few hundred KiB per stage however many frames run). Stage times
//! are the family runner's ([`Runner::stage_times`]): GPU time from CUDA events recorded in
//! the graph (or around eager launches) for GPU steps, the monotonic clock for host steps;
//! never host clocks around asynchronous work.
//!
//! The command reads as its parts: the arguments and the order of work (here), what the
//! machine is ([`machine`]), the timed loop and each way of running ([`timing`]), the
//! statistics of a stage ([`stats`]), the report in text and JSON ([`report`]) and the
//! plot ([`plot`]).

pub(crate) mod machine;
mod plot;
mod report;
mod stats;
mod throughput;
mod timing;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgMatches, Args};
use tether_bundle::Bundle;
use tether_family::family::{
    Execution, Family, Input, InputSource, MappedIo, Precision, RunOptions, Runner, SyncPolicy,
};

use crate::cli::escape;
use crate::cli::run::ThreadsArg;
use crate::cli::run::{open_runner, runner_on, write_atomic};
use crate::outln;
use machine::Machine;
pub(crate) use machine::default_threads;
use plot::{PlotFormat, plot_format};
use report::Summary;
use stats::{BEYOND_FLOOR_OFFSET_NS, Stage};
use timing::{Schedule, Variant, run_timed, variant};

/// Arguments of `tether bench`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("launch").args(["graph", "eager", "compare"]))]
pub struct BenchArgs {
    /// The bundle.
    bundle: PathBuf,
    /// The input (decoded once, before timing). Without one, the family's throughput tests
    /// (a text generator: llama-bench's `pp`/`tg`; `--runs` repetitions each, default 5).
    input: Option<PathBuf>,
    /// Time the family on this text instead of an INPUT file (embed: one sentence; the
    /// text families' `run --text`).
    #[arg(long, value_name = "TEXT", conflicts_with = "input")]
    text: Option<String>,
    /// Timed runs (1 to 1,000,000,000; with --compare, runs of each). Default 200, or no
    /// limit with --duration; a family's throughput tests (no INPUT): 5 of each test.
    #[arg(long, allow_negative_numbers = true, value_parser = tether_family::args::whole(1, 1_000_000_000))]
    runs: Option<u64>,
    /// Stop after this many whole seconds, 1 to 86,400 (whichever comes first with --runs).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = tether_family::args::whole(1, 86_400))]
    duration: Option<u64>,
    /// Untimed warm-up runs (of each, with --compare), after the first run, which prepares
    /// the session (on a GPU: captures the graph) and is never timed.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = tether_family::args::whole(0, 1_000_000))]
    warmup: u64,
    /// Open loop at a fixed rate (frames per second): frames are released on a fixed
    /// schedule with idle gaps between them, where latency after idle shows. A frame
    /// released while the previous one still runs waits; releases a whole period late are
    /// skipped, as a camera drops frames. Default: closed loop (back to back).
    #[arg(long, value_name = "HZ", allow_negative_numbers = true, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Deadline per frame in milliseconds, from its release (open loop) or its start
    /// (closed loop). Default: the period at --rate; none back to back.
    #[arg(long, value_name = "MS", allow_negative_numbers = true, value_parser = parse_deadline)]
    deadline: Option<f64>,
    /// Capture CUDA graphs (the default on a GPU).
    #[arg(long)]
    graph: bool,
    /// Launch every GPU step eagerly (no CUDA graphs).
    #[arg(long)]
    eager: bool,
    /// Run graphs and eager launches interleaved (frame by frame; with --rate the releases
    /// alternate between them) and report both and their ratio. Needs a GPU session.
    #[arg(long)]
    compare: bool,
    /// How the host waits for the GPU: `spin` (busy-poll, lowest latency), `yield`, `block`
    /// (sleep in the driver). Sets the CUDA context's scheduling policy.
    #[arg(long, default_value = "spin", value_parser = parse_sync)]
    sync: SyncPolicy,
    /// Where a GPU session's input frame and results live: `auto` (mapped on an integrated
    /// GPU, copied on a discrete one), `copy` (upload and download nodes in the graph),
    /// `mapped` (zero-copy: kernels read and write the page-locked host buffers over the
    /// bus), `mapped-outputs` (the frame copied, the results written into host memory).
    #[arg(long, default_value = "auto", value_parser = parse_staging)]
    staging: MappedIo,
    /// Arithmetic of the GPU engines that have a choice: `fp32` (default; TF32 off), `tf32`,
    /// `fp16`. The CPU engine computes in fp32.
    #[arg(long, default_value = "fp32", value_parser = super::run::parse_precision)]
    precision: Precision,
    #[command(flatten)]
    threads: ThreadsArg,
    /// Print JSON to stdout, or write it to FILE (atomically); `-`, `/dev/stdout` and
    /// `/dev/fd/1` are stdout.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-", value_parser = json_destination)]
    json: Option<PathBuf>,
    /// Draw the latency histogram and CDF of every stage to FILE (`.svg` or `.png`).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    /// Where to run: `auto`, `cpu`, `cuda`, `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Time runs on the frame the first (untimed) run left in the session's input staging:
    /// no copy of the frame per run, the runtime's share when a producer writes its frames
    /// into the staging in place (a family API's `staging_mut`; the producer's writes are not
    /// timed). A family without such a path says so.
    #[arg(long)]
    staged: bool,
    /// After every timed run, launch the same captured graph(s) bare and wait, nothing else
    /// (`floor`), and report each run's host time beyond it, paired run by run
    /// (`beyond-floor`, run minus the floor after it). Needs a GPU session of captured
    /// graphs. Per-stage timing is off (reading the events is host time a run would not
    /// otherwise spend), so only the total, the floor and the difference are reported.
    #[arg(long, conflicts_with_all = ["rate", "compare", "eager"])]
    floor: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    // (clap's message names the value: `invalid value 'V' for '--rate <HZ>': ...`.)
    let v: f64 = s
        .parse()
        .map_err(|e| format!("{e} (accepted 1/86400 to 100000 Hz)"))?;
    // At least one frame a day (a period of at most --duration's bound, 86,400 s): a
    // smaller rate would wait years for its second frame.
    if v.is_finite() && (1.0 / 86_400.0..=100_000.0).contains(&v) {
        Ok(v)
    } else {
        Err("accepted 1/86400 (one frame a day, 1.16e-5) to 100000 Hz".to_string())
    }
}

fn parse_deadline(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|e| format!("{e} (accepted above 0 up to 3600000 ms)"))?;
    if v.is_finite() && v > 0.0 && v <= 3_600_000.0 {
        Ok(v)
    } else {
        Err("accepted above 0 up to 3600000 ms".to_string())
    }
}

fn parse_sync(s: &str) -> Result<SyncPolicy, String> {
    s.parse::<SyncPolicy>().map_err(|e| format!("--sync {e}"))
}

fn parse_staging(s: &str) -> Result<MappedIo, String> {
    s.parse::<MappedIo>().map_err(|e| format!("--staging {e}"))
}

/// The `--json FILE` report: pretty JSON ending with a line break (as the printed form),
/// written atomically.
fn write_json_report(path: &std::path::Path, doc: &serde_json::Value) -> Result<()> {
    write_atomic(
        path,
        format!("{}\n", serde_json::to_string_pretty(doc)?).as_bytes(),
    )
}

/// `--json`'s FILE: the names of standard output as `-` (printed, not an atomic file write,
/// which a pipe or terminal cannot take), any other path as given.
fn json_destination(s: &str) -> std::result::Result<PathBuf, String> {
    Ok(PathBuf::from(match s {
        "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1" => "-",
        other => other,
    }))
}

/// Check that an output file (`--json` or `--plot`, named `option`) can be written where it
/// is named (its folder exists and takes a new file; it is not a folder, device or FIFO),
/// before any work: a benchmark that ran for minutes must not lose its results to its
/// output's name. Nor may the output destroy something else: it is never the bundle or the
/// INPUT, and `--json` replaces only an earlier report of `tether bench` (an empty file, or
/// a JSON object whose `command` is `"bench"`); any other existing file (a prompt given
/// after `--json` as its FILE, a tokenizer, a config) is refused: a usage error.
fn check_output(a: &BenchArgs, option: &str, path: &Path) -> Result<()> {
    crate::cli::run::check_destination(path)?;
    crate::cli::refuse_output_over_input(option, path, "BUNDLE", &a.bundle)?;
    if let Some(input) = &a.input {
        crate::cli::refuse_output_over_input(option, path, "INPUT", input)?;
    }
    if option == "--json" && !replaceable_report(path) {
        crate::usage!(
            "--json {}: the file exists and is not an earlier `tether bench` report; refusing to replace it (to read a prompt or input from it, give it before --json, or write the report with `--json -` or to another file)",
            escape(&path.display().to_string())
        );
    }
    Ok(())
}

/// Whether `--json` may replace the file at `path`: none there, an empty (or blank) one, or
/// an earlier report of `tether bench` (a JSON object with `"command": "bench"`, at most
/// 64 MiB). A file that cannot be read is left to the writer's own error.
fn replaceable_report(path: &Path) -> bool {
    const MAX_REPORT: u64 = 64 << 20;
    let Ok(m) = std::fs::metadata(path) else {
        return true;
    };
    if m.len() > MAX_REPORT {
        return false;
    }
    let Ok(bytes) = std::fs::read(path) else {
        return true;
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .is_ok_and(|v| v.get("command").and_then(|c| c.as_str()) == Some("bench"))
}

/// Run `tether bench`: check the outputs, open the variants and prepare them on the input,
/// warm up, time the runs, then write the JSON, the plot and the text report.
pub fn bench(a: &BenchArgs, matches: &ArgMatches) -> Result<ExitCode> {
    let (threads, threads_why) = a.threads.resolve();
    let input = match (&a.input, &a.text) {
        (Some(p), _) => Some(InputSource::File(p)),
        (None, Some(t)) => Some(InputSource::Text(t)),
        (None, None) => None,
    };
    let Some(input) = input else {
        if let Some(p) = a.json.as_ref().filter(|p| p.as_os_str() != "-") {
            check_output(a, "--json", p)?;
        }
        return throughput::bench(a, matches, threads, threads_why);
    };
    let plot = check_outputs(a)?;
    let (stop, cancellers) = stop_on_ctrl_c();
    let opened = open_variants(a, input, matches, threads, &cancellers)?;
    let (bundle, family, input) = (&opened.bundle, opened.family, opened.input.as_ref());
    let mut variants = opened.variants;
    let machine = Machine::probe(
        &variants[0].env,
        a.sync,
        a.staging,
        a.precision,
        threads_why,
    );
    for v in &mut variants {
        for _ in 0..a.warmup {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            v.run(input, a.staged)?;
        }
    }
    let period = a.rate.map(|hz| Duration::from_secs_f64(1.0 / hz));
    let schedule = Schedule {
        runs: a
            .runs
            .unwrap_or(if a.duration.is_some() { u64::MAX } else { 200 }),
        duration: a.duration.map(Duration::from_secs),
        period,
        deadline: a
            .deadline
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .or(period),
        staged: a.staged,
        floor: a.floor,
        show: a.json.as_ref().is_none_or(|p| p.as_os_str() != "-"),
    };
    let wall = run_timed(&mut variants, input, &schedule, &stop)?;
    let interrupted =
        stop.load(Ordering::SeqCst) && variants.iter().any(|v| v.runs < schedule.runs);
    let engines: BTreeMap<String, String> = variants[0].runner.engines().into_iter().collect();
    let summary = Summary {
        args: a,
        bundle,
        family,
        input,
        engines: &engines,
        machine: &machine,
        variants: &variants,
        wall,
        interrupted,
        deadline: schedule.deadline,
    };
    write_report(a, &summary, plot.as_ref(), schedule.show)?;
    Ok(if interrupted {
        ExitCode::from(crate::cli::EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--json FILE` and `--plot FILE` checked before any work: the folders exist, the plot's
/// format follows from its name (a usage error otherwise).
fn check_outputs(a: &BenchArgs) -> Result<Option<(PathBuf, PlotFormat)>> {
    if let Some(p) = a.json.as_ref().filter(|p| p.as_os_str() != "-") {
        check_output(a, "--json", p)?;
    }
    match &a.plot {
        Some(p) => {
            let Some(f) = plot_format(p) else {
                crate::usage!(
                    "--plot {}: the file must end in .svg or .png",
                    escape(&p.display().to_string())
                );
            };
            check_output(a, "--plot", p)?;
            // The two reports in one file: the second written would replace the first.
            if let Some(j) = a.json.as_ref().filter(|j| j.as_os_str() != "-")
                && (j == p || crate::cli::same_file(j, p))
            {
                crate::usage!(
                    "--json and --plot name the same file {}: give each its own",
                    escape(&p.display().to_string())
                );
            }
            Ok(Some((p.clone(), f)))
        }
        None => Ok(None),
    }
}

/// Cancel functions of the runners ([`Runner::canceller`]) that Ctrl-C calls.
type Cancellers = Arc<Mutex<Vec<Box<dyn Fn() + Send + Sync>>>>;

/// A flag Ctrl-C sets from now on, and the cancel functions it calls: the benchmark stops
/// after the run in flight (loading finishes first), a cancellable run (a VAD's chunks)
/// stops between its units, and the report covers what ran.
fn stop_on_ctrl_c() -> (Arc<AtomicBool>, Cancellers) {
    let stop = Arc::new(AtomicBool::new(false));
    let cancellers: Cancellers = Arc::default();
    let flag = Arc::clone(&stop);
    let cancel = Arc::clone(&cancellers);
    // A second handler cannot be installed in one process; ignore that case (tests).
    let _ = ctrlc::set_handler(move || {
        crate::cli::ctrl_c(&flag);
        if let Ok(c) = cancel.lock() {
            c.iter().for_each(|f| f());
        }
    });
    (stop, cancellers)
}

/// The bundle, its family, the decoded input and the variants to time, each prepared on the
/// input (its first run, never timed: a GPU session captures its graph then).
struct Opened {
    bundle: Arc<Bundle>,
    family: &'static dyn Family,
    input: Box<dyn Input>,
    variants: Vec<Variant>,
}

/// Open the bundle's runner(s) as the arguments ask (graphs, eager, or both with
/// `--compare`), load the input, prepare each runner on it, and check that what
/// `--compare`, `--floor` and `--staged` need is there (usage errors otherwise).
fn open_variants(
    a: &BenchArgs,
    input_source: InputSource<'_>,
    matches: &ArgMatches,
    threads: usize,
    cancellers: &Cancellers,
) -> Result<Opened> {
    // Ctrl-C reaches each runner from its first (preparing) run on.
    let variant = |name, runner: Box<dyn Runner>| {
        if let (Some(f), Ok(mut c)) = (runner.canceller(), cancellers.lock()) {
            c.push(f);
        }
        variant(name, runner)
    };
    let options = |graphs: bool| RunOptions {
        device: a.device.clone(),
        verify_eagerly: false,
        step_timing: !a.floor,
        graphs,
        sync: a.sync,
        threads: Some(threads),
        precision: a.precision,
        staging: a.staging,
    };
    let (bundle, family, first) = open_runner(&a.bundle, matches, &options(!a.eager))?;
    let first_name = if a.eager { "eager" } else { "graph" };
    let mut variants = vec![variant(first_name, first)];
    let input = variants[0].runner.load(input_source)?;
    // The first run prepares the session for the input (a GPU session captures its graph
    // then): never timed, and only after it does the runner know how it executes.
    variants[0].prepare(input.as_ref())?;
    if a.compare {
        if !variants[0].env.execution.on_gpu() {
            crate::usage!(
                "--compare needs a GPU session: this bundle runs on {} ({}), where there is nothing to capture",
                variants[0].env.device,
                variants[0].env.execution
            );
        }
        let (_, _, second) = runner_on(Arc::clone(&bundle), &a.bundle, matches, &options(false))?;
        variants.push(variant("eager", second));
        variants[1].prepare(input.as_ref())?;
    }
    if !variants[0].env.execution.on_gpu() {
        // On the host there is neither a graph nor an eager launch: the run is named for
        // where it ran, and --graph / --eager are said to have no effect, not dropped
        // silently (--sync and --staging: the header's lines, `Machine::probe`).
        variants[0].name = "host";
        let asked = if a.graph {
            Some(("--graph", "nothing to capture"))
        } else if a.eager {
            Some(("--eager", "no GPU launches"))
        } else {
            None
        };
        if let Some((opt, why)) = asked {
            let note = format!("{opt} asked, but this bundle runs on the CPU: {why}");
            let env = &mut variants[0].env;
            env.execution_note = if env.execution_note.is_empty() {
                note
            } else {
                format!("{}; {note}", env.execution_note)
            };
        }
    }
    if a.floor {
        let env = &variants[0].env;
        if env.execution != Execution::Graph {
            crate::usage!(
                "--floor needs a GPU session of one captured graph: this bundle runs on {} ({})",
                env.device,
                env.execution
            );
        }
        match variants[0].runner.launch_floor() {
            None => crate::usage!(
                "--floor: the {} family offers no bare graph launch",
                family.name()
            ),
            Some(r) => r?,
        }
        variants[0].floor = Some((Stage::new(), Stage::with_offset(BEYOND_FLOOR_OFFSET_NS)));
    }
    if a.staged {
        // The first run staged the input; check the family has the path before timing.
        match variants[0].runner.run_staged() {
            None => crate::usage!(
                "--staged: the {} family has no staged path (it runs on a copy of each input)",
                family.name()
            ),
            Some(r) => r?,
        }
    }
    Ok(Opened {
        bundle,
        family,
        input,
        variants,
    })
}

/// Write the JSON (to stdout or its file), the plot, and (unless the JSON goes to stdout)
/// the text report.
fn write_report(
    a: &BenchArgs,
    summary: &Summary<'_>,
    plot: Option<&(PathBuf, PlotFormat)>,
    show: bool,
) -> Result<()> {
    let doc = crate::cli::tidy(summary.json());
    match &a.json {
        Some(p) if p.as_os_str() != "-" => write_json_report(p, &doc)?,
        Some(_) => outln!("{}", serde_json::to_string_pretty(&doc)?)?,
        None => {}
    }
    if let Some((path, format)) = plot {
        let label = summary.input.label();
        let title = format!(
            "{} on {} - {}",
            summary.bundle.identity().name,
            Path::new(label)
                .file_name()
                .map_or_else(|| label.to_string(), |f| f.to_string_lossy().into_owned()),
            summary.mode_line()
        );
        // Names from the bundle may hold control characters: escaped, as in the text output
        // (an SVG with a raw ESC is not well-formed XML).
        let (title, setup) = (
            escape(&title).into_owned(),
            escape(&summary.setup_line()).into_owned(),
        );
        let header = plot::Header {
            title: &title,
            setup: &setup,
        };
        let bytes = plot::render(&header, summary.variants, *format).context("drawing the plot")?;
        write_atomic(path, &bytes)?;
    }
    if show {
        summary.print()?;
        if let Some((path, _)) = plot {
            outln!("  plot: {}", path.display())?;
        }
    }
    Ok(())
}
