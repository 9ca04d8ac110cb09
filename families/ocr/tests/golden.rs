//! End to end against rapidocr-onnxruntime 1.4.4's own pipeline.
//!
//! The goldens `golden/page.json` and `golden/text.json` were written by
//! `golden/reference.py` (the package's `RapidOCR()` on scikit-image's
//! `page.png` and `text.png`, onnxruntime CPU). Real models and images come
//! from `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`); a
//! missing asset fails the test with the command to run.
//!
//! Acceptance (the issue's, [`tether_ocr::compare`]): every reference line is
//! matched by one of ours with polygon IoU >= 0.9 and no line is extra, and
//! the character error rate over all lines (Levenshtein distance / reference
//! characters) is <= 1 %. Stage checks: the detector input shape is the
//! reference's, every reference detection box is matched with IoU >= 0.9.

mod common;

use common::{bundle, check, check_lines};
use tether_ocr::{Device, ImageView, Ocr, OcrOptions, PixelFormat};

fn ocr() -> Ocr {
    ocr_with(&OcrOptions::default())
}

fn ocr_with(options: &OcrOptions) -> Ocr {
    // The CPU explicitly: these goldens are the CPU engine's evidence.
    let options = OcrOptions {
        device: Device::Cpu,
        ..options.clone()
    };
    Ocr::from_bundle(bundle(), &options).expect("ocr")
}

#[test]
fn page_and_text_match_rapidocr() {
    let mut ocr = ocr();
    check(&mut ocr, "page.json");
    check(&mut ocr, "text.json");
    // Again: same answers, nothing re-prepared.
    let prepared = ocr.prepared_engines();
    check(&mut ocr, "page.json");
    assert_eq!(
        ocr.prepared_engines(),
        prepared,
        "engines were prepared again"
    );
    eprintln!(
        "prepared (det, rec, cls): {prepared:?}, rec widths {:?}",
        ocr.prepared_rec_widths()
    );
}

#[test]
fn every_detected_line_matches_before_the_score_filter() {
    let mut ocr = ocr_with(&OcrOptions {
        text_score: Some(0.0),
        ..OcrOptions::default()
    });
    check_lines(&mut ocr, "page.json", "lines");
    check_lines(&mut ocr, "text.json", "lines");
}

#[test]
fn self_test_passes_on_the_cpu() {
    let mut ocr = ocr();
    let report = tether_ocr::selftest::run(&mut ocr)
        .expect("self-test runs")
        .expect("the bundle carries a self-test");
    eprintln!("{report:?}");
    assert!(report.passed, "{report:?}");
    assert!(report.checks.iter().all(|c| c.passed()), "{report}");
}

#[test]
fn the_bundle_records_each_network_at_the_shapes_it_runs_at() {
    let b = bundle();
    let dims = |section: &str| -> Vec<(String, Vec<i64>)> {
        let s = b.section(section).expect("section");
        b.tensors(s.index)
            .map(|t| (t.name.to_string(), t.dims.iter().collect()))
            .collect()
    };
    let det = dims("ocr/det/model.onnx");
    assert_eq!(det.len(), 2, "{det:?}");
    assert_eq!(det[0].1, [1, 3, -1, -1]);
    assert_eq!(det[1].1, [1, 1, -1, -1]);
    // The recogniser: its image input, the input the build adds to mask the bucket padding
    // (one valid width per table), and its output, each found by name.
    let rec = dims("ocr/rec/model.onnx");
    assert_eq!(rec.len(), 3, "{rec:?}");
    let rec_dims = |name: &str| -> &[i64] {
        &rec.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name} in {rec:?}"))
            .1
    };
    assert_eq!(rec_dims("x"), [1, 3, 48, -1]);
    let valid = rec_dims(tether_ocr::network::VALID_WIDTHS);
    assert!(valid.len() == 1 && valid[0] >= 1, "{rec:?}");
    let output = rec
        .iter()
        .find(|(n, _)| n != "x" && n != tether_ocr::network::VALID_WIDTHS)
        .expect("the output");
    assert_eq!(output.1, [1, -1, 6625]);
    let cls = dims("ocr/cls/model.onnx");
    assert_eq!(cls[0].1, [1, 3, 48, 192]);
    assert_eq!(cls[1].1, [1, 2]);
    // The model API groups the three networks and opens them on the CPU.
    let ocr = ocr();
    let engines: Vec<(String, String)> = ocr
        .engines()
        .map(|(n, e)| (n.to_string(), e.id().to_string()))
        .collect();
    assert_eq!(
        engines,
        [
            ("det".to_string(), "tract-cpu".to_string()),
            ("rec".to_string(), "tract-cpu".to_string()),
            ("cls".to_string(), "tract-cpu".to_string())
        ]
    );
}

#[test]
fn degenerate_images_give_typed_errors_or_no_text() {
    let mut ocr = ocr();
    // 5000 x 1: scaling the long side to 2000 leaves a 0-pixel side.
    let wide = vec![255u8; 5000];
    let view = ImageView::new(&wide, 5000, 1, PixelFormat::Gray8).expect("view");
    match ocr.detect_text(&view) {
        Err(e @ tether_ocr::OcrError::Scaled { width, height, .. }) => {
            assert_eq!((width, height), (5000, 1));
            // The limit and the side it leaves are named (max_side_len 2000: 1 x 0.4 px).
            assert_eq!(
                e.to_string(),
                "image 5000x1: scaling its long side to max_side_len (2000 px) leaves the other side 0 px, which rounds to 0 at the detector's multiples of 32"
            );
        }
        other => panic!("expected an image error, got {other:?}"),
    }
    // A blank 40 x 40 page: no text, no error.
    let blank = vec![255u8; 40 * 40 * 3];
    let view = ImageView::new(&blank, 40, 40, PixelFormat::Rgb8).expect("view");
    assert!(ocr.detect_text(&view).expect("blank").is_empty());
    // A 1 x 1 image is scaled up and padded like the reference does.
    let dot = [0u8];
    let view = ImageView::new(&dot, 1, 1, PixelFormat::Gray8).expect("view");
    assert!(ocr.detect_text(&view).expect("dot").is_empty());
}
