//! The CPU engine on several threads (`ModelOptions::cpu_threads`): tract's pool really runs
//! (its threads exist), and the detections match the single-thread run.
//!
//! Uses the nudenet `320n.onnx` model and `astronaut.png` from `tests/fetch-assets`.

use std::path::PathBuf;

use tether::detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};
use tether::runtime::ModelOptions;

fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.assets"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first",
        p.display()
    );
    p
}

fn detector(bundle: &std::sync::Arc<tether::bundle::Bundle>, threads: usize) -> Detector {
    Detector::from_bundle(
        std::sync::Arc::clone(bundle),
        &DetectorOptions {
            device: Device::Cpu,
            model: ModelOptions {
                cpu_threads: threads,
                ..ModelOptions::default()
            },
            ..DetectorOptions::default()
        },
    )
    .expect("open the detector")
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_threads_detect_what_one_thread_detects() {
    let onnx = std::fs::read(asset("320n.onnx")).expect("read 320n.onnx");
    let (writer, _) = tether_detect::recipe::build(
        &onnx,
        &tether_detect::recipe::BuildOptions {
            common: tether_detect::recipe::BuildCommon::named("320n"),
            input_size: Some((320, 320)),
            ..Default::default()
        },
        &mut |_| {},
    )
    .expect("build the bundle");
    let bundle = std::sync::Arc::new(
        tether::bundle::Bundle::from_vec(
            writer.to_bytes().expect("serialise"),
            tether::bundle::Verify::Eager,
        )
        .expect("read the bundle back"),
    );
    let img = image::open(asset("astronaut.png"))
        .expect("decode astronaut.png")
        .to_rgb8();
    let (w, h) = img.dimensions();
    let view = ImageView::new(img.as_raw(), w, h, PixelFormat::Rgb8).expect("view");

    let mut one = detector(&bundle, 1);
    assert_eq!(one.model().cpu_threads(), 1);
    let a = one.detect(&view).expect("detect, 1 thread").clone();
    assert!(
        !thread_names().iter().any(|n| n.starts_with("tether-cpu")),
        "one thread must not start a pool: {:?}",
        thread_names()
    );

    let mut two = detector(&bundle, 2);
    assert_eq!(two.model().cpu_threads(), 2);
    let b = two.detect(&view).expect("detect, 2 threads").clone();
    let pool: Vec<String> = thread_names()
        .into_iter()
        .filter(|n| n.starts_with("tether-cpu"))
        .collect();
    assert_eq!(pool.len(), 2, "the 2-thread pool: {:?}", thread_names());

    assert!(!a.is_empty(), "the astronaut image has detections");
    assert_eq!(a.len(), b.len(), "{a:?}\n{b:?}");
    for (x, y) in a.iter().zip(b.iter()) {
        assert_eq!(x.class_id, y.class_id);
        assert!((x.score - y.score).abs() < 1e-4, "{x:?} vs {y:?}");
        for (p, q) in [
            (x.bbox.x1, y.bbox.x1),
            (x.bbox.y1, y.bbox.y1),
            (x.bbox.x2, y.bbox.x2),
            (x.bbox.y2, y.bbox.y2),
        ] {
            assert!((p - q).abs() < 1e-2, "{x:?} vs {y:?}");
        }
    }
}
