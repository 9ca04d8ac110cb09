//! The bundle's self-test, in the shared format ([`tether_family::selftest`], section
//! `vad/selftest`): a short reference PCM snippet, the speech probabilities expected for it
//! from a fresh stream, and the tolerance, so the device the bundle is deployed on can check
//! itself (`tether verify --self-test`).
//!
//! The reference payload ([`fn@reference`]) is `golden/selftest.json`, written by
//! `golden/reference.py`: the first 8 chunks (256 ms) of alsa-utils `Front_Center.wav` at
//! 16 kHz and the probabilities the `silero-vad` 6.2.3 package computes for them from a fresh
//! state (onnxruntime), tolerance 1e-4 (the bar).
//!
//! Entries: input [`PCM`] (f32 `[chunks * 512]`, 16 kHz mono), expected [`PROBABILITIES`]
//! (f32 `[chunks]`), tolerance [`MAX_ABS_DIFF`] (on each probability).

use tether_family::selftest::{Check, Report, Role, SelfTest, SelfTestError, Values, max_abs_diff};

use crate::{CHUNK_SAMPLES, FAMILY, VadError};

/// Input entry: 16 kHz mono samples, a whole number of chunks.
pub const PCM: &str = "pcm";
/// Expected entry: the probability of each chunk, from a fresh stream.
pub const PROBABILITIES: &str = "probabilities";
/// Tolerance entry: the largest accepted absolute difference of a probability.
pub const MAX_ABS_DIFF: &str = "max_abs_diff";
/// Most chunks a payload may hold (about 33 s).
pub const MAX_SELFTEST_CHUNKS: usize = 1024;

/// The reference payload as committed (see the module documentation).
const REFERENCE_JSON: &str = include_str!("../golden/selftest.json");

/// The reference payload of the sequence form (`golden/reference_sequence.py`): the same
/// input through faster-whisper 1.2.1's `silero_vad_v6.onnx` with its own wrapper.
const SEQUENCE_REFERENCE_JSON: &str = include_str!("../golden/selftest_sequence.json");

fn bad(what: impl Into<String>) -> VadError {
    VadError::SelfTest(SelfTestError::Malformed(what.into()))
}

/// A payload: `pcm` (whole chunks), the probabilities `expected` for it, the tolerance and
/// where the expected values come from.
pub fn payload(pcm: Vec<f32>, expected: Vec<f32>, tolerance: f32, source: String) -> SelfTest {
    let (n, c) = (pcm.len() as u32, expected.len() as u32);
    SelfTest::new(source)
        .with(Role::Input, PCM, &[n], Values::F32(pcm))
        .with(Role::Expected, PROBABILITIES, &[c], Values::F32(expected))
        .with(
            Role::Tolerance,
            MAX_ABS_DIFF,
            &[],
            Values::F32(vec![tolerance]),
        )
}

/// The committed reference payload (the package's probabilities).
///
/// # Errors
/// [`VadError::SelfTest`] if the embedded JSON is malformed (a build defect).
pub fn reference() -> Result<SelfTest, VadError> {
    parse_reference(REFERENCE_JSON, |env| {
        format!(
            "silero-vad {} on onnxruntime {} (families/vad/golden/selftest.json)",
            env["silero_vad"].as_str().unwrap_or("?"),
            env["onnxruntime"].as_str().unwrap_or("?")
        )
    })
}

/// The committed reference payload of the sequence form (faster-whisper's probabilities for
/// the same input).
///
/// # Errors
/// As [`reference`].
pub fn sequence_reference() -> Result<SelfTest, VadError> {
    parse_reference(SEQUENCE_REFERENCE_JSON, |env| {
        format!(
            "faster-whisper {} (silero_vad_v6.onnx) on onnxruntime {} (families/vad/golden/selftest_sequence.json)",
            env["faster_whisper"].as_str().unwrap_or("?"),
            env["onnxruntime"].as_str().unwrap_or("?")
        )
    })
}

