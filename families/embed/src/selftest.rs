//! The bundle's self-test: a sentence, its expected embedding and the
//! smallest accepted cosine, stored in the `embed/selftest` section so the
//! device the bundle is deployed on can check itself
//! (`tether verify --self-test`).
//!
//! The reference payload ([`SelfTest::reference`]) is `golden/selftest.json`,
//! written by `golden/reference.py`: "A man is eating food." and its
//! sentence-transformers embedding from the fp32 weights, minimum cosine
//! 0.999 (the bar).
//!
//! Section layout (little-endian): a 32-byte [`SelfTestHeader`], `dim` f32
//! values, `text_len` bytes of UTF-8 text, `source_len` bytes of UTF-8
//! naming where the expected values come from.

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{EMBEDDING_DIM, EmbedError, cosine};

/// Value of [`SelfTestHeader::version`] this crate writes and reads.
pub const SELFTEST_VERSION: u16 = 1;
/// Longest self-test text in bytes.
pub const MAX_TEXT_BYTES: u32 = 4096;

const REFERENCE_JSON: &str = include_str!("../golden/selftest.json");

/// Header of the `embed/selftest` section.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct SelfTestHeader {
    /// [`SELFTEST_VERSION`].
    pub version: U16,
    /// Reserved, zero.
    pub reserved0: U16,
    /// Embedding width ([`EMBEDDING_DIM`]).
    pub dim: U32,
    /// Smallest accepted cosine between the computed and expected embedding.
    pub min_cosine: F32,
    /// Bytes of the text.
    pub text_len: U32,
    /// Bytes of the source description.
    pub source_len: U32,
    /// Reserved, zero.
    pub reserved: [u8; 12],
}

/// A self-test payload.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTest {
    /// The text to embed.
    pub text: String,
    /// Its expected embedding (384 values).
    pub expected: Vec<f32>,
    /// Smallest accepted cosine.
    pub min_cosine: f32,
    /// Where the expected values come from.
    pub source: String,
}

/// Outcome of a self-test run.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTestReport {
    /// Whether the cosine reached the minimum.
    pub passed: bool,
    /// Cosine between the computed and the expected embedding.
    pub cosine: f32,
    /// The minimum applied.
    pub min_cosine: f32,
    /// Largest absolute difference of one component.
    pub worst_abs_diff: f32,
    /// Where the expected values come from.
    pub source: String,
}

impl std::fmt::Display for SelfTestReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "embed self-test {}: cosine {:.6} (minimum {}), worst |diff| {:.3e} (expected values from {})",
            if self.passed { "passed" } else { "FAILED" },
            self.cosine,
            self.min_cosine,
            self.worst_abs_diff,
            self.source
        )
    }
}

fn bad(what: impl Into<String>) -> EmbedError {
    EmbedError::SelfTest(what.into())
}

