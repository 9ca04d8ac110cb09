//! The semantic API: 16 kHz PCM in, speech probabilities and segments out.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, TensorDesc, Verify};
use tether_runtime::{Device, ModelOptions};

use crate::audio::AudioStream;
use crate::config::{CONFIG_SECTION, ONNX_SECTION};
use crate::net::Network;
use crate::segments::{ChunkEvents, SegmentTracker, SpeechSegment, closed};
use crate::{
    CHUNK_SAMPLES, CONTEXT_SAMPLES, FAMILY, STATE_LEN, VadConfig, VadError, WINDOW_SAMPLES,
};
use tether_family::model::{check_family, open_bundle};
use tether_family::selftest::{Report, SelfTest};

/// Options of [`Vad::open`].
#[derive(Clone, Debug, Default)]
pub struct VadOptions {
    /// Where to run (default: the first CUDA GPU when one answers, else the CPU).
    pub device: Device,
    /// Model options beyond the device (engines to exclude, precision, session options);
    /// the input shapes and the fixed `sr` are set by [`Vad::open`].
    pub model: ModelOptions,
    /// Replace the bundle's segment parameters.
    pub config: Option<VadConfig>,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
}

/// Chunks pushed between two calls of [`Vad::stream_blocks`]'s `stop`: 64 chunks, 2.048 s of
/// audio (a few milliseconds of compute), so a stop is seen at once whatever the length.
pub const STOP_EVERY_CHUNKS: usize = 64;

/// What one chunk produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkResult {
    /// Chunk index since the last reset (0, 1, ...).
    pub index: u64,
    /// Speech probability of the chunk, in [0, 1].
    pub probability: f32,
    /// Segment events the chunk caused (fixed capacity).
    pub events: ChunkEvents,
}

impl ChunkResult {
    /// First sample of the chunk at 16 kHz.
    pub fn start_sample(&self) -> u64 {
        self.index * CHUNK_SAMPLES as u64
    }
    /// Start of the chunk in milliseconds.
    pub fn start_ms(&self) -> f64 {
        self.index as f64 * crate::CHUNK_MS
    }
}

/// What [`Vad::finish`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEnd {
    /// The last, zero-padded partial chunk, when one was pending.
    pub last_chunk: Option<ChunkResult>,
    /// Events of closing the stream that are not in `last_chunk` (the `End`
    /// of a segment still open when the stream had no partial chunk).
    pub events: ChunkEvents,
    /// Samples in the stream.
    pub samples: u64,
}

/// A whole signal's result ([`Vad::process`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detection {
    /// One probability per 512-sample chunk; the last chunk is zero-padded.
    pub probabilities: Vec<f32>,
    /// Speech segments, padded, in samples at 16 kHz.
    pub segments: Vec<SpeechSegment>,
    /// Samples in the signal.
    pub samples: u64,
}

/// Silero VAD, streaming.
///
/// Feed 16 kHz mono PCM with [`Vad::push_chunk`] (exactly 512 samples) or
/// [`Vad::push`] (any length; a partial chunk waits for the next call), end
/// a stream with [`Vad::finish`], start a new one with [`Vad::reset`].
///
/// Per chunk, as the package's `OnnxWrapper.__call__` does: the network sees
/// the previous chunk's last 64 samples followed by the 512 new ones
/// (`[1, 576]`), `sr = 16000` (fixed into the graph at load, see `net.rs`)
/// and the recurrent state `[2, 1, 128]`; it returns
/// the speech probability and the next state. The state lives in two session
/// regions used alternately as input and output (the runtime's ping-pong:
/// swapped, never copied; on a GPU it never leaves the device); `reset`
/// zeroes it and the context.
///
/// The network runs through the runtime's model API on the engine chosen for
/// the device ([`VadOptions::device`]). Nothing in `push_chunk` allocates
/// except inside the tract CPU engine (its intermediate tensors); on a GPU a
/// chunk is one captured CUDA graph launch (see `net.rs`).
#[derive(Debug)]
pub struct Vad {
    net: Network,
    config: VadConfig,
    tracker: SegmentTracker,
    /// Network input: context, then the chunk (copied into the session's
    /// input region before each run).
    window: [f32; WINDOW_SAMPLES],
    /// A partial chunk from `push`.
    pending: [f32; CHUNK_SAMPLES],
    pending_len: usize,
    /// Samples since the last reset.
    samples: u64,
    /// Time spent in the network since open.
    network_time: std::time::Duration,
}

