//! The detection pipeline on a GPU, through the runtime's device session, against the host
//! implementation — and its graphs and its hot path.
//!
//! Without a CUDA driver and device (CI) every test is reported *ignored* with the reason (a
//! libtest-mimic harness decides at run time), never as a pass. On the GPU host they run via
//! `runtime/gpu/h200-run.sh`.
//!
//! * exactness: the letterbox kernel equals the host stage bit for bit over every pixel
//!   format and odd strides; the decode + sort + NMS kernels equal the host stage exactly
//!   (same record bytes) over random outputs with heavy overlap and ties, over more
//!   candidates than any fixed capacity (a 2560x2560 input's 134,400 anchors), and with NaN
//!   and infinite values, on every run;
//! * graphs: with a capture-safe network the whole frame (upload, letterbox, network, post,
//!   download) is one graph, checked at load on poisoned buffers; copy and mapped staging
//!   give identical results under every sync policy;
//! * the hot path: >= 10,000 frames (TETHER_HOT_FRAMES) with zero heap allocations on the
//!   calling thread (a counting global allocator) and no device memory growth;
//! * real models: `Detector` on the GPU against `Detector` on the CPU, and the field cases
//!   (`cells_2560.png`, `naninf.onnx`) the same on every engine and every run; the full
//!   pipeline on YOLOv8n 320 with the engine selection picks (the native engine):
//!   `TETHER_REAL_HOT_FRAMES` frames (default 10,000), zero heap allocations, no device
//!   memory change.

use std::path::PathBuf;
use std::sync::Arc;

use tether_detect::output::{DetectOutput, parse};
use tether_detect::stages::{letterbox_pipeline, pipeline, post_pipeline};
use tether_detect::{
    DetectConfig, Detections, Detector, DetectorOptions, Device, FrameSpec, ImageView, PixelFormat,
    Postprocessor, Preprocessor,
};
use tether_runtime::backend::{
    Bindings, CaptureSafety, DeviceExecutor, DevicePlan, EngineKind, Enqueue, IoSpec, PlanMemory,
    PrepareError, RunError, WorkspaceSpec,
};
use tether_runtime::cuda::{
    ArenaPlan, Context, DeviceArena, DevicePtr, DeviceRegion, Stream, SyncPolicy, skip_reason,
};
use tether_runtime::session::{ExecMode, MappedIo, SessionOptions};
use tether_runtime::{DType, IoMode, Plan, Session, TensorSpec};
use tether_testkit::asset;
use tether_testkit::{GpuTests, ThreadAllocCounter, count_allocs};
use zerocopy::FromBytes;

// ------------------------------------------------------------------ allocation counter

#[global_allocator]
static GLOBAL: ThreadAllocCounter = ThreadAllocCounter;

// ------------------------------------------------------------------ helpers

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn field_case(name: &str) -> PathBuf {
    let p = std::env::var_os("TETHER_FIELD_CASES")
        .map_or_else(|| repo_root().join("tests/field"), PathBuf::from)
        .join(name);
    assert!(p.is_file(), "missing field case {}", p.display());
    p
}

fn ctx() -> Context {
    Context::new(0, SyncPolicy::Spin).expect("CUDA context")
}

fn options(ctx: &Context) -> SessionOptions {
    SessionOptions {
        context: Some(ctx.clone()),
        ..SessionOptions::default()
    }
}

fn cfg(w: u32, h: u32, c: u32, n: u32) -> DetectConfig {
    DetectConfig::ultralytics(w, h, c, n)
}

fn random_frame(rng: &mut Rng, spec: &FrameSpec) -> Vec<u8> {
    let ch = spec.format.channels();
    let mut f = vec![0u8; spec.bytes()];
    for y in 0..spec.height as usize {
        for x in 0..spec.width as usize {
            for k in 0..ch {
                let base = ((x * 3 + y * 5 + k * 60) % 256) as u64;
                f[y * spec.stride + x * ch + k] = ((base + rng.below(24)) % 256) as u8;
            }
        }
    }
    f
}