fn parse_reference(
    json: &str,
    source: impl FnOnce(&serde_json::Value) -> String,
) -> Result<SelfTest, VadError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("golden JSON: {e}")))?;
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
    let source = source(&v["environment"]);
    let t = payload(
        floats("pcm_16k")?,
        floats("probs")?,
        v["tolerance"].as_f64().unwrap_or(1e-4) as f32,
        source,
    );
    input(&t)?;
    Ok(t)
}

/// The test's input samples, checked: 1 to [`MAX_SELFTEST_CHUNKS`] whole chunks, as many
/// expected probabilities as chunks.
///
/// # Errors
/// [`VadError::SelfTest`] naming the entry and the sizes seen.
pub fn input(test: &SelfTest) -> Result<&[f32], VadError> {
    let pcm = test.f32s(Role::Input, PCM)?;
    let chunks = test.f32s(Role::Expected, PROBABILITIES)?.len();
    if chunks == 0 || chunks > MAX_SELFTEST_CHUNKS || pcm.len() != chunks * CHUNK_SAMPLES {
        return Err(bad(format!(
            "{} samples for {chunks} chunks of {CHUNK_SAMPLES} (1 to {MAX_SELFTEST_CHUNKS} chunks)",
            pcm.len()
        )));
    }
    test.tolerance(MAX_ABS_DIFF)?;
    Ok(pcm)
}

/// Compare the probabilities `got` (computed on `engine`) with the expected ones: passed
/// when there are as many and each is within the tolerance (a NaN fails).
///
/// # Errors
/// [`VadError::SelfTest`] when the test lacks an entry.
pub fn compare(test: &SelfTest, got: &[f32], engine: &str) -> Result<Report, VadError> {
    let expected = test.f32s(Role::Expected, PROBABILITIES)?;
    let tolerance = test.tolerance(MAX_ABS_DIFF)?;
    let (worst, at) = max_abs_diff(got, expected);
    let summary = format!(
        "{} chunk probabilities on {engine}, worst |diff| {worst:.2e} at chunk {at} (tolerance {tolerance:.0e})",
        got.len().min(expected.len())
    );
    Ok(Report::new(
        FAMILY,
        test,
        got.len() == expected.len(),
        vec![
            Check::at_most(
                "max |probability diff|",
                f64::from(worst),
                f64::from(tolerance),
            )
            .at(at),
        ],
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_payload_round_trips_through_the_section_format() {
        let t = reference().expect("reference");
        assert_eq!(t.f32s(Role::Expected, PROBABILITIES).unwrap().len(), 8);
        assert_eq!(input(&t).unwrap().len(), 8 * CHUNK_SAMPLES);
        assert!(t.source.contains("silero-vad 6.2.3"), "{}", t.source);
        let bytes = t.to_section();
        assert_eq!(SelfTest::from_section(&bytes).expect("parse"), t);
        let e = SelfTest::from_section(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("remain"), "{e}");
        // A payload whose samples are not whole chunks is refused by name.
        let short = payload(vec![0.0; 100], vec![0.5], 1e-4, "x".into());
        let e = input(&short).unwrap_err();
        assert!(e.to_string().contains("100 samples for 1 chunks"), "{e}");
    }

    #[test]
    fn compare_reports_the_worst_chunk_and_fails_on_nan() {
        let t = reference().expect("reference");
        let mut got = t.f32s(Role::Expected, PROBABILITIES).unwrap().to_vec();
        let r = compare(&t, &got, "test").unwrap();
        assert!(r.passed && r.checks[0].value == 0.0, "{r}");
        got[5] += 2e-4;
        let r = compare(&t, &got, "test").unwrap();
        assert!(!r.passed && r.checks[0].at == Some(5), "{r}");
        got[5] = f32::NAN;
        let r = compare(&t, &got, "test").unwrap();
        assert!(!r.passed && r.checks[0].value.is_infinite(), "{r}");
        assert!(!compare(&t, &got[..3], "test").unwrap().passed);
    }
}
