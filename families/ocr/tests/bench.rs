//! CPU latency of the OCR pipeline on page.png and text.png (ignored by
//! default; `docs/evidence/ocr-cpu.md` records a run):
//!
//! ```sh
//! TETHER_ASSETS=... OCR_BENCH_RUNS=10 cargo test --workspace --release \
//!     --test bench -- --ignored --nocapture
//! ```
//!
//! The CPU engine (`Device::Cpu`) runs on the calling thread only, so this
//! is single-threaded, like the onnxruntime reference in `golden/bench_ort.py`.
//! The image is decoded once, outside the timed region.

use std::sync::Arc;
use std::time::Duration;

use tether_bundle::{Bundle, Verify};
use tether_ocr::recipe::{BuildCommon, BuildOptions, Networks, build};
use tether_ocr::{Device, ImageView, Ocr, OcrOptions, PixelFormat};
use tether_testkit::asset;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q / 100.0).round() as usize;
    v[i]
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn cpu_latency() {
    let runs: usize = std::env::var("OCR_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let det = std::fs::read(asset("ch_PP-OCRv4_det_infer.onnx")).expect("det");
    let rec = std::fs::read(asset("ch_PP-OCRv4_rec_infer.onnx")).expect("rec");
    let cls = std::fs::read(asset("ch_ppocr_mobile_v2.0_cls_infer.onnx")).expect("cls");
    let (writer, _) = build(
        Networks {
            det: &det,
            rec: &rec,
            cls: Some(&cls),
        },
        &BuildOptions {
            common: BuildCommon::named("bench"),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    let bundle =
        Bundle::from_vec(writer.to_bytes().expect("bytes"), Verify::Eager).expect("bundle");
    let options = OcrOptions {
        device: Device::Cpu,
        ..OcrOptions::default()
    };
    let mut ocr = Ocr::from_bundle(Arc::new(bundle), &options).expect("ocr");
    for name in ["page.png", "text.png"] {
        let img = image::open(asset(name)).expect("decode").to_luma8();
        let (w, h) = img.dimensions();
        let view = ImageView::new(img.as_raw(), w, h, PixelFormat::Gray8).expect("view");
        // Warm-up: prepares the detector for this size and the buckets used.
        for _ in 0..2 {
            ocr.detect_text(&view).expect("ocr");
        }
        let mut cols: [Vec<f64>; 7] = Default::default();
        let mut lines = 0;
        for _ in 0..runs {
            lines = ocr.detect_text(&view).expect("ocr").len();
            let t = ocr.stage_times();
            for (c, d) in cols.iter_mut().zip([
                t.total,
                t.preprocess,
                t.det,
                t.postprocess,
                t.crop,
                t.cls,
                t.rec,
            ]) {
                c.push(ms(d));
            }
        }
        let [total, pre, det, post, crop, cls, rec] = &mut cols;
        println!(
            "{name}: total p50 {:.1} ms p90 {:.1} ms | preprocess {:.1} | det {:.1} | db {:.1} | crop {:.1} | cls {:.1} | rec {:.1} ms (p50; {lines} lines, {runs} runs)",
            pct(&mut total.clone(), 50.0),
            pct(total, 90.0),
            pct(pre, 50.0),
            pct(det, 50.0),
            pct(post, 50.0),
            pct(crop, 50.0),
            pct(cls, 50.0),
            pct(rec, 50.0),
        );
    }
}
