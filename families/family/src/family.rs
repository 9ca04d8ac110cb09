//! The interface a model family implements for tools (feature `cli`), and the registry the
//! `tether` CLI dispatches on.
//!
//! The CLI knows no family: `tether build --family NAME` asks the family named for its own
//! arguments and recipe; `inspect`, `run` and `bench` read the bundle's family from its
//! identity and ask that family to describe the bundle, open a runner, read inputs, and
//! print or annotate results. Adding a family is implementing [`Family`] in its crate and
//! adding it to the registry (`src/families.rs` in the facade crate).

use std::any::Any;
use std::fmt::Display;
use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, BundleWriter, TensorDesc};

pub use crate::selftest::{Report, SelfTest};

/// A command-line value that parses but is out of range (`--score-threshold -1`): tools exit
/// with their usage status (2) for it, as for a value that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The usage error of a `--NAME` value outside `[lo, hi]`: `--NAME V: accepted LO to HI`,
/// the wording of [`crate::args::whole`]'s refusals, so that every range reads alike.
pub fn out_of_range(
    name: &str,
    value: impl Display,
    lo: impl Display,
    hi: impl Display,
) -> UsageError {
    UsageError(format!("--{name} {value}: accepted {lo} to {hi}"))
}

/// Check that an optional `--NAME` value lies in `[lo, hi]`.
///
/// # Errors
/// [`UsageError`] naming the option, the value and the range ([`out_of_range`]).
pub fn check_range(name: &str, value: Option<f32>, lo: f32, hi: f32) -> Result<(), UsageError> {
    match value {
        Some(v) if !(lo..=hi).contains(&v) => Err(out_of_range(name, v, lo, hi)),
        _ => Ok(()),
    }
}

/// The common part of `tether build`, given to every recipe (defined with the recipes'
/// other shared parts, [`crate::recipe`]).
pub use crate::recipe::{BuildCommon, file_stem};

/// A network of a built bundle that TensorRT plans may be added for (`--engine tensorrt`):
/// its ONNX file and its I/O at the shapes the bundle runs at.
#[derive(Clone, Debug)]
pub struct PlanSource {
    /// Network name (`<family>/<network>/...`).
    pub network: String,
    /// The ONNX file it was built from.
    pub onnx: std::path::PathBuf,
    /// Its inputs and outputs with concrete shapes.
    pub tensors: Vec<TensorDesc>,
    /// Inputs whose declared shape is dynamic (they need an optimization profile).
    pub dynamic_inputs: Vec<String>,
}

/// What a recipe produced.
pub struct Built {
    /// The bundle, ready to write.
    pub writer: BundleWriter,
    /// Networks TensorRT plans can be built for.
    pub networks: Vec<PlanSource>,
    /// Lines for the build log (configuration, classes, ...), without trailing newlines.
    pub summary: Vec<String>,
}

/// A family's description of one of its bundles, for `tether inspect`.
#[derive(Clone, Debug, Default)]
pub struct Description {
    /// `(key, value)` lines for the text output, in order.
    pub lines: Vec<(String, String)>,
    /// The same as JSON (an object), under the key `family_config`.
    pub json: serde_json::Value,
}

impl Description {
    /// This description closed by the bundle's self-test: the line `self-test` and the key
    /// `self_test` of [`Description::json`] (an object) from [`describe_self_test`]
    /// (`family` is the family's name, `describe` its summary of a readable test).
    #[must_use]
    pub fn with_self_test(
        mut self,
        bundle: &Bundle,
        family: &str,
        describe: impl FnOnce(&SelfTest) -> (String, serde_json::Value),
    ) -> Self {
        let (line, test) = describe_self_test(bundle, family, describe);
        self.lines.push(("self-test".into(), line));
        self.json["self_test"] = test;
        self
    }
}

/// The `self-test` line and JSON of a family's [`Description`]: `describe` turns the
/// bundle's readable self-test into its own summary line and JSON object (the JSON gains
/// `format_version` and `source`); `none` (JSON null) without one; an unreadable one (an old
/// format version) is described, not an error, so that `inspect` still shows the rest.
pub fn describe_self_test(
    bundle: &Bundle,
    family: &str,
    describe: impl FnOnce(&SelfTest) -> (String, serde_json::Value),
) -> (String, serde_json::Value) {
    match SelfTest::of_bundle(bundle, family) {
        Ok(None) => ("none".into(), serde_json::Value::Null),
        Ok(Some(t)) => {
            let (line, mut json) = describe(&t);
            if let Some(o) = json.as_object_mut() {
                o.insert(
                    "format_version".into(),
                    crate::selftest::FORMAT_VERSION.into(),
                );
                o.insert("source".into(), t.source.clone().into());
            }
            (line, json)
        }
        Err(e) => (
            format!("unreadable: {e}"),
            serde_json::json!({ "error": e.to_string() }),
        ),
    }
}