impl Vad {
    /// Open a `vad` bundle with default options.
    ///
    /// # Errors
    /// See [`Vad::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, VadError> {
        Self::open(path, &VadOptions::default())
    }

    /// Open a `vad` bundle (memory-mapped) and prepare the network on
    /// [`VadOptions::device`].
    ///
    /// # Errors
    /// [`VadError::Model`] (unreadable or corrupt bundle, missing section,
    /// a bundle of another family), [`VadError::Config`], [`VadError::Model`] (no engine for the network
    /// on this device, device unavailable), [`VadError::Network`] (not
    /// Silero's streaming or sequence I/O).
    pub fn open(path: impl AsRef<Path>, options: &VadOptions) -> Result<Self, VadError> {
        Self::from_bundle(open_bundle(path, options.verify_eagerly)?, options)
    }

    /// Prepare from an opened bundle. The configuration is copied out at load; the model
    /// keeps the bundle (the self-test is read from it only when run).
    ///
    /// # Errors
    /// As [`Vad::open`].
    pub fn from_bundle(bundle: Arc<Bundle>, options: &VadOptions) -> Result<Self, VadError> {
        check_family(&bundle, FAMILY)?;
        let id = bundle.identity();
        let name = id.name.to_string();
        let config = match options.config {
            Some(c) => c,
            None => VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?,
        };
        config.validate()?;
        let mut model = options.model.clone();
        model.device = options.device;
        let net = Network::open(bundle, model)?;
        log::info!(
            "vad `{name}`: Silero VAD at 16 kHz, chunks of {CHUNK_SAMPLES}, threshold {} / {}, min speech {} ms, min silence {} ms, pad {} ms, {} engine",
            config.threshold,
            config.neg_threshold,
            config.min_speech_ms,
            config.min_silence_ms,
            config.speech_pad_ms,
            net.engine()
        );
        Ok(Self {
            net,
            config,
            tracker: SegmentTracker::new(&config, CHUNK_SAMPLES),
            window: [0.0; WINDOW_SAMPLES],
            pending: [0.0; CHUNK_SAMPLES],
            pending_len: 0,
            samples: 0,
            network_time: std::time::Duration::ZERO,
        })
    }

    /// Prepare from ONNX bytes (the streaming Silero network) and segment
    /// parameters, without a bundle file: an in-memory bundle holding the
    /// network and `config` ([`bundle_of`]) opened with `options`.
    ///
    /// # Errors
    /// [`VadError::Config`], [`VadError::Model`] (the network fails to
    /// prepare), [`VadError::Network`] (missing or mistyped tensors).
    pub fn from_onnx(onnx: &[u8], config: VadConfig) -> Result<Self, VadError> {
        Self::from_onnx_with(onnx, config, &VadOptions::default())
    }

    /// [`Vad::from_onnx`] with options (device, engines).
    ///
    /// # Errors
    /// As [`Vad::from_onnx`].
    pub fn from_onnx_with(
        onnx: &[u8],
        config: VadConfig,
        options: &VadOptions,
    ) -> Result<Self, VadError> {
        config.validate()?;
        let bundle = Bundle::from_vec(
            bundle_of(onnx, &config, "silero-vad", 0)?.to_bytes()?,
            Verify::Eager,
        )?;
        Self::from_bundle(Arc::new(bundle), options)
    }

    /// Which of Silero's ONNX interfaces the network has (streaming or sequence form).
    pub fn form(&self) -> crate::Form {
        self.net.form()
    }

    /// The engine running the network (chosen for the device at open).
    pub fn engine(&self) -> tether_runtime::EngineKind {
        self.net.engine()
    }

    /// The model underneath (device, network, why its engine was chosen).
    pub fn model(&self) -> &tether_runtime::Model {
        self.net.model()
    }

    /// The session running the network (on a GPU: its device session, how runs execute,
    /// memory measured at load).
    pub fn session(&self) -> &tether_runtime::session::Session {
        self.net.session()
    }

    /// Wall time spent running the network (input copy, run, output read)
    /// since open, summed over chunks (what `tether bench` reports as the
    /// network stage).
    pub fn network_time(&self) -> std::time::Duration {
        self.network_time
    }

    /// Wall (CPU) or GPU (device session with step timing) milliseconds per
    /// step of the last chunk.
    pub fn step_times(&self) -> &[(String, f64)] {
        self.net.session().step_times()
    }

    /// The current recurrent state `[2, 1, 128]` (read back from the device
    /// on a GPU; blocks). For inspection and tests.
    ///
    /// # Errors
    /// [`VadError::Run`] on a device error.
    pub fn state(&mut self, out: &mut [f32; STATE_LEN]) -> Result<(), VadError> {
        self.net.read_state(out)
    }

    /// The segment parameters in use.
    pub fn config(&self) -> &VadConfig {
        &self.config
    }

    /// Samples pushed since the last reset.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Whether a speech segment is open.
    pub fn in_speech(&self) -> bool {
        self.tracker.in_speech()
    }

    /// Start a new stream: zero the recurrent state and the context, drop a
    /// pending partial chunk, forget the segment state.
    ///
    /// # Errors
    /// [`VadError::Run`] when the state cannot be zeroed (a device error);
    /// everything else is reset either way.
    pub fn reset(&mut self) -> Result<(), VadError> {
        self.window = [0.0; WINDOW_SAMPLES];
        self.pending_len = 0;
        self.samples = 0;
        self.tracker.reset();
        self.net.reset_state()
    }

    /// Run the network on `window` (already filled) and advance the state.
    fn step(&mut self) -> Result<f32, VadError> {
        let t0 = std::time::Instant::now();
        self.net.window_mut()?.copy_from_slice(&self.window);
        let probability = self.net.run()?;
        self.network_time += t0.elapsed();
        // The next chunk's context: the last 64 samples of this input
        // (`self._context = x[..., -context_size:]`).
        self.window
            .copy_within(WINDOW_SAMPLES - CONTEXT_SAMPLES.., 0);
        Ok(probability)
    }

    /// Refuse `pcm` when a sample is NaN or infinite; `first` is the stream index of
    /// `pcm[0]`. One `is_finite` per sample, no allocation.
    fn check_finite(pcm: &[f32], first: u64) -> Result<(), VadError> {
        match pcm.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(i) => Err(VadError::NonFiniteSample {
                index: first + i as u64,
                value: pcm[i],
            }),
        }
    }

    /// Process exactly one 512-sample chunk (32 ms at 16 kHz).
    ///
    /// # Errors
    /// [`VadError::ChunkLength`], [`VadError::PartialChunkPending`] (after a
    /// [`Vad::push`] that left a partial chunk), [`VadError::NonFiniteSample`] (a NaN or
    /// infinite sample, named by its index in the stream and its value; the stream is
    /// unchanged), [`VadError::Model`] / [`VadError::Output`] from the engine.
    pub fn push_chunk(&mut self, chunk: &[f32]) -> Result<ChunkResult, VadError> {
        if chunk.len() != CHUNK_SAMPLES {
            return Err(VadError::ChunkLength {
                expected: CHUNK_SAMPLES,
                actual: chunk.len(),
            });
        }
        if self.pending_len != 0 {
            return Err(VadError::PartialChunkPending {
                pending: self.pending_len,
            });
        }
        Self::check_finite(chunk, self.samples)?;
        self.window[CONTEXT_SAMPLES..].copy_from_slice(chunk);
        self.run_chunk(CHUNK_SAMPLES, false)
    }

    /// The chunk in `window[64..]` holds `valid` real samples (the rest is
    /// zero padding); `last` ends the stream.
    fn run_chunk(&mut self, valid: usize, last: bool) -> Result<ChunkResult, VadError> {
        let index = self.tracker.chunks();
        let probability = self.step()?;
        self.samples += valid as u64;
        let events = if last {
            self.tracker.push_last(probability, self.samples)
        } else {
            self.tracker.push(probability)
        };
        Ok(ChunkResult {
            index,
            probability,
            events,
        })
    }

    /// Push any number of samples; `on_chunk` is called for each completed
    /// chunk. Samples that do not complete a chunk wait for the next call
    /// (or [`Vad::finish`]).
    ///
    /// # Errors
    /// [`VadError::NonFiniteSample`] when a sample is NaN or infinite (named by its index
    /// in the stream and its value): checked before anything is consumed, so the stream is
    /// unchanged and can go on with other samples. From the engine, as
    /// [`Vad::push_chunk`]; on such an error the failing chunk is lost and the stream
    /// should be reset.
    pub fn push(
        &mut self,
        mut pcm: &[f32],
        mut on_chunk: impl FnMut(&ChunkResult),
    ) -> Result<(), VadError> {
        Self::check_finite(pcm, self.samples + self.pending_len as u64)?;
        while !pcm.is_empty() {
            let take = (CHUNK_SAMPLES - self.pending_len).min(pcm.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&pcm[..take]);
            self.pending_len += take;
            pcm = &pcm[take..];
            if self.pending_len == CHUNK_SAMPLES {
                self.pending_len = 0;
                self.window[CONTEXT_SAMPLES..].copy_from_slice(&self.pending);
                let r = self.run_chunk(CHUNK_SAMPLES, false)?;
                on_chunk(&r);
            }
        }
        Ok(())
    }

    /// End the stream: a pending partial chunk is zero-padded and processed
    /// as the last chunk, a segment still open ends at the stream's length
    /// (as the package's `get_speech_timestamps` ends it), and the stream is
    /// reset.
    ///
    /// # Errors
    /// As [`Vad::push_chunk`]; the stream is reset either way.
    pub fn finish(&mut self) -> Result<StreamEnd, VadError> {
        let samples = self.samples + self.pending_len as u64;
        let result = if self.pending_len > 0 {
            let valid = self.pending_len;
            self.pending_len = 0;
            self.window[CONTEXT_SAMPLES..CONTEXT_SAMPLES + valid]
                .copy_from_slice(&self.pending[..valid]);
            self.window[CONTEXT_SAMPLES + valid..].fill(0.0);
            self.run_chunk(valid, true).map(|r| StreamEnd {
                last_chunk: Some(r),
                events: ChunkEvents::new(),
                samples,
            })
        } else {
            Ok(StreamEnd {
                last_chunk: None,
                events: self.tracker.finish(samples),
                samples,
            })
        };
        let reset = self.reset();
        let end = result?;
        reset?;
        Ok(end)
    }

    /// The whole-signal API: reset, stream `pcm` (16 kHz mono) through
    /// [`Vad::push`] and [`Vad::finish`], collect every probability and
    /// segment, reset again. Equivalent to the package's
    /// `get_speech_timestamps` on the same signal.
    ///
    /// # Errors
    /// As [`Vad::push_chunk`].
    pub fn process(&mut self, pcm: &[f32]) -> Result<Detection, VadError> {
        fn ends(events: &ChunkEvents, segments: &mut Vec<SpeechSegment>) {
            segments.extend(closed(events));
        }
        self.reset()?;
        let mut probabilities = Vec::with_capacity(pcm.len().div_ceil(CHUNK_SAMPLES));
        let mut segments = Vec::new();
        let streamed = self.push(pcm, |r| {
            probabilities.push(r.probability);
            ends(&r.events, &mut segments);
        });
        if let Err(e) = streamed {
            let _ = self.reset();
            return Err(e);
        }
        let end = self.finish()?;
        if let Some(r) = &end.last_chunk {
            probabilities.push(r.probability);
            ends(&r.events, &mut segments);
        }
        ends(&end.events, &mut segments);
        Ok(Detection {
            probabilities,
            segments,
            samples: end.samples,
        })
    }

    /// [`Vad::process`] on a WAV file of any sample rate and channel count
    /// (channel mean, windowed-sinc resampling to 16 kHz), streamed: the file
    /// is read block by block ([`AudioStream`]), so memory does not grow with
    /// its length beyond one probability per chunk.
    ///
    /// # Errors
    /// [`VadError::Wav`], [`VadError::Resample`], and as [`Vad::process`].
    pub fn process_wav(&mut self, path: impl AsRef<Path>) -> Result<Detection, VadError> {
        self.process_stream(&mut AudioStream::open(path)?)
    }

    /// [`Vad::process`] on an [`AudioStream`], block by block: the same
    /// probabilities and segments as on the whole signal.
    ///
    /// # Errors
    /// As [`Vad::process_wav`].
    pub fn process_stream<R: Read>(
        &mut self,
        audio: &mut AudioStream<R>,
    ) -> Result<Detection, VadError> {
        let mut probabilities = Vec::new();
        let mut segments = Vec::new();
        let end = self.stream(audio, |r| {
            probabilities.push(r.probability);
            segments.extend(closed(&r.events));
        })?;
        segments.extend(closed(&end.events));
        Ok(Detection {
            probabilities,
            segments,
            samples: end.samples,
        })
    }

    /// Stream `audio` through the network as a microphone would feed it: reset,
    /// then every chunk as soon as its samples are decoded, `on_chunk` called
    /// with its probability and the segment events it caused (a segment is
    /// reported as soon as it closes), the last partial chunk included; the
    /// stream is finished and reset at the end. Memory is bounded by the
    /// stream's block, whatever the file's length. Returns the end of the
    /// stream (its `last_chunk` was already given to `on_chunk`; its `events`
    /// close a segment still open at a chunk boundary).
    ///
    /// # Errors
    /// As [`Vad::process_wav`]; the stream is reset either way.
    pub fn stream<R: Read>(
        &mut self,
        audio: &mut AudioStream<R>,
        on_chunk: impl FnMut(&ChunkResult),
    ) -> Result<StreamEnd, VadError> {
        self.stream_blocks(|block| audio.next_block(block), on_chunk, || false)
            .map(|(end, _)| end)
    }

    /// [`Vad::stream`] over any source of 16 kHz blocks (`next_block` replaces the block it
    /// is given and returns `false` with the last one), asking `stop` before each piece of
    /// [`STOP_EVERY_CHUNKS`] chunks is pushed: once it returns `true` nothing more is read
    /// and the stream is finished there (a segment still open ends where the audio
    /// stopped). Returns the end of the stream and whether `stop` ended it early. This is
    /// how a run is cancelled (Ctrl-C) within milliseconds on input of any length.
    ///
    /// # Errors
    /// `next_block`'s, and as [`Vad::push_chunk`]; the stream is reset either way.
    pub fn stream_blocks(
        &mut self,
        mut next_block: impl FnMut(&mut Vec<f32>) -> Result<bool, VadError>,
        mut on_chunk: impl FnMut(&ChunkResult),
        mut stop: impl FnMut() -> bool,
    ) -> Result<(StreamEnd, bool), VadError> {
        self.reset()?;
        let mut block = Vec::new();
        let mut stopped = false;
        let streamed = (|| loop {
            let more = next_block(&mut block)?;
            for piece in block.chunks(STOP_EVERY_CHUNKS * CHUNK_SAMPLES) {
                if stop() {
                    stopped = true;
                    return Ok(());
                }
                self.push(piece, &mut on_chunk)?;
            }
            if !more {
                return Ok(());
            }
        })();
        if let Err(e) = streamed {
            let _ = self.reset();
            return Err(e);
        }
        let end = self.finish()?;
        if let Some(r) = &end.last_chunk {
            on_chunk(r);
        }
        Ok((end, stopped))
    }

    /// The self-test the bundle this was opened from carries, if any (read from the
    /// bundle when asked: a bundle whose self-test this build cannot read still opens).
    ///
    /// # Errors
    /// [`VadError::SelfTest`] for an unreadable section.
    pub fn bundled_self_test(&self) -> Result<Option<SelfTest>, VadError> {
        Ok(SelfTest::of_bundle(self.model().bundle(), FAMILY)?)
    }

    /// Run `test` on a fresh stream and compare (the stream is reset before
    /// and after).
    ///
    /// # Errors
    /// [`VadError::SelfTest`] for a test without the family's entries; as
    /// [`Vad::push_chunk`].
    pub fn run_self_test(&mut self, test: &SelfTest) -> Result<Report, VadError> {
        let pcm = crate::selftest::input(test)?;
        let got = self.chunk_probabilities(pcm)?;
        crate::selftest::compare(test, &got, &self.engine().to_string())
    }

    /// The probability of each whole chunk of `pcm` from a fresh stream (the stream is reset
    /// before and after, also when a chunk fails).
    ///
    /// # Errors
    /// As [`Vad::push_chunk`].
    pub fn chunk_probabilities(&mut self, pcm: &[f32]) -> Result<Vec<f32>, VadError> {
        self.reset()?;
        let mut got = Vec::with_capacity(pcm.len() / CHUNK_SAMPLES);
        for chunk in pcm.chunks_exact(CHUNK_SAMPLES) {
            match self.push_chunk(chunk) {
                Ok(r) => got.push(r.probability),
                Err(e) => {
                    let _ = self.reset();
                    return Err(e);
                }
            }
        }
        self.reset()?;
        Ok(got)
    }

    /// Run the bundle's own self-test (what `tether verify --self-test` runs on the
    /// device).
    ///
    /// # Errors
    /// [`VadError::SelfTest`] when the bundle has none or it is unreadable; as
    /// [`Vad::run_self_test`].
    pub fn self_test(&mut self) -> Result<Report, VadError> {
        let test = SelfTest::required(self.model().bundle(), FAMILY)?;
        self.run_self_test(&test)
    }
}

