//! The voice-activity family's sections in the bundle and its configuration
//! record (read in place with zerocopy, no parsing at load).

use zerocopy::little_endian::{F64, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{CHUNK_SAMPLES, CONTEXT_SAMPLES, SAMPLE_RATE, STATE_LEN, VadError};

/// Name of the bundle section holding the Silero VAD ONNX network.
pub const ONNX_SECTION: &str = "vad/silero/model.onnx";
/// Name of the bundle section holding a [`VadConfigRecord`].
pub const CONFIG_SECTION: &str = "vad/config";
/// Name of the bundle section holding the self-test payload
/// ([`crate::selftest`]).
pub const SELFTEST_SECTION: &str = "vad/selftest";
/// Value of [`VadConfigRecord::version`] this crate writes and reads.
pub const CONFIG_VERSION: u16 = 1;
/// Largest duration accepted for the millisecond fields (one hour).
pub const MAX_DURATION_MS: u32 = 3_600_000;

/// On-disk record of the `vad/config` section (little-endian, 64 bytes,
/// alignment 1). Newer minor versions may append fields; readers ignore the
/// tail beyond the fields they know.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct VadConfigRecord {
    /// [`CONFIG_VERSION`].
    pub version: U16,
    /// Reserved, zero.
    pub reserved0: U16,
    /// Network sample rate in Hz ([`SAMPLE_RATE`]).
    pub sample_rate: U32,
    /// Samples per chunk ([`CHUNK_SAMPLES`]).
    pub chunk_samples: U32,
    /// Context samples prepended to each chunk ([`CONTEXT_SAMPLES`]).
    pub context_samples: U32,
    /// Elements of the recurrent state ([`STATE_LEN`]).
    pub state_len: U32,
    /// Speech threshold: a chunk with probability `>=` this is speech.
    pub threshold: F64,
    /// Exit threshold: while in speech, a chunk with probability `<` this is silence.
    pub neg_threshold: F64,
    /// Segments of at most this many milliseconds are dropped.
    pub min_speech_ms: U32,
    /// Silence that must last this many milliseconds to end a segment.
    pub min_silence_ms: U32,
    /// Padding added to each side of a segment, in milliseconds.
    pub speech_pad_ms: U32,
    /// Reserved, zero.
    pub reserved: [u8; 16],
}

/// Segment parameters, validated and in native types.
///
/// Defaults and meanings are the package's `get_speech_timestamps` parameters
/// (`silero_vad/utils_vad.py`, silero-vad 6.2.3); `max_speech_duration_s` is
/// not supported (the package default, infinity, is what this family does).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VadConfig {
    /// Speech threshold (`threshold`, default 0.5, in `[0, 1]`): probability
    /// `>=` starts or sustains speech.
    pub threshold: f64,
    /// Exit threshold (`neg_threshold`, default `max(threshold - 0.15, 0.01)`,
    /// in `[0, 1]`): while in speech, probability `<` this counts as silence.
    /// As in the package it may exceed `threshold` (thresholds below 0.01).
    pub neg_threshold: f64,
    /// `min_speech_duration_ms` (default 250): segments whose unpadded length
    /// is not longer than this are dropped.
    pub min_speech_ms: u32,
    /// `min_silence_duration_ms` (default 100): silence needed to end a segment.
    pub min_silence_ms: u32,
    /// `speech_pad_ms` (default 30): padding added to each side of a segment.
    pub speech_pad_ms: u32,
}

impl Default for VadConfig {
    fn default() -> Self {
        Self::with_threshold(0.5)
    }
}

/// Samples per millisecond at [`SAMPLE_RATE`].
pub(crate) const SAMPLES_PER_MS: u64 = SAMPLE_RATE as u64 / 1000;

impl VadConfig {
    /// The package defaults with another speech threshold; the exit threshold
    /// follows it as `max(threshold - 0.15, 0.01)` (the package's rule).
    pub fn with_threshold(threshold: f64) -> Self {
        Self {
            threshold,
            neg_threshold: (threshold - 0.15).max(0.01),
            min_speech_ms: 250,
            min_silence_ms: 100,
            speech_pad_ms: 30,
        }
    }

    /// `min_speech_ms` in samples at 16 kHz.
    pub fn min_speech_samples(&self) -> u64 {
        u64::from(self.min_speech_ms) * SAMPLES_PER_MS
    }

    /// `min_silence_ms` in samples at 16 kHz.
    pub fn min_silence_samples(&self) -> u64 {
        u64::from(self.min_silence_ms) * SAMPLES_PER_MS
    }

    /// `speech_pad_ms` in samples at 16 kHz.
    pub fn speech_pad_samples(&self) -> u64 {
        u64::from(self.speech_pad_ms) * SAMPLES_PER_MS
    }

