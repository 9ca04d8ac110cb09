//! The segment logic alone against the package's
//! `get_speech_timestamps_from_probs` (silero-vad 6.2.3) on seeded random
//! probability sequences with several parameter sets
//! (`golden/segments_synthetic.json`, and `golden/segments_low_threshold.json`
//! for speech thresholds at and below 0.01, where the package's exit threshold
//! is at or above the speech threshold; both written by `golden/reference.py`).
//! Exact equality: the same integer sample arithmetic.

use serde_json::Value;
use tether_vad::{SegmentEvent, SegmentTracker, SpeechSegment, VadConfig};

#[test]
fn tracker_equals_get_speech_timestamps_from_probs() {
    let total = check_golden("segments_synthetic.json", 30);
    assert!(total > 100);
}

#[test]
fn low_thresholds_equal_the_package() {
    let total = check_golden("segments_low_threshold.json", 20);
    assert!(total > 20);
}

/// Every case of `golden/<file>` (at least `min_cases`) through the tracker; returns the
/// number of segments compared.
fn check_golden(file: &str, min_cases: usize) -> usize {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(file);
    let doc: Value = serde_json::from_slice(&std::fs::read(path).expect("golden")).expect("JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= min_cases);
    let mut total = 0;
    for (n, case) in cases.iter().enumerate() {
        let p = &case["params"];
        let threshold = p["threshold"].as_f64().unwrap_or(0.5);
        let mut config = VadConfig::with_threshold(threshold);
        if let Some(v) = p["neg_threshold"].as_f64() {
            config.neg_threshold = v;
        }
        let ms = |key: &str, default: u32| p[key].as_u64().map_or(default, |v| v as u32);
        config.min_speech_ms = ms("min_speech_duration_ms", 250);
        config.min_silence_ms = ms("min_silence_duration_ms", 100);
        config.speech_pad_ms = ms("speech_pad_ms", 30);
        config.validate().expect("valid parameters");
        let length = case["audio_length_samples"].as_u64().expect("length");
        let probs: Vec<f32> = case["probs"]
            .as_array()
            .expect("probs")
            .iter()
            .map(|v| v.as_f64().expect("prob") as f32)
            .collect();
        let want: Vec<SpeechSegment> = case["segments_samples"]
            .as_array()
            .expect("segments")
            .iter()
            .map(|s| SpeechSegment {
                start: s[0].as_u64().expect("start"),
                end: s[1].as_u64().expect("end"),
            })
            .collect();
        let mut tracker = SegmentTracker::new(&config, 512);
        let mut got = Vec::new();
        let mut starts = 0;
        let last = probs.len() - 1;
        for (i, &prob) in probs.iter().enumerate() {
            let events = if i == last {
                tracker.push_last(prob, length)
            } else {
                tracker.push(prob)
            };
            for e in events {
                match e {
                    SegmentEvent::Start { .. } => starts += 1,
                    SegmentEvent::End(s) => got.push(s),
                }
            }
        }
        assert_eq!(got, want, "case {n} with {p}");
        assert_eq!(starts, want.len(), "case {n}: one Start per kept segment");
        total += want.len();
    }
    println!("{file}: {} cases, {total} segments, all equal", cases.len());
    total
}
