//! `tether bench`: the latency of any family's pipeline on one input, closed loop (back to
//! back) or open loop at a fixed rate, CUDA graphs against eager launches, with the
//! statistics a control loop is judged by, per stage, and a plot.
//!
//! Percentiles come from fixed-memory histograms (`hdrhistogram`, 1 ns to 1 h at three
//! significant digits: a few hundred KiB per stage however many frames run). Stage times
//! are the family runner's ([`Runner::stage_times`]): GPU time from CUDA events recorded in
//! the graph (or around eager launches) for GPU steps, the monotonic clock for host steps;
//! never host clocks around asynchronous work.

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
use tether_bundle::Bundle;
use tether_family::family::{
    Environment, Execution, Family, Input, InputSource, MappedIo, Precision, RunOptions, Runner,
    SyncPolicy,
};

use crate::cli::run::{JSON_SCHEMA_VERSION, open_runner, write_atomic};
use crate::cli::{OutputError, escape};
use crate::outln;

/// Arguments of `tether bench`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("launch").args(["graph", "eager", "compare"]))]
pub struct BenchArgs {
    /// The bundle.
    bundle: PathBuf,
    /// The input (decoded once, before timing).
    input: PathBuf,
    /// Timed runs (1 to 1,000,000,000; with --compare, runs of each). Default 200, or no
    /// limit with --duration.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    runs: Option<u64>,
    /// Stop after this many whole seconds, 1 to 86,400 (whichever comes first with --runs).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    duration: Option<u64>,
    /// Untimed warm-up runs (of each, with --compare), after the first run, which prepares
    /// the session (on a GPU: captures the graph) and is never timed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
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
    /// Threads of the CPU engine. Default: the cores this process may run on, or 1 when it
    /// runs under a real-time scheduling policy or only on isolated cores (`isolcpus`).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: Option<u64>,
    /// Print JSON to stdout, or write it to FILE (atomically).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Draw the latency histogram and CDF of every stage to FILE (`.svg` or `.png`).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    /// Where to run: `auto`, `cpu`, `cuda`, `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Time runs on the frame the first (untimed) run left in the session's input staging:
    /// no copy of the frame per run, the runtime's share when a producer writes its frames
    /// into the staging in place (`Detector::staging_mut`; the producer's writes are not
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
    let v: f64 = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if v.is_finite() && v > 0.0 && v <= 100_000.0 {
        Ok(v)
    } else {
        Err(format!("`{s}`: a rate must be in (0, 100000] Hz"))
    }
}

fn parse_deadline(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if v.is_finite() && v > 0.0 && v <= 3_600_000.0 {
        Ok(v)
    } else {
        Err(format!("`{s}`: a deadline must be in (0, 3600000] ms"))
    }
}

fn parse_sync(s: &str) -> Result<SyncPolicy, String> {
    s.parse::<SyncPolicy>().map_err(|e| format!("--sync {e}"))
}

fn parse_staging(s: &str) -> Result<MappedIo, String> {
    s.parse::<MappedIo>().map_err(|e| format!("--staging {e}"))
}

/// The default of `--threads`: 1 under a real-time scheduling policy (`SCHED_FIFO`,
/// `SCHED_RR`) or when every core this process may run on is isolated
/// (`/sys/devices/system/cpu/isolated`); else the cores available to it (affinity mask and
/// cgroup quota, as [`std::thread::available_parallelism`] counts them). Returns the count
/// and why.
pub fn default_threads() -> (usize, &'static str) {
    // SAFETY: sched_getscheduler(0) reads the calling process's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
        return (1, "real-time scheduling policy");
    }
    if let Some(allowed) = affinity()
        && let Some(isolated) = std::fs::read_to_string("/sys/devices/system/cpu/isolated")
            .ok()
            .and_then(|s| parse_cpu_list(&s))
        && !allowed.is_empty()
        && allowed.iter().all(|c| isolated.contains(c))
    {
        return (1, "isolated cores");
    }
    match std::thread::available_parallelism() {
        Ok(n) => (n.get(), "cores available"),
        Err(_) => (1, "core count unknown"),
    }
}

/// The CPUs this process may run on.
fn affinity() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    Some(
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `i` is below CPU_SETSIZE and `set` is initialised.
            .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
            .collect(),
    )
}

/// Parse a kernel CPU list (`0-3,8,10-11`); `None` when malformed, empty for an empty list.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// Latency statistics of one stage, from a fixed-memory histogram (nanosecond resolution,
/// three significant digits).
struct Stage {
    hist: Histogram<u64>,
    /// Nanoseconds added before recording, so that a difference down to `-offset_ns` can be
    /// recorded (0 for times; [`BEYOND_FLOOR_OFFSET_NS`] for `beyond-floor`).
    offset_ns: u64,
    /// The exact sum of what was recorded, in ms: with an offset the mean comes from it (the
    /// histogram saturates below `-offset_ns`).
    sum_ms: f64,
}

