//! Shared by the OCR family's golden tests (CPU and GPU): assets, goldens,
//! the bundle built from the pinned networks, and the comparison of one
//! image's lines with the reference's ([`tether_ocr::compare`]).
#![allow(dead_code)] // each test binary uses a part

use std::sync::Arc;

use serde_json::Value;
use tether_bundle::{Bundle, Verify};
use tether_ocr::compare::{MAX_CER, MIN_IOU, compare};
use tether_ocr::recipe::{BuildCommon, BuildOptions, Networks, build};
use tether_ocr::{ImageView, Ocr, PixelFormat};
pub use tether_testkit::asset;

/// A committed golden, embedded so the test binaries run anywhere (the GPU
/// host has no checkout).
pub fn golden(name: &str) -> Value {
    let text = match name {
        "page.json" => include_str!("../../golden/page.json"),
        "text.json" => include_str!("../../golden/text.json"),
        other => panic!("no golden {other}"),
    };
    serde_json::from_str(text).expect("golden JSON")
}

pub fn quad(v: &Value) -> [[f32; 2]; 4] {
    let a = v.as_array().expect("quad");
    std::array::from_fn(|i| {
        [
            a[i][0].as_f64().expect("x") as f32,
            a[i][1].as_f64().expect("y") as f32,
        ]
    })
}

pub fn bundle() -> Arc<Bundle> {
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
            common: BuildCommon::named("ppocr-v4"),
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

/// `results`: the reference's final lines; `lines`: every detected line
/// before its text-score filter (compare with `text_score` 0).
pub fn check(ocr: &mut Ocr, golden_name: &str) {
    check_lines(ocr, golden_name, "results");
}

pub fn check_lines(ocr: &mut Ocr, golden_name: &str, key: &str) {
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