/// Where one input of `run`/`bench` comes from.
#[derive(Clone, Copy, Debug)]
pub enum InputSource<'a> {
    /// A file (an image, a WAV file, a text file: the family decides).
    File(&'a Path),
    /// Literal text (`--text`), for families that take text.
    Text(&'a str),
}

/// A decoded input, ready to run (decoding is not part of the timed run). The family that
/// loaded it gets its own type back with [`input_as`].
pub trait Input: Any + Send {
    /// What to call it in output (the path, or the text).
    fn label(&self) -> &str;
    /// A short description of what was decoded (`1280x720 RGB`, `16 kHz, 3.2 s`).
    fn describe(&self) -> String;
}

/// `input` as the family's own input type `T`, or an error saying it is not `what` (an input
/// another family loaded).
///
/// # Errors
/// `input` is not a `T`.
pub fn input_as<'a, T: Input>(input: &'a dyn Input, what: &str) -> anyhow::Result<&'a T> {
    (input as &dyn Any)
        .downcast_ref::<T>()
        .ok_or_else(|| anyhow::anyhow!("not {what}"))
}

/// The result of one run, for output.
pub struct Outcome {
    /// One-line summary (`3 detections`, `2 text lines`).
    pub summary: String,
    /// Further text lines (one per detection, text line, segment...).
    pub lines: Vec<String>,
    /// The result as JSON (an object).
    pub json: serde_json::Value,
    /// An annotated image when the family has one (`--annotate`).
    pub annotated: Option<image::RgbImage>,
}

/// A bundle opened for `run` and `bench`.
pub trait Runner {
    /// `(network, engine)` for every network (the engine selection made on this device).
    fn engines(&self) -> Vec<(String, String)>;
    /// Decode an input.
    ///
    /// # Errors
    /// An input this family cannot read (named in the message).
    fn load(&self, source: InputSource<'_>) -> anyhow::Result<Box<dyn Input>>;
    /// Run once on a decoded input (the part `bench` times).
    ///
    /// # Errors
    /// A run failure.
    fn run(&mut self, input: &dyn Input) -> anyhow::Result<()>;
    /// Run again on the input the last [`Runner::run`] left in the session's input staging,
    /// without copying it in (`bench --staged`): the runtime's share of a frame a producer
    /// writes into the staging in place (the producer's own writes are not in it, nor what
    /// they cost the upload when they leave the lines in the CPU's caches). `None` when the
    /// family has no such path.
    fn run_staged(&mut self) -> Option<anyhow::Result<()>> {
        None
    }
    /// The floor of a run (`bench --floor`): launch the last run's captured CUDA graph(s)
    /// and wait, nothing else. `None` when the family does not offer it; an error when the
    /// session is not captured graphs alone (a CPU session, eager launches).
    fn launch_floor(&mut self) -> Option<anyhow::Result<()>> {
        None
    }
    /// Inputs given through the family's own run arguments (a text generator's `--prompt`
    /// or `--chat-file`), decoded: `tether run` runs them after the INPUTs and `--text`s.
    /// Default: none.
    ///
    /// # Errors
    /// An input that cannot be read (named), or a family option that does not apply to
    /// `run` (a [`UsageError`]).
    fn arg_inputs(&self) -> anyhow::Result<Vec<Box<dyn Input>>> {
        Ok(Vec::new())
    }
    /// Run once on `input` as [`Runner::run`] does, handing the output text to `sink` piece
    /// by piece as it is produced (a text generator's tokens), so that `tether run` can
    /// print it as it comes. `None`: the family has no streamed output (use
    /// [`Runner::run`]).
    fn run_streaming(
        &mut self,
        input: &dyn Input,
        sink: &mut dyn FnMut(&str) -> anyhow::Result<()>,
    ) -> Option<anyhow::Result<()>> {
        let _ = (input, sink);
        None
    }
    /// A function any thread may call (on Ctrl-C) to end the run in progress early; that
    /// run then returns normally with what it produced and its outcome says it was
    /// cancelled. `None`: runs are not cancellable (they are short).
    fn canceller(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        None
    }
    /// The family's own benchmark, for a family measured by throughput tests rather than
    /// the latency of a run on one input (a text generator: llama-bench's prompt-processing
    /// and generation tests); `tether bench B` without an INPUT runs it. `stop` is set on
    /// Ctrl-C: the benchmark ends after the run in progress and reports what ran (a test cut
    /// short has fewer runs than `options.repetitions`; one with no run is left out). `None`:
    /// the family is benchmarked per input (`tether bench B INPUT`).
    fn throughput_bench(
        &mut self,
        options: &ThroughputOptions,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Option<anyhow::Result<ThroughputReport>> {
        let _ = (options, stop);
        None
    }
    /// The units the last run was made of, when a run is made of many that its users count
    /// one by one (a VAD's 32 ms chunks, an embedder's texts); `None` when a run is one unit
    /// (a frame, a page). `bench` reports time per unit and units per second beside the
    /// per-run figures.
    fn units(&self) -> Option<Units<'_>> {
        None
    }
    /// The outcome of the last run on `input`.
    fn outcome(&self, input: &dyn Input, annotate: bool) -> anyhow::Result<Outcome>;
    /// Milliseconds per stage of the last run (`upload`, `pre`, network names, `post`,
    /// `download` on a GPU session; host stages on the CPU).
    fn stage_times(&self) -> Vec<(String, f64)>;
    /// Where and how runs execute, for benchmark headers. The default knows nothing.
    fn environment(&self) -> Environment {
        Environment::default()
    }
}

/// What `tether bench` asks of a family's throughput benchmark
/// ([`Runner::throughput_bench`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThroughputOptions {
    /// Timed repetitions of each test (`--runs`), after the family's warm-up.
    pub repetitions: usize,
}

