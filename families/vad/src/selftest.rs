//! The bundle's self-test: a short reference PCM snippet, the speech
//! probabilities expected for it, and the tolerance, stored in the
//! `vad/selftest` section so the device the bundle is deployed on can check
//! itself (`tether verify --self-test`).
//!
//! The reference payload ([`SelfTest::reference`]) is
//! `golden/selftest.json`, written by `golden/reference.py`: the first 8
//! chunks (256 ms) of alsa-utils `Front_Center.wav` at 16 kHz and the
//! probabilities the `silero-vad` 6.2.3 package computes for them from a fresh
//! state (onnxruntime), tolerance 1e-4 (the bar).
//!
//! Section layout (little-endian): a 32-byte [`SelfTestHeader`], then
//! `chunks * chunk_samples` f32 samples, `chunks` f32 expected probabilities,
//! and `source_len` bytes of UTF-8 naming where the expected values come from.

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{CHUNK_SAMPLES, VadError};

/// Value of [`SelfTestHeader::version`] this crate writes and reads.
pub const SELFTEST_VERSION: u16 = 1;
/// Most chunks a payload may hold (about 33 s).
pub const MAX_SELFTEST_CHUNKS: u32 = 1024;

/// The reference payload as committed (see the module documentation).
const REFERENCE_JSON: &str = include_str!("../golden/selftest.json");

/// Header of the `vad/selftest` section.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct SelfTestHeader {
    /// [`SELFTEST_VERSION`].
    pub version: U16,
    /// Reserved, zero.
    pub reserved0: U16,
    /// Chunks in the payload.
    pub chunks: U32,
    /// Samples per chunk ([`CHUNK_SAMPLES`]).
    pub chunk_samples: U32,
    /// Largest accepted absolute difference of a probability.
    pub tolerance: F32,
    /// Bytes of the trailing source description.
    pub source_len: U32,
    /// Reserved, zero.
    pub reserved: [u8; 12],
}

/// A self-test payload.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTest {
    /// 16 kHz mono samples, a whole number of chunks.
    pub pcm: Vec<f32>,
    /// Expected probability of each chunk, from a fresh stream.
    pub expected: Vec<f32>,
    /// Largest accepted absolute difference.
    pub tolerance: f32,
    /// Where the expected values come from.
    pub source: String,
}

/// Outcome of a self-test run.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTestReport {
    /// Whether every chunk is within the tolerance.
    pub passed: bool,
    /// Chunks compared.
    pub chunks: usize,
    /// Largest absolute difference seen.
    pub worst_abs_diff: f32,
    /// Chunk where it was seen.
    pub worst_chunk: usize,
    /// The tolerance applied.
    pub tolerance: f32,
    /// Where the expected values come from.
    pub source: String,
}

impl std::fmt::Display for SelfTestReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vad self-test {}: {} chunks, worst |diff| {:.3e} at chunk {} (tolerance {:.1e}; expected values from {})",
            if self.passed { "passed" } else { "FAILED" },
            self.chunks,
            self.worst_abs_diff,
            self.worst_chunk,
            self.tolerance,
            self.source
        )
    }
}

fn bad(what: impl Into<String>) -> VadError {
    VadError::SelfTest(what.into())
}

