//! Golden test: the detection pipeline against the onnxruntime reference.
//!
//! The goldens in `families/detect/golden/*.json` were produced by
//! `golden/reference.py` (onnxruntime CPU, numpy pre/post-processing written
//! from the same contract as `letterbox.rs` / `decode.rs`); they are committed
//! so CI needs no onnxruntime. Real models and images come from
//! `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`); a missing
//! asset fails the test with the command to run.
//!
//! Tolerances: network input values within 1e-5 (same f32 arithmetic);
//! raw network outputs within 1e-3 relative + 1e-4 absolute (tract vs
//! onnxruntime kernels, measured ~1e-5); detections: same count and classes,
//! IoU >= 0.9, scores within 1e-3 (the acceptance bar).

use std::path::PathBuf;

use serde_json::Value;
use tether_detect::recipe::{BuildCommon, BuildOptions, build};
use tether_detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};
use tether_testkit::asset;

fn golden(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    serde_json::from_slice(&std::fs::read(&p).expect("golden file")).expect("golden JSON")
}

fn f(v: &Value) -> f32 {
    v.as_f64().expect("number") as f32
}

fn iou(a: [f32; 4], b: [f32; 4]) -> f32 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let area = |r: [f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    inter / (area(a) + area(b) - inter)
}

fn check(golden_name: &str) {
    let g = golden(golden_name);
    let model = asset(g["model"].as_str().expect("model"));
    let image_path = asset(g["image"].as_str().expect("image"));
    let input_size = [
        g["input_size"][1].as_u64().expect("w") as u32,
        g["input_size"][0].as_u64().expect("h") as u32,
    ];

    // Build the bundle exactly as `tether build` does.
    let onnx = std::fs::read(&model).expect("model bytes");
    let (writer, report) = build(
        &onnx,
        &BuildOptions {
            common: BuildCommon::named(golden_name),
            input_size: Some((input_size[0], input_size[1])),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    let names: Vec<&str> = g["class_names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    assert_eq!(report.labels, names, "class names from the ONNX metadata");
    let path = std::env::temp_dir().join(format!(
        "tether-golden-{}-{golden_name}.bundle",
        std::process::id()
    ));
    writer.write(&path).expect("write bundle");

    // The CPU path: its module exposes the network's input and output tensors.
    let options = DetectorOptions {
        device: Device::Cpu,
        ..DetectorOptions::default()
    };
    let mut det = Detector::open(&path, &options).expect("load bundle");
    let img = image::open(&image_path).expect("decode image").to_rgb8();
    assert_eq!(
        [img.height(), img.width()],
        [
            g["image_size"][0].as_u64().unwrap() as u32,
            g["image_size"][1].as_u64().unwrap() as u32
        ]
    );
    let view =
        ImageView::new(img.as_raw(), img.width(), img.height(), PixelFormat::Rgb8).expect("view");
    let dets = det.detect(&view).expect("detect").clone();

    // Letterbox geometry.
    let lb = det.letterbox().expect("letterbox");
    let gl = &g["letterbox"];
    assert_eq!(
        [lb.left, lb.top, lb.new_width, lb.new_height],
        ["left", "top", "new_w", "new_h"].map(|k| gl[k].as_u64().unwrap() as u32)
    );

    // Network input values at fixed positions, and the sum of all of them.
    let (w, h) = (input_size[0] as usize, input_size[1] as usize);
    // The session's regions hold the network's input and output tensors of the last run.
    let regions = det.regions().expect("prepared");
    let net = det.model().single_network().expect("one network");
    let input_name = g["input_name"].as_str().expect("input name");
    assert_eq!(net.io().inputs[0].name, input_name);
    let read = |det: &mut Detector, id, bytes: usize| -> Vec<f32> {
        let mut b = vec![0u8; bytes];
        det.session_mut()
            .expect("session")
            .read_region(id, &mut b)
            .expect("read region");
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let in_bytes = net.io().inputs[0].byte_len().unwrap();
    let out_bytes = net.io().outputs[0].byte_len().unwrap();
    let output_name = g["output_name"].as_str().expect("output name");
    assert_eq!(net.io().outputs[0].name, output_name);
    let input = read(&mut det, regions.tensor, in_bytes);
    for s in g["input_sample"].as_array().expect("input_sample") {
        let (c, y, x) = (
            s["c"].as_u64().unwrap() as usize,
            s["y"].as_u64().unwrap() as usize,
            s["x"].as_u64().unwrap() as usize,
        );
        let ours = input[c * w * h + y * w + x];
        assert!(
            (ours - f(&s["value"])).abs() <= 1e-5,
            "input[{c},{y},{x}] = {ours}, reference {}",
            s["value"]
        );
    }
    let sum: f64 = input.iter().map(|&v| f64::from(v)).sum();
    let want = g["input_checksum"].as_f64().unwrap();
    assert!(
        (sum - want).abs() <= 1e-6 * want.abs().max(1.0),
        "input sum {sum}, reference {want}"
    );

    // Raw network output at fixed anchors.
    let out = read(&mut det, regions.raw, out_bytes);
    let n = g["raw_output_shape"][2].as_u64().unwrap() as usize;
    let rows = g["raw_output_shape"][1].as_u64().unwrap() as usize;
    assert_eq!(out.len(), rows * n);
    let mut worst = 0f32;
    for s in g["raw_output_sample"]
        .as_array()
        .expect("raw_output_sample")
    {
        let a = s["anchor"].as_u64().unwrap() as usize;
        for (r, v) in s["values"].as_array().unwrap().iter().enumerate() {
            let (ours, theirs) = (out[r * n + a], f(v));
            let err = (ours - theirs).abs();
            worst = worst.max(err / theirs.abs().max(1e-3));
            assert!(
                err <= 1e-3 * theirs.abs() + 1e-4,
                "output[{r}, {a}] = {ours}, reference {theirs}"
            );
        }
    }
    eprintln!("{golden_name}: worst relative raw-output difference {worst:.2e}");

    // Detections.
    let want = g["detections"].as_array().expect("detections");
    assert_eq!(dets.len(), want.len(), "detection count: ours {dets:?}");
    assert!(
        !want.is_empty(),
        "a golden with no detections proves nothing"
    );
    for (ours, theirs) in dets.iter().zip(want) {
        let tb = [0, 1, 2, 3].map(|i| f(&theirs["box"][i]));
        let ob = [ours.bbox.x1, ours.bbox.y1, ours.bbox.x2, ours.bbox.y2];
        assert_eq!(
            u64::from(ours.class_id),
            theirs["class_id"].as_u64().unwrap(),
            "class"
        );
        assert_eq!(det.class_name(ours.class_id), theirs["class_name"].as_str());
        assert!(
            (ours.score - f(&theirs["score"])).abs() <= 1e-3,
            "score {} vs {}",
            ours.score,
            theirs["score"]
        );
        let overlap = iou(ob, tb);
        assert!(
            overlap >= 0.9,
            "IoU {overlap} between ours {ob:?} and reference {tb:?}"
        );
        eprintln!(
            "  {:<16} score {:.4} (ref {:.4})  IoU {overlap:.5}",
            theirs["class_name"].as_str().unwrap(),
            ours.score,
            f(&theirs["score"])
        );
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn doclaynet_on_page_matches_onnxruntime() {
    check("doclaynet_page.json");
}

#[test]
fn nudenet_320n_on_astronaut_matches_onnxruntime() {
    check("nudenet_astronaut.json");
}
