//! The voice-activity family as the `tether` CLI sees it (feature `cli`):
//! build arguments and recipe, the `inspect` description, `run`/`bench` on
//! WAV files (any sample rate and channel count: channel mean, then
//! resampling to 16 kHz, see [`crate::audio`]), text and JSON output, and
//! the bundle's self-test for `tether verify --self-test`.
//!
//! `run` streams the whole file through the streaming API ([`Vad::push`] piece by piece,
//! then [`Vad::finish`]: what [`Vad::process`] does, the package's
//! `get_speech_timestamps` on the same signal) and prints the speech segments in seconds;
//! decoding and resampling happen in `load`, outside the timed run (files over 35 minutes
//! are decoded block by block during the run). Ctrl-C stops a run between pieces of
//! [`crate::STOP_EVERY_CHUNKS`] chunks; `bench` reports the host time of every chunk
//! (`Runner::units`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgMatches, value_parser};
use serde_json::json;
use tether_bundle::Bundle;
use tether_family::args::{
    flag, flag_arg, int_in, number_arg, path_arg, read_file, required_path, value,
};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Family, Input, InputSource, Outcome, Report,
    RunOptions, Runner, SelfTest, Units, UsageError, file_stem, input_as,
};
use tether_family::selftest::Role;

use crate::config::CONFIG_SECTION;
use crate::net::NETWORK;
use crate::recipe::{self, BuildOptions};
use crate::segments::closed;
use crate::selftest::{MAX_ABS_DIFF, PROBABILITIES};
use crate::{
    Audio, CHUNK_SAMPLES, Detection, FAMILY, SAMPLE_RATE, Vad, VadConfig, VadError, VadOptions,
};

/// The voice-activity family.
pub struct VadFamily;

/// The registry entry.
pub static VAD: VadFamily = VadFamily;

fn threshold_arg() -> Arg {
    number_arg(
        "threshold",
        "P",
        value_parser!(f64),
        "Speech threshold in [0, 1] (default 0.5; the exit threshold follows as max(P - 0.15, 0.01), as in silero-vad)",
    )
}

fn ms_arg(name: &'static str, help: &'static str) -> Arg {
    number_arg(name, "MS", value_parser!(i64), help)
}

/// The segment parameters of `args` over `base` (the package's defaults at
/// build time, the bundle's at run time).
fn config_of(args: &ArgMatches, base: VadConfig) -> Result<VadConfig> {
    let get_ms = |n: &str| -> Result<Option<u32>> {
        let max = i64::from(crate::config::MAX_DURATION_MS);
        Ok(int_in(args, n, 0, max)?.map(|v| v as u32))
    };
    // f64 as the package's Python float: `--threshold 0.01` is exactly its 0.01.
    let threshold = value::<f64>(args, "threshold");
    let mut c = match threshold {
        Some(t) if !(0.0..=1.0).contains(&t) => {
            return Err(tether_family::family::out_of_range("threshold", t, 0, 1).into());
        }
        Some(t) => {
            let mut c = VadConfig::with_threshold(t);
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
            "{}: invalid value {value}",
            option_of(field)
        ))),
        other => anyhow::Error::new(other),
    })?;
    Ok(c)
}

