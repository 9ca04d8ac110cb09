//! The bundle's self-test, in the shared format ([`tether_family::selftest`], section
//! `embed/selftest`): a sentence, its expected embedding and the smallest accepted cosine,
//! so the device the bundle is deployed on can check itself (`tether verify --self-test`).
//!
//! The reference payload ([`fn@reference`]) is `golden/selftest.json`, written by
//! `golden/reference.py`: "A man is eating food." and its sentence-transformers embedding
//! from the fp32 weights, minimum cosine 0.999 (the bar).
//!
//! Entries: input [`TEXT`] (UTF-8, at most [`MAX_TEXT_BYTES`]), expected [`EMBEDDING`] (f32
//! `[384]`), tolerance [`MIN_COSINE`].

use tether_family::selftest::{Check, Report, Role, SelfTest, SelfTestError, Values, max_abs_diff};

use crate::{EMBEDDING_DIM, EmbedError, FAMILY, cosine};

/// Input entry: the text to embed.
pub const TEXT: &str = "text";
/// Expected entry: its embedding (384 values).
pub const EMBEDDING: &str = "embedding";
/// Tolerance entry: the smallest accepted cosine between the computed and the expected
/// embedding.
pub const MIN_COSINE: &str = "min_cosine";
/// Longest self-test text in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;

const REFERENCE_JSON: &str = include_str!("../golden/selftest.json");

fn bad(what: impl Into<String>) -> EmbedError {
    EmbedError::SelfTest(SelfTestError::Malformed(what.into()))
}

/// A payload: `text`, its `expected` embedding, the minimum cosine and where the expected
/// values come from.
pub fn payload(text: String, expected: Vec<f32>, min_cosine: f32, source: String) -> SelfTest {
    SelfTest::new(source)
        .with(Role::Input, TEXT, &[], Values::Text(text))
        .with(
            Role::Expected,
            EMBEDDING,
            &[expected.len() as u32],
            Values::F32(expected),
        )
        .with(
            Role::Tolerance,
            MIN_COSINE,
            &[],
            Values::F32(vec![min_cosine]),
        )
}

/// The committed reference payload (sentence-transformers, fp32 weights).
///
/// # Errors
/// [`EmbedError::SelfTest`] if the embedded JSON is malformed (a build defect).
pub fn reference() -> Result<SelfTest, EmbedError> {
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
    let t = payload(
        v["text"]
            .as_str()
            .ok_or_else(|| bad("golden JSON has no `text`"))?
            .to_string(),
        expected,
        v["min_cosine"].as_f64().unwrap_or(0.999) as f32,
        format!(
            "sentence-transformers {} on the fp32 all-MiniLM-L6-v2 weights (families/embed/golden/selftest.json)",
            env["sentence_transformers"].as_str().unwrap_or("?")
        ),
    );
    input(&t)?;
    Ok(t)
}

/// The test's text, checked: at most [`MAX_TEXT_BYTES`], an expected embedding of
/// [`EMBEDDING_DIM`] values, a minimum cosine in `(-1, 1]`.
///
/// # Errors
/// [`EmbedError::SelfTest`] naming the entry and the value seen.
pub fn input(test: &SelfTest) -> Result<&str, EmbedError> {
    let text = test.text(Role::Input, TEXT)?;
    if text.len() > MAX_TEXT_BYTES {
        return Err(bad(format!(
            "a {}-byte text (at most {MAX_TEXT_BYTES})",
            text.len()
        )));
    }
    let n = test.f32s(Role::Expected, EMBEDDING)?.len();
    if n != EMBEDDING_DIM {
        return Err(bad(format!(
            "an expected embedding of {n} values (this build returns {EMBEDDING_DIM})"
        )));
    }
    let m = test.f32_scalar(Role::Tolerance, MIN_COSINE)?;
    if !(m > -1.0 && m <= 1.0) {
        return Err(bad(format!("min_cosine {m}")));
    }
    Ok(text)
}

/// Compare the embedding `got` (computed on `engine`) with the expected one: passed when
/// the cosine reaches the minimum.
///
/// # Errors
/// [`EmbedError::SelfTest`] when the test lacks an entry.
pub fn compare(test: &SelfTest, got: &[f32], engine: &str) -> Result<Report, EmbedError> {
    let expected = test.f32s(Role::Expected, EMBEDDING)?;
    let min_cosine = test.f32_scalar(Role::Tolerance, MIN_COSINE)?;
    let c = cosine(got, expected);
    // The worst component is reported, not bounded: the cosine is the criterion.
    let (worst, _) = max_abs_diff(got, expected);
    let summary = format!(
        "embedding of the reference sentence on {engine}: cosine {c:.6} (minimum {min_cosine}), worst |diff| {worst:.2e}"
    );
    Ok(Report::new(
        FAMILY,
        test,
        got.len() == expected.len(),
        vec![Check::at_least(
            "cosine",
            f64::from(c),
            f64::from(min_cosine),
        )],
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_payload_round_trips() {
        let t = reference().expect("reference");
        assert_eq!(input(&t).unwrap(), "A man is eating food.");
        assert_eq!(t.f32_scalar(Role::Tolerance, MIN_COSINE).unwrap(), 0.999);
        let expected = t.f32s(Role::Expected, EMBEDDING).unwrap();
        let norm: f32 = expected.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        let b = t.to_section();
        assert_eq!(SelfTest::from_section(&b).expect("parse"), t);
        assert!(SelfTest::from_section(&b[..b.len() - 1]).is_err());
        let e = SelfTest::from_section(&b[..3]).unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
        let r = compare(&t, expected, "test").unwrap();
        assert!(r.passed && r.summary.contains("worst |diff| 0.00e0"), "{r}");
        let neg: Vec<f32> = expected.iter().map(|v| -v).collect();
        assert!(!compare(&t, &neg, "test").unwrap().passed);
        assert!(!compare(&t, &expected[..10], "test").unwrap().passed);
        let short = payload("x".into(), vec![0.5; 10], 0.9, "x".into());
        assert!(input(&short).unwrap_err().to_string().contains("10 values"));
    }
}
