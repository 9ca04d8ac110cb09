//! The voice-activity family as the `tether` CLI sees it (feature `cli`):
//! build arguments and recipe, the `inspect` description, `run`/`bench` on
//! WAV files (any sample rate and channel count: channel mean, then
//! resampling to 16 kHz, see [`crate::audio`]), text and JSON output, and
//! the bundle's self-test for `tether verify --self-test`.
//!
//! `run` streams the whole file through [`Vad::process`] (the package's
//! `get_speech_timestamps` on the same signal) and prints the speech
//! segments in seconds; decoding and resampling happen in `load`, outside
//! the timed run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgAction, ArgMatches, value_parser};
use serde_json::json;
use tether_bundle::Bundle;
use tether_family::family::{
    BuildCommon, Built, Description, Family, Input, InputSource, Outcome, Report, RunOptions,
    Runner, SelfTest, UsageError, check_range, describe_self_test, file_stem, input_as,
};
use tether_family::selftest::Role;

use crate::config::CONFIG_SECTION;
use crate::net::NETWORK;
use crate::recipe::{self, BuildOptions};
use crate::selftest::{MAX_ABS_DIFF, PROBABILITIES};
use crate::{
    Audio, CHUNK_SAMPLES, Detection, FAMILY, SAMPLE_RATE, Vad, VadConfig, VadError, VadOptions,
};

/// The voice-activity family.
pub struct VadFamily;

/// The registry entry.
pub static VAD: VadFamily = VadFamily;

fn threshold_arg() -> Arg {
    Arg::new("threshold")
        .long("threshold")
        .value_name("P")
        .allow_negative_numbers(true)
        .value_parser(value_parser!(f32))
        .help("Speech threshold in (0, 1] (default 0.5; the exit threshold follows as max(P - 0.15, 0.01))")
}

fn ms_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("MS")
        .allow_negative_numbers(true)
        .value_parser(value_parser!(i64))
        .help(help)
}

/// The segment parameters of `args` over `base` (the package's defaults at
/// build time, the bundle's at run time).
fn config_of(args: &ArgMatches, base: VadConfig) -> Result<VadConfig> {
    let get_f = |n: &str| args.try_get_one::<f32>(n).ok().flatten().copied();
    let get_ms = |n: &str| -> Result<Option<u32>> {
        match args.try_get_one::<i64>(n).ok().flatten().copied() {
            None => Ok(None),
            Some(v) if (0..=i64::from(crate::config::MAX_DURATION_MS)).contains(&v) => {
                Ok(Some(v as u32))
            }
            Some(v) => Err(UsageError(format!(
                "--{n} {v}: must be between 0 and {}",
                crate::config::MAX_DURATION_MS
            ))
            .into()),
        }
    };
    let threshold = get_f("threshold");
    check_range("threshold", threshold, 0.0, 1.0)?;
    let mut c = match threshold {
        Some(t) if t <= 0.0 => {
            return Err(UsageError(format!("--threshold {t}: must be above 0")).into());
        }
        Some(t) => {
            let mut c = VadConfig::with_threshold(f64::from(t));
            c.min_speech_ms = base.min_speech_ms;
            c.min_silence_ms = base.min_silence_ms;
            c.speech_pad_ms = base.speech_pad_ms;
            c
        }
        None => base,
    };
    if let Some(v) = get_ms("min-speech-ms")? {
        c.min_speech_ms = v;
    }
    if let Some(v) = get_ms("min-silence-ms")? {
        c.min_silence_ms = v;
    }
    if let Some(v) = get_ms("speech-pad-ms")? {
        c.speech_pad_ms = v;
    }
    c.validate().map_err(|e| match e {
        VadError::Config { field, value } => anyhow::Error::new(UsageError(format!(
            "--{}: invalid value {value}",
            field.replace('_', "-")
        ))),
        other => anyhow::Error::new(other),
    })?;
    Ok(c)
}

fn segment_args() -> Vec<Arg> {
    vec![
        threshold_arg(),
        ms_arg(
            "min-speech-ms",
            "Segments of at most this many milliseconds are dropped (default 250)",
        ),
        ms_arg(
            "min-silence-ms",
            "Silence that ends a segment, in milliseconds (default 100)",
        ),
        ms_arg(
            "speech-pad-ms",
            "Padding added to each side of a segment, in milliseconds (default 30)",
        ),
    ]
}

