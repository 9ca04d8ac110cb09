//! A robot's perception loop: frames released at a fixed rate (a camera), detection on each,
//! deadline tracking, results handed over a bounded channel to a consumer thread (the
//! planner), and a clean shutdown on Ctrl-C: the frame in flight completes, the consumer
//! drains, the summary prints, the exit code is 130.
//!
//! ```text
//! robot-loop BUNDLE [--hz 30] [--frames N] [--images DIR | --size WxH] [--deadline-ms MS]
//!                   [--device auto|cpu|cuda|cuda:N] [--threads N]
//! ```
//!
//! Frames come from a folder of PNG/JPEG images (decoded and brought to one size before the
//! loop starts, then cycled), or from a synthetic camera (a moving test pattern, `--size`,
//! default 640x480). The loop allocates nothing per frame: the frame buffer, the detector's
//! session and the result messages (fixed-size, `Copy`) are all made before it starts; a
//! full channel drops the result (counted) rather than stall the loop.
//!
//! Exit codes: 0 done, 1 error, 2 usage, 130 stopped by Ctrl-C (after the summary).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tether::detect::{
    Detection, Detector, DetectorOptions, Device, FrameSpec, ImageView, PixelFormat,
};
use tether::runtime::ModelOptions;

/// How many results the channel holds before the loop starts dropping them.
const CHANNEL_DEPTH: usize = 8;
/// Detections carried per result message (the best ones).
const TOP: usize = 4;

struct Args {
    bundle: PathBuf,
    hz: f64,
    frames: Option<u64>,
    images: Option<PathBuf>,
    size: (u32, u32),
    deadline: Option<Duration>,
    device: Device,
    threads: usize,
}

fn usage(why: &str) -> ! {
    eprintln!("error: {why}");
    eprintln!(
        "usage: robot-loop BUNDLE [--hz 30] [--frames N] [--images DIR | --size WxH] [--deadline-ms MS] [--device auto|cpu|cuda|cuda:N] [--threads N]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        bundle: PathBuf::new(),
        hz: 30.0,
        frames: None,
        images: None,
        size: (640, 480),
        deadline: None,
        device: Device::Auto,
        threads: 1,
    };
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--hz" => {
                a.hz = value()
                    .parse()
                    .ok()
                    .filter(|h: &f64| h.is_finite() && *h > 0.0 && *h <= 10_000.0)
                    .unwrap_or_else(|| usage("--hz must be in (0, 10000]"))
            }
            "--frames" => a.frames = Some(value().parse().unwrap_or_else(|_| usage("--frames N"))),
            "--images" => a.images = Some(PathBuf::from(value())),
            "--size" => {
                let v = value();
                a.size = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .filter(|&(w, h)| w > 0 && h > 0)
                    .unwrap_or_else(|| usage("--size WxH, e.g. 640x480"));
            }
            "--deadline-ms" => {
                let ms: f64 = value()
                    .parse()
                    .ok()
                    .filter(|m: &f64| m.is_finite() && *m > 0.0)
                    .unwrap_or_else(|| usage("--deadline-ms must be a positive number"));
                a.deadline = Some(Duration::from_secs_f64(ms / 1e3));
            }
            "--device" => {
                a.device = value()
                    .parse()
                    .unwrap_or_else(|e| usage(&format!("--device: {e}")))
            }
            "--threads" => {
                a.threads = value()
                    .parse()
                    .ok()
                    .filter(|&n: &usize| (1..=1024).contains(&n))
                    .unwrap_or_else(|| usage("--threads must be in 1..=1024"))
            }
            s if s.starts_with('-') => usage(&format!("unknown option {s}")),
            s if a.bundle.as_os_str().is_empty() => a.bundle = PathBuf::from(s),
            s => usage(&format!("unexpected argument {s}")),
        }
    }
    if a.bundle.as_os_str().is_empty() {
        usage("give a BUNDLE");
    }
    a
}

