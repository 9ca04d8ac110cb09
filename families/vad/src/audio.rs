//! Audio input: WAV files of any sample rate and channel count to the
//! network's 16 kHz mono float32 signal, whole or streamed in bounded memory.
//!
//! The chain is the one the package's `read_audio` (`silero_vad/utils_vad.py`)
//! runs with torchaudio 2.8 when no sox backend is present, so the reference
//! and this crate see the same signal:
//!
//! 1. decode the file as libsndfile does for `torchaudio.load` (its `soundfile`
//!    backend, `normalize=True`): [`crate::wav`] reads PCM, float, A-law and
//!    mu-law in RIFF, RIFX and RF64 files, cut-off and streaming ones included;
//! 2. mean over channels, in float32 (`wav.mean(dim=0)`);
//! 3. [`SincResampler`] to 16 kHz: torchaudio's `transforms.Resample` with
//!    its defaults (`sinc_interp_hann`, `lowpass_filter_width = 6`,
//!    `rolloff = 0.99`), written from its documented algorithm
//!    (`torchaudio/functional/functional.py`, `_get_sinc_resample_kernel` and
//!    `_apply_sinc_resample_kernel`).
//!
//! [`AudioStream`] runs the three steps block by block (memory bounded by the
//! block and the resampling kernel, whatever the file's length); [`read_wav`]
//! collects its blocks. Both give the same samples, bit for bit.
//!
//! Measured against torchaudio on the golden inputs: the 16 kHz signals agree
//! within 1e-6 (see `tests/golden.rs`).

use std::io::Read;
use std::path::Path;

use crate::wav::{Truncation, WavError, WavFormat, WavReader};
use crate::{SAMPLE_RATE, VadError};

/// Zero crossings of the sinc kept on each side (torchaudio's
/// `lowpass_filter_width` default).
pub const LOWPASS_FILTER_WIDTH: u32 = 6;
/// Cut-off as a fraction of the lower Nyquist frequency (torchaudio's
/// `rolloff` default).
pub const ROLLOFF: f64 = 0.99;
/// Largest resampling kernel built, in coefficients (16 Mi, 64 MiB): rates
/// whose ratio does not reduce (e.g. 44101 -> 16000) are refused rather than
/// allocating gigabytes as torchaudio would.
pub const MAX_KERNEL_COEFFICIENTS: usize = 1 << 24;
/// Largest WAV [`read_wav`] holds in memory, in samples over all channels
/// (2^31, e.g. over three hours of 48 kHz stereo); [`AudioStream`] has no limit.
pub const MAX_WAV_SAMPLES: u64 = 1 << 31;
/// Source frames an [`AudioStream`] decodes per block.
pub const STREAM_BLOCK_FRAMES: usize = 16 * 1024;

/// A decoded, down-mixed and resampled signal.
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    /// Mono samples at 16 kHz, nominally in [-1, 1].
    pub samples: Vec<f32>,
    /// The file's sample rate in Hz.
    pub source_rate: u32,
    /// The file's channel count.
    pub source_channels: u16,
    /// The file's frames (samples per channel) that were read.
    pub source_frames: u64,
    /// The file's format.
    pub format: WavFormat,
    /// Set when the file is shorter than its header says (the samples present
    /// were used).
    pub truncation: Option<Truncation>,
}

impl Audio {
    /// Duration of the 16 kHz signal in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        self.samples.len() as f64 * 1000.0 / f64::from(SAMPLE_RATE)
    }
}

/// A WAV file decoded, down-mixed and resampled to 16 kHz block by block.
///
/// Memory: one block of the file's bytes ([`STREAM_BLOCK_FRAMES`] frames), the
/// resampler's kernel and the input it still needs (about 2 x its width), and
/// the caller's output block; nothing grows with the file's length.
pub struct AudioStream<R> {
    reader: WavReader<R>,
    resampler: Option<ResampleStream>,
    mono: Vec<f32>,
    frames: u64,
    name: String,
    done: bool,
}