/// The offset of the `beyond-floor` histogram: paired differences down to -50 us are
/// recorded as they are (lower ones at -50 us), at a resolution of 32 to 64 ns where the
/// differences lie (0 to 50 us: 50 to 100 us recorded, three significant digits).
const BEYOND_FLOOR_OFFSET_NS: u64 = 50_000;

impl Stage {
    fn new() -> Self {
        Self::with_offset(0)
    }
    fn with_offset(offset_ns: u64) -> Self {
        Stage {
            // 1 ns .. 1 hour, 3 significant figures: a fixed few hundred KiB whatever the runs.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds"),
            offset_ns,
            sum_ms: 0.0,
        }
    }
    fn record_ms(&mut self, ms: f64) {
        self.sum_ms += ms;
        let ns = (ms * 1e6 + self.offset_ns as f64)
            .round()
            .clamp(1.0, 3.6e12) as u64;
        // In bounds by the clamp: recording cannot fail.
        let _ = self.hist.record(ns);
    }
    fn to_ms(&self, ns: f64) -> f64 {
        (ns - self.offset_ns as f64) / 1e6
    }
    fn ms(&self, q: f64) -> f64 {
        self.to_ms(self.hist.value_at_quantile(q) as f64)
    }
    fn min(&self) -> f64 {
        self.to_ms(self.hist.min() as f64)
    }
    fn max(&self) -> f64 {
        self.to_ms(self.hist.max() as f64)
    }
    fn mean(&self) -> f64 {
        match self.hist.len() {
            n if self.offset_ns != 0 && n > 0 => self.sum_ms / n as f64,
            _ => self.to_ms(self.hist.mean()),
        }
    }
    fn stddev(&self) -> f64 {
        self.hist.stdev() / 1e6
    }
    /// Coefficient of variation (standard deviation over mean).
    fn cv(&self) -> f64 {
        let m = self.mean();
        if m > 0.0 && self.offset_ns == 0 {
            self.stddev() / m
        } else {
            0.0
        }
    }
    fn stats(&self) -> Value {
        json!({
            "min": self.min(),
            "p50": self.ms(0.50),
            "p90": self.ms(0.90),
            "p99": self.ms(0.99),
            "p99.9": self.ms(0.999),
            "max": self.max(),
            "mean": self.mean(),
            "stddev": self.stddev(),
            "cv": self.cv(),
            "count": self.hist.len(),
        })
    }
}

/// One way of running (graphs, eager, or the only one): its runner and what it measured.
struct Variant {
    name: &'static str,
    runner: Box<dyn Runner>,
    env: Environment,
    /// Host wall time of each `Runner::run` (the host time per call).
    total: Stage,
    stages: Vec<(String, Stage)>,
    /// Host time a run spent beyond the GPU time of its GPU-timed stages.
    overhead: Option<Stage>,
    /// With `--floor`: the bare launch + wait after each run, and each run's host time
    /// beyond it (run minus the floor after it).
    floor: Option<(Stage, Stage)>,
    /// With `--floor`: wall time spent in the bare launches (not part of the throughput).
    floor_wall: Duration,
    runs: u64,
    missed: u64,
    skipped: u64,
}

impl Variant {
    /// Run once (untimed) so that the runner prepares its session, then read how it
    /// executes.
    fn prepare(&mut self, input: &dyn Input) -> Result<()> {
        self.runner.run(input)?;
        self.env = self.runner.environment();
        self.overhead = (!self.env.gpu_timed.is_empty()).then(Stage::new);
        Ok(())
    }

    fn record(&mut self, service: Duration) {
        let total_ms = service.as_secs_f64() * 1e3;
        self.total.record_ms(total_ms);
        if self.floor.is_some() {
            // Per-stage timing is off: the stages the runner lists hold no times.
            self.runs += 1;
            return;
        }
        let mut gpu_ms = 0.0;
        for (name, ms) in self.runner.stage_times() {
            if self.env.gpu_timed.contains(&name) {
                gpu_ms += ms;
            }
            match self.stages.iter_mut().find(|(n, _)| *n == name) {
                Some((_, s)) => s.record_ms(ms),
                None => {
                    let mut s = Stage::new();
                    s.record_ms(ms);
                    self.stages.push((name, s));
                }
            }
        }
        if let Some(o) = &mut self.overhead {
            o.record_ms((total_ms - gpu_ms).max(0.0));
        }
        self.runs += 1;
    }

