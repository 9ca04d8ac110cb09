//! The bundle's self-test: one text-line image with the reference's
//! answer, run on the device where the bundle is deployed
//! (`tether verify --self-test`).
//!
//! The line is a crop of scikit-image's `page.png` cut by the reference's own
//! `get_rotate_crop_image`; the expected classifier label/score and text/score
//! are the reference's (`rapidocr-onnxruntime` 1.4.4, onnxruntime CPU,
//! `golden/reference.py`, committed as `golden/selftest.txt`). The recipe
//! embeds it only when the bundle's rec and cls networks are the pinned ones
//! (same SHA-256 as in that file), since the answer belongs to those weights.
//!
//! Section layout (`ocr/selftest`): a [`SelfTestRecord`], then the expected
//! text (UTF-8, `text_len` bytes), then the line's BGR pixels
//! (`width * height * 3` bytes, rows top to bottom).
//!
//! Pass criterion: the text is equal, and the recognition score (and the
//! classifier score, when the bundle has a classifier) is within the stored
//! tolerance (absolute; tract and onnxruntime agree to about 1e-5 on these
//! networks).

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::OcrError;

/// Value of [`SelfTestRecord::version`].
pub const SELFTEST_VERSION: u16 = 1;
/// `flags` bit: the classifier expectation is present.
pub const FLAG_HAS_CLS: u16 = 1;
/// Absolute tolerance on scores written by the recipe.
pub const SCORE_TOLERANCE: f32 = 2e-3;

/// Header of the `ocr/selftest` section (little-endian, 48 bytes).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct SelfTestRecord {
    /// [`SELFTEST_VERSION`].
    pub version: U16,
    /// `FLAG_*` bits.
    pub flags: U16,
    /// Line image width in pixels.
    pub width: U32,
    /// Line image height in pixels.
    pub height: U32,
    /// The reference's padded recognition width for this line alone.
    pub rec_width: U32,
    /// Expected recognition score.
    pub score: F32,
    /// Expected classifier label (0: upright, 1: 180 degrees).
    pub cls_label: U32,
    /// Expected classifier score.
    pub cls_score: F32,
    /// Absolute tolerance on both scores.
    pub tolerance: F32,
    /// Bytes of expected text after the record.
    pub text_len: U32,
    /// Reserved, zero.
    pub reserved: [u8; 12],
}

/// A decoded self-test.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTest {
    /// Line image width in pixels.
    pub width: u32,
    /// Line image height in pixels.
    pub height: u32,
    /// BGR pixels, `width * height * 3` bytes.
    pub pixels: Vec<u8>,
    /// The reference's padded recognition width.
    pub rec_width: u32,
    /// Expected text.
    pub text: String,
    /// Expected recognition score.
    pub score: f32,
    /// Expected classifier label and score.
    pub cls: Option<(u32, f32)>,
    /// Absolute score tolerance.
    pub tolerance: f32,
}

/// What one self-test run saw.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTestReport {
    /// Text equal and every score within tolerance.
    pub passed: bool,
    /// Expected text.
    pub expected_text: String,
    /// Recognised text.
    pub text: String,
    /// |recognition score - expected|.
    pub score_deviation: f32,
    /// Classifier label seen, and |classifier score - expected| (when checked).
    pub cls: Option<(u32, f32)>,
    /// Tolerance applied.
    pub tolerance: f32,
}

impl SelfTestReport {
    /// The worst score deviation seen.
    pub fn worst_deviation(&self) -> f32 {
        self.cls
            .map_or(self.score_deviation, |(_, d)| d.max(self.score_deviation))
    }
}

fn bad(what: impl Into<String>) -> OcrError {
    OcrError::SelfTest(what.into())
}

impl SelfTest {
    /// The `ocr/selftest` section bytes.
    pub fn to_section(&self) -> Vec<u8> {
        let rec = SelfTestRecord {
            version: SELFTEST_VERSION.into(),
            flags: (if self.cls.is_some() { FLAG_HAS_CLS } else { 0 }).into(),
            width: self.width.into(),
            height: self.height.into(),
            rec_width: self.rec_width.into(),
            score: self.score.into(),
            cls_label: self.cls.map_or(0, |c| c.0).into(),
            cls_score: self.cls.map_or(0.0, |c| c.1).into(),
            tolerance: self.tolerance.into(),
            text_len: (self.text.len() as u32).into(),
            reserved: [0; 12],
        };
        let mut out = rec.as_bytes().to_vec();
        out.extend_from_slice(self.text.as_bytes());
        out.extend_from_slice(&self.pixels);
        out
    }