/// A YOLOv8-like raw output with clusters of overlapping boxes, quantised scores (exact ties
/// are common) and many classes, in network pixels.
fn synthetic_output(
    rng: &mut Rng,
    c: usize,
    n: usize,
    in_w: f32,
    in_h: f32,
    density: f32,
) -> Vec<f32> {
    let mut v = vec![0f32; (4 + c) * n];
    let centres: Vec<(f32, f32)> = (0..24).map(|_| (rng.f() * in_w, rng.f() * in_h)).collect();
    for a in 0..n {
        let (cx, cy) = centres[rng.below(centres.len() as u64) as usize];
        v[a] = cx + (rng.f() - 0.5) * 12.0;
        v[n + a] = cy + (rng.f() - 0.5) * 12.0;
        v[2 * n + a] = 8.0 + rng.f() * 60.0;
        v[3 * n + a] = 8.0 + rng.f() * 60.0;
        for k in 0..c {
            v[(4 + k) * n + a] = rng.f() * 0.2;
        }
        if rng.f() < density {
            let k = rng.below(c as u64) as usize;
            v[(4 + k) * n + a] = 0.25 + (rng.below(64) as f32) / 100.0;
        }
    }
    v
}

fn as_bytes(v: &[f32]) -> &[u8] {
    zerocopy::IntoBytes::as_bytes(v)
}

/// The host post-processing's record for `raw`.
fn host_record(c: &DetectConfig, spec: FrameSpec, raw: &[f32]) -> Vec<u8> {
    let (s, raw_id, result) = post_pipeline(c, spec, false).unwrap();
    let mut sess = Session::new(s, &SessionOptions::default()).unwrap();
    sess.input_mut(raw_id)
        .unwrap()
        .copy_from_slice(as_bytes(raw));
    sess.run().unwrap();
    sess.output(result).unwrap().to_vec()
}

fn record_summary(bytes: &[u8]) -> (u32, u32, u32) {
    let (o, _) = DetectOutput::ref_from_prefix(bytes).unwrap();
    (o.count, o.candidates, o.nonfinite)
}

fn assert_same_record(gpu: &[u8], cpu: &[u8], what: &str) {
    let (g, _) = DetectOutput::ref_from_prefix(gpu).unwrap();
    let (c, _) = DetectOutput::ref_from_prefix(cpu).unwrap();
    assert_eq!(
        (g.count, g.candidates, g.nonfinite, g.magic),
        (c.count, c.candidates, c.nonfinite, c.magic),
        "{what}: header"
    );
    for i in 0..g.count as usize {
        let (a, b) = (g.det[i], c.det[i]);
        assert_eq!(
            [a.x1, a.y1, a.x2, a.y2, a.score].map(f32::to_bits),
            [b.x1, b.y1, b.x2, b.y2, b.score].map(f32::to_bits),
            "{what}: detection {i}: {a:?} vs {b:?}"
        );
        assert_eq!(a.class_id, b.class_id, "{what}: detection {i}");
    }
}

// ------------------------------------------------------------------ a capture-safe network

/// A device plan whose "network" copies a recorded output into its output region (one
/// device-to-device copy node): a capture-safe stand-in for a network, local to this test.
struct ReplayPlan {
    io: IoSpec,
    recorded: DeviceRegion,
    _memory: DeviceArena,
}

impl ReplayPlan {
    fn new(ctx: &Context, c: &DetectConfig, raw: &[f32]) -> Arc<Self> {
        let mut plan = ArenaPlan::new();
        let id = plan.add("recorded output", raw.len() * 4).unwrap();
        let arena = DeviceArena::new(ctx, plan).unwrap();
        let s = Stream::new(ctx, SyncPolicy::Spin).unwrap();
        // SAFETY: the region holds raw.len() f32; synchronised before raw is released.
        unsafe { s.memcpy_htod(arena.ptr(id), raw.as_ptr().cast(), raw.len() * 4) }.unwrap();
        s.synchronize().unwrap();
        let (w, h) = (c.input_width as usize, c.input_height as usize);
        Arc::new(ReplayPlan {
            io: IoSpec {
                inputs: vec![TensorSpec {
                    name: "images".into(),
                    mode: IoMode::Input,
                    dtype: DType::F32,
                    shape: vec![1, 3, h, w],
                }],
                outputs: vec![TensorSpec {
                    name: "output0".into(),
                    mode: IoMode::Output,
                    dtype: DType::F32,
                    shape: vec![1, 4 + c.num_classes as usize, c.num_anchors as usize],
                }],
            },
            recorded: arena.region(id),
            _memory: arena,
        })
    }
}

