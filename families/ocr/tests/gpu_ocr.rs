//! The OCR pipeline on a GPU (the model API on `Device::Cuda(0)`: the engine
//! chosen for the device, one plan and device session per detector size and
//! recogniser bucket) against rapidocr-onnxruntime's goldens, with the same
//! acceptance rule as the CPU (`tests/golden.rs`, [`tether_ocr::compare`]).
//!
//! Without a CUDA driver and device (CI, the development VM) every test is
//! reported *ignored* with the reason (a libtest-mimic harness decides at run
//! time), never as a pass. Built in the workspace (the facade's default
//! features compile the GPU engines). On the GPU host: `TETHER_ASSETS=DIR gpu_ocr
//! --test-threads=1 --nocapture`.

mod common;

use tether_ocr::{Device, EngineKind, Ocr, OcrOptions};
use tether_runtime::cuda::skip_reason;
use tether_testkit::GpuTests;

fn gpu_ocr(options: OcrOptions) -> Ocr {
    let ocr = Ocr::from_bundle(
        common::bundle(),
        &OcrOptions {
            device: Device::Cuda(0),
            ..options
        },
    )
    .expect("ocr on CUDA device 0");
    let engines: Vec<(String, EngineKind)> =
        ocr.engines().map(|(n, e)| (n.to_string(), e)).collect();
    eprintln!("engines on {}: {engines:?}", ocr.model().device());
    for (n, e) in &engines {
        assert_ne!(
            *e,
            EngineKind::TractCpu,
            "network {n} fell back to the CPU on a GPU device"
        );
    }
    ocr
}

fn page_and_text_match_rapidocr() {
    let mut ocr = gpu_ocr(OcrOptions::default());
    common::check(&mut ocr, "page.json");
    common::check(&mut ocr, "text.json");
    let prepared = ocr.prepared_engines();
    common::check(&mut ocr, "page.json");
    assert_eq!(
        ocr.prepared_engines(),
        prepared,
        "plans were prepared again"
    );
    eprintln!(
        "prepared (det, rec, cls): {prepared:?}, rec widths {:?}, times {:?}",
        ocr.prepared_rec_widths(),
        ocr.stage_times()
    );
}

fn every_detected_line_matches_before_the_score_filter() {
    let mut ocr = gpu_ocr(OcrOptions {
        text_score: Some(0.0),
        ..OcrOptions::default()
    });
    common::check_lines(&mut ocr, "page.json", "lines");
    common::check_lines(&mut ocr, "text.json", "lines");
}

fn self_test_passes() {
    let mut ocr = gpu_ocr(OcrOptions::default());
    let report = tether_ocr::selftest::run(&mut ocr)
        .expect("self-test runs")
        .expect("the bundle carries a self-test");
    eprintln!("{report:?}");
    assert!(report.passed, "{report:?}");
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "real_model::page_and_text_match_rapidocr",
            page_and_text_match_rapidocr,
        )
        .test(
            "real_model::every_detected_line_matches_before_the_score_filter",
            every_detected_line_matches_before_the_score_filter,
        )
        .test("real_model::self_test_passes", self_test_passes)
        .run()
}
