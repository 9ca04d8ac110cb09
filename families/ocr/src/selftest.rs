//! The bundle's self-test, in the shared format ([`tether_family::selftest`], section
//! `ocr/selftest`): one text-line image with the reference's answer, run on the device where
//! the bundle is deployed (`tether verify --self-test`).
//!
//! The line is a crop of scikit-image's `page.png` cut by the reference's own
//! `get_rotate_crop_image`; the expected classifier label/score and text/score
//! are the reference's (`rapidocr-onnxruntime` 1.4.4, onnxruntime CPU,
//! `golden/reference.py`, committed as `golden/selftest.txt`). The recipe
//! embeds it when the bundle's rec and cls networks are the pinned ones (same SHA-256 as in
//! that file), since the answer belongs to those weights; for other networks the expected
//! answer is the build host's CPU engine's ([`from_host`], the source says so).
//!
//! Entries: inputs [`LINE`] (u8 `[height, width, 3]`, BGR, rows top to bottom) and
//! [`REC_WIDTH`] (the reference's padded recognition width for this line alone); expected
//! [`TEXT`], [`SCORE`] and, when the bundle has a classifier, [`CLS_LABEL`] (0: upright,
//! 1: 180 degrees) and [`CLS_SCORE`]; tolerance [`MAX_SCORE_DIFF`].
//!
//! Pass criterion: the text is equal, and the recognition score (and the
//! classifier score, when the bundle has a classifier) is within the stored
//! tolerance (absolute; tract and onnxruntime agree to about 1e-5 on these
//! networks).

use tether_family::selftest::{Check, Report, Role, SelfTest, SelfTestError, Values};

use crate::{FAMILY, OcrError};

/// Input entry: the line's BGR pixels, `[height, width, 3]`.
pub const LINE: &str = "line";
/// Input entry: the reference's padded recognition width for this line alone.
pub const REC_WIDTH: &str = "rec_width";
/// Expected entry: the recognised text.
pub const TEXT: &str = "text";
/// Expected entry: the recognition score.
pub const SCORE: &str = "score";
/// Expected entry (with a classifier): the classifier's label.
pub const CLS_LABEL: &str = "cls_label";
/// Expected entry (with a classifier): the classifier's score.
pub const CLS_SCORE: &str = "cls_score";
/// Tolerance entry: the largest accepted absolute difference of a score.
pub const MAX_SCORE_DIFF: &str = "max_score_diff";
/// Absolute tolerance on scores written by the recipe.
pub const SCORE_TOLERANCE: f32 = 2e-3;
/// Largest side of the line image, in pixels.
pub const MAX_LINE_SIDE: u32 = 4096;

fn bad(what: impl Into<String>) -> OcrError {
    OcrError::SelfTest(SelfTestError::Malformed(what.into()))
}

/// The line of a test: its BGR pixels, width and height, checked.
///
/// # Errors
/// [`OcrError::SelfTest`] naming the entry and what is wrong.
pub fn line(test: &SelfTest) -> Result<(&[u8], u32, u32), OcrError> {
    let (pixels, shape) = test.u8s(Role::Input, LINE)?;
    match *shape {
        [h, w, 3] if (1..=MAX_LINE_SIDE).contains(&w) && (1..=MAX_LINE_SIDE).contains(&h) => {
            Ok((pixels, w, h))
        }
        _ => Err(bad(format!(
            "line of shape {shape:?} (expected [height, width, 3], sides 1 to {MAX_LINE_SIDE})"
        ))),
    }
}

/// Parse `golden/selftest.txt` (`key value` lines written by
/// `golden/reference.py`); returns the test and the SHA-256 (hex) of the
/// rec and cls networks it belongs to.
///
/// # Errors
/// [`OcrError::SelfTest`] for a missing or malformed field.
pub fn from_golden(text: &str) -> Result<(SelfTest, String, String), OcrError> {
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
    let (w, h) = (num("width")? as u32, num("height")? as u32);
    if pixels.len() != w as usize * h as usize * 3 {
        return Err(bad(format!(
            "golden has {} pixel bytes for {w}x{h}",
            pixels.len()
        )));
    }
    let t = SelfTest::new(
        "rapidocr-onnxruntime 1.4.4 (onnxruntime CPU) on the pinned PP-OCRv4 rec and mobile v2.0 cls networks (families/ocr/golden/selftest.txt)",
    )
    .with(Role::Input, LINE, &[h, w, 3], Values::U8(pixels))
    .with(
        Role::Input,
        REC_WIDTH,
        &[1],
        Values::U32(vec![num("rec_width")? as u32]),
    )
    .with(Role::Expected, TEXT, &[], Values::Text(get("text")?.to_string()))
    .with(Role::Expected, SCORE, &[1], Values::F32(vec![num("score")? as f32]))
    .with(
        Role::Expected,
        CLS_LABEL,
        &[1],
        Values::U32(vec![num("cls_label")? as u32]),
    )
    .with(
        Role::Expected,
        CLS_SCORE,
        &[1],
        Values::F32(vec![num("cls_score")? as f32]),
    )
    .with(
        Role::Tolerance,
        MAX_SCORE_DIFF,
        &[],
        Values::F32(vec![SCORE_TOLERANCE]),
    );
    line(&t)?;
    Ok((
        t,
        get("rec_sha256")?.to_string(),
        get("cls_sha256")?.to_string(),
    ))
}

/// What the pipeline answers for one line: its text, recognition score and, when the
/// bundle has a classifier, the classifier's label and score.
struct Answer {
    text: String,
    score: f32,
    cls: Option<(u32, f32)>,
}