    /// One timed run: the whole run, or (`staged`) the run on the staged input (checked
    /// to exist before timing).
    fn run(&mut self, input: &dyn Input, staged: bool) -> Result<()> {
        if staged {
            self.runner
                .run_staged()
                .context("this family has no staged path (--staged)")?
        } else {
            self.runner.run(input)
        }
    }

    /// With `--floor`: a bare launch + wait of the captured graph(s), timed, and the paired
    /// difference to the run before it (`service`).
    fn record_floor(&mut self, service: Duration) -> Result<()> {
        let t0 = Instant::now();
        self.runner
            .launch_floor()
            .context("this family offers no bare graph launch (--floor)")??;
        let floor = t0.elapsed();
        if let Some((f, beyond)) = &mut self.floor {
            let d = service.as_secs_f64() - floor.as_secs_f64();
            f.record_ms(floor.as_secs_f64() * 1e3);
            beyond.record_ms(d * 1e3);
            self.floor_wall += floor;
        }
        Ok(())
    }

    /// Runs per second of the wall time the runs took (the bare launches of `--floor`
    /// left out).
    fn throughput(&self, wall_s: f64) -> f64 {
        let busy = wall_s - self.floor_wall.as_secs_f64();
        if busy > 0.0 {
            self.runs as f64 / busy
        } else {
            0.0
        }
    }

    /// `(name, clock, stage)` rows: the total, every stage, the host overhead.
    fn rows(&self) -> Vec<(String, &'static str, &Stage)> {
        let mut v = vec![("total".to_string(), "host", &self.total)];
        for (n, s) in &self.stages {
            let clock = if self.env.gpu_timed.contains(n) {
                "gpu"
            } else {
                "host"
            };
            v.push((n.clone(), clock, s));
        }
        if let Some(o) = &self.overhead {
            v.push(("host-overhead".to_string(), "host", o));
        }
        if let Some((floor, beyond)) = &self.floor {
            v.push(("floor".to_string(), "host", floor));
            v.push(("beyond-floor".to_string(), "host", beyond));
        }
        v
    }

    fn json(&self, wall_s: f64, rate: bool, deadline: bool) -> Value {
        json!({
            "name": self.name,
            "execution": self.env.execution.as_str(),
            "execution_note": self.env.execution_note,
            "runs": self.runs,
            "missed_deadlines": deadline.then_some(self.missed),
            "skipped_frames": rate.then_some(self.skipped),
            "throughput_fps": self.throughput(wall_s),
            "total_ms": self.total.stats(),
            "stages_ms": self.stage_json(),
        })
    }

    fn stage_json(&self) -> Vec<Value> {
        self.rows()
            .into_iter()
            .skip(1)
            .map(|(n, clock, s)| json!({ "stage": n, "clock": clock, "stats": s.stats() }))
            .collect()
    }
}