/// Percentiles of a latency in milliseconds (nearest rank), for the report of a throughput
/// benchmark.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// What was timed (`time to first token`, `inter-token`).
    pub name: String,
    /// Samples.
    pub count: usize,
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// 99.9th percentile, ms.
    pub p999: f64,
    /// Largest, ms.
    pub max: f64,
    /// Mean, ms.
    pub mean: f64,
}

/// One throughput test: `per_run` units of work per repetition, the rate of each
/// repetition, their mean and sample standard deviation (llama-bench's `avg ± stddev`).
#[derive(Clone, Debug, PartialEq)]
pub struct ThroughputTest {
    /// Test name (`pp512`, `tg128`).
    pub name: String,
    /// Units of work per repetition (tokens).
    pub per_run: u64,
    /// The unit, a plural noun ending in `s` (`tokens`); rates are in units per second. The
    /// text report drops the `s` where `per_run` is 1.
    pub unit: &'static str,
    /// Each timed repetition's rate, units per second.
    pub runs: Vec<f64>,
    /// Mean rate, units per second.
    pub mean: f64,
    /// Sample standard deviation (n - 1) of the rates, units per second.
    pub stddev: f64,
}

/// What a family's throughput benchmark measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThroughputReport {
    /// The tests, in the order run.
    pub tests: Vec<ThroughputTest>,
    /// Latencies measured along (`time to first token`, `inter-token`).
    pub latencies_ms: Vec<LatencySummary>,
    /// `(key, value)` lines describing how it ran (threads, instruction set, context).
    pub notes: Vec<(String, String)>,
}

#[cfg(feature = "cli")]
impl Environment {
    /// What a model says of itself: its device, the CPU engine's threads, each network's
    /// engine and why, and `Host` execution on the CPU (`Unknown` on a GPU until a runner
    /// adds what its device sessions report).
    pub fn of_model(model: &tether_runtime::Model) -> Self {
        let on_cpu = model.device() == tether_runtime::Device::Cpu;
        Environment {
            device: model.device().to_string(),
            execution: if on_cpu {
                Execution::Host
            } else {
                Execution::Unknown
            },
            cpu_threads: model.cpu_threads(),
            engine_choice: model
                .networks()
                .iter()
                .map(|n| (n.name().to_string(), n.choice().to_string()))
                .collect(),
            ..Environment::default()
        }
    }
}