impl<R> std::fmt::Debug for AudioStream<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AudioStream")
            .field("name", &self.name)
            .field("reader", &self.reader)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl AudioStream<std::io::BufReader<std::fs::File>> {
    /// Open a WAV file (regular files only) and read its header.
    ///
    /// # Errors
    /// [`VadError::Wav`] naming the file and what is wrong with it;
    /// [`VadError::Resample`] for a rate that cannot be resampled.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, VadError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |e: std::io::Error| VadError::Wav {
            source_name: name.clone(),
            error: WavError::Io(e),
        };
        let file = tether_bundle::files::open_regular(path)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let len = file.metadata().map_err(io)?.len();
        Self::new(std::io::BufReader::new(file), Some(len), &name)
    }
}

impl<R: Read> AudioStream<R> {
    /// Read the header from `reader` (`len`: its length in bytes, when known);
    /// `name` names the source in errors.
    ///
    /// # Errors
    /// As [`AudioStream::open`].
    pub fn new(reader: R, len: Option<u64>, name: &str) -> Result<Self, VadError> {
        let reader = WavReader::new(reader, len).map_err(|error| VadError::Wav {
            source_name: name.to_string(),
            error,
        })?;
        let rate = reader.format().sample_rate;
        let resampler = if rate == SAMPLE_RATE {
            None
        } else {
            Some(ResampleStream::new(SincResampler::new(rate, SAMPLE_RATE)?))
        };
        if let Some(t) = reader.truncation() {
            log::warn!("{name}: {t}");
        }
        Ok(Self {
            reader,
            resampler,
            mono: Vec::with_capacity(STREAM_BLOCK_FRAMES),
            frames: 0,
            name: name.to_string(),
            done: false,
        })
    }

    /// The file's format.
    pub fn format(&self) -> &WavFormat {
        self.reader.format()
    }

    /// Frames the file holds, when known before reading it (not for a streaming header).
    pub fn source_frames(&self) -> Option<u64> {
        self.reader.frames()
    }

    /// Samples at 16 kHz the stream will give, when the frame count is known.
    pub fn samples_16k(&self) -> Option<u64> {
        let frames = self.reader.frames()?;
        Some(match &self.resampler {
            None => frames,
            Some(r) => r.resampler.output_len(frames as usize) as u64,
        })
    }

    /// Frames read so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Set once the file turned out shorter than its header says.
    pub fn truncation(&self) -> Option<Truncation> {
        self.reader.truncation()
    }

    /// Replace `out` with the next block of 16 kHz mono samples; `false` once the
    /// stream has ended (then `out` is empty).
    ///
    /// # Errors
    /// [`VadError::Wav`] when reading fails.
    pub fn next_block(&mut self, out: &mut Vec<f32>) -> Result<bool, VadError> {
        out.clear();
        while out.is_empty() && !self.done {
            self.mono.clear();
            let had_truncation = self.reader.truncation().is_some();
            let n = self
                .reader
                .read_mono(&mut self.mono, STREAM_BLOCK_FRAMES)
                .map_err(|error| VadError::Wav {
                    source_name: self.name.clone(),
                    error,
                })?;
            if !had_truncation && let Some(t) = self.reader.truncation() {
                log::warn!("{}: {t}", self.name);
            }
            self.frames += n as u64;
            match &mut self.resampler {
                None => out.extend_from_slice(&self.mono),
                Some(r) => r.push(&self.mono, out),
            }
            if n == 0 {
                self.done = true;
                if let Some(r) = &mut self.resampler {
                    r.finish(out);
                }
            }
        }
        Ok(!out.is_empty())
    }

