//! tether voice-activity family: Silero VAD (`silero-vad==6.2.3`,
//! `silero_vad_op18_ifless.onnx`) as a streaming API for a robot.
//!
//! - [`Vad`]: push 16 kHz mono PCM, get one speech probability
//!   per 512-sample chunk (32 ms) and speech-segment events. The network's
//!   recurrent state lives in two buffers swapped every chunk (ping-pong, no
//!   allocation); [`Vad::reset`] starts a new stream. [`Vad::process`] is the
//!   whole-signal API (it iterates the streaming one).
//! - [`segments`]: the hysteresis that turns probabilities into segments,
//!   mirroring the package's `get_speech_timestamps` (host code, no network).
//! - [`audio`]: WAV files of any sample rate and channel count to 16 kHz mono
//!   (channel mean, then torchaudio's windowed-sinc resampler, re-implemented),
//!   whole or streamed block by block; [`wav`]: the RIFF/WAVE reader (what
//!   libsndfile reads: PCM, float, A-law, mu-law; cut-off and streaming files).
//! - [`config`]: the family's bundle sections and configuration record.
//! - [`selftest`]: the bundle's self-test (reference PCM + expected probabilities from the
//!   package) in the shared format, and its comparison.
//! - `recipe` (feature `build`): ONNX -> `.bundle`; `cli` (feature `cli`):
//!   the family as the `tether` CLI sees it (build, inspect, run, bench,
//!   `verify --self-test`).
//!
//! The network runs through one internal module (`net`): the runtime's
//! [`tether_runtime::Model`], which picks the engine for the real device (the
//! tract CPU engine, or a GPU engine with one captured CUDA graph per state
//! parity), with the `sr` input fixed to 16000 at load.
//!
//! The streaming protocol (context, state, `sr`) follows the package's
//! `OnnxWrapper.__call__` in `silero_vad/utils_vad.py`; see `README.md` for
//! every constant's source and the golden evidence.
#![warn(missing_docs)]

pub mod audio;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
mod net;
#[cfg(feature = "build")]
pub mod recipe;
pub mod segments;
pub mod selftest;
mod vad;
pub mod wav;

pub use audio::{Audio, AudioStream, ResampleStream, SincResampler, read_wav, read_wav_bytes};
pub use config::VadConfig;
pub use net::Form;
pub use segments::{SegmentEvent, SegmentTracker, SpeechSegment};
pub use tether_family::selftest::{Report as SelfTestReport, SelfTest};
pub use tether_runtime::{Device, EngineKind};
pub use vad::{ChunkResult, Detection, STOP_EVERY_CHUNKS, StreamEnd, Vad, VadOptions, bundle_of};

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "vad";

/// Sample rate the network runs at, in Hz (the 16 kHz branch of the model).
pub const SAMPLE_RATE: u32 = 16_000;

/// Samples per chunk at 16 kHz (32 ms): `OnnxWrapper.__call__` accepts only
/// 512 samples at 16 kHz (`num_samples = 512 if sr == 16000 else 256`).
pub const CHUNK_SAMPLES: usize = 512;

/// Samples of the previous chunk prepended to each chunk at 16 kHz
/// (`context_size = 64 if sr == 16000 else 32`); zeros after a reset.
pub const CONTEXT_SAMPLES: usize = 64;

/// Network input length: context plus chunk, `[1, 576]`.
pub const WINDOW_SAMPLES: usize = CONTEXT_SAMPLES + CHUNK_SAMPLES;

/// Elements of the recurrent state `[2, 1, 128]` (`reset_states`:
/// `torch.zeros((2, batch_size, 128))`).
pub const STATE_LEN: usize = 2 * 128;

/// Duration of one chunk in milliseconds (512 / 16 kHz).
pub const CHUNK_MS: f64 = 32.0;

/// Errors of the voice-activity family. The hot-path variants (`ChunkLength`,
/// `NonFiniteSample`, `Model`'s `Run` and `View`, `Output`) carry only numbers.
#[derive(Debug, thiserror::Error)]
pub enum VadError {
    /// Opening the bundle or running the network failed: the bundle, the runtime, an
    /// engine call, a tensor view, or a bundle of another family.
    #[error(transparent)]
    Model(#[from] tether_family::model::ModelError),
    /// A field of the configuration is out of range.
    #[error("vad configuration: invalid {field}: {value}")]
    Config {
        /// The field.
        field: &'static str,
        /// The value seen.
        value: String,
    },
    /// The network's inputs and outputs are neither of Silero VAD's interfaces (streaming or sequence form).
    #[error("not a Silero VAD network: {0}")]
    Network(String),
    /// [`Vad::push_chunk`] was given a chunk of the wrong length.
    #[error("a chunk holds {actual} samples, expected {expected} (32 ms at 16 kHz)")]
    ChunkLength {
        /// [`CHUNK_SAMPLES`].
        expected: usize,
        /// Samples given.
        actual: usize,
    },
    /// A sample given to [`Vad::push`] or [`Vad::push_chunk`] is NaN or infinite: the
    /// network's answer to it would mean nothing (onnxruntime gives 0 or NaN, the tract
    /// engine a constant), so the call is refused before it consumes anything.
    #[error(
        "sample {index} of the stream is {value}, not a finite number: the VAD needs finite samples (nominally in [-1, 1])"
    )]
    NonFiniteSample {
        /// The sample's index in the stream (counted from its start or last reset, at
        /// 16 kHz).
        index: u64,
        /// The sample.
        value: f32,
    },
    /// [`Vad::push_chunk`] was called while [`Vad::push`] holds a partial chunk.
    #[error(
        "{pending} samples of a partial chunk are pending from push(); finish() or reset() first"
    )]
    PartialChunkPending {
        /// Samples held.
        pending: usize,
    },
    /// The network output buffer has the wrong size.
    #[error("network output {index} holds {actual} bytes, expected {expected}")]
    Output {
        /// Output index in the network's order.
        index: usize,
        /// Bytes expected.
        expected: usize,
        /// Bytes present.
        actual: usize,
    },
    /// A WAV file could not be read or is unusable.
    #[error("WAV {source_name}: {error}")]
    Wav {
        /// File name (or `<bytes>` for in-memory data).
        source_name: String,
        /// What is wrong (naming the format field and its value where one is).
        #[source]
        error: wav::WavError,
    },
    /// A resampling request is out of range.
    #[error("resampling {from_hz} Hz -> {to_hz} Hz: {reason}")]
    Resample {
        /// Source rate in Hz.
        from_hz: u32,
        /// Target rate in Hz.
        to_hz: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// The self-test section is unreadable or lacks an entry this family needs.
    #[error("vad self-test: {0}")]
    SelfTest(#[from] tether_family::selftest::SelfTestError),
    /// At build time, the CPU engine does not reproduce the pinned model's reference output
    /// (the report says by how much).
    #[error("the CPU engine does not reproduce the reference: {0}")]
    ReferenceMismatch(Box<tether_family::selftest::Report>),
}

tether_family::model_error_conversions!(VadError);