#[cfg(feature = "cli")]
impl Environment {
    /// [`Environment::of_model`] with the execution of the device sessions a runner holds
    /// ([`Environment::add_sessions`] in builds with the `cuda` feature; none on the CPU).
    pub fn of_model_sessions<'a>(
        model: &tether_runtime::Model,
        sessions: impl IntoIterator<Item = &'a tether_runtime::session::Session>,
    ) -> Self {
        #[allow(unused_mut)]
        let mut env = Environment::of_model(model);
        #[cfg(feature = "cuda")]
        env.add_sessions(sessions);
        #[cfg(not(feature = "cuda"))]
        let _ = sessions;
        env
    }
}

#[cfg(all(feature = "cli", feature = "cuda"))]
impl Environment {
    /// Sets [`Environment::execution`] from the device sessions a runner holds (none on the
    /// CPU): one mode when they agree, else the slowest (eager, then split graphs) with the
    /// sessions' notes; unchanged when there is no device session yet (nothing prepared).
    pub fn add_sessions<'a>(
        &mut self,
        sessions: impl IntoIterator<Item = &'a tether_runtime::session::Session>,
    ) {
        use tether_runtime::session::ExecMode;
        let mut worst: Option<(u8, Execution)> = None;
        let mut notes: Vec<&str> = Vec::new();
        for d in sessions.into_iter().filter_map(|s| s.device()) {
            let (mode, note) = d.exec_mode();
            let this = match mode {
                ExecMode::WholeGraph => (0, Execution::Graph),
                ExecMode::SplitGraphs => (1, Execution::SplitGraphs),
                ExecMode::Eager => (2, Execution::Eager),
            };
            if worst.is_none_or(|w| this.0 > w.0) {
                worst = Some(this);
            }
            if !note.is_empty() && !notes.contains(&note) {
                notes.push(note);
            }
        }
        if let Some((_, e)) = worst {
            self.execution = e;
            self.execution_note = notes.join("; ");
        }
    }
}

/// How a runner's runs execute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Execution {
    /// Not said.
    #[default]
    Unknown,
    /// On the CPU (host sessions).
    Host,
    /// One CUDA graph per run.
    Graph,
    /// CUDA graphs around engines that cannot be captured, those launched eagerly between.
    SplitGraphs,
    /// Every GPU step launched eagerly.
    Eager,
}

impl Execution {
    /// `host`, `graph`, `split-graphs`, `eager`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Execution::Unknown => "unknown",
            Execution::Host => "host",
            Execution::Graph => "graph",
            Execution::SplitGraphs => "split-graphs",
            Execution::Eager => "eager",
        }
    }

    /// Whether runs launch work on a GPU (graphs or eagerly).
    pub fn on_gpu(self) -> bool {
        matches!(
            self,
            Execution::Graph | Execution::SplitGraphs | Execution::Eager
        )
    }
}

impl std::fmt::Display for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The units of the last run ([`Runner::units`]).
#[derive(Clone, Copy, Debug)]
pub struct Units<'a> {
    /// The unit's name, singular, as its users say it (`chunk`, `text`).
    pub name: &'static str,
    /// Units the last run processed (all of them, or those before a cancel).
    pub count: u64,
    /// Host wall time of each unit of the last run in milliseconds (monotonic clock), when
    /// the family processes units one at a time (a VAD's chunks); empty when units share a
    /// batch (an embedder's texts), where the time per unit is the run's time over `count`.
    pub times_ms: &'a [f64],
}

/// Where and how a runner's runs execute ([`Runner::environment`]).
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// The device the runs use (`cuda:0`, `cpu`).
    pub device: String,
    /// How runs execute.
    pub execution: Execution,
    /// Why (the session's own words: capture result, check, what runs eagerly).
    pub execution_note: String,
    /// Stages of [`Runner::stage_times`] timed on the GPU with CUDA events; every other
    /// stage is host time on the monotonic clock.
    pub gpu_timed: Vec<String>,
    /// Threads of the CPU engine (1: the calling thread).
    pub cpu_threads: usize,
    /// `(network, why that engine)`: the selection record of each network.
    pub engine_choice: Vec<(String, String)>,
    /// Where the GPU session's staging was placed (`auto` resolved), when the runner reports
    /// its session; `None` otherwise.
    pub staging: Option<MappedIo>,
}

/// The run-time vocabulary the options below use (one definition, in the runtime:
/// [`tether_runtime::vocab`]), re-exported for families and tools.
pub use tether_runtime::vocab::{MappedIo, ParseVocabError, Precision, SyncPolicy};