/// The line of `test` through the classifier (when the bundle has one) and the recogniser
/// at width `rec_width`.
fn answer(ocr: &mut crate::Ocr, test: &SelfTest, rec_width: u32) -> Result<Answer, OcrError> {
    let (pixels, w, h) = line(test)?;
    ocr.set_crop(pixels, w as usize, h as usize);
    let outcome = ocr.recognize_line(rec_width)?;
    Ok(Answer {
        text: ocr.line_text().to_string(),
        score: outcome.score as f32,
        cls: outcome.cls_label.map(|l| (l as u32, outcome.cls_score)),
    })
}

/// The build host's payload: `reference`'s line at width `rec_width`, with the answer
/// `ocr` (on the CPU engine) gives as the expected values, the reference's tolerance, and
/// `source`.
///
/// # Errors
/// As [`run_test`].
pub fn from_host(
    ocr: &mut crate::Ocr,
    reference: &SelfTest,
    rec_width: u32,
    source: String,
) -> Result<SelfTest, OcrError> {
    let a = answer(ocr, reference, rec_width)?;
    let (pixels, w, h) = line(reference)?;
    let mut t = SelfTest::new(source)
        .with(Role::Input, LINE, &[h, w, 3], Values::U8(pixels.to_vec()))
        .with(Role::Input, REC_WIDTH, &[1], Values::U32(vec![rec_width]))
        .with(Role::Expected, TEXT, &[], Values::Text(a.text))
        .with(Role::Expected, SCORE, &[1], Values::F32(vec![a.score]))
        .with(
            Role::Tolerance,
            MAX_SCORE_DIFF,
            &[],
            Values::F32(vec![reference.tolerance(MAX_SCORE_DIFF)?]),
        );
    if let Some((label, score)) = a.cls {
        t.set(Role::Expected, CLS_LABEL, &[1], Values::U32(vec![label]));
        t.set(Role::Expected, CLS_SCORE, &[1], Values::F32(vec![score]));
    }
    Ok(t)
}

/// Run `test` on `ocr`: the line through the classifier (when the bundle has one) and the
/// recogniser at the test's width, compared with the expected text and scores.
///
/// # Errors
/// [`OcrError::SelfTest`] for a test without the family's entries; engine errors as
/// [`crate::Ocr::detect_text`].
pub fn run_test(ocr: &mut crate::Ocr, test: &SelfTest) -> Result<Report, OcrError> {
    let rec_width = test.u32_scalar(Role::Input, REC_WIDTH)?;
    let want_text = test.text(Role::Expected, TEXT)?;
    let want_score = test.f32_scalar(Role::Expected, SCORE)?;
    let want_cls = if test.has(Role::Expected, CLS_LABEL) {
        Some((
            test.u32_scalar(Role::Expected, CLS_LABEL)?,
            test.f32_scalar(Role::Expected, CLS_SCORE)?,
        ))
    } else {
        None
    };
    let tolerance = test.tolerance(MAX_SCORE_DIFF)?;
    let got = answer(ocr, test, rec_width)?;
    let mut checks = vec![Check::at_most(
        "|recognition score diff|",
        (f64::from(got.score) - f64::from(want_score)).abs(),
        f64::from(tolerance),
    )];
    let mut labels_equal = true;
    if let (Some((label, score)), Some((seen, seen_score))) = (want_cls, got.cls) {
        labels_equal = seen == label;
        checks.push(Check::at_most(
            "|classifier score diff|",
            (f64::from(seen_score) - f64::from(score)).abs(),
            f64::from(tolerance),
        ));
    }
    let worst = checks.iter().map(|c| c.value).fold(0.0, f64::max);
    // Where it ran: the engines of the bundle's networks on this device, each once.
    let mut engines: Vec<String> = Vec::new();
    for (_, kind) in ocr.engines() {
        let name = kind.to_string();
        if !engines.contains(&name) {
            engines.push(name);
        }
    }
    let summary = format!(
        "text {:?} (expected {want_text:?}) on {}{}, worst score deviation {worst:.2e} (tolerance {tolerance:.0e})",
        got.text,
        engines.join(", "),
        if labels_equal {
            ""
        } else {
            ", classifier label differs"
        }
    );
    Ok(Report::new(
        FAMILY,
        test,
        got.text == want_text && labels_equal,
        checks,
        summary,
    ))
}

/// Run the bundle's self-test on `ocr`; `Ok(None)` when the bundle carries none.
///
/// # Errors
/// [`OcrError::SelfTest`] for an unreadable section; as [`run_test`].
pub fn run(ocr: &mut crate::Ocr) -> Result<Option<Report>, OcrError> {
    let bundle = std::sync::Arc::clone(ocr.bundle());
    match SelfTest::of_bundle(&bundle, FAMILY)? {
        Some(t) => run_test(ocr, &t).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_golden_parses_and_round_trips() {
        let (t, rec, cls) = from_golden(include_str!("../golden/selftest.txt")).expect("golden");
        assert_eq!(rec.len(), 64);
        assert_eq!(cls.len(), 64);
        assert!(!t.text(Role::Expected, TEXT).unwrap().is_empty());
        let (px, w, h) = line(&t).unwrap();
        assert_eq!(px.len(), (w * h * 3) as usize);
        let s = t.to_section();
        assert_eq!(SelfTest::from_section(&s).expect("valid"), t);
        assert!(SelfTest::from_section(&s[..s.len() - 1]).is_err());
    }

    #[test]
    fn a_line_of_the_wrong_shape_is_refused() {
        let t = SelfTest::new("x").with(Role::Input, LINE, &[2, 1], Values::U8(vec![1, 2]));
        let e = line(&t).unwrap_err();
        assert!(e.to_string().contains("shape [2, 1]"), "{e}");
        let e = from_golden("width 2\n").unwrap_err();
        assert!(e.to_string().contains("no `pixels` line"), "{e}");
    }
}
