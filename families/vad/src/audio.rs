//! Audio input: WAV files of any sample rate and channel count to the
//! network's 16 kHz mono float32 signal.
//!
//! The chain is the one the package's `read_audio` (`silero_vad/utils_vad.py`)
//! runs with torchaudio 2.8 when no sox backend is present, so the reference
//! and this crate see the same signal:
//!
//! 1. decode PCM with [hound](https://crates.io/crates/hound): integer samples
//!    divided by `2^(bits - 1)` (8-bit WAV is unsigned; hound re-centres it),
//!    float samples as stored (`torchaudio.load`'s normalisation);
//! 2. mean over channels, in float32 (`wav.mean(dim=0)`);
//! 3. [`SincResampler`] to 16 kHz: torchaudio's `transforms.Resample` with
//!    its defaults (`sinc_interp_hann`, `lowpass_filter_width = 6`,
//!    `rolloff = 0.99`), written from its documented algorithm
//!    (`torchaudio/functional/functional.py`, `_get_sinc_resample_kernel` and
//!    `_apply_sinc_resample_kernel`).
//!
//! Measured against torchaudio on the golden inputs: the 16 kHz signals agree
//! within 1e-6 (see `tests/golden.rs`).

use std::io::Read;
use std::path::Path;

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
/// Largest WAV accepted, in samples over all channels (2^31, e.g. over three
/// hours of 48 kHz stereo).
pub const MAX_WAV_SAMPLES: u64 = 1 << 31;

/// A decoded, down-mixed and resampled signal.
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    /// Mono samples at 16 kHz, nominally in [-1, 1].
    pub samples: Vec<f32>,
    /// The file's sample rate in Hz.
    pub source_rate: u32,
    /// The file's channel count.
    pub source_channels: u16,
    /// The file's frames (samples per channel).
    pub source_frames: u64,
}

impl Audio {
    /// Duration of the 16 kHz signal in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        self.samples.len() as f64 * 1000.0 / f64::from(SAMPLE_RATE)
    }
}

/// Read a WAV file and return it as 16 kHz mono (see the module documentation).
///
/// # Errors
/// [`VadError::Wav`] for an unreadable or malformed file, an unsupported
/// sample format, zero channels or sample rate, or more than
/// [`MAX_WAV_SAMPLES`] samples; [`VadError::Resample`] for a rate whose
/// kernel would exceed [`MAX_KERNEL_COEFFICIENTS`].
pub fn read_wav(path: impl AsRef<Path>) -> Result<Audio, VadError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| VadError::Wav {
        source_name: name.clone(),
        reason: e.to_string(),
    })?;
    decode(std::io::BufReader::new(file), &name)
}

/// [`read_wav`] on bytes in memory.
///
/// # Errors
/// As [`read_wav`].
pub fn read_wav_bytes(bytes: &[u8]) -> Result<Audio, VadError> {
    decode(bytes, "<bytes>")
}

fn decode<R: Read>(reader: R, name: &str) -> Result<Audio, VadError> {
    let wav_err = |reason: String| VadError::Wav {
        source_name: name.to_string(),
        reason,
    };
    let mut r = hound::WavReader::new(reader).map_err(|e| wav_err(e.to_string()))?;
    let spec = r.spec();
    if spec.channels == 0 || spec.sample_rate == 0 {
        return Err(wav_err(format!(
            "{} channels at {} Hz",
            spec.channels, spec.sample_rate
        )));
    }
    let total = u64::from(r.len());
    if total > MAX_WAV_SAMPLES {
        return Err(wav_err(format!(
            "{total} samples (at most {MAX_WAV_SAMPLES})"
        )));
    }
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => r
            .samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(|e| wav_err(e.to_string()))?,
        (hound::SampleFormat::Int, bits @ 1..=32) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f64;
            r.samples::<i32>()
                .map(|s| s.map(|v| (f64::from(v) * scale) as f32))
                .collect::<Result<_, _>>()
                .map_err(|e| wav_err(e.to_string()))?
        }
        (format, bits) => {
            return Err(wav_err(format!(
                "unsupported sample format {format:?} with {bits} bits"
            )));
        }
    };
    let channels = usize::from(spec.channels);
    if !interleaved.len().is_multiple_of(channels) {
        return Err(wav_err(format!(
            "{} samples is not a whole number of {channels}-channel frames",
            interleaved.len()
        )));
    }
    let mono = downmix(&interleaved, channels);
    let frames = mono.len() as u64;
    let samples = if spec.sample_rate == SAMPLE_RATE {
        mono
    } else {
        SincResampler::new(spec.sample_rate, SAMPLE_RATE)?.process(&mono)
    };
    Ok(Audio {
        samples,
        source_rate: spec.sample_rate,
        source_channels: spec.channels,
        source_frames: frames,
    })
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