    /// Read the rest of the stream into one [`Audio`].
    ///
    /// # Errors
    /// As [`AudioStream::next_block`]; [`VadError::Wav`] when the file holds more than
    /// [`MAX_WAV_SAMPLES`] samples.
    pub fn collect(mut self) -> Result<Audio, VadError> {
        let format = *self.reader.format();
        let channels = u64::from(format.channels);
        if let Some(frames) = self.reader.frames()
            && frames * channels > MAX_WAV_SAMPLES
        {
            return Err(self.too_long(frames * channels));
        }
        let mut samples = Vec::with_capacity(self.samples_16k().unwrap_or(0) as usize);
        let mut block = Vec::new();
        while self.next_block(&mut block)? {
            samples.extend_from_slice(&block);
            if self.frames * channels > MAX_WAV_SAMPLES {
                return Err(self.too_long(self.frames * channels));
            }
        }
        Ok(Audio {
            samples,
            source_rate: format.sample_rate,
            source_channels: format.channels,
            source_frames: self.frames,
            format,
            truncation: self.reader.truncation(),
        })
    }

    fn too_long(&self, samples: u64) -> VadError {
        VadError::Wav {
            source_name: self.name.clone(),
            error: WavError::Malformed(format!(
                "{samples} samples are more than {MAX_WAV_SAMPLES} to hold in memory; stream the file instead (AudioStream, Vad::process_wav)"
            )),
        }
    }
}

/// Read a WAV file and return it as 16 kHz mono (see the module documentation).
///
/// # Errors
/// [`VadError::Wav`] for an unreadable, malformed or unsupported file (naming the
/// format field and its value), or more than [`MAX_WAV_SAMPLES`] samples;
/// [`VadError::Resample`] for a rate whose kernel would exceed
/// [`MAX_KERNEL_COEFFICIENTS`].
pub fn read_wav(path: impl AsRef<Path>) -> Result<Audio, VadError> {
    AudioStream::open(path)?.collect()
}

/// [`read_wav`] on bytes in memory.
///
/// # Errors
/// As [`read_wav`].
pub fn read_wav_bytes(bytes: &[u8]) -> Result<Audio, VadError> {
    AudioStream::new(bytes, Some(bytes.len() as u64), "<bytes>")?.collect()
}

/// Mean over the channels of interleaved frames, in float32 (channel order).
///
/// `channels` must be at least 1; a trailing partial frame is ignored.
pub fn downmix(interleaved: &[f32], channels: usize) -> Vec<f32> {
    if channels <= 1 {
        return interleaved.to_vec();
    }
    let n = channels as f32;
    interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().copied().sum::<f32>() / n)
        .collect()
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Band-limited (windowed-sinc, polyphase) resampler between two integer
/// rates: torchaudio's `sinc_interp_hann` method with its defaults.
///
/// With `g = gcd(from, to)`, `orig = from / g`, `new = to / g`,
/// `base = min(orig, new) * 0.99` and `width = ceil(6 * orig / base)`,
/// output sample `k * new + p` (phase `p < new`) is
/// `sum_i h[p][i] * x[k * orig + i - width]` over `i < 2 * width + orig`
/// (samples outside the input are zero), where, with
/// `t = clamp((-p / new + (i - width) / orig) * base, -6, 6)`,
/// `h[p][i] = sinc(pi t) * cos(pi t / 12)^2 * base / orig`.
/// The output has `ceil(len * new / orig)` samples. As in torchaudio the
/// kernel is computed in float64 (the phase offset `-p / new` in float32,
/// torch's type promotion) and stored as float32; products are summed in
/// float64 here (torchaudio: float32 convolution), a difference of about 1e-7.
#[derive(Clone, Debug)]
pub struct SincResampler {
    from_hz: u32,
    to_hz: u32,
    orig: usize,
    new: usize,
    width: usize,
    taps: usize,
    kernel: Vec<f32>,
    /// Per phase, the range of taps that are not zero.
    support: Vec<(usize, usize)>,
}

