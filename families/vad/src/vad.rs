//! The semantic API: 16 kHz PCM in, speech probabilities and segments out.

use std::path::Path;

use tether_bundle::DType;
use tether_bundle::{Bundle, Verify};
use zerocopy::IntoBytes;

use crate::config::{CONFIG_SECTION, ONNX_SECTION, SELFTEST_SECTION};
use crate::net::{Network, freeze_i64_input};
use crate::segments::{ChunkEvents, SegmentEvent, SegmentTracker, SpeechSegment};
use crate::selftest::{SelfTest, SelfTestReport};
use crate::{
    CHUNK_SAMPLES, CONTEXT_SAMPLES, FAMILY, SAMPLE_RATE, STATE_LEN, VadConfig, VadError,
    WINDOW_SAMPLES,
};

/// Options of [`Vad::open`].
#[derive(Clone, Debug, Default)]
pub struct VadOptions {
    /// Replace the bundle's segment parameters.
    pub config: Option<VadConfig>,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
}

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

/// Indices of the network's tensors, found by name at load.
#[derive(Clone, Copy, Debug)]
struct Io {
    input: usize,
    state: usize,
    output: usize,
    state_n: usize,
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
/// the speech probability and the next state. The state lives in two buffers
/// used alternately as input and output (ping-pong: swapped by index, never
/// copied or allocated); `reset` zeroes both and the context.
///
/// Nothing in `push_chunk` allocates except inside the tract CPU engine
/// (its intermediate tensors); see `net.rs`.
#[derive(Debug)]
pub struct Vad {
    net: Network,
    io: Io,
    config: VadConfig,
    tracker: SegmentTracker,
    /// Network input: context, then the chunk.
    window: [f32; WINDOW_SAMPLES],
    /// The recurrent state ping-pong; `states[current]` feeds the next chunk.
    states: [[f32; STATE_LEN]; 2],
    current: usize,
    probability: [f32; 1],
    /// A partial chunk from `push`.
    pending: [f32; CHUNK_SAMPLES],
    pending_len: usize,
    /// Samples since the last reset.
    samples: u64,
    selftest: Option<SelfTest>,
}

fn find(specs: &[tether_runtime::TensorSpec], name: &str) -> Result<usize, VadError> {
    specs.iter().position(|t| t.name == name).ok_or_else(|| {
        VadError::Network(format!(
            "no tensor `{name}` among [{}]",
            specs
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

impl Vad {
    /// Open a `vad` bundle with default options.
    ///
    /// # Errors
    /// See [`Vad::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, VadError> {
        Self::open(path, &VadOptions::default())
    }

    /// Open a `vad` bundle (memory-mapped) and prepare the network.
    ///
    /// # Errors
    /// [`VadError::Bundle`] (unreadable or corrupt bundle, missing section),
    /// [`VadError::WrongFamily`], [`VadError::Config`], [`VadError::SelfTest`]
    /// (malformed payload), [`VadError::Network`].
    pub fn open(path: impl AsRef<Path>, options: &VadOptions) -> Result<Self, VadError> {
        let verify = if options.verify_eagerly {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        let bundle = Bundle::open(path, verify)?;
        Self::from_bundle(&bundle, options)
    }

    /// Prepare from an opened bundle (the bundle can be dropped afterwards).
    ///
    /// # Errors
    /// As [`Vad::open`].
    pub fn from_bundle(bundle: &Bundle, options: &VadOptions) -> Result<Self, VadError> {
        let id = bundle.identity();
        if id.family != FAMILY {
            return Err(VadError::WrongFamily {
                bundle: id.name.to_string(),
                family: id.family.to_string(),
            });
        }
        let config = match options.config {
            Some(c) => c,
            None => VadConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?,
        };
        let mut vad = Self::from_onnx(bundle.section_data(ONNX_SECTION)?, config)?;
        if bundle.section(SELFTEST_SECTION).is_ok() {
            vad.selftest = Some(SelfTest::from_section(
                bundle.section_data(SELFTEST_SECTION)?,
            )?);
        }
        log::info!(
            "vad `{}`: Silero VAD at 16 kHz, chunks of {CHUNK_SAMPLES}, threshold {} / {}, min speech {} ms, min silence {} ms, pad {} ms, tract CPU engine",
            id.name,
            config.threshold,
            config.neg_threshold,
            config.min_speech_ms,
            config.min_silence_ms,
            config.speech_pad_ms
        );
        Ok(vad)
    }

    /// Prepare from ONNX bytes (the streaming Silero network) and segment
    /// parameters, without a bundle.
    ///
    /// # Errors
    /// [`VadError::Config`], [`VadError::Network`] (missing or mistyped
    /// tensors, or the network fails to prepare).
    pub fn from_onnx(onnx: &[u8], config: VadConfig) -> Result<Self, VadError> {
        config.validate()?;
        // `sr` is always 16000 here: make it a constant (see net.rs).
        let onnx = freeze_i64_input(onnx, "sr", i64::from(SAMPLE_RATE))?;
        let info = tether_runtime::cpu::inspect_onnx(&onnx)
            .map_err(|e| VadError::Network(e.to_string()))?;
        let shapes: Vec<Vec<usize>> = info
            .inputs
            .iter()
            .map(|t| match t.name.as_str() {
                "input" => Ok(vec![1, WINDOW_SAMPLES]),
                "state" => Ok(vec![2, 1, STATE_LEN / 2]),
                other => Err(VadError::Network(format!(
                    "unexpected input `{other}` (Silero VAD has `input`, `sr`, `state`)"
                ))),
            })
            .collect::<Result<_, _>>()?;
        let net = Network::load(&onnx, &shapes)?;
        let io = Io {
            input: find(net.inputs(), "input")?,
            state: find(net.inputs(), "state")?,
            output: find(net.outputs(), "output")?,
            state_n: find(net.outputs(), "stateN")?,
        };
        let expect = |spec: &tether_runtime::TensorSpec, dtype: DType, shape: &[usize]| {
            if spec.dtype == dtype && spec.shape == shape {
                Ok(())
            } else {
                Err(VadError::Network(format!(
                    "tensor {spec}, expected {dtype}{shape:?}"
                )))
            }
        };
        expect(&net.inputs()[io.input], DType::F32, &[1, WINDOW_SAMPLES])?;
        expect(&net.inputs()[io.state], DType::F32, &[2, 1, STATE_LEN / 2])?;
        expect(&net.outputs()[io.output], DType::F32, &[1, 1])?;
        expect(
            &net.outputs()[io.state_n],
            DType::F32,
            &[2, 1, STATE_LEN / 2],
        )?;
        if net.inputs().len() != 2 || net.outputs().len() != 2 {
            return Err(VadError::Network(format!(
                "{} inputs and {} outputs, expected 2 (`sr` fixed) and 2",
                net.inputs().len(),
                net.outputs().len()
            )));
        }
        Ok(Self {
            net,
            io,
            config,
            tracker: SegmentTracker::new(&config, CHUNK_SAMPLES),
            window: [0.0; WINDOW_SAMPLES],
            states: [[0.0; STATE_LEN]; 2],
            current: 0,
            probability: [0.0],
            pending: [0.0; CHUNK_SAMPLES],
            pending_len: 0,
            samples: 0,
            selftest: None,
        })
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
    pub fn reset(&mut self) {
        self.states = [[0.0; STATE_LEN]; 2];
        self.current = 0;
        self.window = [0.0; WINDOW_SAMPLES];
        self.pending_len = 0;
        self.samples = 0;
        self.tracker.reset();
    }

    /// Run the network on `window` (already filled) and advance the state.
    fn step(&mut self) -> Result<f32, VadError> {
        let (a, b) = self.states.split_at_mut(1);
        let (state_in, state_out) = if self.current == 0 {
            (&a[0], &mut b[0])
        } else {
            (&b[0], &mut a[0])
        };
        let mut inputs: [&[u8]; 2] = [&[]; 2];
        inputs[self.io.input] = self.window.as_bytes();
        inputs[self.io.state] = state_in.as_bytes();
        let prob = self.probability.as_mut_bytes();
        let state = state_out.as_mut_bytes();
        let mut outputs: [&mut [u8]; 2] = if self.io.output == 0 {
            [prob, state]
        } else {
            [state, prob]
        };
        self.net.run(&inputs, &mut outputs)?;
        self.current ^= 1;
        // The next chunk's context: the last 64 samples of this input
        // (`self._context = x[..., -context_size:]`).
        self.window
            .copy_within(WINDOW_SAMPLES - CONTEXT_SAMPLES.., 0);
        Ok(self.probability[0])
    }

    /// Process exactly one 512-sample chunk (32 ms at 16 kHz).
    ///
    /// # Errors
    /// [`VadError::ChunkLength`], [`VadError::PartialChunkPending`] (after a
    /// [`Vad::push`] that left a partial chunk), [`VadError::Run`] /
    /// [`VadError::Output`] from the engine.
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
    /// As [`Vad::push_chunk`]; on an error the failing chunk is lost and the
    /// stream should be reset.
    pub fn push(
        &mut self,
        mut pcm: &[f32],
        mut on_chunk: impl FnMut(&ChunkResult),
    ) -> Result<(), VadError> {
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
        self.reset();
        result
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
            for e in events {
                if let SegmentEvent::End(s) = e {
                    segments.push(*s);
                }
            }
        }
        self.reset();
        let mut probabilities = Vec::with_capacity(pcm.len().div_ceil(CHUNK_SAMPLES));
        let mut segments = Vec::new();
        let streamed = self.push(pcm, |r| {
            probabilities.push(r.probability);
            ends(&r.events, &mut segments);
        });
        if let Err(e) = streamed {
            self.reset();
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
    /// ([`crate::read_wav`]: channel mean, windowed-sinc resampling to 16 kHz).
    ///
    /// # Errors
    /// [`VadError::Wav`], [`VadError::Resample`], and as [`Vad::process`].
    pub fn process_wav(&mut self, path: impl AsRef<Path>) -> Result<Detection, VadError> {
        let audio = crate::read_wav(path)?;
        self.process(&audio.samples)
    }

    /// The self-test payload of the bundle this was opened from, if any.
    pub fn bundled_self_test(&self) -> Option<&SelfTest> {
        self.selftest.as_ref()
    }

    /// Run `test` on a fresh stream and compare (the stream is reset before
    /// and after).
    ///
    /// # Errors
    /// As [`Vad::push_chunk`].
    pub fn run_self_test(&mut self, test: &SelfTest) -> Result<SelfTestReport, VadError> {
        self.reset();
        let mut got = Vec::with_capacity(test.chunks());
        for chunk in test.pcm.chunks_exact(CHUNK_SAMPLES) {
            match self.push_chunk(chunk) {
                Ok(r) => got.push(r.probability),
                Err(e) => {
                    self.reset();
                    return Err(e);
                }
            }
        }
        self.reset();
        Ok(test.compare(&got))
    }

    /// Run the bundle's own self-test payload (what `tether verify
    /// --self-test` runs on the device).
    ///
    /// # Errors
    /// [`VadError::SelfTest`] when the bundle has no payload; as
    /// [`Vad::run_self_test`].
    pub fn self_test(&mut self) -> Result<SelfTestReport, VadError> {
        let test = self.selftest.take().ok_or_else(|| {
            VadError::SelfTest(format!("the bundle has no `{SELFTEST_SECTION}` section"))
        })?;
        let r = self.run_self_test(&test);
        self.selftest = Some(test);
        r
    }
}