impl Family for VadFamily {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "Silero voice activity detection (silero-vad pipeline): a WAV file in, speech segments out"
    }

    fn build_args(&self) -> Vec<Arg> {
        let mut v = vec![
            Arg::new("onnx")
                .long("onnx")
                .value_name("M.onnx")
                .value_parser(value_parser!(PathBuf))
                .required(true)
                .help("The Silero VAD streaming network (e.g. silero_vad_op18_ifless.onnx of silero-vad 6.2.3)"),
        ];
        v.extend(segment_args());
        v
    }

    fn build(
        &self,
        args: &ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Built> {
        let config = config_of(args, VadConfig::default())?;
        let path = args
            .get_one::<PathBuf>("onnx")
            .cloned()
            .context("--onnx is required")?;
        let onnx = tether_bundle::files::read_regular(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let (writer, report) = recipe::build(
            &onnx,
            &BuildOptions {
                common: common.clone().or_name(file_stem(&path, "vad")),
                config: Some(config),
            },
            progress,
        )
        .context("building the vad bundle")?;
        let c = &report.config;
        Ok(Built {
            writer,
            // The `sr` input is fixed into the graph at load; a TensorRT plan takes every
            // input at run time, so none is offered (the GPU runs the ONNX network).
            networks: Vec::new(),
            summary: vec![
                format!(
                    "family vad: Silero VAD at 16 kHz, chunks of {CHUNK_SAMPLES} (+64 context), threshold {} / {}, min speech {} ms, min silence {} ms, pad {} ms",
                    c.threshold,
                    c.neg_threshold,
                    c.min_speech_ms,
                    c.min_silence_ms,
                    c.speech_pad_ms
                ),
                format!(
                    "model SHA-256 {}{}",
                    report.model_sha256,
                    if report.pinned_model {
                        " (silero-vad 6.2.3)"
                    } else {
                        " (not the pinned file)"
                    }
                ),
                format!("self-test: embedded (vad/selftest): {}", report.selftest),
            ],
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        let mut v = segment_args();
        v.push(
            Arg::new("probabilities")
                .long("probabilities")
                .action(ArgAction::SetTrue)
                .help("Also print every chunk's speech probability (JSON: always included)"),
        );
        v
    }

    fn describe(&self, bundle: &Bundle) -> Result<Description> {
        let c = VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let (selftest_line, selftest_json) = describe_self_test(bundle, FAMILY, |t| {
            let chunks = t
                .f32s(Role::Expected, PROBABILITIES)
                .map_or(0, <[f32]>::len);
            let tolerance = t.tolerance(MAX_ABS_DIFF).unwrap_or(f32::NAN);
            (
                format!(
                    "{chunks} chunks, tolerance {tolerance:.0e} (expected values from {})",
                    t.source
                ),
                json!({ "chunks": chunks, "tolerance": tolerance }),
            )
        });
        let lines = vec![
            (
                "networks".into(),
                format!(
                    "{NETWORK} (Silero VAD: input f32 [1, 576], sr fixed to {SAMPLE_RATE}, state f32 [2, 1, 128] -> output [1, 1], stateN [2, 1, 128])"
                ),
            ),
            (
                "audio".into(),
                format!(
                    "16 kHz mono (WAV of any rate and channel count: channel mean, windowed-sinc resampling), chunks of {CHUNK_SAMPLES} samples (32 ms) + 64 context"
                ),
            ),
            (
                "segments".into(),
                format!(
                    "threshold {} / exit {}, min speech {} ms, min silence {} ms, pad {} ms",
                    c.threshold,
                    c.neg_threshold,
                    c.min_speech_ms,
                    c.min_silence_ms,
                    c.speech_pad_ms
                ),
            ),
            ("self-test".into(), selftest_line),
        ];
        Ok(Description {
            lines,
            json: json!({
                "networks": { NETWORK: true },
                "sample_rate": SAMPLE_RATE,
                "chunk_samples": CHUNK_SAMPLES,
                "context_samples": crate::CONTEXT_SAMPLES,
                "threshold": c.threshold,
                "neg_threshold": c.neg_threshold,
                "min_speech_ms": c.min_speech_ms,
                "min_silence_ms": c.min_silence_ms,
                "speech_pad_ms": c.speech_pad_ms,
                "self_test": selftest_json,
            }),
        })
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        let base = VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let config = config_of(args, base)?;
        let mut vad_options = vad_options(options)?;
        vad_options.config = Some(config);
        let vad = Vad::from_bundle(bundle, &vad_options)?;
        let probabilities = args
            .try_get_one::<bool>("probabilities")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false);
        Ok(Box::new(VadRunner {
            vad,
            last: Detection::default(),
            network: Duration::ZERO,
            total: Duration::ZERO,
            probabilities,
        }))
    }

    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> Result<Report> {
        let mut vad = Vad::from_bundle(bundle, &vad_options(options)?)?;
        Ok(vad.run_self_test(test)?)
    }
}

/// The [`VadOptions`] of the common run options (device, verification).
fn vad_options(options: &RunOptions) -> Result<VadOptions> {
    let device: tether_runtime::Device = options.device()?;
    // Threads, precision and the device session's options (graphs, step timing, sync).
    let model = options.model_options();
    Ok(VadOptions {
        device,
        model,
        verify_eagerly: options.verify_eagerly,
        ..VadOptions::default()
    })
}

struct VadRunner {
    vad: Vad,
    last: Detection,
    /// Network time of the last run (sum over its chunks).
    network: Duration,
    /// Wall time of the last run.
    total: Duration,
    probabilities: bool,
}

struct WavInput {
    label: String,
    audio: Audio,
}

impl Input for WavInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        format!(
            "{} Hz, {} channel(s), {:.2} s -> 16 kHz mono",
            self.audio.source_rate,
            self.audio.source_channels,
            self.audio.duration_ms() / 1e3
        )
    }
}