impl SincResampler {
    /// Prepare the kernel for `from_hz -> to_hz`.
    ///
    /// # Errors
    /// [`VadError::Resample`] when a rate is zero or the kernel would exceed
    /// [`MAX_KERNEL_COEFFICIENTS`].
    pub fn new(from_hz: u32, to_hz: u32) -> Result<Self, VadError> {
        let err = |reason| VadError::Resample {
            from_hz,
            to_hz,
            reason,
        };
        if from_hz == 0 || to_hz == 0 {
            return Err(err("a rate is zero"));
        }
        let g = gcd(u64::from(from_hz), u64::from(to_hz));
        let orig = (u64::from(from_hz) / g) as usize;
        let new = (u64::from(to_hz) / g) as usize;
        let lpw = f64::from(LOWPASS_FILTER_WIDTH);
        let base = orig.min(new) as f64 * ROLLOFF;
        let width = (lpw * orig as f64 / base).ceil() as usize;
        let taps = 2 * width + orig;
        if new.saturating_mul(taps) > MAX_KERNEL_COEFFICIENTS {
            return Err(err(
                "the rates share too small a common divisor (the kernel would exceed 16 Mi coefficients)",
            ));
        }
        let scale = base / orig as f64;
        let mut kernel = vec![0f32; new * taps];
        let mut support = Vec::with_capacity(new);
        for p in 0..new {
            let phase = f64::from(-(p as f32) / new as f32);
            let row = &mut kernel[p * taps..(p + 1) * taps];
            for (i, h) in row.iter_mut().enumerate() {
                let t = ((phase + (i as f64 - width as f64) / orig as f64) * base).clamp(-lpw, lpw);
                let window = (t * std::f64::consts::PI / lpw / 2.0).cos().powi(2);
                let tp = t * std::f64::consts::PI;
                let sinc = if tp == 0.0 { 1.0 } else { tp.sin() / tp };
                *h = (sinc * (window * scale)) as f32;
            }
            let first = row.iter().position(|&h| h != 0.0).unwrap_or(0);
            let last = row.iter().rposition(|&h| h != 0.0).map_or(0, |l| l + 1);
            support.push((first, last.max(first)));
        }
        Ok(Self {
            from_hz,
            to_hz,
            orig,
            new,
            width,
            taps,
            kernel,
            support,
        })
    }

    /// Source rate in Hz.
    pub fn from_hz(&self) -> u32 {
        self.from_hz
    }

    /// Target rate in Hz.
    pub fn to_hz(&self) -> u32 {
        self.to_hz
    }

    /// Output samples for `input_len` input samples: `ceil(input_len * to / from)`.
    pub fn output_len(&self, input_len: usize) -> usize {
        (input_len * self.new).div_ceil(self.orig)
    }

    /// Resample `input` into `output` (exactly [`Self::output_len`] samples).
    ///
    /// # Errors
    /// [`VadError::Resample`] when `output` has another length.
    pub fn process_into(&self, input: &[f32], output: &mut [f32]) -> Result<(), VadError> {
        if output.len() != self.output_len(input.len()) {
            return Err(VadError::Resample {
                from_hz: self.from_hz,
                to_hz: self.to_hz,
                reason: "the output buffer length is not output_len(input.len())",
            });
        }
        let len = input.len() as isize;
        for (o, y) in output.iter_mut().enumerate() {
            let (k, p) = (o / self.new, o % self.new);
            let row = &self.kernel[p * self.taps..(p + 1) * self.taps];
            let (first, last) = self.support[p];
            let origin = (k * self.orig) as isize - self.width as isize;
            let mut acc = 0f64;
            for (i, &h) in row.iter().enumerate().take(last).skip(first) {
                let j = origin + i as isize;
                if j >= 0 && j < len {
                    acc += f64::from(h * input[j as usize]);
                }
            }
            *y = acc as f32;
        }
        Ok(())
    }

    /// Resample `input` into a new vector (`from == to` copies it).
    pub fn process(&self, input: &[f32]) -> Vec<f32> {
        if self.orig == self.new {
            return input.to_vec();
        }
        let mut out = vec![0f32; self.output_len(input.len())];
        // The length matches by construction.
        if self.process_into(input, &mut out).is_err() {
            out.clear();
        }
        out
    }
}