    /// Check ranges; the error names the field and the value seen.
    ///
    /// Besides plain ranges, `min_silence + 32 ms >= 2 * speech_pad` is
    /// required: the package splits the gap between two segments closer than
    /// twice the padding, which needs the next segment before the previous one
    /// can be reported; with this condition that case cannot occur, so a
    /// segment is final when it ends (see [`crate::segments`]).
    ///
    /// # Errors
    /// [`VadError::Config`].
    pub fn validate(&self) -> Result<(), VadError> {
        let bad = |field: &'static str, value: String| Err(VadError::Config { field, value });
        // Probabilities: any value in [0, 1] means what it means in the package, which
        // does not order the two thresholds (`--threshold 0.01` gives an exit threshold
        // of 0.01 >= 0.01 - 0.15; below 0.01 the exit threshold is above the speech one).
        if !(0.0..=1.0).contains(&self.threshold) {
            return bad(
                "threshold",
                format!("{} (must be in [0, 1])", self.threshold),
            );
        }
        if !(0.0..=1.0).contains(&self.neg_threshold) {
            return bad(
                "neg_threshold",
                format!("{} (must be in [0, 1])", self.neg_threshold),
            );
        }
        for (field, v) in [
            ("min_speech_ms", self.min_speech_ms),
            ("min_silence_ms", self.min_silence_ms),
            ("speech_pad_ms", self.speech_pad_ms),
        ] {
            if v > MAX_DURATION_MS {
                return bad(field, format!("{v} ms (at most {MAX_DURATION_MS})"));
            }
        }
        if self.min_silence_samples() + (CHUNK_SAMPLES as u64) < 2 * self.speech_pad_samples() {
            return bad(
                "speech_pad_ms",
                format!(
                    "{} ms with min_silence_ms {} (need min_silence_ms + 32 >= 2 * speech_pad_ms)",
                    self.speech_pad_ms, self.min_silence_ms
                ),
            );
        }
        Ok(())
    }

    /// Read and validate the record at the start of `bytes` (the section payload).
    ///
    /// # Errors
    /// [`VadError::Config`] for a short record, another version, a geometry
    /// other than this crate's (16 kHz, 512 + 64 samples, state of 256) or an
    /// out-of-range field.
    pub fn from_section(bytes: &[u8]) -> Result<Self, VadError> {
        let (r, _) = VadConfigRecord::ref_from_prefix(bytes).map_err(|_| VadError::Config {
            field: "record",
            value: format!(
                "{} bytes, need {}",
                bytes.len(),
                size_of::<VadConfigRecord>()
            ),
        })?;
        if r.version.get() != CONFIG_VERSION {
            return Err(VadError::Config {
                field: "version",
                value: format!("{} (this build reads {CONFIG_VERSION})", r.version.get()),
            });
        }
        let geometry = [
            ("sample_rate", r.sample_rate.get(), SAMPLE_RATE),
            ("chunk_samples", r.chunk_samples.get(), CHUNK_SAMPLES as u32),
            (
                "context_samples",
                r.context_samples.get(),
                CONTEXT_SAMPLES as u32,
            ),
            ("state_len", r.state_len.get(), STATE_LEN as u32),
        ];
        for (field, got, want) in geometry {
            if got != want {
                return Err(VadError::Config {
                    field,
                    value: format!("{got} (this build runs {want})"),
                });
            }
        }
        let c = Self {
            threshold: r.threshold.get(),
            neg_threshold: r.neg_threshold.get(),
            min_speech_ms: r.min_speech_ms.get(),
            min_silence_ms: r.min_silence_ms.get(),
            speech_pad_ms: r.speech_pad_ms.get(),
        };
        c.validate()?;
        Ok(c)
    }

    /// The on-disk record.
    pub fn to_record(&self) -> VadConfigRecord {
        VadConfigRecord {
            version: CONFIG_VERSION.into(),
            reserved0: 0.into(),
            sample_rate: SAMPLE_RATE.into(),
            chunk_samples: (CHUNK_SAMPLES as u32).into(),
            context_samples: (CONTEXT_SAMPLES as u32).into(),
            state_len: (STATE_LEN as u32).into(),
            threshold: self.threshold.into(),
            neg_threshold: self.neg_threshold.into(),
            min_speech_ms: self.min_speech_ms.into(),
            min_silence_ms: self.min_silence_ms.into(),
            speech_pad_ms: self.speech_pad_ms.into(),
            reserved: [0; 16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_64_bytes_and_round_trips() {
        assert_eq!(size_of::<VadConfigRecord>(), 64);
        let c = VadConfig::default();
        assert_eq!(c.neg_threshold, 0.5 - 0.15);
        let back = VadConfig::from_section(c.to_record().as_bytes()).expect("valid");
        assert_eq!(back, c);
        assert_eq!(
            (
                c.min_speech_samples(),
                c.min_silence_samples(),
                c.speech_pad_samples()
            ),
            (4000, 1600, 480)
        );
        assert_eq!(VadConfig::with_threshold(0.1).neg_threshold, 0.01);
    }

    #[test]
    fn rejects_short_foreign_and_out_of_range_records() {
        let c = VadConfig::default();
        let e = VadConfig::from_section(&c.to_record().as_bytes()[..9]).unwrap_err();
        assert!(e.to_string().contains("9 bytes, need 64"), "{e}");
        let mut rec = c.to_record();
        rec.version = 7.into();
        let e = VadConfig::from_section(rec.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("version") && e.to_string().contains('7'));
        let mut rec = c.to_record();
        rec.sample_rate = 8000.into();
        let e = VadConfig::from_section(rec.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("sample_rate: 8000"), "{e}");
        let mut bad = c;
        bad.threshold = 1.5;
        let e = bad.validate().unwrap_err();
        assert!(e.to_string().contains("threshold: 1.5"), "{e}");
        let mut bad = c;
        bad.neg_threshold = 1.6;
        assert!(bad.validate().is_err());
        // The package's rule below 0.01: the exit threshold (0.01) is above the
        // speech threshold, which the package accepts; so does this crate.
        for t in [0.01, 0.005, 0.0] {
            let low = VadConfig::with_threshold(t);
            assert_eq!(low.neg_threshold, 0.01);
            low.validate().expect("silero-vad accepts it");
        }
        let mut bad = c;
        bad.speech_pad_ms = 200;
        let e = bad.validate().unwrap_err();
        assert!(e.to_string().contains("speech_pad_ms: 200"), "{e}");
        let mut bad = c;
        bad.threshold = f64::NAN;
        assert!(bad.validate().is_err());
    }
}