fn wav_of(input: &dyn Input) -> Result<&WavInput> {
    input_as(input, "a WAV input of the vad family")
}

impl Runner for VadRunner {
    fn environment(&self) -> tether_family::family::Environment {
        tether_family::family::Environment::of_model(self.vad.model())
    }

    fn engines(&self) -> Vec<(String, String)> {
        vec![(NETWORK.to_string(), self.vad.engine().id().to_string())]
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        match source {
            InputSource::File(path) => {
                let bytes = tether_bundle::files::read_regular(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let audio = crate::read_wav_bytes(&bytes)
                    .with_context(|| format!("decoding {}", path.display()))?;
                Ok(Box::new(WavInput {
                    label: path.display().to_string(),
                    audio,
                }))
            }
            InputSource::Text(_) => bail!("the vad family reads WAV files, not text"),
        }
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        let wav = wav_of(input)?;
        let t0 = std::time::Instant::now();
        let n0 = self.vad.network_time();
        self.last = self
            .vad
            .process(&wav.audio.samples)
            .with_context(|| format!("detecting speech in {}", wav.label))?;
        self.network = self.vad.network_time().saturating_sub(n0);
        self.total = t0.elapsed();
        Ok(())
    }

    fn outcome(&self, input: &dyn Input, _annotate: bool) -> Result<Outcome> {
        let wav = wav_of(input)?;
        let d = &self.last;
        let s = |samples: u64| samples as f64 / f64::from(SAMPLE_RATE);
        let mut lines: Vec<String> = d
            .segments
            .iter()
            .map(|g| {
                format!(
                    "speech {:.3} s - {:.3} s ({:.3} s)",
                    s(g.start),
                    s(g.end),
                    s(g.end - g.start)
                )
            })
            .collect();
        if self.probabilities {
            lines.extend(d.probabilities.iter().enumerate().map(|(i, p)| {
                format!("chunk {i} ({:.3} s): {p:.4}", s((i * CHUNK_SAMPLES) as u64))
            }));
        }
        let speech: u64 = d.segments.iter().map(|g| g.end - g.start).sum();
        Ok(Outcome {
            summary: format!(
                "{} speech segment{} ({:.2} s of speech in {:.2} s, {} chunks)",
                d.segments.len(),
                if d.segments.len() == 1 { "" } else { "s" },
                s(speech),
                s(d.samples),
                d.probabilities.len()
            ),
            lines,
            json: json!({
                "source_rate": wav.audio.source_rate,
                "source_channels": wav.audio.source_channels,
                "samples_16k": d.samples,
                "duration_s": s(d.samples),
                "chunk_samples": CHUNK_SAMPLES,
                "segments": d.segments.iter().map(|g| json!({
                    "start_s": s(g.start),
                    "end_s": s(g.end),
                    "start_sample": g.start,
                    "end_sample": g.end,
                })).collect::<Vec<_>>(),
                "probabilities": d.probabilities,
            }),
            annotated: None,
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        vec![
            (NETWORK.to_string(), ms(self.network)),
            (
                "segments".into(),
                ms(self.total.saturating_sub(self.network)),
            ),
        ]
    }
}