/// [`SincResampler`] over a signal that arrives in pieces: each output sample
/// is computed, with the same arithmetic in the same order as
/// [`SincResampler::process_into`], as soon as the input its kernel covers has
/// arrived; input no later output needs is dropped. The concatenated output
/// equals `process` on the concatenated input, bit for bit.
#[derive(Clone, Debug)]
pub struct ResampleStream {
    resampler: SincResampler,
    /// Input from global index `base` on.
    input: Vec<f32>,
    base: u64,
    /// Input samples received.
    received: u64,
    /// Next output index.
    next: u64,
}

impl ResampleStream {
    /// A stream through `resampler`.
    pub fn new(resampler: SincResampler) -> Self {
        Self {
            resampler,
            input: Vec::new(),
            base: 0,
            received: 0,
            next: 0,
        }
    }

    /// Global index of the first input sample output `o` reads (may be negative).
    fn origin(&self, o: u64) -> i64 {
        let r = &self.resampler;
        (o / r.new as u64 * r.orig as u64) as i64 - r.width as i64
    }

    /// Compute output `o` from the held input; inputs at or past `len` (the total,
    /// when known) and before 0 are zero.
    fn output(&self, o: u64, len: u64) -> f32 {
        let r = &self.resampler;
        let p = (o % r.new as u64) as usize;
        let row = &r.kernel[p * r.taps..(p + 1) * r.taps];
        let (first, last) = r.support[p];
        let origin = self.origin(o);
        let mut acc = 0f64;
        for (i, &h) in row.iter().enumerate().take(last).skip(first) {
            let j = origin + i as i64;
            if j >= 0 && (j as u64) < len {
                acc += f64::from(h * self.input[(j as u64 - self.base) as usize]);
            }
        }
        acc as f32
    }

    /// Add `x` to the input and append every output it completes to `out`.
    pub fn push(&mut self, x: &[f32], out: &mut Vec<f32>) {
        self.input.extend_from_slice(x);
        self.received += x.len() as u64;
        let taps = self.resampler.taps as i64;
        // Output o is complete when its whole kernel window has arrived.
        while self.origin(self.next) + taps <= self.received as i64 {
            out.push(self.output(self.next, u64::MAX));
            self.next += 1;
        }
        self.drop_consumed();
    }

    /// The input has ended: append the remaining outputs (`ceil(len * to / from)` in all).
    pub fn finish(&mut self, out: &mut Vec<f32>) {
        let total = self.resampler.output_len(self.received as usize) as u64;
        while self.next < total {
            out.push(self.output(self.next, self.received));
            self.next += 1;
        }
        self.input.clear();
        self.base = self.received;
    }

