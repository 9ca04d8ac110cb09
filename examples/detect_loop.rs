//! A robot's perception loop: detect on every frame at a fixed rate, report
//! latency, jitter and missed deadlines; Ctrl-C stops it cleanly.
//!
//! ```text
//! detect-loop BUNDLE [--hz 30] [--frames N] [--raw FRAME.rgb --size WxH]
//! ```
//!
//! Frames: a raw RGB8 file (`--raw`, e.g. `ffmpeg -i img.png -pix_fmt rgb24 -f rawvideo f.rgb`)
//! or, by default, a synthetic 640x480 test pattern. The loop itself never
//! allocates: the detector reuses its buffers and results are a fixed-capacity
//! vector. This is also the "minimal embedding" binary whose size
//! `docs/evidence/cross-aarch64.md` records.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tether::detect::{Detector, ImageView, PixelFormat};

struct Args {
    bundle: String,
    hz: f64,
    frames: Option<u64>,
    raw: Option<String>,
    size: (u32, u32),
}

fn usage() -> ! {
    eprintln!("usage: detect-loop BUNDLE [--hz 30] [--frames N] [--raw FRAME.rgb --size WxH]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        bundle: String::new(),
        hz: 30.0,
        frames: None,
        raw: None,
        size: (640, 480),
    };
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--hz" => a.hz = value().parse().unwrap_or_else(|_| usage()),
            "--frames" => a.frames = Some(value().parse().unwrap_or_else(|_| usage())),
            "--raw" => a.raw = Some(value()),
            "--size" => {
                let v = value();
                let (w, h) = v.split_once('x').unwrap_or_else(|| usage());
                a.size = (
                    w.parse().unwrap_or_else(|_| usage()),
                    h.parse().unwrap_or_else(|_| usage()),
                );
            }
            s if s.starts_with('-') => usage(),
            s => a.bundle = s.to_string(),
        }
    }
    if a.bundle.is_empty() || !a.hz.is_finite() || a.hz <= 0.0 {
        usage();
    }
    a
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args();
    let (w, h) = args.size;
    let frame = match &args.raw {
        Some(p) => std::fs::read(p)?,
        // A gradient test pattern.
        None => (0..w * h * 3)
            .map(|i| ((i / 3 % w + i / 3 / w) % 256) as u8)
            .collect(),
    };
    let image = ImageView::new(&frame, w, h, PixelFormat::Rgb8)?;

    let t = Instant::now();
    let mut detector = Detector::load(&args.bundle)?;
    println!(
        "loaded {} in {:.1} ms",
        args.bundle,
        t.elapsed().as_secs_f64() * 1e3
    );

    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))?;

    let period = Duration::from_secs_f64(1.0 / args.hz);
    let mut next = Instant::now();
    let (mut n, mut missed) = (0u64, 0u64);
    let (mut sum, mut max, mut min) = (Duration::ZERO, Duration::ZERO, Duration::MAX);
    let mut last_count = 0usize;
    while !stop.load(Ordering::Relaxed) && args.frames.is_none_or(|f| n < f) {
        let start = Instant::now();
        last_count = detector.detect(&image)?.len();
        let took = start.elapsed();
        n += 1;
        sum += took;
        max = max.max(took);
        min = min.min(took);
        next += period;
        let now = Instant::now();
        if now > next {
            missed += 1;
            next = now; // drop the backlog instead of bursting
        } else {
            std::thread::sleep(next - now);
        }
    }
    if n > 0 {
        println!(
            "{n} frames at {} Hz: latency min {:.2} / mean {:.2} / max {:.2} ms, jitter (max-min) {:.2} ms, {missed} missed deadlines, {last_count} detections in the last frame",
            args.hz,
            min.as_secs_f64() * 1e3,
            sum.as_secs_f64() * 1e3 / n as f64,
            max.as_secs_f64() * 1e3,
            (max - min).as_secs_f64() * 1e3,
        );
    }
    Ok(())
}
