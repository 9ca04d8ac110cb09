//! Soak runs (ignored by default; run explicitly, record the output in
//! `docs/evidence/soak.md`):
//!
//! ```text
//! cargo test --workspace --release --test soak -- --ignored --nocapture --test-threads=1
//! ```
//!
//! * `cpu_frames_keep_memory_flat`: `TETHER_SOAK_FRAMES` (default 1,000,000) frames of a small
//!   model (the field case `dyn.onnx`, a YOLOv8-shaped detector, at 64x64) through `Detector`
//!   on the tract CPU engine; resident memory sampled over the first and the last 10 % of
//!   the frames must be flat, and the latency p99.9 of the last 10 % within 2x of the first.
//! * `load_unload_cycles_keep_memory_flat`: `TETHER_SOAK_CYCLES` (default 1,000) opens and
//!   drops of a detector with a frame each; resident memory after the last 10 % of the cycles
//!   equals that after the first 10 % (within one page-allocator chunk).

use std::path::PathBuf;
use std::time::Instant;

use hdrhistogram::Histogram;
use tether_detect::{Detector, DetectorOptions, Device, ImageView, PixelFormat};

fn field(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/field")
        .join(name)
}

/// Resident set size in bytes (`VmRSS` of `/proc/self/status`, in kB whatever the page size).
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .unwrap_or(0)
        * 1024
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bundle(side: u32) -> PathBuf {
    let onnx = std::fs::read(field("dyn.onnx")).unwrap();
    let (w, _) = tether_detect::recipe::build(
        &onnx,
        &tether_detect::recipe::BuildOptions {
            common: tether_detect::recipe::BuildCommon::named("soak"),
            input_size: Some((side, side)),
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    let p = std::env::temp_dir().join(format!("tether-soak-{}.bundle", std::process::id()));
    w.write(&p).unwrap();
    p
}

fn frame(side: u32) -> Vec<u8> {
    // A red square in the middle on black (what the model makes of it is printed; the whole
    // pipeline runs either way: letterbox, network, decode, NMS).
    let mut v = vec![0u8; (side * side * 3) as usize];
    for y in side / 4..side * 3 / 4 {
        for x in side / 4..side * 3 / 4 {
            v[((y * side + x) * 3) as usize] = 255;
        }
    }
    v
}

#[test]
#[ignore = "soak: run explicitly (see the module docs)"]
fn cpu_frames_keep_memory_flat() {
    let side = 64;
    let path = bundle(side);
    let px = frame(side);
    let view = ImageView::new(&px, side, side, PixelFormat::Rgb8).unwrap();
    let mut det = Detector::open(
        &path,
        &DetectorOptions {
            device: Device::Cpu,
            ..DetectorOptions::default()
        },
    )
    .unwrap();
    let frames = env("TETHER_SOAK_FRAMES", 1_000_000);
    let tenth = (frames / 10).max(1);
    let mut first = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let mut last = first.clone();
    let (mut rss_first, mut rss_last) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    let mut kept = 0usize;
    for i in 0..frames {
        let t = Instant::now();
        kept = det.detect(&view).unwrap().len();
        let ns = t.elapsed().as_nanos() as u64;
        if i < tenth {
            first.record(ns.max(1)).unwrap();
            if i % (tenth / 20).max(1) == 0 {
                rss_first.push(rss());
            }
        } else if i >= frames - tenth {
            last.record(ns.max(1)).unwrap();
            if i % (tenth / 20).max(1) == 0 {
                rss_last.push(rss());
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let min = |v: &[usize]| v.iter().copied().min().unwrap_or(0);
    let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e6;
    println!(
        "cpu soak: {frames} frames of dyn.onnx {side}x{side} in {secs:.1} s ({kept} detections per frame)"
    );
    println!(
        "  RSS first 10 %: {:.1}..{:.1} MiB; last 10 %: {:.1}..{:.1} MiB",
        min(&rss_first) as f64 / 1048576.0,
        max(&rss_first) as f64 / 1048576.0,
        min(&rss_last) as f64 / 1048576.0,
        max(&rss_last) as f64 / 1048576.0
    );
    println!(
        "  latency first 10 %: p50 {:.4} ms p99.9 {:.4} ms; last 10 %: p50 {:.4} ms p99.9 {:.4} ms",
        p(&first, 0.5),
        p(&first, 0.999),
        p(&last, 0.5),
        p(&last, 0.999)
    );
    // Flat: the last tenth never exceeds the first tenth's peak by more than 1 MiB (allocator
    // slack), whatever the frame count.
    assert!(
        max(&rss_last) <= max(&rss_first) + (1 << 20),
        "resident memory grew: {} -> {} bytes",
        max(&rss_first),
        max(&rss_last)
    );
    assert!(
        p(&last, 0.999) <= 2.0 * p(&first, 0.999) + 0.05,
        "latency p99.9 drifted"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
#[ignore = "soak: run explicitly (see the module docs)"]
fn load_unload_cycles_keep_memory_flat() {
    let side = 64;
    let path = bundle(side);
    let px = frame(side);
    let view = ImageView::new(&px, side, side, PixelFormat::Rgb8).unwrap();
    let cycles = env("TETHER_SOAK_CYCLES", 1000);
    let tenth = (cycles / 10).max(1);
    let (mut after_first, mut after_last) = (0usize, 0usize);
    let t0 = Instant::now();
    for i in 0..cycles {
        let mut det = Detector::open(
            &path,
            &DetectorOptions {
                device: Device::Cpu,
                ..DetectorOptions::default()
            },
        )
        .unwrap();
        det.detect(&view).unwrap();
        drop(det);
        if i + 1 == tenth {
            after_first = rss();
        }
        if i + 1 == cycles {
            after_last = rss();
        }
    }
    println!(
        "load/unload: {cycles} cycles in {:.1} s; RSS after the first 10 %: {:.1} MiB, after the last: {:.1} MiB",
        t0.elapsed().as_secs_f64(),
        after_first as f64 / 1048576.0,
        after_last as f64 / 1048576.0
    );
    assert!(
        after_last <= after_first + (2 << 20),
        "resident memory grew over load/unload cycles: {after_first} -> {after_last} bytes"
    );
    let _ = std::fs::remove_file(&path);
}