/// Where frames come from.
enum Camera {
    /// Decoded images of one size, cycled.
    Files(Vec<Vec<u8>>),
    /// A moving test pattern.
    Synthetic,
}

impl Camera {
    /// Decode every PNG/JPEG in `dir` (sorted by name) to RGB8 of the first image's size.
    fn from_dir(dir: &Path) -> Result<(Self, (u32, u32)), Box<dyn std::error::Error>> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .map(str::to_ascii_lowercase)
                    .is_some_and(|e| matches!(e.as_str(), "png" | "jpg" | "jpeg"))
            })
            .collect();
        paths.sort();
        let mut frames = Vec::new();
        let mut size = None;
        for p in &paths {
            let img = image::open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .to_rgb8();
            let (w, h) = *size.get_or_insert(img.dimensions());
            let img = if img.dimensions() == (w, h) {
                img
            } else {
                image::imageops::resize(&img, w, h, image::imageops::FilterType::Triangle)
            };
            frames.push(img.into_raw());
        }
        match size {
            Some(s) => Ok((Camera::Files(frames), s)),
            None => Err(format!("{}: no PNG or JPEG images", dir.display()).into()),
        }
    }

    /// Write frame `n` into `buf` (RGB8, `w` x `h`); no allocation.
    fn capture(&self, n: u64, buf: &mut [u8], w: u32) {
        match self {
            Camera::Files(frames) => {
                buf.copy_from_slice(&frames[(n % frames.len() as u64) as usize])
            }
            Camera::Synthetic => {
                let shift = (n * 4) as usize;
                for (i, px) in buf.chunks_exact_mut(3).enumerate() {
                    let (x, y) = (i % w as usize, i / w as usize);
                    px[0] = ((x + shift) % 256) as u8;
                    px[1] = ((y + shift / 2) % 256) as u8;
                    px[2] = ((x + y) % 256) as u8;
                }
            }
        }
    }
}

/// What the loop hands the consumer per frame: fixed size, `Copy`, no allocation.
#[derive(Clone, Copy, Debug)]
struct FrameResult {
    frame: u64,
    /// Time inside `detect`.
    latency: Duration,
    /// From the frame's release to its result (waiting included).
    response: Duration,
    missed: bool,
    count: usize,
    top: [Option<Detection>; TOP],
}

/// The consumer (a planner): reads results until the loop closes the channel; prints one
/// line a second. Returns how many results it consumed.
fn consume(rx: Receiver<FrameResult>, labels: Vec<String>, every: u64) -> u64 {
    let mut n = 0;
    for r in rx {
        n += 1;
        if r.frame.is_multiple_of(every) {
            let best = r.top[0].map_or_else(
                || "nothing".to_string(),
                |d| {
                    format!(
                        "{} {:.2}",
                        labels
                            .get(usize::from(d.class_id))
                            .map_or("?", String::as_str),
                        d.score
                    )
                },
            );
            println!(
                "frame {:>6}: {:>3} objects (best: {best}), {:.2} ms, {:.2} ms from release{}",
                r.frame,
                r.count,
                r.latency.as_secs_f64() * 1e3,
                r.response.as_secs_f64() * 1e3,
                if r.missed { ", DEADLINE MISSED" } else { "" }
            );
        }
    }
    n
}

/// Wait until `t`, waking early when `stop` is set (the Ctrl-C handler unparks us).
fn wait_until(t: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= t || stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::park_timeout(t - now);
    }
}