/// Options every runner honours.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `--device`: `auto`, `cpu`, `cuda`, `cuda:N`.
    pub device: String,
    /// Check every section CRC at open.
    pub verify_eagerly: bool,
    /// Time every step of a run (GPU time from CUDA events recorded in the graph on a GPU;
    /// `bench` sets it).
    pub step_timing: bool,
    /// Capture CUDA graphs on a GPU (default `true`; `false` launches every step eagerly).
    pub graphs: bool,
    /// How the host waits for the GPU.
    pub sync: SyncPolicy,
    /// Threads of the CPU engine: `None` for the engine's default (the calling thread only).
    pub threads: Option<usize>,
    /// Arithmetic precision of the GPU engines that have a choice.
    pub precision: Precision,
    /// Where a GPU session's host staging lives.
    pub staging: MappedIo,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            device: "auto".into(),
            verify_eagerly: false,
            step_timing: false,
            graphs: true,
            sync: SyncPolicy::Spin,
            threads: None,
            precision: Precision::Fp32,
            staging: MappedIo::Auto,
        }
    }
}

impl RunOptions {
    /// `--device` as the runtime's [`tether_runtime::Device`].
    ///
    /// # Errors
    /// The value is not `auto`, `cpu`, `cuda` or `cuda:N` (the error names it).
    pub fn device(
        &self,
    ) -> Result<tether_runtime::Device, tether_runtime::device::ParseDeviceError> {
        self.device.parse()
    }

    /// The model options these run options ask for: CPU threads, precision and, with the
    /// `cuda` feature, the device session's graphs, step timing and wait policy. The device
    /// is [`RunOptions::device`].
    pub fn model_options(&self) -> tether_runtime::ModelOptions {
        #[allow(unused_mut)]
        let mut model = tether_runtime::ModelOptions {
            cpu_threads: self.threads.unwrap_or(1),
            precision: self.precision,
            ..tether_runtime::ModelOptions::default()
        };
        #[cfg(feature = "cuda")]
        {
            model.session.graphs = self.graphs;
            model.session.step_timing = self.step_timing;
            model.session.mapped = self.staging;
            model.session.sync = self.sync;
        }
        model
    }
}