/// The command-line option a [`VadConfig`] field comes from: every field but the exit
/// threshold is an option of its own; the exit threshold follows `--threshold`.
fn option_of(field: &str) -> String {
    match field {
        "neg_threshold" => "--threshold (the exit threshold max(P - 0.15, 0.01))".into(),
        f => format!("--{}", f.replace('_', "-")),
    }
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

    fn inputs_help(&self) -> &'static str {
        "WAV files (PCM, float, A-law or mu-law; any rate and channel count: mixed to mono, resampled to 16 kHz)"
    }

    fn no_tensorrt_plans(&self) -> Option<&'static str> {
        // README, "GPU": `sr` is fixed at load; the TensorRT backend refuses fixed inputs.
        Some(
            "its sample-rate input is fixed at load, and a TensorRT plan takes every input at run time",
        )
    }

    fn build_args(&self) -> Vec<Arg> {
        let mut v = vec![
            path_arg(
                "onnx",
                "M.onnx",
                "A Silero VAD network: the streaming form (silero_vad_op18_ifless.onnx of silero-vad 6.2.3) or the sequence form (silero_vad_v6.onnx of faster-whisper)",
            )
            .required(true),
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
        let path = required_path(args, "onnx")?;
        let onnx = read_file(&path)?;
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
                    "model SHA-256 {} ({}{})",
                    report.model_sha256,
                    report.form.describe(),
                    if report.pinned_model {
                        ", a pinned file"
                    } else {
                        ", not a pinned file"
                    }
                ),
                format!("self-test: embedded (vad/selftest): {}", report.selftest),
            ],
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        let mut v = segment_args();
        v.push(flag_arg(
            "probabilities",
            "Also print every chunk's speech probability (JSON: always included)",
        ));
        v
    }

    fn bundle_values(&self, bundle: &Bundle) -> Result<Vec<(&'static str, String)>> {
        let c = VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        Ok(vec![
            ("threshold", c.threshold.to_string()),
            ("min-speech-ms", c.min_speech_ms.to_string()),
            ("min-silence-ms", c.min_silence_ms.to_string()),
            ("speech-pad-ms", c.speech_pad_ms.to_string()),
        ])
    }

    fn describe(&self, bundle: &Arc<Bundle>) -> Result<Description> {
        let c = VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let lines = vec![
            (
                "networks".into(),
                match crate::net::form_of_bundle(bundle) {
                    Some(crate::Form::Sequence) => format!(
                        "{NETWORK} (Silero VAD, sequence form: input f32 [1, 576] (one window per run), h, c f32 [1, 1, 128] -> speech_probs [1], hn, cn)"
                    ),
                    _ => format!(
                        "{NETWORK} (Silero VAD, streaming form: input f32 [1, 576], sr fixed to {SAMPLE_RATE}, state f32 [2, 1, 128] -> output [1, 1], stateN [2, 1, 128])"
                    ),
                },
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
        ];
        let json = json!({
                "networks": { NETWORK: true },
                // Which of Silero's interfaces the network has (null: neither, unreadable).
                "form": match crate::net::form_of_bundle(bundle) {
                    Some(crate::Form::Streaming) => Some("streaming"),
                    Some(crate::Form::Sequence) => Some("sequence"),
                    None => None,
                },
                "sample_rate": SAMPLE_RATE,
                "chunk_samples": CHUNK_SAMPLES,
                "context_samples": crate::CONTEXT_SAMPLES,
                "threshold": c.threshold,
                "neg_threshold": c.neg_threshold,
                "min_speech_ms": c.min_speech_ms,
                "min_silence_ms": c.min_silence_ms,
                "speech_pad_ms": c.speech_pad_ms,
        });
        let d = Description { lines, json };
        Ok(d.with_self_test(bundle, FAMILY, |t| {
            let chunks = t
                .f32s(Role::Expected, PROBABILITIES)
                .map_or(0, <[f32]>::len);
            let tolerance = t.tolerance(MAX_ABS_DIFF).unwrap_or(f32::NAN);
            (
                format!(
                    "{chunks} chunks, tolerance {tolerance:.0e}; expected values from {}",
                    t.source
                ),
                json!({ "chunks": chunks, "tolerance": tolerance }),
            )
        }))
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
        let probabilities = flag(args, "probabilities");
        Ok(Box::new(VadRunner {
            vad,
            last: Detection::default(),
            network: Duration::ZERO,
            total: Duration::ZERO,
            probabilities,
            chunk_ms: Vec::new(),
            cancel: Arc::new(AtomicBool::new(false)),
            cancelled: false,
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
    /// Host wall time of each chunk of the last run, ms (`bench`'s per-chunk latency).
    chunk_ms: Vec<f64>,
    /// Set by [`Runner::canceller`] (Ctrl-C): the run stops before its next piece.
    cancel: Arc<AtomicBool>,
    /// The last run was stopped by `cancel` before the end of its input.
    cancelled: bool,
}

impl VadRunner {
    /// The library's block-by-block stream ([`Vad::stream_blocks`]: what [`Vad::process`] /
    /// [`Vad::process_wav`] compute on the same signal), stopping at the next piece once
    /// `cancel` is set (the segments then end where the audio stopped), with the host time
    /// of every chunk. `next_block` yields the 16 kHz signal block by block (`false` with
    /// the last).
    fn detect(
        &mut self,
        next_block: impl FnMut(&mut Vec<f32>) -> Result<bool, VadError>,
    ) -> Result<Detection, VadError> {
        self.chunk_ms.clear();
        let (mut probabilities, mut segments) = (Vec::new(), Vec::new());
        let chunk_ms = &mut self.chunk_ms;
        let cancel = &self.cancel;
        // When the chunk in progress began: at the previous chunk's end, or when the piece
        // it is in was handed over (the decoding of a block is no chunk's time).
        let since = std::cell::Cell::new(std::time::Instant::now());
        let (end, stopped) = self.vad.stream_blocks(
            next_block,
            |r| {
                let now = std::time::Instant::now();
                chunk_ms.push((now - since.get()).as_secs_f64() * 1e3);
                since.set(now);
                probabilities.push(r.probability);
                segments.extend(closed(&r.events));
            },
            || {
                since.set(std::time::Instant::now());
                cancel.load(Ordering::SeqCst)
            },
        )?;
        segments.extend(closed(&end.events));
        self.cancelled = stopped;
        Ok(Detection {
            probabilities,
            segments,
            samples: end.samples,
        })
    }
}

/// Files whose 16 kHz signal is at most this many samples (about 35 minutes, 128 MiB) are
/// decoded at `load`, outside the timed run; longer ones are streamed through the network
/// during the run, block by block, in bounded memory.
const IN_MEMORY_SAMPLES: u64 = 1 << 25;

/// A WAV input: decoded at load, or opened and streamed at run.
struct WavInput {
    label: String,
    path: PathBuf,
    format: crate::wav::WavFormat,
    /// Frames per channel (known at load unless the header has a streaming size).
    frames: Option<u64>,
    truncation: Option<crate::wav::Truncation>,
    /// The decoded signal, when held in memory.
    audio: Option<Audio>,
}

impl WavInput {
    fn open(path: &std::path::Path) -> Result<Self> {
        let stream = crate::AudioStream::open(path)?;
        let format = *stream.format();
        let small = stream.samples_16k().is_some_and(|n| n <= IN_MEMORY_SAMPLES);
        let (frames, truncation, audio) = if small {
            let audio = stream.collect()?;
            (Some(audio.source_frames), audio.truncation, Some(audio))
        } else {
            (stream.source_frames(), stream.truncation(), None)
        };
        Ok(WavInput {
            label: path.display().to_string(),
            path: path.to_path_buf(),
            format,
            frames,
            truncation,
            audio,
        })
    }
}

impl Input for WavInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        let length = match self.frames {
            Some(f) => format!("{:.2} s", f as f64 / f64::from(self.format.sample_rate)),
            None => "length not in the header".into(),
        };
        format!(
            "{} Hz, {} channel(s), {}, {length}{} -> 16 kHz mono{}",
            self.format.sample_rate,
            self.format.channels,
            self.format.describe(),
            if self.truncation.is_some() {
                " (cut off: shorter than its header says)"
            } else {
                ""
            },
            if self.audio.is_none() {
                " (streamed)"
            } else {
                ""
            }
        )
    }
}

fn wav_of(input: &dyn Input) -> Result<&WavInput> {
    input_as(input, "a WAV input of the vad family")
}

impl Runner for VadRunner {
    fn environment(&self) -> tether_family::family::Environment {
        Environment::of_model_sessions(self.vad.model(), [self.vad.session()])
    }

    fn engines(&self) -> Vec<(String, String)> {
        vec![(NETWORK.to_string(), self.vad.engine().id().to_string())]
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        match source {
            InputSource::File(path) => Ok(Box::new(
                WavInput::open(path).with_context(|| format!("reading {}", path.display()))?,
            )),
            InputSource::Text(_) => bail!("the vad family reads WAV files, not text"),
        }
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        let wav = wav_of(input)?;
        let t0 = std::time::Instant::now();
        let n0 = self.vad.network_time();
        self.last = match &wav.audio {
            Some(audio) => {
                let mut whole = Some(audio.samples.as_slice());
                self.detect(|block| {
                    block.clear();
                    block.extend_from_slice(whole.take().unwrap_or_default());
                    Ok(false)
                })
            }
            None => crate::AudioStream::open(&wav.path)
                .and_then(|mut audio| self.detect(|block| audio.next_block(block))),
        }
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
        if let Some(t) = &wav.truncation {
            lines.insert(0, format!("warning: {t}"));
        }
        Ok(Outcome {
            summary: format!(
                "{} speech segment{} ({:.2} s of speech in {:.2} s, {} chunk{}){}{}",
                d.segments.len(),
                if d.segments.len() == 1 { "" } else { "s" },
                s(speech),
                s(d.samples),
                d.probabilities.len(),
                if d.probabilities.len() == 1 { "" } else { "s" },
                if wav.truncation.is_some() {
                    "; the file is cut off (see the warning)"
                } else {
                    ""
                },
                if self.cancelled {
                    "; stopped by Ctrl-C: the audio after that is not read"
                } else {
                    ""
                }
            ),
            lines,
            json: json!({
                "source_rate": wav.format.sample_rate,
                "source_channels": wav.format.channels,
                "source_format": wav.format.describe(),
                "truncated": wav.truncation.map(|t| json!({
                    "declared_data_bytes": t.declared_bytes,
                    "present_data_bytes": t.present_bytes,
                })),
                "cancelled": self.cancelled,
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

    fn canceller(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let c = Arc::clone(&self.cancel);
        Some(Box::new(move || c.store(true, Ordering::SeqCst)))
    }

    fn units(&self) -> Option<Units<'_>> {
        Some(Units {
            name: "chunk",
            count: self.chunk_ms.len() as u64,
            times_ms: &self.chunk_ms,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<VadConfig> {
        let m = clap::Command::new("run")
            .args(segment_args())
            .try_get_matches_from(std::iter::once("run").chain(args.iter().copied()))?;
        config_of(&m, VadConfig::default())
    }

    #[test]
    fn low_thresholds_follow_the_package() {
        // silero-vad: neg_threshold = max(threshold - 0.15, 0.01), accepted even when it is
        // above the speech threshold.
        for (arg, t) in [("0.01", 0.01), ("0.005", 0.005), ("0", 0.0)] {
            let c = parse(&["--threshold", arg]).expect("accepted");
            assert_eq!((c.threshold, c.neg_threshold), (t, 0.01), "{arg}");
        }
        // f64 as in Python: 0.3 - 0.15 is the package's float arithmetic.
        let c = parse(&["--threshold", "0.3"]).expect("accepted");
        assert_eq!(c.neg_threshold, 0.3f64 - 0.15);
    }

    #[test]
    fn errors_name_only_options_that_exist() {
        for args in [
            &["--threshold", "1.5"][..],
            &["--threshold", "-0.1"],
            &["--speech-pad-ms", "400"],
            &["--min-silence-ms", "-1"],
        ] {
            let e = parse(args).expect_err("out of range").to_string();
            assert!(!e.contains("neg"), "{args:?}: {e}");
            assert!(e.contains(args[0]), "{args:?}: {e}");
        }
    }
}