impl SelfTest {
    /// The committed reference payload (package probabilities).
    ///
    /// # Errors
    /// [`VadError::SelfTest`] if the embedded JSON is malformed (a build defect).
    pub fn reference() -> Result<Self, VadError> {
        let v: serde_json::Value =
            serde_json::from_str(REFERENCE_JSON).map_err(|e| bad(format!("golden JSON: {e}")))?;
        let floats = |key: &str| -> Result<Vec<f32>, VadError> {
            v[key]
                .as_array()
                .ok_or_else(|| bad(format!("golden JSON has no array `{key}`")))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .map(|f| f as f32)
                        .ok_or_else(|| bad(format!("non-number in `{key}`")))
                })
                .collect()
        };
        let env = &v["environment"];
        let source = format!(
            "silero-vad {} on onnxruntime {} (families/vad/golden/selftest.json)",
            env["silero_vad"].as_str().unwrap_or("?"),
            env["onnxruntime"].as_str().unwrap_or("?")
        );
        let t = Self {
            pcm: floats("pcm_16k")?,
            expected: floats("probs")?,
            tolerance: v["tolerance"].as_f64().unwrap_or(1e-4) as f32,
            source,
        };
        t.validate()?;
        Ok(t)
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.expected.len()
    }

    fn validate(&self) -> Result<(), VadError> {
        let chunks = self.expected.len();
        if chunks == 0 || chunks > MAX_SELFTEST_CHUNKS as usize {
            return Err(bad(format!("{chunks} chunks (1 to {MAX_SELFTEST_CHUNKS})")));
        }
        if self.pcm.len() != chunks * CHUNK_SAMPLES {
            return Err(bad(format!(
                "{} samples for {chunks} chunks of {CHUNK_SAMPLES}",
                self.pcm.len()
            )));
        }
        if !(self.tolerance.is_finite() && self.tolerance > 0.0) {
            return Err(bad(format!("tolerance {}", self.tolerance)));
        }
        Ok(())
    }

    /// The section payload.
    pub fn to_section(&self) -> Vec<u8> {
        let header = SelfTestHeader {
            version: SELFTEST_VERSION.into(),
            reserved0: 0.into(),
            chunks: (self.expected.len() as u32).into(),
            chunk_samples: (CHUNK_SAMPLES as u32).into(),
            tolerance: self.tolerance.into(),
            source_len: (self.source.len() as u32).into(),
            reserved: [0; 12],
        };
        let mut out = header.as_bytes().to_vec();
        for v in self.pcm.iter().chain(&self.expected) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(self.source.as_bytes());
        out
    }

    /// Parse a section payload.
    ///
    /// # Errors
    /// [`VadError::SelfTest`] naming what is short, unknown or out of range.
    pub fn from_section(bytes: &[u8]) -> Result<Self, VadError> {
        let (h, rest) = SelfTestHeader::ref_from_prefix(bytes).map_err(|_| {
            bad(format!(
                "{} bytes, the header needs {}",
                bytes.len(),
                size_of::<SelfTestHeader>()
            ))
        })?;
        if h.version.get() != SELFTEST_VERSION {
            return Err(bad(format!(
                "version {} (this build reads {SELFTEST_VERSION})",
                h.version.get()
            )));
        }
        if h.chunk_samples.get() as usize != CHUNK_SAMPLES {
            return Err(bad(format!(
                "chunks of {} samples (this build runs {CHUNK_SAMPLES})",
                h.chunk_samples.get()
            )));
        }
        let chunks = h.chunks.get();
        if chunks == 0 || chunks > MAX_SELFTEST_CHUNKS {
            return Err(bad(format!("{chunks} chunks (1 to {MAX_SELFTEST_CHUNKS})")));
        }
        let chunks = chunks as usize;
        let floats = chunks * CHUNK_SAMPLES + chunks;
        let source_len = h.source_len.get() as usize;
        let need = floats * 4 + source_len;
        if rest.len() != need {
            return Err(bad(format!(
                "{} payload bytes after the header, expected {need} ({chunks} chunks, {source_len}-byte source)",
                rest.len()
            )));
        }
        let (data, source) = rest.split_at(floats * 4);
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let (pcm, expected) = values.split_at(chunks * CHUNK_SAMPLES);
        let t = Self {
            pcm: pcm.to_vec(),
            expected: expected.to_vec(),
            tolerance: h.tolerance.get(),
            source: String::from_utf8(source.to_vec())
                .map_err(|_| bad("the source description is not UTF-8"))?,
        };
        t.validate()?;
        Ok(t)
    }

    /// Compare probabilities computed for [`Self::pcm`] with the expected ones.
    pub fn compare(&self, got: &[f32]) -> SelfTestReport {
        let mut worst = (0f32, 0usize);
        let mut passed = got.len() == self.expected.len();
        for (i, (g, e)) in got.iter().zip(&self.expected).enumerate() {
            let d = (g - e).abs();
            // NaN fails the test and is reported as the worst difference.
            if d.is_nan() || d > self.tolerance {
                passed = false;
            }
            if d.is_nan() || d > worst.0 {
                worst = (if d.is_nan() { f32::INFINITY } else { d }, i);
            }
        }
        SelfTestReport {
            passed,
            chunks: got.len().min(self.expected.len()),
            worst_abs_diff: worst.0,
            worst_chunk: worst.1,
            tolerance: self.tolerance,
            source: self.source.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_payload_round_trips_through_the_section_format() {
        let t = SelfTest::reference().expect("reference");
        assert_eq!(t.chunks(), 8);
        assert_eq!(t.pcm.len(), 8 * CHUNK_SAMPLES);
        assert!(t.source.contains("silero-vad 6.2.3"), "{}", t.source);
        let bytes = t.to_section();
        assert_eq!(SelfTest::from_section(&bytes).expect("parse"), t);
        let e = SelfTest::from_section(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("payload bytes"), "{e}");
        let e = SelfTest::from_section(&bytes[..10]).unwrap_err();
        assert!(e.to_string().contains("10 bytes"), "{e}");
        let mut b = bytes.clone();
        b[0] = 9;
        assert!(
            SelfTest::from_section(&b)
                .unwrap_err()
                .to_string()
                .contains("version 9")
        );
    }

    #[test]
    fn compare_reports_the_worst_chunk_and_fails_on_nan() {
        let t = SelfTest::reference().expect("reference");
        let mut got = t.expected.clone();
        let r = t.compare(&got);
        assert!(r.passed && r.worst_abs_diff == 0.0, "{r}");
        got[5] += 2e-4;
        let r = t.compare(&got);
        assert!(!r.passed && r.worst_chunk == 5, "{r}");
        got[5] = f32::NAN;
        let r = t.compare(&got);
        assert!(!r.passed && r.worst_abs_diff.is_infinite(), "{r}");
        assert!(!t.compare(&got[..3]).passed);
    }
}