/// A model family, as tools see it.
pub trait Family: Send + Sync {
    /// The name recorded in bundles and given to `--family` (`detect`).
    fn name(&self) -> &'static str;
    /// One line for `--help`.
    fn about(&self) -> &'static str;
    /// Arguments of `tether build --family NAME` beyond the common ones (`-o`, `--name`,
    /// `--model-version`, `--engine`, ...).
    fn build_args(&self) -> Vec<clap::Arg>;
    /// Build a bundle from the parsed arguments. `progress` receives a short message
    /// before each long step.
    ///
    /// # Errors
    /// Unreadable or unsupported models, invalid options (named in the message).
    fn build(
        &self,
        args: &clap::ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<Built>;
    /// Arguments of `tether run`/`bench` beyond the common ones.
    fn run_args(&self) -> Vec<clap::Arg>;
    /// The values `bundle` holds for those of [`Family::run_args`] that default to the
    /// bundle's own (the thresholds a bundle was built with), as (argument id, value as
    /// text): `tether run BUNDLE --help` shows them beside the options, whose help gives the
    /// build-time default. Empty where no option defaults to the bundle (the default).
    ///
    /// # Errors
    /// The bundle's configuration section does not read (a CRC mismatch, bad content): the
    /// help says so instead of showing values.
    fn bundle_values(&self, bundle: &Bundle) -> anyhow::Result<Vec<(&'static str, String)>> {
        let _ = bundle;
        Ok(Vec::new())
    }
    /// Describe a bundle of this family (its configuration and assets). The bundle is shared
    /// (`Arc`) so that a description that needs the family's own reader (a checkpoint that
    /// holds its bundle) takes it without opening the file again.
    ///
    /// # Errors
    /// A bundle whose family sections are unreadable.
    fn describe(&self, bundle: &std::sync::Arc<Bundle>) -> anyhow::Result<Description>;
    /// Open a runner.
    ///
    /// # Errors
    /// As the family's semantic API's open.
    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &clap::ArgMatches,
        options: &RunOptions,
    ) -> anyhow::Result<Box<dyn Runner>>;
    /// Whether [`Runner::outcome`] draws an annotated image when asked (`run --annotate`):
    /// image families do; audio and text families do not, and the CLI refuses the option
    /// for them instead of ignoring it.
    fn annotates(&self) -> bool {
        false
    }
    /// What `tether run`'s INPUT arguments are for this family, for `run BUNDLE --help`
    /// (`PNG or JPEG images`).
    fn inputs_help(&self) -> &'static str {
        "Input files"
    }
    /// Whether the family takes literal text inputs (`run --text`, `bench --text`): the CLI
    /// lists the option only for such families and refuses it, before any work, for others.
    fn takes_text(&self) -> bool {
        false
    }
    /// Whether `--precision` (the GPU engines' arithmetic) applies to this family's engines:
    /// the CLI lists the option only where it does and refuses a value given for a family
    /// whose engines have no such choice, instead of ignoring it.
    fn has_precision(&self) -> bool {
        true
    }
    /// Whether the family's runners have a [`Runner::throughput_bench`] (`tether bench B`
    /// without an INPUT): known before the model is loaded, so that `bench B` of a family
    /// benchmarked per input is a usage error before any work.
    fn has_throughput_bench(&self) -> bool {
        false
    }
    /// Ids of [`Family::run_args`] that only `tether bench` takes (a text generator's
    /// throughput tests): `run --help` leaves them out.
    fn bench_only_args(&self) -> &'static [&'static str] {
        &[]
    }
    /// Why `tether build --engine tensorrt` makes no TensorRT plan for this family's
    /// bundles (the option is then refused with this reason instead of ignored), or `None`
    /// where it builds one for each network the recipe offers.
    fn no_tensorrt_plans(&self) -> Option<&'static str> {
        None
    }
    /// Ids of [`Family::run_args`] that give `tether run` its inputs in place of INPUT
    /// arguments ([`Runner::arg_inputs`]: a text generator's `--prompt`); the CLI names them
    /// when a run is given no input.
    fn input_args(&self) -> &'static [&'static str] {
        &[]
    }
    /// Ids of [`Family::run_args`] that only `tether run` takes (a text generator's
    /// `--prompt`, whose bench times an INPUT or `--text` instead): `bench --help` leaves
    /// them out, and the family refuses them there.
    fn run_only_args(&self) -> &'static [&'static str] {
        &[]
    }
    /// Run `test`, the self-test `bundle` carries ([`crate::selftest`]), on
    /// `options.device`: the family's pipeline on the reference input, its output compared
    /// with the recorded one within the recorded tolerances.
    ///
    /// # Errors
    /// The bundle cannot be opened on that device; the test lacks an entry the family needs.
    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> anyhow::Result<Report>;
    /// Run the self-test the bundle carries (`tether verify --self-test`): `Ok(None)` when it
    /// carries none. Reads the section ([`SelfTest::of_bundle`]) and runs it with
    /// [`Family::run_self_test`].
    ///
    /// # Errors
    /// The section is unreadable (a format version this build does not read is named), or
    /// as [`Family::run_self_test`].
    fn self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
    ) -> anyhow::Result<Option<Report>> {
        let Some(test) = SelfTest::of_bundle(&bundle, self.name())? else {
            return Ok(None);
        };
        self.run_self_test(bundle, options, &test).map(Some)
    }
    /// The family's own engines (those beyond the shared network engines) as this machine
    /// offers them, one line each, for `tether doctor`: a text generator's CPU kernels and
    /// GPU decoder. Empty (the default) for a family that runs only on the shared engines.
    fn own_engines(&self) -> Vec<String> {
        Vec::new()
    }
    /// A one-line hint for `error` (one link of a failed command's error chain) when it is
    /// one of this family's own errors and a hint fits; the CLI prints it as `hint:`. The
    /// bundle's and the runtime's errors are not the family's to explain: a family error
    /// wrapping one exposes it as its `source()`, the next link, and the CLI hints at it
    /// itself.
    fn hint(&self, error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
        let _ = error;
        None
    }
}

/// The families a tool knows.
pub type Registry = &'static [&'static dyn Family];

/// The family called `name` in `registry`.
pub fn find(registry: Registry, name: &str) -> Option<&'static dyn Family> {
    registry.iter().copied().find(|f| f.name() == name)
}

/// `detect, ocr, vad` (for messages).
pub fn names(registry: Registry) -> String {
    registry
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}