    /// Decode and check the `ocr/selftest` section.
    ///
    /// # Errors
    /// [`OcrError::SelfTest`] naming the field and the values seen.
    pub fn from_section(bytes: &[u8]) -> Result<Self, OcrError> {
        let (r, rest) = SelfTestRecord::ref_from_prefix(bytes).map_err(|_| {
            bad(format!(
                "section of {} bytes is shorter than its {}-byte header",
                bytes.len(),
                size_of::<SelfTestRecord>()
            ))
        })?;
        if r.version.get() != SELFTEST_VERSION {
            return Err(bad(format!(
                "version {} (this build reads {SELFTEST_VERSION})",
                r.version.get()
            )));
        }
        let (w, h) = (r.width.get(), r.height.get());
        if w == 0 || h == 0 || w > 4096 || h > 4096 {
            return Err(bad(format!("image size {w}x{h}")));
        }
        let text_len = r.text_len.get() as usize;
        let px = w as usize * h as usize * 3;
        if rest.len() != text_len + px {
            return Err(bad(format!(
                "{} payload bytes, expected {text_len} text + {px} pixel bytes",
                rest.len()
            )));
        }
        let text = std::str::from_utf8(&rest[..text_len])
            .map_err(|e| bad(format!("expected text is not UTF-8: {e}")))?
            .to_string();
        let tolerance = r.tolerance.get();
        if !(tolerance.is_finite() && tolerance >= 0.0) {
            return Err(bad(format!("tolerance {tolerance}")));
        }
        Ok(Self {
            width: w,
            height: h,
            pixels: rest[text_len..].to_vec(),
            rec_width: r.rec_width.get(),
            text,
            score: r.score.get(),
            cls: (r.flags.get() & FLAG_HAS_CLS != 0)
                .then(|| (r.cls_label.get(), r.cls_score.get())),
            tolerance,
        })
    }

    /// Parse `golden/selftest.txt` (`key value` lines written by
    /// `golden/reference.py`); returns the test and the SHA-256 (hex) of the
    /// rec and cls networks it belongs to.
    ///
    /// # Errors
    /// [`OcrError::SelfTest`] for a missing or malformed field.
    pub fn from_golden(text: &str) -> Result<(Self, String, String), OcrError> {
        let get = |key: &str| -> Result<&str, OcrError> {
            text.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
                .ok_or_else(|| bad(format!("golden has no `{key}` line")))
        };
        let num = |key: &str| -> Result<f64, OcrError> {
            let v = get(key)?;
            v.trim()
                .parse::<f64>()
                .map_err(|_| bad(format!("golden `{key}` is not a number: {v:?}")))
        };
        let hex = get("pixels")?.trim();
        if hex.len() % 2 != 0 {
            return Err(bad("golden `pixels` has an odd number of hex digits"));
        }
        let pixels = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad("golden `pixels` is not hex"))?;
        let t = Self {
            width: num("width")? as u32,
            height: num("height")? as u32,
            pixels,
            rec_width: num("rec_width")? as u32,
            text: get("text")?.to_string(),
            score: num("score")? as f32,
            cls: Some((num("cls_label")? as u32, num("cls_score")? as f32)),
            tolerance: SCORE_TOLERANCE,
        };
        if t.pixels.len() != t.width as usize * t.height as usize * 3 {
            return Err(bad(format!(
                "golden has {} pixel bytes for {}x{}",
                t.pixels.len(),
                t.width,
                t.height
            )));
        }
        Ok((
            t,
            get("rec_sha256")?.to_string(),
            get("cls_sha256")?.to_string(),
        ))
    }
}

/// Run the bundle's self-test on `ocr`; `Ok(None)` when the bundle carries
/// none.
///
/// # Errors
/// [`OcrError::SelfTest`] for a malformed section; engine errors as
/// [`crate::Ocr::detect_text`].
pub fn run(ocr: &mut crate::Ocr) -> Result<Option<SelfTestReport>, OcrError> {
    let bundle = std::sync::Arc::clone(ocr.bundle());
    let Ok(section) = bundle.section_data(crate::config::SELFTEST_SECTION) else {
        return Ok(None);
    };
    let t = SelfTest::from_section(section)?;
    ocr.set_crop(&t.pixels, t.width as usize, t.height as usize);
    let outcome = ocr.recognize_line(t.rec_width)?;
    let text = ocr.line_text().to_string();
    let score_deviation = (outcome.score as f32 - t.score).abs();
    let cls = match (t.cls, outcome.cls_label) {
        (Some((label, score)), Some(seen)) => {
            let d = if seen as u32 == label {
                (outcome.cls_score - score).abs()
            } else {
                f32::INFINITY
            };
            Some((seen as u32, d))
        }
        _ => None,
    };
    let passed = text == t.text
        && score_deviation <= t.tolerance
        && cls.is_none_or(|(_, d)| d <= t.tolerance);
    Ok(Some(SelfTestReport {
        passed,
        expected_text: t.text,
        text,
        score_deviation,
        cls,
        tolerance: t.tolerance,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_round_trip_and_checks() {
        let t = SelfTest {
            width: 2,
            height: 1,
            pixels: vec![1, 2, 3, 4, 5, 6],
            rec_width: 320,
            text: "ab".into(),
            score: 0.9,
            cls: Some((0, 0.99)),
            tolerance: 1e-3,
        };
        let s = t.to_section();
        assert_eq!(SelfTest::from_section(&s).expect("valid"), t);
        let e = SelfTest::from_section(&s[..s.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("payload bytes"), "{e}");
        assert!(SelfTest::from_section(&s[..10]).is_err());
        let mut bad = s.clone();
        bad[0] = 9;
        assert!(SelfTest::from_section(&bad).is_err());
    }

    #[test]
    fn the_committed_golden_parses() {
        let (t, rec, cls) =
            SelfTest::from_golden(include_str!("../golden/selftest.txt")).expect("golden");
        assert_eq!(rec.len(), 64);
        assert_eq!(cls.len(), 64);
        assert!(!t.text.is_empty());
        assert_eq!(t.pixels.len(), (t.width * t.height * 3) as usize);
    }
}