/// What `bench` knows of the machine it ran on.
struct Machine {
    lines: Vec<(&'static str, String)>,
}

impl Machine {
    fn probe(
        env: &Environment,
        sync: SyncPolicy,
        staging: MappedIo,
        precision: Precision,
        threads_why: &str,
    ) -> Self {
        let report = tether_targets::probe::probe();
        let mut lines: Vec<(&'static str, String)> = Vec::new();
        lines.push(("tether", env!("CARGO_PKG_VERSION").to_string()));
        lines.push(("device", env.device.clone()));
        if let Some(g) = report.cuda.devices.first() {
            lines.push((
                "gpu",
                format!(
                    "{} (sm_{}, {} MiB)",
                    g.name,
                    g.sm.number(),
                    g.total_memory_bytes >> 20
                ),
            ));
        }
        if let Some(v) = report.cuda.driver_version {
            lines.push(("cuda driver", v.to_string()));
        }
        lines.push(("cpu", cpu_model()));
        lines.push((
            "cores",
            std::thread::available_parallelism().map_or_else(|_| "?".into(), |n| n.to_string()),
        ));
        lines.push(("cpu governor", governors()));
        if let Some(m) = &report.model {
            lines.push(("board", m.clone()));
        }
        if let Some(p) = &report.power_mode {
            lines.push((
                "power mode",
                format!("{} ({})", p.id, p.name.as_deref().unwrap_or("unnamed")),
            ));
        } else if report.l4t.is_some() {
            lines.push(("power mode", "unreadable".into()));
        }
        if env.execution.on_gpu() {
            use tether_runtime::tensorrt::{LoadOptions, TensorRt};
            use tether_targets::libs::{self, Library};
            lines.push((
                "tensorrt",
                match TensorRt::load_with(&LoadOptions::new(None)) {
                    Ok((lib, _)) => format!("{} {}", lib.version(), lib.flavor()),
                    Err(_) => "not found".into(),
                },
            ));
            let search = tether_targets::ProbeOptions::system().search_env();
            let cudnn = libs::identify(&libs::search_list(Library::Cudnn, &search, None));
            lines.push((
                "cudnn",
                match (cudnn.version, cudnn.path) {
                    (Some(v), Some(p)) => format!("{v} ({p})"),
                    (None, Some(p)) => format!("found ({p})"),
                    _ => "not found".into(),
                },
            ));
        }
        for (net, why) in &env.engine_choice {
            lines.push(("engine", format!("{net}: {why}")));
        }
        lines.push((
            "execution",
            if env.execution_note.is_empty() {
                env.execution.to_string()
            } else {
                format!("{} ({})", env.execution, env.execution_note)
            },
        ));
        if env.execution.on_gpu() {
            lines.push(("sync", sync.as_str().to_string()));
            lines.push((
                "staging",
                match env.staging {
                    Some(s) if s != staging => format!("{} ({})", staging.as_str(), s.as_str()),
                    _ => staging.as_str().to_string(),
                },
            ));
            lines.push(("precision", precision.as_str().to_string()));
        } else if staging != MappedIo::Auto && env.execution == Execution::Host {
            lines.push((
                "staging",
                format!(
                    "{} asked, but this bundle runs on the CPU: nothing is staged",
                    staging.as_str()
                ),
            ));
        }
        lines.push((
            "cpu threads",
            format!("{} ({threads_why})", env.cpu_threads.max(1)),
        ));
        Machine { lines }
    }

    fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut engines = serde_json::Map::new();
        for (k, v) in &self.lines {
            if *k == "engine" {
                if let Some((net, why)) = v.split_once(": ") {
                    engines.insert(net.to_string(), json!(why));
                }
            } else {
                m.insert(k.replace(' ', "_"), json!(v));
            }
        }
        m.insert("engine_choice".into(), Value::Object(engines));
        Value::Object(m)
    }
}

/// `model name` of /proc/cpuinfo (x86), or the first `Model`/`Hardware`/`CPU part` line.
fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    for key in ["model name", "Model", "Hardware", "CPU part"] {
        if let Some(v) = text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        }) {
            return v;
        }
    }
    std::env::consts::ARCH.to_string()
}