fn main() -> ExitCode {
    let args = parse_args();
    match run(&args) {
        Ok(true) => ExitCode::from(130),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The loop; `Ok(true)` when stopped by Ctrl-C.
fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let (camera, (w, h)) = match &args.images {
        Some(dir) => Camera::from_dir(dir)?,
        None => (Camera::Synthetic, args.size),
    };
    let spec = FrameSpec::packed(w, h, PixelFormat::Rgb8);
    let t = Instant::now();
    let mut detector = Detector::open(
        &args.bundle,
        &DetectorOptions {
            device: args.device,
            frame: Some(spec),
            model: ModelOptions {
                cpu_threads: args.threads,
                ..ModelOptions::default()
            },
            ..DetectorOptions::default()
        },
    )?;
    println!(
        "loaded {} in {:.0} ms: {} on {}, frames {w}x{h}",
        args.bundle.display(),
        t.elapsed().as_secs_f64() * 1e3,
        detector.engine(),
        detector.model().device()
    );

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        let main_thread = std::thread::current();
        ctrlc::set_handler(move || {
            stop.store(true, Ordering::SeqCst);
            main_thread.unpark();
        })?;
    }
    let period = Duration::from_secs_f64(1.0 / args.hz);
    let deadline = args.deadline.unwrap_or(period);
    let (tx, rx) = sync_channel::<FrameResult>(CHANNEL_DEPTH);
    let labels = detector.labels().to_vec();
    let every = (args.hz.round() as u64).max(1);
    let consumer = std::thread::Builder::new()
        .name("planner".into())
        .spawn(move || consume(rx, labels, every))?;

    let mut frame = vec![0u8; spec.stride * h as usize];
    // 1 us .. 1 h, 3 significant digits: fixed memory however long the loop runs.
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let (mut n, mut missed, mut skipped, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    println!(
        "running at {} Hz, deadline {:.1} ms (Ctrl-C to stop)",
        args.hz,
        deadline.as_secs_f64() * 1e3
    );
    let start = Instant::now();
    let mut k = 0u64;
    let mut failure = None;
    while args.frames.is_none_or(|f| n < f) {
        let mut release = start + period.mul_f64(k as f64);
        wait_until(release, &stop);
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let now = Instant::now();
        if now >= release + period {
            // More than a period late: the camera has moved on; take its newest frame.
            let newest = ((now - start).as_secs_f64() / period.as_secs_f64()).floor() as u64;
            skipped += newest - k;
            k = newest;
            release = start + period.mul_f64(k as f64);
        }
        camera.capture(k, &mut frame, w);
        let image = ImageView::new(&frame, w, h, PixelFormat::Rgb8)?;
        let t0 = Instant::now();
        let result = detector.detect_prepared(&image).map(|dets| {
            let mut top = [None; TOP];
            for (slot, d) in top.iter_mut().zip(dets.iter()) {
                *slot = Some(*d);
            }
            (dets.len(), top)
        });
        let done = Instant::now();
        let (count, top) = match result {
            Ok(r) => r,
            Err(e) => {
                // A `Copy` error: report it after the summary and stop.
                failure = Some(e);
                break;
            }
        };
        let latency = done - t0;
        let response = done - release;
        let late = response > deadline;
        missed += u64::from(late);
        let _ = hist.record((latency.as_micros() as u64).max(1));
        let msg = FrameResult {
            frame: k,
            latency,
            response,
            missed: late,
            count,
            top,
        };
        if let Err(TrySendError::Full(_)) = tx.try_send(msg) {
            dropped += 1;
        }
        n += 1;
        k += 1;
    }
    let wall = start.elapsed();
    drop(tx);
    let consumed = consumer
        .join()
        .map_err(|_| "the consumer thread panicked")?;
    let interrupted = stop.load(Ordering::SeqCst);
    let ms = |us: u64| us as f64 / 1e3;
    println!(
        "summary: {n} frames in {:.1} s at {} Hz{}: latency p50 {:.2} / p99 {:.2} / p99.9 {:.2} / max {:.2} ms; \
         {missed} missed the {:.1} ms deadline, {skipped} frames skipped, {dropped} results dropped (channel full), {consumed} consumed",
        wall.as_secs_f64(),
        args.hz,
        if interrupted {
            " (stopped by Ctrl-C)"
        } else {
            ""
        },
        ms(hist.value_at_quantile(0.5)),
        ms(hist.value_at_quantile(0.99)),
        ms(hist.value_at_quantile(0.999)),
        ms(hist.max()),
        deadline.as_secs_f64() * 1e3,
    );
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(interrupted)
}
