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

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tether_bundle::{Bundle, Verify};
use tether_ocr::compare::{MAX_CER, MIN_IOU, compare};
use tether_ocr::recipe::{BuildOptions, Networks, build};
use tether_ocr::{Device, ImageView, Ocr, OcrOptions, PixelFormat};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS")
        .map_or_else(|| repo_root().join(".assets"), PathBuf::from);
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first (it downloads the pinned wheels)",
        p.display()
    );
    p
}

fn golden(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    serde_json::from_slice(&std::fs::read(&p).expect("golden file")).expect("golden JSON")
}

fn quad(v: &Value) -> [[f32; 2]; 4] {
    let a = v.as_array().expect("quad");
    std::array::from_fn(|i| {
        [
            a[i][0].as_f64().expect("x") as f32,
            a[i][1].as_f64().expect("y") as f32,
        ]
    })
}

fn ocr() -> Ocr {
    ocr_with(&OcrOptions::default())
}

fn bundle() -> Arc<Bundle> {
    let det = std::fs::read(asset("ch_PP-OCRv4_det_infer.onnx")).expect("det");
    let rec = std::fs::read(asset("ch_PP-OCRv4_rec_infer.onnx")).expect("rec");
    let cls = std::fs::read(asset("ch_ppocr_mobile_v2.0_cls_infer.onnx")).expect("cls");
    let (writer, report) = build(
        Networks {
            det: &det,
            rec: &rec,
            cls: Some(&cls),
        },
        &BuildOptions {
            name: "ppocr-v4".into(),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    assert_eq!(report.dictionary_entries, 6624);
    assert!(
        report.self_test_skipped.is_none(),
        "{:?}",
        report.self_test_skipped
    );
    Arc::new(Bundle::from_vec(writer.to_bytes().expect("bytes"), Verify::Eager).expect("bundle"))
}

fn ocr_with(options: &OcrOptions) -> Ocr {
    // The CPU explicitly: these goldens are the CPU engine's evidence.
    let options = OcrOptions {
        device: Device::Cpu,
        ..options.clone()
    };
    Ocr::from_bundle(bundle(), &options).expect("ocr")
}

/// `results`: the reference's final lines; `lines`: every detected line
/// before its text-score filter (compare with `text_score` 0).
fn check(ocr: &mut Ocr, golden_name: &str) {
    check_lines(ocr, golden_name, "results");
}

fn check_lines(ocr: &mut Ocr, golden_name: &str, key: &str) {
    let g = golden(golden_name);
    let img = image::open(asset(g["image"].as_str().expect("image")))
        .expect("decode")
        .to_luma8();
    let (w, h) = img.dimensions();
    let view = ImageView::new(img.as_raw(), w, h, PixelFormat::Gray8).expect("view");
    ocr.detect_text(&view).expect("ocr");
    let res = ocr.result();
    let stats = ocr.stats();
    let times = ocr.stage_times();
    let want_in = &g["det"]["input_shape"];
    assert_eq!(
        (stats.det_input.1 as u64, stats.det_input.0 as u64),
        (
            want_in[2].as_u64().expect("h"),
            want_in[3].as_u64().expect("w")
        ),
        "detector input size"
    );
    let ours: Vec<([[f32; 2]; 4], String, f32)> = res
        .lines()
        .map(|l| (l.polygon, l.text.to_string(), l.score))
        .collect();
    eprintln!("{golden_name}: {} lines, {times:?}, {stats:?}", ours.len());
    for (p, t, s) in &ours {
        eprintln!("  ours {t:?} {s:.4} {p:?}");
    }
    let want: Vec<([[f32; 2]; 4], String, f64)> = g[key]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                quad(&r["box"]),
                r["text"].as_str().expect("text").to_string(),
                r["score"].as_f64().expect("score"),
            )
        })
        .collect();
    // Match each reference line to our line of largest IoU.
    let reference: Vec<_> = want.iter().map(|(p, t, _)| (*p, t.as_str())).collect();
    let mine: Vec<_> = ours.iter().map(|(p, t, _)| (*p, t.as_str())).collect();
    let c = compare(&reference, &mine);
    for p in &c.pairs {
        let (w, o) = (&want[p.reference], &ours[p.ours]);
        eprintln!(
            "  {:?} ({:.4}) ~ {:?} ({:.4}): IoU {:.3}, {} edits",
            w.1, w.2, o.1, o.2, p.iou, p.edits
        );
    }
    if let Some((r, best)) = c.missing.first() {
        panic!(
            "reference line {:?} {:?} has no match with IoU >= {MIN_IOU} (best {best:?})",
            want[*r].1, want[*r].0
        );
    }
    if let Some(&i) = c.extra.first() {
        panic!(
            "extra line {:?} {:?} not in the reference",
            ours[i].1, ours[i].0
        );
    }
    let cer = c.cer();
    eprintln!(
        "{golden_name}: CER {cer:.4} ({} edits over {} characters)",
        c.edits, c.chars
    );
    assert!(cer <= MAX_CER, "character error rate {cer:.4} > 1 %");
    assert!(c.passes());
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
    assert!(report.worst_deviation() <= report.tolerance);
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
    let rec = dims("ocr/rec/model.onnx");
    assert_eq!(rec[0].1, [1, 3, 48, -1]);
    assert_eq!(rec[1].1, [1, -1, 6625]);
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
        Err(tether_ocr::OcrError::Image { width, height, .. }) => {
            assert_eq!((width, height), (5000, 1))
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