/// The CPU frequency governors in use (`performance`, `schedutil x4, performance x4`), or
/// why none can be read (virtual machines have no cpufreq).
fn governors() -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..4096 {
        let p = format!("/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor");
        match std::fs::read_to_string(&p) {
            Ok(g) => *counts.entry(g.trim().to_string()).or_default() += 1,
            Err(_) if i == 0 => return "unreadable (no cpufreq: a virtual machine?)".into(),
            Err(_) => break,
        }
    }
    if counts.len() == 1 {
        return counts.into_keys().next().unwrap_or_default();
    }
    counts
        .iter()
        .map(|(g, n)| format!("{g} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Check that an output file's folder exists (before any work).
fn check_output(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if parent.is_dir() {
        Ok(())
    } else {
        Err(OutputError {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "folder does not exist"),
        }
        .into())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PlotFormat {
    Svg,
    Png,
}

fn plot_format(path: &Path) -> Option<PlotFormat> {
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

/// Run `tether bench`.
pub fn bench(a: &BenchArgs, matches: &ArgMatches) -> Result<ExitCode> {
    if let Some(p) = a.json.as_ref().filter(|p| p.as_os_str() != "-") {
        check_output(p)?;
    }
    let plot = match &a.plot {
        Some(p) => {
            let Some(f) = plot_format(p) else {
                crate::usage!(
                    "--plot {}: the file must end in .svg or .png",
                    escape(&p.display().to_string())
                );
            };
            check_output(p)?;
            Some((p.clone(), f))
        }
        None => None,
    };
    // Ctrl-C from here on stops the benchmark after the run in flight (loading finishes
    // first) and still reports what ran.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        // A second handler cannot be installed in one process; ignore that case (tests).
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let (threads, threads_why) = match a.threads {
        Some(n) => (n as usize, "--threads"),
        None => default_threads(),
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
    let input = variants[0].runner.load(InputSource::File(&a.input))?;
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
        let (_, _, second) = open_runner(&a.bundle, matches, &options(false))?;
        variants.push(variant("eager", second));
        variants[1].prepare(input.as_ref())?;
    }
    if !variants[0].env.execution.on_gpu() && first_name == "graph" {
        variants[0].name = "host";
        if a.graph && variants[0].env.execution_note.is_empty() {
            variants[0].env.execution_note =
                "--graph asked, but this bundle runs on the CPU: nothing to capture".into();
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
            v.run(input.as_ref(), a.staged)?;
        }
    }
    let runs = a
        .runs
        .unwrap_or(if a.duration.is_some() { u64::MAX } else { 200 });
    let period = a.rate.map(|hz| Duration::from_secs_f64(1.0 / hz));
    let deadline = a
        .deadline
        .map(|ms| Duration::from_secs_f64(ms / 1e3))
        .or(period);
    let show = a.json.as_ref().is_none_or(|p| p.as_os_str() != "-");
    let bar = progress(runs, a.duration, show);
    let started = Instant::now();
    let end = a.duration.map(|s| started + Duration::from_secs(s));
    let n = variants.len();
    let mut release_index = 0u64;
    let mut frame = 0u64;
    loop {
        let v = (frame % n as u64) as usize;
        if variants[v].runs >= runs
            || stop.load(Ordering::SeqCst)
            || end.is_some_and(|e| Instant::now() >= e)
        {
            break;
        }
        // When this frame is released: now (closed loop) or on the fixed schedule.
        let release = match period {
            None => Instant::now(),
            Some(p) => {
                let mut release = started + p.mul_f64(release_index as f64);
                let now = Instant::now();
                if now >= release + p {
                    // A whole period late: the releases missed are dropped, as a camera's.
                    let k = ((now - started).as_secs_f64() / p.as_secs_f64()).floor() as u64;
                    variants[v].skipped += k.saturating_sub(release_index);
                    release_index = k;
                    release = started + p.mul_f64(k as f64);
                } else if release > now && !sleep_until(release, &stop) {
                    break;
                }
                release_index += 1;
                release
            }
        };
        let t0 = Instant::now();
        variants[v].run(input.as_ref(), a.staged)?;
        let done = Instant::now();
        // The deadline counts from the release; back to back the release is the start.
        if deadline.is_some_and(|d| done - release.min(t0) > d) {
            variants[v].missed += 1;
        }
        variants[v].record(done - t0);
        if a.floor {
            variants[v].record_floor(done - t0)?;
        }
        frame += 1;
        if frame.is_multiple_of(16) || period.is_some() {
            match a.duration {
                Some(_) => bar.set_position(started.elapsed().as_secs()),
                None => bar.set_position(variants[0].runs),
            }
        }
    }
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let interrupted = stop.load(Ordering::SeqCst) && variants.iter().any(|v| v.runs < runs);
    let engines: BTreeMap<String, String> = variants[0].runner.engines().into_iter().collect();
    let summary = Summary {
        args: a,
        bundle: &bundle,
        family,
        input: input.as_ref(),
        engines: &engines,
        machine: &machine,
        variants: &variants,
        wall,
        interrupted,
        deadline,
    };
    let doc = summary.json();
    match &a.json {
        Some(p) if p.as_os_str() != "-" => {
            write_atomic(p, serde_json::to_string_pretty(&doc)?.as_bytes())?;
        }
        Some(_) => outln!("{}", serde_json::to_string_pretty(&doc)?)?,
        None => {}
    }
    if let Some((path, format)) = &plot {
        let title = format!(
            "{} on {} - {}",
            bundle.identity().name,
            Path::new(input.label()).file_name().map_or_else(
                || input.label().to_string(),
                |f| f.to_string_lossy().into_owned()
            ),
            summary.mode_line()
        );
        let bytes = plot::render(&title, &variants, *format).context("drawing the plot")?;
        write_atomic(path, &bytes)?;
    }
    if show {
        summary.print()?;
        if let Some((path, _)) = &plot {
            outln!("  plot: {}", path.display())?;
        }
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

fn variant(name: &'static str, runner: Box<dyn Runner>) -> Variant {
    let env = runner.environment();
    let overhead = (!env.gpu_timed.is_empty()).then(Stage::new);
    Variant {
        name,
        runner,
        env,
        total: Stage::new(),
        stages: Vec::new(),
        overhead,
        floor: None,
        floor_wall: Duration::ZERO,
        runs: 0,
        missed: 0,
        skipped: 0,
    }
}

/// Sleep until `t`, waking at least every 50 ms to see Ctrl-C; `false` when stopped.
fn sleep_until(t: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= t {
            return true;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

fn progress(runs: u64, duration: Option<u64>, show: bool) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (len, template) = match duration {
        Some(s) => (s, "{bar:30} {pos}/{len} s eta {eta}"),
        None => (runs, "{bar:30} {pos}/{len} runs {per_sec} eta {eta}"),
    };
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(template).expect("static template"));
    bar
}

/// Everything the report needs.
struct Summary<'a> {
    args: &'a BenchArgs,
    bundle: &'a Bundle,
    family: &'static dyn Family,
    input: &'a dyn Input,
    engines: &'a BTreeMap<String, String>,
    machine: &'a Machine,
    variants: &'a [Variant],
    wall: f64,
    interrupted: bool,
    deadline: Option<Duration>,
}

impl Summary<'_> {
    fn mode_line(&self) -> String {
        let a = self.args;
        let mut s = match a.rate {
            Some(hz) => format!("open loop at {hz} Hz"),
            None => "closed loop".to_string(),
        };
        if let Some(d) = self.deadline {
            s.push_str(&format!(", deadline {:.3} ms", d.as_secs_f64() * 1e3));
        }
        if a.staged {
            s.push_str(", staged input");
        }
        if a.floor {
            s.push_str(", bare-launch floor after each run");
        }
        s
    }

    fn json(&self) -> Value {
        let a = self.args;
        let v0 = &self.variants[0];
        let rate = a.rate.is_some();
        let has_deadline = self.deadline.is_some();
        let mut doc = json!({
            "schema_version": JSON_SCHEMA_VERSION,
            "command": "bench",
            "bundle": { "path": a.bundle.display().to_string(), "name": self.bundle.identity().name },
            "family": self.family.name(),
            "input": self.input.label(),
            "engines": self.engines,
            "environment": self.machine.json(),
            "runs": v0.runs,
            "warmup": a.warmup,
            "mode": if rate { "open-loop" } else { "closed-loop" },
            "staged": a.staged,
            "floor": a.floor,
            "rate_hz": a.rate,
            "deadline_ms": self.deadline.map(|d| d.as_secs_f64() * 1e3),
            "missed_deadlines": has_deadline.then_some(v0.missed),
            "skipped_frames": rate.then_some(v0.skipped),
            "throughput_fps": v0.throughput(self.wall),
            "wall_s": self.wall,
            "interrupted": self.interrupted,
            "total_ms": v0.total.stats(),
            "stages_ms": v0.stage_json(),
            "variants": self.variants.iter().map(|v| v.json(self.wall, rate, has_deadline)).collect::<Vec<_>>(),
        });
        if let Some(r) = self.ratio() {
            doc["ratio_eager_over_graph"] = r;
        }
        doc
    }

    /// Eager over graph, for the total: `p50`, `p99`, `p99.9`, `mean`.
    fn ratio(&self) -> Option<Value> {
        let g = self.variants.iter().find(|v| v.name == "graph")?;
        let e = self.variants.iter().find(|v| v.name == "eager")?;
        if g.runs == 0 || e.runs == 0 {
            return None;
        }
        let r = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        Some(json!({
            "p50": r(e.total.ms(0.5), g.total.ms(0.5)),
            "p99": r(e.total.ms(0.99), g.total.ms(0.99)),
            "p99.9": r(e.total.ms(0.999), g.total.ms(0.999)),
            "mean": r(e.total.mean(), g.total.mean()),
        }))
    }

    fn print(&self) -> Result<()> {
        let a = self.args;
        outln!(
            "{} on {} ({}; {} warm-up{})",
            a.bundle.display(),
            escape(self.input.label()),
            self.mode_line(),
            a.warmup,
            if self.interrupted {
                "; interrupted"
            } else {
                ""
            }
        )?;
        for (k, v) in &self.machine.lines {
            outln!("  {:<13} {}", k, escape(v))?;
        }
        for v in self.variants {
            outln!()?;
            let fps = v.throughput(self.wall);
            outln!(
                "  [{}] {} runs, {:.1} frames/s{}",
                v.name,
                v.runs,
                fps,
                if self.variants.len() > 1 {
                    " (interleaved)"
                } else {
                    ""
                }
            )?;
            outln!(
                "  {:<14} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}",
                "stage",
                "clock",
                "min ms",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "mean ms",
                "sd ms",
                "cv %"
            )?;
            for (name, clock, s) in v.rows() {
                outln!(
                    "  {:<14} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.3} {:>6.2}",
                    escape(&name),
                    clock,
                    s.min(),
                    s.ms(0.5),
                    s.ms(0.9),
                    s.ms(0.99),
                    s.ms(0.999),
                    s.max(),
                    s.mean(),
                    s.stddev(),
                    s.cv() * 100.0
                )?;
            }
            if let Some((_, beyond)) = &v.floor {
                outln!(
                    "  host time beyond a bare graph launch + wait (paired): p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, mean {:.2} us",
                    beyond.ms(0.5) * 1e3,
                    beyond.ms(0.99) * 1e3,
                    beyond.ms(0.999) * 1e3,
                    beyond.mean() * 1e3
                )?;
            }
            if v.total.cv() > 0.025 {
                outln!(
                    "  warning: the total's coefficient of variation is {:.1} % (> 2.5 %): the figures are noisy",
                    v.total.cv() * 100.0
                )?;
            }
            if let Some(d) = self.deadline {
                outln!(
                    "  deadline {:.3} ms: {} of {} frames missed it{}",
                    d.as_secs_f64() * 1e3,
                    v.missed,
                    v.runs,
                    match a.rate {
                        Some(_) =>
                            format!("; {} releases skipped (a whole period late)", v.skipped),
                        None => String::new(),
                    }
                )?;
            }
        }
        if let Some(r) = self.ratio() {
            let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
            outln!()?;
            outln!(
                "  eager / graph (total): p50 {:.3}x, p99 {:.3}x, p99.9 {:.3}x, mean {:.3}x",
                f("p50"),
                f("p99"),
                f("p99.9"),
                f("mean")
            )?;
        }
        Ok(())
    }
}

/// The latency plot: per stage, a histogram (the body, up to p99.9) and the CDF (up to the
/// maximum), every variant overlaid.
mod plot {
    use super::{PlotFormat, Stage, Variant};
    use anyhow::{Result, anyhow};
    use plotters::coord::Shift;
    use plotters::prelude::*;

    const WIDTH: u32 = 1400;
    const ROW: u32 = 240;
    const TITLE: u32 = 44;
    const BINS: usize = 60;
    const COLOURS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14)];

    /// Render the plot as SVG or PNG bytes.
    pub fn render(title: &str, variants: &[Variant], format: PlotFormat) -> Result<Vec<u8>> {
        let rows = rows(variants);
        let height = TITLE + ROW * rows.len().max(1) as u32;
        match format {
            PlotFormat::Svg => {
                let mut svg = String::new();
                {
                    let root =
                        SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
                    draw(&root, title, &rows).map_err(|e| anyhow!("{e}"))?;
                    root.present().map_err(|e| anyhow!("{e}"))?;
                }
                Ok(svg.into_bytes())
            }
            PlotFormat::Png => {
                let mut rgb = vec![255u8; (WIDTH * height * 3) as usize];
                {
                    let root =
                        mono::MonoText(BitMapBackend::with_buffer(&mut rgb, (WIDTH, height)))
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
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2))
                });
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

    /// A bitmap backend whose text is drawn with embedded-graphics' mono fonts: plotters'
    /// own bitmap text needs system fonts (font-kit) or a font file, neither of which a
    /// robot's image has.
    mod mono {
        use embedded_graphics::mono_font::ascii::{FONT_6X10, FONT_7X13, FONT_9X15, FONT_10X20};
        use embedded_graphics::mono_font::{MonoFont, MonoTextStyle};
        use embedded_graphics::pixelcolor::Rgb888;
        use embedded_graphics::prelude::*;
        use embedded_graphics::text::{Baseline, Text};
        use plotters::prelude::{BitMapBackend, DrawingBackend};
        use plotters_backend::text_anchor::{HPos, VPos};
        use plotters_backend::{
            BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
        };

        /// The wrapped bitmap backend.
        pub struct MonoText<'a>(pub BitMapBackend<'a>);

        /// The mono font whose advance is closest to the width plotters lays text out with
        /// (its font-less estimate: 0.7 em a character, an em being `size / 1.24^2`), so
        /// captions and legends fit the boxes plotters computes for them.
        fn font(size: f64) -> &'static MonoFont<'static> {
            let want = size / (1.24 * 1.24) * 0.7;
            [&FONT_6X10, &FONT_7X13, &FONT_9X15, &FONT_10X20]
                .into_iter()
                .min_by(|a, b| {
                    let d = |f: &MonoFont<'_>| {
                        (f64::from(f.character_size.width + f.character_spacing) - want).abs()
                    };
                    d(a).total_cmp(&d(b))
                })
                .unwrap_or(&FONT_6X10)
        }

        fn extent(text: &str, f: &MonoFont<'_>) -> (u32, u32) {
            let n = text.chars().count() as u32;
            (
                n * (f.character_size.width + f.character_spacing),
                f.character_size.height,
            )
        }

        /// Collects the pixels a text sets.
        struct Pixels(Vec<(i32, i32)>);

        impl OriginDimensions for Pixels {
            fn size(&self) -> Size {
                Size::new(1 << 15, 1 << 15)
            }
        }

        impl DrawTarget for Pixels {
            type Color = Rgb888;
            type Error = std::convert::Infallible;
            fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(
                &mut self,
                pixels: I,
            ) -> Result<(), Self::Error> {
                self.0
                    .extend(pixels.into_iter().map(|Pixel(p, _)| (p.x, p.y)));
                Ok(())
            }
        }

        type Error<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

        impl<'a> DrawingBackend for MonoText<'a> {
            type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

            fn get_size(&self) -> (u32, u32) {
                self.0.get_size()
            }
            fn ensure_prepared(&mut self) -> Result<(), Error<'a>> {
                self.0.ensure_prepared()
            }
            fn present(&mut self) -> Result<(), Error<'a>> {
                self.0.present()
            }
            fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), Error<'a>> {
                self.0.draw_pixel(p, c)
            }
            fn draw_line<S: BackendStyle>(
                &mut self,
                from: BackendCoord,
                to: BackendCoord,
                style: &S,
            ) -> Result<(), Error<'a>> {
                self.0.draw_line(from, to, style)
            }
            fn draw_rect<S: BackendStyle>(
                &mut self,
                ul: BackendCoord,
                br: BackendCoord,
                style: &S,
                fill: bool,
            ) -> Result<(), Error<'a>> {
                self.0.draw_rect(ul, br, style, fill)
            }
            fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
                &mut self,
                path: I,
                style: &S,
            ) -> Result<(), Error<'a>> {
                self.0.draw_path(path, style)
            }
            fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
                &mut self,
                vert: I,
                style: &S,
            ) -> Result<(), Error<'a>> {
                self.0.fill_polygon(vert, style)
            }
            fn draw_circle<S: BackendStyle>(
                &mut self,
                center: BackendCoord,
                radius: u32,
                style: &S,
                fill: bool,
            ) -> Result<(), Error<'a>> {
                self.0.draw_circle(center, radius, style, fill)
            }

            fn estimate_text_size<T: BackendTextStyle>(
                &self,
                text: &str,
                style: &T,
            ) -> Result<(u32, u32), Error<'a>> {
                Ok(extent(text, font(style.size())))
            }

            fn draw_text<T: BackendTextStyle>(
                &mut self,
                text: &str,
                style: &T,
                pos: BackendCoord,
            ) -> Result<(), Error<'a>> {
                let colour = style.color();
                if colour.alpha == 0.0 {
                    return Ok(());
                }
                let f = font(style.size());
                let (w, h) = extent(text, f);
                let (w, h) = (w as i32, h as i32);
                let dx = match style.anchor().h_pos {
                    HPos::Left => 0,
                    HPos::Right => -w,
                    HPos::Center => -w / 2,
                };
                let dy = match style.anchor().v_pos {
                    VPos::Top => 0,
                    VPos::Center => -h / 2,
                    VPos::Bottom => -h,
                };
                let mut pixels = Pixels(Vec::new());
                let _ = Text::with_baseline(
                    text,
                    Point::zero(),
                    MonoTextStyle::new(f, Rgb888::BLACK),
                    Baseline::Top,
                )
                .draw(&mut pixels);
                let trans = style.transform();
                let (bw, bh) = self.get_size();
                for (x, y) in pixels.0 {
                    let (x, y) = trans.transform(x + dx, y + dy);
                    let (x, y) = (pos.0 + x, pos.1 + y);
                    if x >= 0 && y >= 0 && x < bw as i32 && y < bh as i32 {
                        self.0.draw_pixel((x, y), colour)?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn stage_statistics_come_from_the_histogram() {
        let mut s = Stage::new();
        for i in 1..=1000 {
            s.record_ms(i as f64 / 100.0); // 0.01 .. 10 ms
        }
        let v = s.stats();
        let close = |k: &str, want: f64| {
            let got = v[k].as_f64().unwrap();
            assert!((got - want).abs() <= want * 0.002, "{k}: {got} vs {want}");
        };
        close("min", 0.01);
        close("p50", 5.0);
        close("p90", 9.0);
        close("p99", 9.9);
        close("p99.9", 9.99);
        close("max", 10.0);
        close("mean", 5.005);
        // Population standard deviation of 0.01..10 step 0.01: sqrt((n^2 - 1) / 12) * 0.01.
        close("stddev", ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt() * 0.01);
        assert_eq!(v["count"], 1000);
    }

    #[test]
    fn plot_formats_follow_the_extension() {
        assert!(plot_format(Path::new("a.svg")) == Some(PlotFormat::Svg));
        assert!(plot_format(Path::new("a.PNG")) == Some(PlotFormat::Png));
        assert!(plot_format(Path::new("a.jpg")).is_none());
        assert!(plot_format(Path::new("a")).is_none());
    }

    #[test]
    fn default_threads_is_at_least_one() {
        let (n, why) = default_threads();
        assert!(n >= 1, "{why}");
    }
}