impl SelfTest {
    /// The committed reference payload (sentence-transformers, fp32 weights).
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] if the embedded JSON is malformed (a build defect).
    pub fn reference() -> Result<Self, EmbedError> {
        let v: serde_json::Value =
            serde_json::from_str(REFERENCE_JSON).map_err(|e| bad(format!("golden JSON: {e}")))?;
        let expected = v["embedding"]
            .as_array()
            .ok_or_else(|| bad("golden JSON has no `embedding`"))?
            .iter()
            .map(|x| {
                x.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| bad("non-number in `embedding`"))
            })
            .collect::<Result<Vec<f32>, _>>()?;
        let env = &v["environment"];
        let t = Self {
            text: v["text"]
                .as_str()
                .ok_or_else(|| bad("golden JSON has no `text`"))?
                .to_string(),
            expected,
            min_cosine: v["min_cosine"].as_f64().unwrap_or(0.999) as f32,
            source: format!(
                "sentence-transformers {} on the fp32 all-MiniLM-L6-v2 weights (families/embed/golden/selftest.json)",
                env["sentence_transformers"].as_str().unwrap_or("?")
            ),
        };
        t.validate()?;
        Ok(t)
    }

    fn validate(&self) -> Result<(), EmbedError> {
        if self.expected.len() != EMBEDDING_DIM {
            return Err(bad(format!(
                "{} values, expected {EMBEDDING_DIM}",
                self.expected.len()
            )));
        }
        if self.text.len() > MAX_TEXT_BYTES as usize {
            return Err(bad(format!(
                "a {}-byte text (at most {MAX_TEXT_BYTES})",
                self.text.len()
            )));
        }
        if !(self.min_cosine > -1.0 && self.min_cosine <= 1.0) {
            return Err(bad(format!("min_cosine {}", self.min_cosine)));
        }
        Ok(())
    }

    /// The section payload.
    pub fn to_section(&self) -> Vec<u8> {
        let header = SelfTestHeader {
            version: SELFTEST_VERSION.into(),
            reserved0: 0.into(),
            dim: (self.expected.len() as u32).into(),
            min_cosine: self.min_cosine.into(),
            text_len: (self.text.len() as u32).into(),
            source_len: (self.source.len() as u32).into(),
            reserved: [0; 12],
        };
        let mut out = header.as_bytes().to_vec();
        for v in &self.expected {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(self.text.as_bytes());
        out.extend_from_slice(self.source.as_bytes());
        out
    }

    /// Parse a section payload.
    ///
    /// # Errors
    /// [`EmbedError::SelfTest`] naming what is short, unknown or out of range.
    pub fn from_section(bytes: &[u8]) -> Result<Self, EmbedError> {
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
        if h.dim.get() as usize != EMBEDDING_DIM {
            return Err(bad(format!(
                "dim {} (this build returns {EMBEDDING_DIM})",
                h.dim.get()
            )));
        }
        let (text_len, source_len) = (h.text_len.get() as usize, h.source_len.get() as usize);
        if text_len > MAX_TEXT_BYTES as usize {
            return Err(bad(format!(
                "a {text_len}-byte text (at most {MAX_TEXT_BYTES})"
            )));
        }
        let need = EMBEDDING_DIM * 4 + text_len + source_len;
        if rest.len() != need {
            return Err(bad(format!(
                "{} payload bytes after the header, expected {need}",
                rest.len()
            )));
        }
        let (values, tail) = rest.split_at(EMBEDDING_DIM * 4);
        let (text, source) = tail.split_at(text_len);
        let utf8 = |b: &[u8], what: &str| {
            String::from_utf8(b.to_vec()).map_err(|_| bad(format!("the {what} is not UTF-8")))
        };
        let t = Self {
            text: utf8(text, "text")?,
            expected: values
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            min_cosine: h.min_cosine.get(),
            source: utf8(source, "source description")?,
        };
        t.validate()?;
        Ok(t)
    }

    /// Compare a computed embedding with the expected one.
    pub fn compare(&self, got: &[f32]) -> SelfTestReport {
        let c = cosine(got, &self.expected);
        let worst = got
            .iter()
            .zip(&self.expected)
            .map(|(a, b)| (a - b).abs())
            .fold(
                0f32,
                |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
            );
        SelfTestReport {
            passed: got.len() == self.expected.len() && c >= self.min_cosine,
            cosine: c,
            min_cosine: self.min_cosine,
            worst_abs_diff: worst,
            source: self.source.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_payload_round_trips() {
        let t = SelfTest::reference().expect("reference");
        assert_eq!(t.text, "A man is eating food.");
        assert_eq!(t.min_cosine, 0.999);
        let norm: f32 = t.expected.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        let b = t.to_section();
        assert_eq!(SelfTest::from_section(&b).expect("parse"), t);
        assert!(SelfTest::from_section(&b[..b.len() - 1]).is_err());
        let e = SelfTest::from_section(&b[..3]).unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
        let r = t.compare(&t.expected);
        assert!(r.passed && r.worst_abs_diff == 0.0, "{r}");
        let neg: Vec<f32> = t.expected.iter().map(|v| -v).collect();
        assert!(!t.compare(&neg).passed);
        assert!(!t.compare(&t.expected[..10]).passed);
    }
}