struct ReplayExecutor {
    recorded: DeviceRegion,
    out: Option<DevicePtr>,
}

impl DevicePlan for ReplayPlan {
    fn kind(&self) -> EngineKind {
        EngineKind::TensorRt
    }
    fn io(&self) -> &IoSpec {
        &self.io
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn workspace(&self) -> WorkspaceSpec {
        WorkspaceSpec {
            bytes: 0,
            align: 256,
        }
    }
    fn memory(&self) -> PlanMemory {
        PlanMemory::default()
    }
    fn capture_safety(&self) -> CaptureSafety {
        CaptureSafety::Safe
    }
    fn executor(&self, _ctx: &Context) -> Result<Box<dyn DeviceExecutor>, PrepareError> {
        Ok(Box::new(ReplayExecutor {
            recorded: self.recorded,
            out: None,
        }))
    }
}

impl DeviceExecutor for ReplayExecutor {
    unsafe fn bind(&mut self, b: &Bindings<'_>) -> Result<(), RunError> {
        self.out = Some(b.outputs[0].ptr);
        Ok(())
    }
    fn enqueue(&mut self, stream: &Stream, _mode: Enqueue) -> Result<(), RunError> {
        let out = self.out.ok_or(RunError::NotBound {
            engine: EngineKind::TensorRt,
        })?;
        // SAFETY: both regions hold the output's bytes (plan construction, session binding).
        unsafe { stream.memcpy_dtod(out, self.recorded.ptr, self.recorded.bytes) }?;
        Ok(())
    }
}

// ------------------------------------------------------------------ tests

fn preprocessing_equals_the_cpu_bit_for_bit() {
    let ctx = ctx();
    let mut rng = Rng(0x5eed);
    let c = cfg(320, 256, 3, 1680);
    let cases = [
        FrameSpec::packed(1920, 1080, PixelFormat::Rgb8),
        FrameSpec::packed(640, 480, PixelFormat::Bgr8),
        FrameSpec::packed(333, 517, PixelFormat::Rgba8),
        FrameSpec {
            width: 101,
            height: 77,
            format: PixelFormat::Gray8,
            stride: 128,
        },
        FrameSpec::packed(160, 90, PixelFormat::Rgb8), // upscaled
    ];
    for spec in cases {
        let frame = random_frame(&mut rng, &spec);
        let (s, f, t) = letterbox_pipeline(&c, spec, true).unwrap();
        let mut gpu = Session::new(s, &options(&ctx)).unwrap();
        gpu.input_mut(f).unwrap().copy_from_slice(&frame);
        gpu.run().unwrap();
        let mut cpu = vec![0f32; 3 * 320 * 256];
        let view =
            ImageView::with_stride(&frame, spec.width, spec.height, spec.stride, spec.format)
                .unwrap();
        Preprocessor::new(320, 256)
            .run(&view, c.mean, c.std, c.pad_value, &mut cpu)
            .unwrap();
        assert_eq!(
            gpu.output(t).unwrap(),
            as_bytes(&cpu),
            "{spec:?}: letterbox differs"
        );
        println!("letterbox {spec:?}: bit-identical to the host stage");
    }
}

fn postprocessing_equals_the_cpu_exactly() {
    let ctx = ctx();
    let mut rng = Rng(0xfeed);
    let spec = FrameSpec::packed(1280, 720, PixelFormat::Rgb8);
    // (classes, anchors, density): few, many, heavy overlap, beyond any fixed capacity.
    for (k, (classes, anchors, density)) in [
        (3u32, 2100u32, 0.05f32),
        (80, 8400, 0.2),
        (1, 21504, 0.9),
        (2, 134_400, 0.5),
    ]
    .into_iter()
    .enumerate()
    {
        let (w, h) = if anchors > 100_000 {
            (2560, 2560)
        } else {
            (640, 640)
        };
        let c = cfg(w, h, classes, anchors);
        let (s, raw_id, result) = post_pipeline(&c, spec, true).unwrap();
        let mut gpu = Session::new(s, &options(&ctx)).unwrap();
        for round in 0..3 {
            let mut raw = synthetic_output(
                &mut rng,
                classes as usize,
                anchors as usize,
                w as f32,
                h as f32,
                density,
            );
            if round == 2 {
                // Non-finite values in every role: boxes, winning and losing scores.
                let n = anchors as usize;
                for (i, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY]
                    .into_iter()
                    .enumerate()
                {
                    raw[7 * i + 1] = v; // cx
                    raw[4 * n + 7 * i + 2] = v; // class 0 score
                    raw[3 * n + 7 * i + 3] = v; // h
                }
            }
            gpu.input_mut(raw_id)
                .unwrap()
                .copy_from_slice(as_bytes(&raw));
            gpu.run().unwrap();
            let cpu = host_record(&c, spec, &raw);
            let what = format!("case {k} ({classes} classes, {anchors} anchors) round {round}");
            assert_same_record(gpu.output(result).unwrap(), &cpu, &what);
            let (count, cands, nonfinite) = record_summary(&cpu);
            if round == 2 {
                assert!(nonfinite > 0, "{what}: non-finite anchors must be counted");
            }
            println!(
                "{what}: {count} kept of {cands} candidates ({nonfinite} non-finite), GPU == CPU"
            );
        }
    }
}

/// One frame through a full device session with the capture-safe network.
fn replay_session(
    ctx: &Context,
    mapped: MappedIo,
    sync: SyncPolicy,
    spec: FrameSpec,
) -> (
    Session,
    tether_detect::stages::DetectRegions,
    Vec<u8>,
    DetectConfig,
    FrameSpec,
) {
    let mut rng = Rng(0xabc);
    let c = cfg(640, 640, 18, 8400);
    let raw = synthetic_output(&mut rng, 18, 8400, 640.0, 640.0, 0.1);
    let plan = Plan::Device(ReplayPlan::new(ctx, &c, &raw));
    let (s, regions) = pipeline(&c, &plan, spec).unwrap();
    let sess = Session::new(
        s,
        &SessionOptions {
            context: Some(ctx.clone()),
            mapped,
            sync,
            ..SessionOptions::default()
        },
    )
    .unwrap();
    let cpu = host_record(&c, spec, &raw);
    (sess, regions, cpu, c, spec)
}

fn a_capture_safe_network_makes_the_whole_frame_one_graph() {
    let ctx = ctx();
    let (mut sess, r, cpu, _, spec) = replay_session(&ctx, MappedIo::Never, SyncPolicy::Spin, hd());
    let d = sess.device().expect("device session");
    let (mode, note) = d.exec_mode();
    println!("{mode:?}: {note}; budget {:?}", d.memory_budget());
    assert_eq!(mode, ExecMode::WholeGraph, "{note}");
    assert!(note.contains("matches the eager run"), "{note}");
    let frame = random_frame(&mut Rng(1), &spec);
    sess.input_mut(r.frame).unwrap().copy_from_slice(&frame);
    sess.run().unwrap();
    assert_same_record(sess.output(r.result).unwrap(), &cpu, "whole-graph run");
}

fn copy_and_mapped_staging_agree_under_every_sync_policy() {
    let ctx = ctx();
    let mut first: Option<Vec<u8>> = None;
    for mapped in [MappedIo::Never, MappedIo::Always, MappedIo::Outputs] {
        for sync in [SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::Blocking] {
            let (mut sess, r, cpu, _, spec) = replay_session(&ctx, mapped, sync, hd());
            let d = sess.device().unwrap();
            assert_eq!(d.is_mapped(), mapped != MappedIo::Never);
            let b = d.memory_budget();
            // Outputs only: the result record mapped, the frame (much larger) copied.
            let want_mapped = match mapped {
                MappedIo::Always => b.pinned,
                MappedIo::Outputs => std::mem::size_of::<DetectOutput>(),
                _ => 0,
            };
            assert_eq!(b.mapped, want_mapped, "{mapped:?}: {b:?}");
            let frame = random_frame(&mut Rng(2), &spec);
            sess.input_mut(r.frame).unwrap().copy_from_slice(&frame);
            sess.run().unwrap();
            let out = sess.output(r.result).unwrap().to_vec();
            assert_same_record(&out, &cpu, &format!("{mapped:?} {sync:?}"));
            match &first {
                None => first = Some(out),
                Some(f) => assert_eq!(&out, f, "{mapped:?} {sync:?}"),
            }
            println!("{mapped:?} staging, {sync:?}: same record");
        }
    }
}

/// The camera frame of the synthetic-network tests: 1280x720 RGB.
fn hd() -> FrameSpec {
    FrameSpec::packed(1280, 720, PixelFormat::Rgb8)
}

/// The hot path's camera frame: `TETHER_HOT_FRAME=WxH` (RGB), default [`hd`]. The soak uses a
/// VGA frame so that 1,000,000 frames fit in one device call.
fn hot_frame() -> FrameSpec {
    std::env::var("TETHER_HOT_FRAME")
        .ok()
        .and_then(|v| {
            let (w, h) = v.split_once('x')?;
            Some(FrameSpec::packed(
                w.parse().ok()?,
                h.parse().ok()?,
                PixelFormat::Rgb8,
            ))
        })
        .unwrap_or_else(hd)
}

fn hot_frames() -> usize {
    std::env::var("TETHER_HOT_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn hot_path(mapped: MappedIo) {
    let ctx = ctx();
    let (mut sess, r, cpu, _, spec) = replay_session(&ctx, mapped, SyncPolicy::Spin, hot_frame());
    let frame = random_frame(&mut Rng(3), &spec);
    let mut dets = Detections::new();
    let frames = hot_frames();
    sess.input_mut(r.frame).unwrap().copy_from_slice(&frame);
    sess.run().unwrap();
    // Per-frame wall time in ns, preallocated (the loop itself must not allocate).
    let mut ns = vec![0u32; frames];
    let (free_before, _) = ctx.mem_info().unwrap();
    let (res, allocs) = count_allocs(|| -> Result<(), String> {
        for slot in ns.iter_mut() {
            let t = std::time::Instant::now();
            sess.input_mut(r.frame)
                .map_err(|e| e.to_string())?
                .copy_from_slice(&frame);
            sess.run().map_err(|e| e.to_string())?;
            parse(sess.output(r.result).map_err(|e| e.to_string())?, &mut dets)
                .map_err(|e| e.to_string())?;
            *slot = t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
        }
        Ok(())
    });
    res.unwrap();
    let (free_after, _) = ctx.mem_info().unwrap();
    assert_same_record(sess.output(r.result).unwrap(), &cpu, "last hot-path frame");
    // Latency of the first and the last tenth: p50 and p99.9 (stable over the run).
    let tenth = (frames / 10).max(1);
    let pct = |v: &[u32], q: f64| -> f64 {
        let mut v = v.to_vec();
        v.sort_unstable();
        f64::from(v[((v.len() - 1) as f64 * q).round() as usize]) / 1e3
    };
    let (first, last) = (&ns[..tenth], &ns[frames - tenth..]);
    println!(
        "hot path ({mapped:?} staging, {}x{} frames): {frames} frames in {:.1} s, {allocs} heap allocations, device free {free_before} -> {free_after}; first 10 %: p50 {:.1} us p99.9 {:.1} us; last 10 %: p50 {:.1} us p99.9 {:.1} us",
        spec.width,
        spec.height,
        ns.iter().map(|&v| f64::from(v)).sum::<f64>() / 1e9,
        pct(first, 0.5),
        pct(first, 0.999),
        pct(last, 0.5),
        pct(last, 0.999)
    );
    assert!(
        pct(last, 0.999) <= 2.0 * pct(first, 0.999) + 50.0,
        "p99.9 drifted over {frames} frames"
    );
    assert_eq!(allocs, 0, "heap allocations on the hot path");
    assert_eq!(
        free_before, free_after,
        "device memory changed over {frames} frames"
    );
}

fn build_bundle(onnx: &std::path::Path, size: Option<(u32, u32)>) -> PathBuf {
    let bytes = std::fs::read(onnx).unwrap();
    let (w, _) = tether_detect::recipe::build(
        &bytes,
        &tether_detect::recipe::BuildOptions {
            common: tether_detect::recipe::BuildCommon::named("gpu-test"),
            input_size: size,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    let p = std::env::temp_dir().join(format!(
        "tether-gpu-{}-{}.bundle",
        std::process::id(),
        onnx.file_stem().unwrap().to_string_lossy()
    ));
    w.write(&p).unwrap();
    p
}

fn rgb(path: &std::path::Path) -> (Vec<u8>, u32, u32) {
    let img = image::open(path).unwrap().to_rgb8();
    let (w, h) = img.dimensions();
    (img.into_raw(), w, h)
}

/// `Detector` on the GPU (whatever engine selection picks) against `Detector` on the CPU.
fn gpu_detector_matches_cpu(model: &str, image: &str, size: Option<(u32, u32)>, score_tol: f32) {
    gpu_detector_matches_cpu_staged(model, image, size, score_tol, MappedIo::Auto);
}

/// As [`gpu_detector_matches_cpu`], with the GPU session's staging `mapped`.
fn gpu_detector_matches_cpu_staged(
    model: &str,
    image: &str,
    size: Option<(u32, u32)>,
    score_tol: f32,
    mapped: MappedIo,
) {
    let bundle = build_bundle(&asset(model), size);
    let (px, w, h) = rgb(&asset(image));
    let view = ImageView::new(&px, w, h, PixelFormat::Rgb8).unwrap();
    let mut cpu = Detector::open(
        &bundle,
        &DetectorOptions {
            device: Device::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let mut model_options = tether_runtime::ModelOptions::default();
    model_options.session.mapped = mapped;
    let mut gpu = Detector::open(
        &bundle,
        &DetectorOptions {
            device: Device::Cuda(0),
            model: model_options,
            ..Default::default()
        },
    )
    .unwrap();
    let want = cpu.detect(&view).unwrap().clone();
    for run in 0..2 {
        let got = gpu.detect(&view).unwrap().clone();
        println!(
            "{model} on {image}: {} engine, {mapped:?} staging, run {run}: {} vs {} detections",
            gpu.engine(),
            got.len(),
            want.len()
        );
        assert_eq!(got.len(), want.len(), "{model}: detection count");
        for (i, (g, c)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.class_id, c.class_id, "{model}: detection {i}");
            assert!(
                (g.score - c.score).abs() <= score_tol,
                "{model}: detection {i}: {g:?} vs {c:?}"
            );
            let d = [
                g.bbox.x1 - c.bbox.x1,
                g.bbox.y1 - c.bbox.y1,
                g.bbox.x2 - c.bbox.x2,
                g.bbox.y2 - c.bbox.y2,
            ];
            assert!(
                d.iter().all(|v| v.abs() <= 0.5),
                "{model}: detection {i}: {g:?} vs {c:?}"
            );
        }
    }
    // The GPU post-processing on the GPU network's own output equals the host stage exactly.
    let regions = gpu.regions().unwrap();
    let c = *gpu.config();
    let mut raw = vec![0u8; (4 + c.num_classes as usize) * c.num_anchors as usize * 4];
    gpu.session_mut()
        .unwrap()
        .read_region(regions.raw, &mut raw)
        .unwrap();
    let raw: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    let mut host = Postprocessor::new(c.num_classes as usize, c.num_anchors as usize);
    let mut host_dets = Detections::new();
    host.run(
        &raw,
        &gpu.letterbox().unwrap(),
        c.score_threshold,
        c.iou_threshold,
        c.max_detections as usize,
        &mut host_dets,
    )
    .unwrap();
    assert_eq!(
        &host_dets,
        gpu.detections(),
        "{model}: GPU post != host post on the GPU output"
    );
    let _ = std::fs::remove_file(&bundle);
}

/// The field cases: many candidates (cells_2560) and non-finite outputs (naninf): the GPU
/// gives the CPU's detections, in the same order, on every run.
fn field_cases_are_equal_on_every_engine_and_run() {
    for (model, image, size) in [
        ("dyn.onnx", "cells_2560.png", Some((2560, 2560))),
        ("naninf.onnx", "red_square.png", None),
    ] {
        let bundle = build_bundle(&field_case(model), size);
        let (px, w, h) = rgb(&field_case(image));
        let view = ImageView::new(&px, w, h, PixelFormat::Rgb8).unwrap();
        let mut cpu = Detector::open(
            &bundle,
            &DetectorOptions {
                device: Device::Cpu,
                ..Default::default()
            },
        )
        .unwrap();
        let mut gpu = Detector::open(
            &bundle,
            &DetectorOptions {
                device: Device::Cuda(0),
                ..Default::default()
            },
        )
        .unwrap();
        let want = cpu.detect(&view).unwrap().clone();
        let want_stats = cpu.post_stats();
        for run in 0..3 {
            let got = gpu.detect(&view).unwrap().clone();
            // The same detections in the same order (classes and boxes exactly: the boxes
            // here are whole cells); scores to 1e-4, as the engines' arithmetic differs in
            // the last bits (cuDNN's convolution algorithms vs tract's).
            assert_eq!(got.len(), want.len(), "{model} run {run}: GPU != CPU");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.class_id == w.class_id
                        && g.bbox == w.bbox
                        && (g.score - w.score).abs() <= 1e-4,
                    "{model} run {run}, detection {i}: GPU {g:?} != CPU {w:?}"
                );
            }
            assert_eq!(gpu.post_stats(), want_stats, "{model} run {run}");
        }
        println!(
            "{model} on {image}: {} detections, {:?}, GPU == CPU (scores to 1e-4) on 3 runs",
            want.len(),
            want_stats
        );
        let _ = std::fs::remove_file(&bundle);
    }
}

/// The full pipeline on a real model with the engine selection picks on this GPU (the native
/// engine where it lowers the network): `TETHER_REAL_HOT_FRAMES` frames (default 10,000)
/// through `Detector::detect`, then as many on the staged frame (`Detector::detect_staged`),
/// zero heap allocations and no device-memory change on either.
fn real_model_hot_path(model: &str, image: &str, size: Option<(u32, u32)>) {
    let bundle = build_bundle(&asset(model), size);
    let (px, w, h) = rgb(&asset(image));
    let view = ImageView::new(&px, w, h, PixelFormat::Rgb8).unwrap();
    let mut gpu = Detector::open(
        &bundle,
        &DetectorOptions {
            device: Device::Cuda(0),
            ..Default::default()
        },
    )
    .unwrap();
    let want = gpu.detect(&view).unwrap().clone();
    let frames: usize = std::env::var("TETHER_REAL_HOT_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let ctx = ctx();
    let (free_before, _) = ctx.mem_info().unwrap();
    let t = std::time::Instant::now();
    let (res, allocs) = count_allocs(|| -> Result<usize, String> {
        let mut kept = 0;
        for _ in 0..frames {
            kept = gpu.detect(&view).map_err(|e| e.to_string())?.len();
        }
        Ok(kept)
    });
    let secs = t.elapsed().as_secs_f64();
    let kept = res.unwrap();
    let (free_after, _) = ctx.mem_info().unwrap();
    println!(
        "{model} on {image}, full pipeline on the {} engine: {frames} frames in {secs:.1} s ({:.3} ms/frame), {allocs} heap allocations, device free {free_before} -> {free_after}, {kept} detections",
        gpu.engine(),
        secs * 1e3 / frames as f64
    );
    assert_eq!(
        gpu.detections(),
        &want,
        "the last frame's detections changed"
    );
    assert_eq!(allocs, 0, "heap allocations on the hot path");
    assert_eq!(
        free_before, free_after,
        "device memory changed over {frames} frames"
    );
    // Zero-copy ingestion: the frame left in the staging, run in place `frames` times
    // (`detect_staged`): the same detections, no allocation, no device-memory change.
    let t = std::time::Instant::now();
    let (res, allocs) = count_allocs(|| -> Result<usize, String> {
        let mut kept = 0;
        for _ in 0..frames {
            kept = gpu.detect_staged().map_err(|e| e.to_string())?.len();
        }
        Ok(kept)
    });
    let secs = t.elapsed().as_secs_f64();
    res.unwrap();
    let (free_staged, _) = ctx.mem_info().unwrap();
    println!(
        "{model} on {image}, staged frames: {frames} frames in {secs:.1} s ({:.3} ms/frame), {allocs} heap allocations, device free {free_after} -> {free_staged}",
        secs * 1e3 / frames as f64
    );
    assert_eq!(gpu.detections(), &want, "staged detections differ");
    assert_eq!(allocs, 0, "heap allocations on the staged path");
    assert_eq!(free_after, free_staged, "device memory changed (staged)");
    // The staged run reads what is written there: a black frame changes the result, the
    // image written back row by row restores it.
    gpu.staging_mut().unwrap().fill(0);
    let black = gpu.detect_staged().unwrap().clone();
    assert_ne!(black, want, "the black frame written in place was not used");
    let row = w as usize * 3;
    for (dst, src) in gpu
        .staging_mut()
        .unwrap()
        .chunks_mut(row)
        .zip(px.chunks(row))
    {
        dst.copy_from_slice(src);
    }
    assert_eq!(gpu.detect_staged().unwrap(), &want, "frame written back");
    // The bare launch (`bench --floor`) runs the whole captured frame on what is staged:
    // on a black frame its result record holds the black frame's detections.
    gpu.staging_mut().unwrap().fill(0);
    let result = gpu.regions().unwrap().result;
    let session = gpu.session_mut().unwrap();
    session
        .device_mut()
        .unwrap()
        .launch_graphs_and_wait()
        .unwrap();
    let mut floor_dets = Detections::new();
    parse(session.output(result).unwrap(), &mut floor_dets).unwrap();
    assert_eq!(
        floor_dets, black,
        "the bare launch did not run the staged frame"
    );
    let _ = std::fs::remove_file(&bundle);
}

fn main() {
    let _ = env_logger::builder().is_test(true).try_init();
    GpuTests::new(skip_reason())
        .test(
            "preprocessing_equals_the_cpu_bit_for_bit",
            preprocessing_equals_the_cpu_bit_for_bit,
        )
        .test(
            "postprocessing_equals_the_cpu_exactly",
            postprocessing_equals_the_cpu_exactly,
        )
        .test(
            "a_capture_safe_network_makes_the_whole_frame_one_graph",
            a_capture_safe_network_makes_the_whole_frame_one_graph,
        )
        .test(
            "copy_and_mapped_staging_agree_under_every_sync_policy",
            copy_and_mapped_staging_agree_under_every_sync_policy,
        )
        .test("hot_path_copy_staging_allocates_nothing", || {
            hot_path(MappedIo::Never)
        })
        .test("hot_path_mapped_staging_allocates_nothing", || {
            hot_path(MappedIo::Always)
        })
        .test("hot_path_mapped_outputs_allocates_nothing", || {
            hot_path(MappedIo::Outputs)
        })
        .test("real_model::nudenet_320n_gpu_matches_cpu", || {
            gpu_detector_matches_cpu("320n.onnx", "astronaut.png", Some((320, 320)), 2e-4)
        })
        .test(
            "real_model::nudenet_320n_mapped_outputs_matches_cpu",
            || {
                gpu_detector_matches_cpu_staged(
                    "320n.onnx",
                    "astronaut.png",
                    Some((320, 320)),
                    2e-4,
                    MappedIo::Outputs,
                )
            },
        )
        .test("real_model::doclaynet_gpu_matches_cpu", || {
            gpu_detector_matches_cpu("yolov8n-doclaynet.onnx", "page.png", None, 2e-4)
        })
        .test(
            "real_model::nudenet_320n_hot_path_allocates_nothing",
            || real_model_hot_path("320n.onnx", "astronaut.png", Some((320, 320))),
        )
        .test(
            "real_model::field_cases_are_equal_on_every_engine_and_run",
            field_cases_are_equal_on_every_engine_and_run,
        )
        .run()
}
