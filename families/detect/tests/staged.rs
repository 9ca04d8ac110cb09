//! Zero-copy ingestion: a frame written into the session's staging in place
//! (`Detector::staging_mut`) and run with `Detector::detect_staged` gives the detections
//! `Detector::detect` gives for the same frame, with and without row padding; the staging
//! keeps its content between runs and a new frame written there changes the result. On the
//! CPU engine (the GPU path is in `gpu_pipeline`). Real model and image from
//! `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`).

use std::path::PathBuf;

use tether_detect::recipe::{BuildCommon, BuildOptions, build};
use tether_detect::{
    Detector, DetectorOptions, Device, FrameError, FrameSpec, ImageView, PixelFormat,
};
use tether_testkit::asset;

fn detector() -> (Detector, PathBuf) {
    let onnx = std::fs::read(asset("320n.onnx")).expect("model bytes");
    let (writer, _) = build(
        &onnx,
        &BuildOptions {
            common: BuildCommon::named("staged"),
            input_size: Some((320, 320)),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    let path = std::env::temp_dir().join(format!("tether-staged-{}.bundle", std::process::id()));
    writer.write(&path).expect("write bundle");
    let det = Detector::open(
        &path,
        &DetectorOptions {
            device: Device::Cpu,
            ..DetectorOptions::default()
        },
    )
    .expect("open");
    (det, path)
}

/// Write `rows` (packed RGB, `width * 3` bytes each) into `staging` with `stride` bytes per
/// row, as a producer would.
fn write_rows(staging: &mut [u8], rows: &[u8], width: usize, stride: usize) {
    for (dst, src) in staging.chunks_mut(stride).zip(rows.chunks(width * 3)) {
        dst[..width * 3].copy_from_slice(src);
    }
}

#[test]
fn staged_frames_detect_what_copied_frames_detect() {
    let (mut det, path) = detector();
    assert!(
        matches!(det.staging_mut(), Err(FrameError::NotPrepared)),
        "staging before a session is prepared"
    );
    assert!(matches!(det.detect_staged(), Err(FrameError::NotPrepared)));

    let img = image::open(asset("astronaut.png"))
        .expect("image")
        .to_rgb8();
    let (w, h) = img.dimensions();
    let view = ImageView::new(img.as_raw(), w, h, PixelFormat::Rgb8).expect("view");
    let want = det.detect(&view).expect("detect").clone();
    assert!(!want.is_empty(), "the reference frame has detections");

    // The staging still holds the frame `detect` copied in.
    assert_eq!(det.detect_staged().expect("staged").clone(), want);
    assert_eq!(det.stage_times().stage_in, std::time::Duration::ZERO);

    // A black frame written in place changes the result; the image written back restores it.
    let spec = FrameSpec::packed(w, h, PixelFormat::Rgb8);
    let staging = det.staging_mut().expect("staging");
    assert_eq!(staging.len(), spec.bytes(), "staging holds one frame");
    staging.fill(0);
    let black = det.detect_staged().expect("black").clone();
    assert_ne!(black, want, "the black frame written in place was not used");
    write_rows(
        det.staging_mut().unwrap(),
        img.as_raw(),
        w as usize,
        spec.stride,
    );
    assert_eq!(det.detect_staged().expect("staged").clone(), want);

    // Rows with padding: prepared for a padded geometry, the staging is `stride * height`
    // and the padding is ignored (filled with a pattern here).
    let stride = w as usize * 3 + 64;
    let padded = FrameSpec {
        stride,
        ..FrameSpec::packed(w, h, PixelFormat::Rgb8)
    };
    det.prepare(padded).expect("prepare padded");
    let staging = det.staging_mut().expect("padded staging");
    assert_eq!(staging.len(), stride * h as usize);
    staging.fill(0xA5);
    write_rows(staging, img.as_raw(), w as usize, stride);
    assert_eq!(det.detect_staged().expect("padded staged").clone(), want);
    let _ = std::fs::remove_file(&path);
}