/// A `vad` bundle writer holding `onnx` (section [`ONNX_SECTION`], its tensors
/// recorded at the shapes the family runs: `input` `[1, 576]`, `sr` `[]`,
/// `state` `[2, 1, 128]`, `output` `[1, 1]`, `stateN` `[2, 1, 128]`) and
/// `config` ([`CONFIG_SECTION`]); no self-test. The recipe adds the self-test
/// and the identity's model version; [`Vad::from_onnx`] opens it in memory.
///
/// # Errors
/// [`VadError::Model`] from the writer.
pub fn bundle_of(
    onnx: &[u8],
    config: &VadConfig,
    name: &str,
    created_unix_s: u64,
) -> Result<BundleWriter, VadError> {
    bundle_with_identity(
        onnx,
        crate::Form::Streaming,
        config,
        IdentityDesc {
            name: name.into(),
            family: FAMILY.into(),
            model_version: "unspecified".into(),
            tool_version: concat!("tether-vad ", env!("CARGO_PKG_VERSION")).into(),
            created_unix_s,
        },
    )
}

/// [`bundle_of`] with a full identity.
/// The network's tensors are recorded at the shapes this family runs them (one window; the
/// manifest's input names also tell the load which [`crate::Form`] the network has).
pub(crate) fn bundle_with_identity(
    onnx: &[u8],
    form: crate::Form,
    config: &VadConfig,
    identity: IdentityDesc,
) -> Result<BundleWriter, VadError> {
    use tether_bundle::{DType, IoMode, Layout};
    let mut writer = BundleWriter::new(identity);
    let target = tether_family::recipe::add_portable_target(&mut writer)?;
    let model = writer.add_section(SectionKind::Onnx, ONNX_SECTION, Some(target), onnx.to_vec())?;
    let window = vec![1, WINDOW_SAMPLES as i64];
    let tensors: Vec<(&str, IoMode, DType, Vec<i64>)> = match form {
        crate::Form::Streaming => {
            let state = vec![2, 1, (STATE_LEN / 2) as i64];
            vec![
                ("input", IoMode::Input, DType::F32, window),
                ("sr", IoMode::Input, DType::I64, vec![]),
                ("state", IoMode::Input, DType::F32, state.clone()),
                ("output", IoMode::Output, DType::F32, vec![1, 1]),
                ("stateN", IoMode::Output, DType::F32, state),
            ]
        }
        crate::Form::Sequence => {
            let half = vec![1, 1, (STATE_LEN / 2) as i64];
            vec![
                ("input", IoMode::Input, DType::F32, window),
                ("h", IoMode::Input, DType::F32, half.clone()),
                ("c", IoMode::Input, DType::F32, half.clone()),
                ("speech_probs", IoMode::Output, DType::F32, vec![1]),
                ("hn", IoMode::Output, DType::F32, half.clone()),
                ("cn", IoMode::Output, DType::F32, half),
            ]
        }
    };
    for (name, mode, dtype, dims) in tensors {
        writer.add_tensor(
            model,
            TensorDesc {
                name: name.into(),
                mode,
                dtype,
                dims,
                layout: Layout::Unspecified,
            },
        )?;
    }
    tether_family::recipe::add_config(&mut writer, CONFIG_SECTION, &config.to_record())?;
    Ok(writer)
}