    fn drop_consumed(&mut self) {
        let keep_from = self.origin(self.next).max(0) as u64;
        if keep_from > self.base {
            let n = ((keep_from - self.base) as usize).min(self.input.len());
            self.input.drain(..n);
            self.base += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_bytes(
        spec: hound::WavSpec,
        write: impl FnOnce(&mut hound::WavWriter<&mut std::io::Cursor<Vec<u8>>>),
    ) -> Vec<u8> {
        let mut cursor = std::io::Cursor::new(Vec::new());
        {
            let mut w = hound::WavWriter::new(&mut cursor, spec).expect("writer");
            write(&mut w);
            w.finalize().expect("finalize");
        }
        cursor.into_inner()
    }

    #[test]
    fn decodes_integer_and_float_pcm_like_torchaudio() {
        let spec = |bits, format, channels| hound::WavSpec {
            channels,
            sample_rate: 16_000,
            bits_per_sample: bits,
            sample_format: format,
        };
        let b = wav_bytes(spec(16, hound::SampleFormat::Int, 1), |w| {
            for v in [0i16, 16384, -32768, 32767] {
                w.write_sample(v).expect("write");
            }
        });
        let a = read_wav_bytes(&b).expect("16-bit");
        assert_eq!(a.samples, [0.0, 0.5, -1.0, 32767.0 / 32768.0]);
        let b = wav_bytes(spec(24, hound::SampleFormat::Int, 2), |w| {
            for v in [4_194_304i32, 0, -8_388_608, -8_388_608] {
                w.write_sample(v).expect("write");
            }
        });
        let a = read_wav_bytes(&b).expect("24-bit stereo");
        assert_eq!(
            (a.samples.as_slice(), a.source_channels),
            ([0.25, -1.0].as_slice(), 2)
        );
        let b = wav_bytes(spec(8, hound::SampleFormat::Int, 1), |w| {
            for v in [0i8, 64, -128] {
                w.write_sample(v).expect("write");
            }
        });
        assert_eq!(read_wav_bytes(&b).expect("8-bit").samples, [0.0, 0.5, -1.0]);
        let b = wav_bytes(spec(32, hound::SampleFormat::Float, 3), |w| {
            for v in [0.3f32, 0.6, 0.9] {
                w.write_sample(v).expect("write");
            }
        });
        let a = read_wav_bytes(&b).expect("float");
        assert_eq!(a.samples, [(0.3f32 + 0.6 + 0.9) / 3.0]);
    }

    #[test]
    fn rejects_garbage_and_impossible_rates() {
        let e = read_wav_bytes(b"RIFF\x04\x00\x00\x00WAVE").unwrap_err();
        assert!(e.to_string().starts_with("WAV <bytes>:"), "{e}");
        let e = read_wav("/nonexistent/x.wav").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.wav"), "{e}");
        let e = SincResampler::new(44_101, 16_000).unwrap_err();
        assert!(e.to_string().contains("44101 Hz -> 16000 Hz"), "{e}");
        assert!(SincResampler::new(0, 16_000).is_err());
    }

    #[test]
    fn streamed_resampling_equals_the_whole_signal_bit_for_bit() {
        let mut seed = 7u64;
        let x: Vec<f32> = (0..20_011)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        for (from, pieces) in [
            (48_000, [1usize, 7, 512, 4096]),
            (22_050, [3, 100, 999, 5000]),
        ] {
            let r = SincResampler::new(from, 16_000).expect("rates");
            let whole = r.process(&x);
            let mut stream = ResampleStream::new(r);
            let (mut out, mut at, mut k) = (Vec::new(), 0, 0);
            while at < x.len() {
                let n = pieces[k % pieces.len()].min(x.len() - at);
                stream.push(&x[at..at + n], &mut out);
                at += n;
                k += 1;
            }
            stream.finish(&mut out);
            assert_eq!(out, whole, "{from} Hz");
        }
    }

    #[test]
    fn resampler_geometry_matches_torchaudio() {
        // 48 kHz -> 16 kHz: orig 3, new 1, width ceil(6 * 3 / 0.99) = 19.
        let r = SincResampler::new(48_000, 16_000).expect("48k");
        assert_eq!((r.orig, r.new, r.width, r.taps), (3, 1, 19, 41));
        assert_eq!(r.output_len(68_545), 22_849);
        // 22.05 kHz -> 16 kHz: gcd 50, orig 441, new 320.
        let r = SincResampler::new(22_050, 16_000).expect("22.05k");
        assert_eq!((r.orig, r.new), (441, 320));
        assert_eq!(r.output_len(112_338), 81_516);
        // A low-frequency tone passes with unit gain away from the edges.
        let r = SincResampler::new(48_000, 16_000).expect("48k");
        let x: Vec<f32> = (0..4800)
            .map(|i| (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 48_000.0).sin())
            .collect();
        let y = r.process(&x);
        for (k, v) in y.iter().enumerate().skip(100).take(1000) {
            let want = (2.0 * std::f32::consts::PI * 440.0 * k as f32 / 16_000.0).sin();
            assert!((v - want).abs() < 2e-3, "sample {k}: {v} vs {want}");
        }
    }
}
