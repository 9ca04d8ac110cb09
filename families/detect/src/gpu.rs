//! The detection pipeline on an NVIDIA GPU: letterbox → engine → decode + NMS, prepared once
//! at load, then one host-to-device copy, one graph launch and one device-to-host copy per
//! frame, with no heap or device allocation.
//!
//! # What load prepares (all of it, once)
//! * device, primary context (bound on whichever thread runs a frame), one non-blocking stream
//!   with the chosen [`SyncPolicy`];
//! * the kernels of `kernels/detect.cu`, embedded ahead of time (`kernels/bin/`): the CUDA 13
//!   fatbin (sm_87/90/100/110) on a 13.x driver, the CUDA 12.9 cubins (sm_87/90/100) on a 12.x
//!   driver (JetPack 6); NVRTC from the embedded source only when
//!   [`GpuOptions::allow_nvrtc`] is set and the crate is built with feature `nvrtc`;
//! * one device arena holding every buffer ([`ArenaPlan`]: frame, input tensor, raw output,
//!   post-processing scratch, output), page-locked staging for the frame and the result; on
//!   an integrated GPU (or with [`MappedIo::Always`]) the staging is *mapped*: the kernels read
//!   the frame and write the result in place, and the two copies disappear;
//! * the engine, bound to its arena regions;
//! * an eager warm-up run, then the CUDA graph capture (dedicated stream, thread-local mode):
//!   pre → engine → post as one graph when the engine is capture-safe, else a pre graph and a
//!   post graph with the engine run eagerly between them (the reason is logged). The graph
//!   replay is compared with the eager run: preprocessed tensor bit-exact, network output and
//!   detections within [`GRAPH_TOLERANCE`]; a mismatch disables the graph and says so.
//!
//! # Exactness
//! The kernels implement the arithmetic of [`crate::letterbox`] and [`crate::decode`]
//! operation for operation (no FMA contraction, round-to-nearest intrinsics, the same total
//! order), so the GPU result equals the CPU result on the same network output.
//!
//! # Capacity
//! At most [`MAX_CANDIDATES`] anchors above the score threshold enter the GPU sort and NMS
//! (the CPU has no cap). More is reported, never silent: [`GpuDetector::overflowed`] is true
//! and a warning is logged; which candidates were kept is then unspecified (whichever won the
//! atomic compaction), so the result may differ from the CPU's.

use std::ffi::c_void;

use tether_runtime::cuda::{
    ArenaPlan, Context, CudaError, DeviceArena, DevicePtr, DriverError, Function, Graph,
    KernelImage, Module, ModuleSource, PinnedBuffer, RegionId, Stream, SyncPolicy,
};
use tether_runtime::engine::IoMode;
use tether_runtime::{CaptureSafety, Engine, Placement, RunError, StreamHandle};

use crate::decode::{BoundingBox, Detection, Detections};
use crate::letterbox::{Letterbox, PixelFormat};
use crate::{DetectConfig, MAX_DETECTIONS};

/// Capacity of the GPU candidate list (anchors above the score threshold). Mirrors
/// `MAX_CANDIDATES` in `kernels/detect.cu`.
pub const MAX_CANDIDATES: usize = 4096;

/// Tolerance of the load-time check of the graph replay against the eager run: absolute, on
/// the network output and on detection boxes and scores. The preprocessed tensor must match
/// bit for bit.
pub const GRAPH_TOLERANCE: f32 = 1e-4;

/// The embedded kernel images (see `kernels/README.md`; rebuilt by `kernels/build-kernels.sh`,
/// digests in `kernels/bin/SHA256SUMS`).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "detect.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../kernels/bin/detect.cu13.fatbin"),
    },
    KernelImage {
        name: "detect.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "detect.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "detect.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../kernels/bin/detect.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../kernels/detect.cu");

/// Whether host staging is mapped into the device address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MappedIo {
    /// Mapped on integrated GPUs (Jetson, DRIVE), copied on discrete ones.
    #[default]
    Auto,
    /// Always mapped (works on discrete GPUs too: the kernels read over the bus).
    Always,
    /// Never mapped: explicit copies.
    Never,
}

/// Options of a GPU detector.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuOptions {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// How the host waits for each frame.
    pub sync: SyncPolicy,
    /// Mapped (zero-copy) staging.
    pub mapped: MappedIo,
    /// Capture CUDA graphs (default). `false` runs every frame eagerly (for comparison).
    pub graphs: bool,
    /// Compile the kernels from source with NVRTC when no embedded image loads.
    pub allow_nvrtc: bool,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            ordinal: 0,
            sync: SyncPolicy::Spin,
            mapped: MappedIo::Auto,
            graphs: true,
            allow_nvrtc: false,
        }
    }
}

/// The frame geometry a detector is prepared for (fixed at load: the graph bakes it in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Pixel layout.
    pub format: PixelFormat,
    /// Bytes per row (>= width * channels).
    pub stride: usize,
}

impl FrameSpec {
    /// A tightly packed frame.
    pub fn packed(width: u32, height: u32, format: PixelFormat) -> Self {
        FrameSpec {
            width,
            height,
            format,
            stride: width as usize * format.channels(),
        }
    }
    /// Bytes of one frame (`stride * height`).
    pub fn bytes(&self) -> usize {
        self.stride * self.height as usize
    }
}

/// Errors of the GPU detector.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// Device layer (load time).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A driver call failed (hot path: `Copy`, no allocation).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The engine failed (hot path: `Copy`).
    #[error(transparent)]
    Run(#[from] RunError),
    /// Configuration, engine or frame does not fit.
    #[error("{0}")]
    Setup(String),
    /// A frame of the wrong size was passed (hot path: numbers only).
    #[error("frame holds {actual} bytes, the detector was prepared for {expected}")]
    FrameSize {
        /// Bytes expected (`FrameSpec::bytes`).
        expected: usize,
        /// Bytes passed.
        actual: usize,
    },
}

/// Device memory budget of a detector, logged at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryBudget {
    /// Bytes of the session's device arena (one allocation).
    pub device_arena: usize,
    /// Page-locked host bytes (frame + result staging).
    pub pinned: usize,
    /// Of those, bytes mapped into the device address space.
    pub mapped: usize,
    /// Device memory the driver reported in use before/after load (difference), including
    /// the engine's own allocations and the kernel module.
    pub device_used_by_load: isize,
}

/// How frames execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// One graph: pre → engine → post.
    WholeGraph,
    /// Pre graph, engine eagerly, post graph (engine not capture-safe).
    SplitGraphs,
    /// Every kernel launched eagerly (graphs disabled or failed validation).
    Eager,
}

/// Stages timed by [`GpuDetector::bench_stage`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchStage {
    /// Host-to-device copy of the frame (copy mode only).
    Upload,
    /// Letterbox kernel, eager launches.
    Pre,
    /// Letterbox kernel as a one-node graph.
    PreGraph,
    /// The engine.
    Engine,
    /// Post-processing kernels (memset + 4 kernels), eager launches.
    Post,
    /// Device-to-host copy of the result (copy mode only).
    Download,
}

/// What [`GpuDetector::bench_wall`] times.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchWall {
    /// `detect_staged`: copies, graph(s)/engine, wait, result parsing.
    Run,
    /// The same graph(s) launched and waited for, nothing else.
    Bare,
    /// Letterbox alone, eager launch + wait.
    PreEager,
    /// Letterbox alone, one-node graph launch + wait.
    PreGraph,
}

/// `#[repr(C)]` mirror of `struct PreParams` in detect.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct PreParams {
    src_w: i32,
    src_h: i32,
    pitch: i32,
    ch: i32,
    off: [i32; 3],
    in_w: i32,
    in_h: i32,
    new_w: i32,
    new_h: i32,
    left: i32,
    top: i32,
    sx: f32,
    sy: f32,
    mean: [f32; 3],
    std: [f32; 3],
    pad: f32,
}

/// `#[repr(C)]` mirror of `struct GpuDetection` in detect.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct GpuDetection {
    x1: f32,
    y1: f32,
    x2: f32,
    y2: f32,
    score: f32,
    class_id: u32,
}

/// `#[repr(C)]` mirror of `struct DetectOutput` in detect.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DetectOutput {
    count: u32,
    candidates: u32,
    overflow: u32,
    magic: u32,
    det: [GpuDetection; MAX_DETECTIONS],
}
const OUTPUT_BYTES: usize = std::mem::size_of::<DetectOutput>();
const OUTPUT_MAGIC: u32 = 0x7e7d_e7ec;

struct Kernels {
    letterbox: Function,
    decode: Function,
    sort: Function,
    mask: Function,
    reduce: Function,
}

struct Regions {
    frame: RegionId,
    tensor: RegionId,
    raw: RegionId,
    box_by_anchor: RegionId,
    cls_by_anchor: RegionId,
    score_by_anchor: RegionId,
    keys: RegionId,
    state: RegionId,
    sorted_box: RegionId,
    sorted_cls: RegionId,
    sorted_score: RegionId,
    mask: RegionId,
    out: RegionId,
}

/// Resolved device addresses used by the launches (copied into graph nodes at capture).
#[derive(Clone, Copy)]
struct Ptrs {
    frame: DevicePtr,
    tensor: DevicePtr,
    raw: DevicePtr,
    box_by_anchor: DevicePtr,
    cls_by_anchor: DevicePtr,
    score_by_anchor: DevicePtr,
    keys: DevicePtr,
    state: DevicePtr,
    sorted_box: DevicePtr,
    sorted_cls: DevicePtr,
    sorted_score: DevicePtr,
    mask: DevicePtr,
    out: DevicePtr,
}

#[derive(Clone, Copy)]
struct PostScalars {
    num_classes: i32,
    num_anchors: i32,
    score_thr: f32,
    iou_thr: f32,
    max_det: i32,
    ratio: f32,
    left: f32,
    top: f32,
    src_w: f32,
    src_h: f32,
}

enum Graphs {
    None,
    Whole(Graph),
    Split { pre: Graph, post: Graph },
}

/// A detection session on one GPU. Not `Sync`: one frame at a time; `Send`, so it may move
/// between threads (the context is bound on whichever thread runs it).
pub struct GpuDetector {
    // Field order is drop order: graphs before the module and memory they reference.
    graphs: Graphs,
    engine: Box<dyn Engine>,
    kernels: Kernels,
    module: Module,
    frame_staging: PinnedBuffer,
    out_staging: PinnedBuffer,
    arena: DeviceArena,
    stream: Stream,
    ctx: Context,
    mode: ExecMode,
    mapped: bool,
    frame: FrameSpec,
    letterbox: Letterbox,
    pre: PreParams,
    post: PostScalars,
    ptrs: Ptrs,
    detections: Detections,
    candidates: u32,
    overflow: bool,
    budget: MemoryBudget,
    capture_note: String,
    tensor_bytes: usize,
    raw_bytes: usize,
}

fn setup(msg: impl Into<String>) -> GpuError {
    GpuError::Setup(msg.into())
}

fn rgb_offsets(format: PixelFormat) -> [i32; 3] {
    match format {
        PixelFormat::Gray8 => [0, 0, 0],
        PixelFormat::Rgb8 | PixelFormat::Rgba8 => [0, 1, 2],
        PixelFormat::Bgr8 => [2, 1, 0],
    }
}

impl GpuDetector {
    /// Prepare a session: device, kernels, arena, staging, engine binding, warm-up, graphs.
    ///
    /// `engine` must be [`Placement::Device`] with one f32 input `[1, 3, H, W]` and one f32
    /// output `[1, 4 + C, N]` matching `config`. It should be created on device
    /// `options.ordinal` (tract-cuda always uses device 0).
    ///
    /// # Errors
    /// [`GpuError::Cuda`] (no driver/device, no kernel image, ...), [`GpuError::Setup`] when
    /// the engine or frame does not fit, [`GpuError::Run`] when the warm-up run fails.
    pub fn new(
        config: &DetectConfig,
        mut engine: Box<dyn Engine>,
        frame: FrameSpec,
        options: &GpuOptions,
    ) -> Result<Self, GpuError> {
        let ctx = Context::new(options.ordinal, options.sync)?;
        let props = ctx.properties().clone();
        let (free_before, _) = ctx.mem_info()?;
        let stream = Stream::new(&ctx, options.sync)?;

        // --- the engine must fit the configuration
        let (iw, ih) = (config.input_width as usize, config.input_height as usize);
        let (c, n) = (config.num_classes as usize, config.num_anchors as usize);
        if engine.placement() != Placement::Device {
            return Err(setup(format!(
                "engine {:?} is host-placed; the GPU path needs a device engine",
                engine.kind()
            )));
        }
        let want_in = [1, 3, ih, iw];
        let want_out = [1, 4 + c, n];
        match (engine.inputs().first(), engine.outputs().first()) {
            (Some(i), Some(o)) if i.shape == want_in && o.shape == want_out => {}
            (i, o) => {
                return Err(setup(format!(
                    "engine I/O {:?} -> {:?} does not match the configuration {:?} -> {:?}",
                    i.map(|t| &t.shape),
                    o.map(|t| &t.shape),
                    want_in,
                    want_out
                )));
            }
        }
        if frame.width == 0
            || frame.height == 0
            || frame.stride < frame.width as usize * frame.format.channels()
        {
            return Err(setup(format!("bad frame geometry {frame:?}")));
        }
        if n > u32::MAX as usize || n == 0 {
            return Err(setup(format!("{n} anchors")));
        }

        // --- kernels
        let module = Module::load(
            &ctx,
            ModuleSource {
                images: KERNEL_IMAGES,
                source: Some(KERNEL_SOURCE),
                allow_nvrtc: options.allow_nvrtc,
            },
        )?;
        let kernels = Kernels {
            letterbox: module.function("letterbox_bilinear_nchw")?,
            decode: module.function("decode_candidates")?,
            sort: module.function("sort_candidates")?,
            mask: module.function("nms_mask")?,
            reduce: module.function("nms_reduce")?,
        };

        // --- memory plan
        let mapped = match options.mapped {
            MappedIo::Auto => props.integrated && props.can_map_host_memory,
            MappedIo::Always => true,
            MappedIo::Never => false,
        };
        let mut plan = ArenaPlan::new();
        let regions = Regions {
            frame: plan.add(
                "frame u8 [H, stride]",
                if mapped { 0 } else { frame.bytes() },
            )?,
            tensor: plan.add("input f32 [1, 3, H, W]", 3 * ih * iw * 4)?,
            raw: plan.add("output f32 [1, 4 + C, N]", (4 + c) * n * 4)?,
            box_by_anchor: plan.add("post: box by anchor f32x4 [N]", n * 16)?,
            cls_by_anchor: plan.add("post: class by anchor u32 [N]", n * 4)?,
            score_by_anchor: plan.add("post: score by anchor f32 [N]", n * 4)?,
            keys: plan.add("post: sort keys u64 [MAX_CANDIDATES]", MAX_CANDIDATES * 8)?,
            state: plan.add("post: counters", 16)?,
            sorted_box: plan.add(
                "post: sorted boxes f32x4 [MAX_CANDIDATES]",
                MAX_CANDIDATES * 16,
            )?,
            sorted_cls: plan.add(
                "post: sorted classes u32 [MAX_CANDIDATES]",
                MAX_CANDIDATES * 4,
            )?,
            sorted_score: plan.add(
                "post: sorted scores f32 [MAX_CANDIDATES]",
                MAX_CANDIDATES * 4,
            )?,
            mask: plan.add(
                "post: IoU mask u64 [MAX_CANDIDATES, MAX_CANDIDATES/64]",
                MAX_CANDIDATES * MAX_CANDIDATES / 8,
            )?,
            out: plan.add("result DetectOutput", if mapped { 0 } else { OUTPUT_BYTES })?,
        };
        log::debug!("{}", plan.describe());
        let arena = DeviceArena::new(&ctx, plan)?;
        let frame_staging = PinnedBuffer::new(&ctx, frame.bytes(), mapped)?;
        let out_staging = PinnedBuffer::new(&ctx, OUTPUT_BYTES, mapped)?;
        let ptrs = Ptrs {
            frame: if mapped {
                frame_staging.device_ptr().unwrap_or_default()
            } else {
                arena.ptr(regions.frame)
            },
            tensor: arena.ptr(regions.tensor),
            raw: arena.ptr(regions.raw),
            box_by_anchor: arena.ptr(regions.box_by_anchor),
            cls_by_anchor: arena.ptr(regions.cls_by_anchor),
            score_by_anchor: arena.ptr(regions.score_by_anchor),
            keys: arena.ptr(regions.keys),
            state: arena.ptr(regions.state),
            sorted_box: arena.ptr(regions.sorted_box),
            sorted_cls: arena.ptr(regions.sorted_cls),
            sorted_score: arena.ptr(regions.sorted_score),
            mask: arena.ptr(regions.mask),
            out: if mapped {
                out_staging.device_ptr().unwrap_or_default()
            } else {
                arena.ptr(regions.out)
            },
        };

        // --- engine binding
        // SAFETY: both regions are sized from the engine's own specs (checked above), live in
        // the arena for the life of this detector, and are used for nothing else.
        unsafe {
            engine.bind_device(IoMode::Input, 0, ptrs.tensor.0, 3 * ih * iw * 4)?;
            engine.bind_device(IoMode::Output, 0, ptrs.raw.0, (4 + c) * n * 4)?;
        }

        // --- per-geometry parameters (the letterbox of lead's CPU path, exactly)
        let lb = Letterbox::new(
            frame.width,
            frame.height,
            config.input_width,
            config.input_height,
        );
        let pre = PreParams {
            src_w: frame.width as i32,
            src_h: frame.height as i32,
            pitch: frame.stride as i32,
            ch: frame.format.channels() as i32,
            off: rgb_offsets(frame.format),
            in_w: iw as i32,
            in_h: ih as i32,
            new_w: lb.new_width as i32,
            new_h: lb.new_height as i32,
            left: lb.left as i32,
            top: lb.top as i32,
            sx: frame.width as f32 / lb.new_width as f32,
            sy: frame.height as f32 / lb.new_height as f32,
            mean: config.mean,
            std: config.std,
            pad: f32::from(config.pad_value),
        };
        let post = PostScalars {
            num_classes: c as i32,
            num_anchors: n as i32,
            score_thr: config.score_threshold,
            iou_thr: config.iou_threshold,
            max_det: (config.max_detections as usize).min(MAX_DETECTIONS) as i32,
            ratio: lb.scale as f32,
            left: lb.left as f32,
            top: lb.top as f32,
            src_w: frame.width as f32,
            src_h: frame.height as f32,
        };

        let mut det = GpuDetector {
            graphs: Graphs::None,
            engine,
            kernels,
            module,
            frame_staging,
            out_staging,
            arena,
            stream,
            ctx,
            mode: ExecMode::Eager,
            mapped,
            frame,
            letterbox: lb,
            pre,
            post,
            ptrs,
            detections: Detections::new(),
            candidates: 0,
            overflow: false,
            budget: MemoryBudget::default(),
            capture_note: String::new(),
            tensor_bytes: 3 * ih * iw * 4,
            raw_bytes: (4 + c) * n * 4,
        };

        // --- warm-up (eager), then graphs validated against it
        det.fill_warmup_frame();
        det.run_staged()?;
        if options.graphs {
            det.capture_graphs()?;
        } else {
            det.capture_note = "graphs disabled by options".into();
        }
        let (free_after, _) = det.ctx.mem_info()?;
        det.budget = MemoryBudget {
            device_arena: det.arena.plan().total_bytes(),
            pinned: det.frame_staging.len() + det.out_staging.len(),
            mapped: if mapped {
                det.frame_staging.len() + det.out_staging.len()
            } else {
                0
            },
            device_used_by_load: free_before as isize - free_after as isize,
        };
        log::info!(
            "GPU detector on {} (sm_{}, {}): kernels {}, engine {:?}, {:?} ({}); memory: device arena {} B, pinned {} B, mapped {} B, device in use after load +{} B (arena + module + engine)",
            props.name,
            props.sm(),
            if props.integrated {
                "integrated"
            } else {
                "discrete"
            },
            det.module.image,
            det.engine.kind(),
            det.mode,
            det.capture_note,
            det.budget.device_arena,
            det.budget.pinned,
            det.budget.mapped,
            det.budget.device_used_by_load
        );
        Ok(det)
    }

    /// A deterministic, non-trivial frame for warm-up and graph validation (gradients and
    /// stripes, so that the letterbox interpolates and the pad is visible).
    fn fill_warmup_frame(&mut self) {
        let f = self.frame;
        let ch = f.format.channels();
        let buf = self.frame_staging.as_mut_slice();
        for y in 0..f.height as usize {
            for x in 0..f.width as usize {
                for k in 0..ch {
                    buf[y * f.stride + x * ch + k] =
                        ((x * 7 + y * 3 + k * 85) ^ (x / 16 * 31)) as u8;
                }
            }
        }
    }

    // ---------------------------------------------------------------- launches (no alloc)

    fn enqueue_pre(&self) -> Result<(), DriverError> {
        enqueue_pre(&self.stream, &self.kernels, &self.ptrs, &self.pre)
    }

    fn enqueue_post(&self) -> Result<(), DriverError> {
        enqueue_post(&self.stream, &self.kernels, &self.ptrs, &self.post)
    }

    fn enqueue_engine(&mut self) -> Result<(), RunError> {
        self.engine
            .run(StreamHandle(self.stream.raw() as *mut c_void))
    }

    fn enqueue_upload(&self) -> Result<(), DriverError> {
        if !self.mapped {
            // SAFETY: staging is pinned and frame.bytes() long; the region is as large.
            unsafe {
                self.stream.memcpy_htod(
                    self.ptrs.frame,
                    self.frame_staging.as_ptr(),
                    self.frame.bytes(),
                )
            }?;
        }
        Ok(())
    }

    fn enqueue_download(&mut self) -> Result<(), DriverError> {
        if !self.mapped {
            let dst = self.out_staging.as_mut_ptr();
            // SAFETY: staging is pinned and OUTPUT_BYTES long, as is the region.
            unsafe { self.stream.memcpy_dtoh(dst, self.ptrs.out, OUTPUT_BYTES) }?;
        }
        Ok(())
    }

    fn execute(&mut self) -> Result<(), GpuError> {
        self.stream.bind()?;
        self.enqueue_upload()?;
        match &self.graphs {
            Graphs::Whole(g) => self.stream.launch_graph(g)?,
            Graphs::Split { pre, .. } => {
                self.stream.launch_graph(pre)?;
                self.enqueue_engine()?;
                if let Graphs::Split { post, .. } = &self.graphs {
                    self.stream.launch_graph(post)?;
                }
            }
            Graphs::None => {
                self.enqueue_pre()?;
                self.enqueue_engine()?;
                self.enqueue_post()?;
            }
        }
        self.enqueue_download()?;
        self.stream.synchronize()?;
        self.collect();
        Ok(())
    }

    fn output(&self) -> &DetectOutput {
        // SAFETY: the staging buffer is OUTPUT_BYTES long, page-aligned, and DetectOutput is
        // plain old data (any bit pattern is valid); the GPU is idle (synchronised).
        unsafe { &*(self.out_staging.as_ptr() as *const DetectOutput) }
    }

    fn collect(&mut self) {
        let o = *self.output_header();
        self.candidates = o.1;
        self.overflow = o.2 != 0;
        self.detections.clear();
        let count = (o.0 as usize).min(MAX_DETECTIONS);
        for i in 0..count {
            let d = self.output().det[i];
            let _ = self.detections.push(Detection {
                class_id: d.class_id as u16,
                score: d.score,
                bbox: BoundingBox {
                    x1: d.x1,
                    y1: d.y1,
                    x2: d.x2,
                    y2: d.y2,
                },
            });
        }
        if self.overflow {
            log::warn!(
                "GPU NMS: {} candidates above the score threshold exceed the capacity of {}; the result may differ from the CPU's",
                self.candidates,
                MAX_CANDIDATES
            );
        }
    }

    fn output_header(&self) -> &(u32, u32, u32, u32) {
        // SAFETY: the first 16 bytes of DetectOutput are four u32 (repr(C)).
        unsafe { &*(self.out_staging.as_ptr() as *const (u32, u32, u32, u32)) }
    }

    // ---------------------------------------------------------------- graphs

    fn snapshot(&mut self) -> Result<Snapshot, GpuError> {
        let (tensor_bytes, raw_bytes) = (self.tensor_bytes, self.raw_bytes);
        let mut tensor = vec![0u8; tensor_bytes];
        let mut raw = vec![0f32; raw_bytes / 4];
        self.stream.bind()?;
        // SAFETY: destination vectors are exactly the region sizes; synchronised right after.
        unsafe {
            self.stream
                .memcpy_dtoh(tensor.as_mut_ptr(), self.ptrs.tensor, tensor_bytes)?;
            self.stream
                .memcpy_dtoh(raw.as_mut_ptr() as *mut u8, self.ptrs.raw, raw_bytes)?;
        }
        self.stream.synchronize()?;
        let o = self.output();
        let dets = o.det[..(o.count as usize).min(MAX_DETECTIONS)].to_vec();
        Ok((tensor, raw, dets, (o.count, o.candidates, o.magic)))
    }

    fn poison(&mut self) -> Result<(), GpuError> {
        self.stream.bind()?;
        // SAFETY: regions are 4-byte aligned and sized as stated.
        unsafe {
            let (t, r) = (self.tensor_bytes / 4, self.raw_bytes / 4);
            self.stream.memset_u32(self.ptrs.tensor, 0x7fc0_0000, t)?; // NaN
            self.stream.memset_u32(self.ptrs.raw, 0x7fc0_0000, r)?;
        }
        self.stream.synchronize()?;
        self.out_staging.as_mut_slice().fill(0xff);
        if !self.mapped {
            // SAFETY: region OUTPUT_BYTES long, aligned.
            unsafe {
                self.stream
                    .memset_u32(self.ptrs.out, 0xffff_ffff, OUTPUT_BYTES / 4)
            }?;
            self.stream.synchronize()?;
        }
        Ok(())
    }

    fn capture_graphs(&mut self) -> Result<(), GpuError> {
        let eager = self.snapshot()?;
        let safety = self.engine.capture_safety();
        let captured = match safety {
            CaptureSafety::Safe => {
                let this = &mut *self;
                let engine = &mut this.engine;
                let g = Graph::capture(&this.stream, |_| -> Result<(), GpuError> {
                    enqueue_pre(&this.stream, &this.kernels, &this.ptrs, &this.pre)?;
                    engine.run(StreamHandle(this.stream.raw() as *mut c_void))?;
                    enqueue_post(&this.stream, &this.kernels, &this.ptrs, &this.post)?;
                    Ok(())
                });
                g.map(|g| {
                    (
                        Graphs::Whole(g),
                        ExecMode::WholeGraph,
                        "pre + engine + post in one graph".to_string(),
                    )
                })
            }
            CaptureSafety::Unsafe(why) => {
                let pre = Graph::capture(&self.stream, |s| {
                    enqueue_pre(s, &self.kernels, &self.ptrs, &self.pre)
                });
                let post = Graph::capture(&self.stream, |s| {
                    enqueue_post(s, &self.kernels, &self.ptrs, &self.post)
                });
                match (pre, post) {
                    (Ok(pre), Ok(post)) => Ok((
                        Graphs::Split { pre, post },
                        ExecMode::SplitGraphs,
                        format!(
                            "engine {:?} runs eagerly between the pre and post graphs: {why}",
                            self.engine.kind()
                        ),
                    )),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
        };
        let (graphs, mode, note) = match captured {
            Ok(x) => x,
            Err(e) => {
                self.capture_note = format!("graph capture failed, running eagerly: {e}");
                log::warn!("{}", self.capture_note);
                return Ok(());
            }
        };
        self.graphs = graphs;
        self.mode = mode;
        // Replay once on poisoned buffers and compare with the eager result.
        self.poison()?;
        self.execute()?;
        let replay = self.snapshot()?;
        match compare(&eager, &replay) {
            Ok(()) => {
                self.capture_note = format!(
                    "{note}; replay matches eager (tensor exact, output/detections within {GRAPH_TOLERANCE})"
                );
            }
            Err(why) => {
                self.graphs = Graphs::None;
                self.mode = ExecMode::Eager;
                self.capture_note = format!("graph disabled: replay differs from eager run: {why}");
                log::error!("{}", self.capture_note);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- public API

    /// Detect in one frame of the geometry given at load: `stride * (height - 1) + width *
    /// channels` to `stride * height` bytes (an [`crate::ImageView`]'s `data()` whose last row
    /// may stop at the pixels).
    ///
    /// Copies the frame into the pinned staging buffer, then: one host-to-device copy, one
    /// graph launch (three launches when the engine is not capture-safe), one device-to-host
    /// copy, one wait. No heap or device allocation (with a capture-safe engine).
    ///
    /// # Errors
    /// [`GpuError::FrameSize`], or a `Copy` driver/engine error.
    pub fn detect(&mut self, frame: &[u8]) -> Result<&Detections, GpuError> {
        let n = self.frame.bytes();
        let f = self.frame;
        let min = f.stride * (f.height as usize - 1) + f.width as usize * f.format.channels();
        if frame.len() < min || frame.len() > n {
            return Err(GpuError::FrameSize {
                expected: n,
                actual: frame.len(),
            });
        }
        self.frame_staging.as_mut_slice()[..frame.len()].copy_from_slice(frame);
        self.execute()?;
        Ok(&self.detections)
    }

    /// The pinned frame buffer: write the next frame here (e.g. straight from a camera
    /// driver) and call [`GpuDetector::detect_staged`] to skip the host-side copy.
    pub fn frame_buffer_mut(&mut self) -> &mut [u8] {
        self.frame_staging.as_mut_slice()
    }

    /// Detect in the frame already written to [`GpuDetector::frame_buffer_mut`].
    ///
    /// # Errors
    /// A `Copy` driver or engine error.
    pub fn detect_staged(&mut self) -> Result<&Detections, GpuError> {
        self.execute()?;
        Ok(&self.detections)
    }

    fn run_staged(&mut self) -> Result<(), GpuError> {
        self.execute()
    }

    /// Detections of the last frame.
    pub fn detections(&self) -> &Detections {
        &self.detections
    }

    /// Candidates above the score threshold in the last frame (before the capacity cap).
    pub fn candidates(&self) -> u32 {
        self.candidates
    }

    /// True when the last frame had more than [`MAX_CANDIDATES`] candidates.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// How frames execute, and why (capture result, validation).
    pub fn exec_mode(&self) -> (ExecMode, &str) {
        (self.mode, &self.capture_note)
    }

    /// Memory budget measured at load.
    pub fn memory_budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The letterbox geometry of the prepared frame size.
    pub fn letterbox(&self) -> Letterbox {
        self.letterbox
    }

    /// The context (for memory queries in tests and tools).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The stream frames run on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// True when host staging is mapped (zero-copy).
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// The frame geometry.
    pub fn frame_spec(&self) -> FrameSpec {
        self.frame
    }

    /// Copy the preprocessed input tensor `[1, 3, H, W]` of the last frame to `dst` (tests,
    /// tools; allocates nothing but blocks).
    ///
    /// # Errors
    /// A driver error, or [`GpuError::Setup`] on a wrong length.
    pub fn read_input_tensor(&mut self, dst: &mut [f32]) -> Result<(), GpuError> {
        self.read_region(self.ptrs.tensor, dst)
    }

    /// Copy the network output `[1, 4 + C, N]` of the last frame to `dst`.
    ///
    /// # Errors
    /// As [`GpuDetector::read_input_tensor`].
    pub fn read_network_output(&mut self, dst: &mut [f32]) -> Result<(), GpuError> {
        self.read_region(self.ptrs.raw, dst)
    }

    fn read_region(&mut self, src: DevicePtr, dst: &mut [f32]) -> Result<(), GpuError> {
        let want = if src == self.ptrs.tensor {
            3 * self.pre.in_w as usize * self.pre.in_h as usize
        } else {
            (4 + self.post.num_classes as usize) * self.post.num_anchors as usize
        };
        if dst.len() != want {
            return Err(setup(format!(
                "buffer of {} values, expected {want}",
                dst.len()
            )));
        }
        self.stream.bind()?;
        // SAFETY: dst holds exactly the region's bytes; synchronised before return.
        unsafe {
            self.stream
                .memcpy_dtoh(dst.as_mut_ptr() as *mut u8, src, want * 4)
        }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Benchmark hook (not part of the stable API): time `iters` back-to-back executions of
    /// one stage on the GPU with events, returning milliseconds per execution.
    ///
    /// # Errors
    /// A driver or engine error.
    #[doc(hidden)]
    pub fn bench_stage(&mut self, stage: BenchStage, iters: usize) -> Result<f64, GpuError> {
        use tether_runtime::cuda::Event;
        self.stream.bind()?;
        let (a, b) = (
            Event::new(&self.ctx, true, false)?,
            Event::new(&self.ctx, true, false)?,
        );
        let pre_graph = match stage {
            BenchStage::PreGraph => Some(Graph::capture(&self.stream, |s| {
                enqueue_pre(s, &self.kernels, &self.ptrs, &self.pre)
            })?),
            _ => None,
        };
        self.stream.synchronize()?;
        a.record(&self.stream)?;
        for _ in 0..iters {
            match stage {
                BenchStage::Upload => {
                    self.enqueue_upload()?;
                }
                BenchStage::Pre => self.enqueue_pre()?,
                BenchStage::PreGraph => self
                    .stream
                    .launch_graph(pre_graph.as_ref().expect("captured"))?,
                BenchStage::Engine => self.enqueue_engine()?,
                BenchStage::Post => self.enqueue_post()?,
                BenchStage::Download => self.enqueue_download()?,
            }
        }
        b.record(&self.stream)?;
        b.synchronize()?;
        Ok(Event::elapsed_ms(&a, &b)? as f64 / iters.max(1) as f64)
    }

    /// Benchmark hook: host wall time of `iters` single executions, each launched and
    /// waited for (with the session's policy), in microseconds. `Bare` launches the session's
    /// graph(s) and synchronises (no copies, no result parsing), `Run` is
    /// [`GpuDetector::detect_staged`], `PreEager`/`PreGraph` run the letterbox alone on the
    /// device-resident frame.
    ///
    /// # Errors
    /// A driver or engine error.
    #[doc(hidden)]
    pub fn bench_wall(
        &mut self,
        what: BenchWall,
        iters: usize,
        out_us: &mut Vec<f64>,
    ) -> Result<(), GpuError> {
        out_us.clear();
        out_us.reserve(iters);
        self.stream.bind()?;
        let pre_graph = match what {
            BenchWall::PreGraph => Some(Graph::capture(&self.stream, |s| {
                enqueue_pre(s, &self.kernels, &self.ptrs, &self.pre)
            })?),
            _ => None,
        };
        for _ in 0..iters {
            let t = std::time::Instant::now();
            match what {
                BenchWall::Run => {
                    self.execute()?;
                }
                BenchWall::Bare => {
                    match &self.graphs {
                        Graphs::Whole(g) => self.stream.launch_graph(g)?,
                        Graphs::Split { pre, post } => {
                            self.stream.launch_graph(pre)?;
                            self.stream.launch_graph(post)?;
                        }
                        Graphs::None => return Err(setup("no graph captured")),
                    }
                    self.stream.synchronize()?;
                }
                BenchWall::PreEager => {
                    self.enqueue_pre()?;
                    self.stream.synchronize()?;
                }
                BenchWall::PreGraph => {
                    self.stream
                        .launch_graph(pre_graph.as_ref().expect("captured"))?;
                    self.stream.synchronize()?;
                }
            }
            out_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(())
    }

    /// Run only the post-processing on a network output supplied by the caller (uploaded to
    /// the output region), as a test hook for exact comparison with the CPU decoder.
    ///
    /// # Errors
    /// A driver error, or [`GpuError::Setup`] on a wrong length.
    pub fn postprocess_only(&mut self, output: &[f32]) -> Result<&Detections, GpuError> {
        let want = (4 + self.post.num_classes as usize) * self.post.num_anchors as usize;
        if output.len() != want {
            return Err(setup(format!(
                "output of {} values, expected {want}",
                output.len()
            )));
        }
        self.stream.bind()?;
        // SAFETY: output holds the region's bytes and outlives the synchronise below.
        unsafe {
            self.stream
                .memcpy_htod(self.ptrs.raw, output.as_ptr() as *const u8, want * 4)
        }?;
        match &self.graphs {
            Graphs::Split { post, .. } => self.stream.launch_graph(post)?,
            _ => self.enqueue_post()?,
        }
        self.enqueue_download()?;
        self.stream.synchronize()?;
        self.collect();
        Ok(&self.detections)
    }
}

/// Enqueue the letterbox kernel (no allocation).
fn enqueue_pre(s: &Stream, k: &Kernels, p: &Ptrs, pre: &PreParams) -> Result<(), DriverError> {
    let (mut frame, mut tensor, mut params) = (p.frame.0, p.tensor.0, *pre);
    let mut args: [*mut c_void; 3] = [
        &mut frame as *mut u64 as *mut c_void,
        &mut tensor as *mut u64 as *mut c_void,
        &mut params as *mut PreParams as *mut c_void,
    ];
    let grid = (
        (pre.in_w as u32).div_ceil(32),
        (pre.in_h as u32).div_ceil(8),
        1,
    );
    // SAFETY: args match letterbox_bilinear_nchw(const u8*, float*, PreParams); the frame
    // and tensor regions are sized for this geometry and outlive every launch and replay.
    unsafe { s.launch(k.letterbox, grid, (32, 8, 1), 0, &mut args) }
}

/// Enqueue the post-processing: counter memset, decode, sort, IoU mask, greedy reduce.
fn enqueue_post(
    stream: &Stream,
    k: &Kernels,
    p: &Ptrs,
    s: &PostScalars,
) -> Result<(), DriverError> {
    let (p, s) = (*p, *s);
    // SAFETY: state region is 16 bytes, 4-byte aligned.
    unsafe { stream.memset_u32(p.state, 0, 4) }?;
    {
        let (mut raw, mut nc, mut na, mut thr) =
            (p.raw.0, s.num_classes, s.num_anchors, s.score_thr);
        let (mut bx, mut cl, mut sc, mut keys, mut st) = (
            p.box_by_anchor.0,
            p.cls_by_anchor.0,
            p.score_by_anchor.0,
            p.keys.0,
            p.state.0,
        );
        let mut args: [*mut c_void; 9] = [
            &mut raw as *mut u64 as *mut c_void,
            &mut nc as *mut i32 as *mut c_void,
            &mut na as *mut i32 as *mut c_void,
            &mut thr as *mut f32 as *mut c_void,
            &mut bx as *mut u64 as *mut c_void,
            &mut cl as *mut u64 as *mut c_void,
            &mut sc as *mut u64 as *mut c_void,
            &mut keys as *mut u64 as *mut c_void,
            &mut st as *mut u64 as *mut c_void,
        ];
        let grid = ((s.num_anchors as u32).div_ceil(256), 1, 1);
        // SAFETY: args match decode_candidates(...); regions sized for N anchors.
        unsafe { stream.launch(k.decode, grid, (256, 1, 1), 0, &mut args) }?;
    }
    {
        let (mut keys, mut bx, mut cl, mut sc, mut st) = (
            p.keys.0,
            p.box_by_anchor.0,
            p.cls_by_anchor.0,
            p.score_by_anchor.0,
            p.state.0,
        );
        let (mut sb, mut scl, mut ss) = (p.sorted_box.0, p.sorted_cls.0, p.sorted_score.0);
        let mut args: [*mut c_void; 8] = [
            &mut keys as *mut u64 as *mut c_void,
            &mut bx as *mut u64 as *mut c_void,
            &mut cl as *mut u64 as *mut c_void,
            &mut sc as *mut u64 as *mut c_void,
            &mut st as *mut u64 as *mut c_void,
            &mut sb as *mut u64 as *mut c_void,
            &mut scl as *mut u64 as *mut c_void,
            &mut ss as *mut u64 as *mut c_void,
        ];
        // SAFETY: args match sort_candidates(...); static shared memory 32 KiB.
        unsafe { stream.launch(k.sort, (1, 1, 1), (1024, 1, 1), 0, &mut args) }?;
    }
    {
        let (mut sb, mut scl, mut st, mut thr, mut mask) = (
            p.sorted_box.0,
            p.sorted_cls.0,
            p.state.0,
            s.iou_thr,
            p.mask.0,
        );
        let mut args: [*mut c_void; 5] = [
            &mut sb as *mut u64 as *mut c_void,
            &mut scl as *mut u64 as *mut c_void,
            &mut st as *mut u64 as *mut c_void,
            &mut thr as *mut f32 as *mut c_void,
            &mut mask as *mut u64 as *mut c_void,
        ];
        let words = (MAX_CANDIDATES / 64) as u32;
        // SAFETY: args match nms_mask(...); mask region is MAX_CANDIDATES^2/8 bytes.
        unsafe { stream.launch(k.mask, (words, words, 1), (64, 1, 1), 0, &mut args) }?;
    }
    {
        let (mut sb, mut scl, mut ss, mut st, mut mask) = (
            p.sorted_box.0,
            p.sorted_cls.0,
            p.sorted_score.0,
            p.state.0,
            p.mask.0,
        );
        let (mut md, mut r, mut l, mut t, mut w, mut h, mut out) =
            (s.max_det, s.ratio, s.left, s.top, s.src_w, s.src_h, p.out.0);
        let mut args: [*mut c_void; 12] = [
            &mut sb as *mut u64 as *mut c_void,
            &mut scl as *mut u64 as *mut c_void,
            &mut ss as *mut u64 as *mut c_void,
            &mut st as *mut u64 as *mut c_void,
            &mut mask as *mut u64 as *mut c_void,
            &mut md as *mut i32 as *mut c_void,
            &mut r as *mut f32 as *mut c_void,
            &mut l as *mut f32 as *mut c_void,
            &mut t as *mut f32 as *mut c_void,
            &mut w as *mut f32 as *mut c_void,
            &mut h as *mut f32 as *mut c_void,
            &mut out as *mut u64 as *mut c_void,
        ];
        // SAFETY: args match nms_reduce(...); out is a DetectOutput (arena or mapped).
        unsafe { stream.launch(k.reduce, (1, 1, 1), (32, 1, 1), 0, &mut args) }?;
    }
    Ok(())
}

type Snapshot = (Vec<u8>, Vec<f32>, Vec<GpuDetection>, (u32, u32, u32));

fn compare(a: &Snapshot, b: &Snapshot) -> Result<(), String> {
    if a.0 != b.0 {
        let first = a.0.iter().zip(&b.0).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!(
            "preprocessed tensor differs (first at byte {first})"
        ));
    }
    let max_raw =
        a.1.iter()
            .zip(&b.1)
            .map(|(x, y)| (x - y).abs())
            .fold(
                0f32,
                |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
            );
    if max_raw > GRAPH_TOLERANCE {
        return Err(format!("network output differs by {max_raw}"));
    }
    if b.3.2 != OUTPUT_MAGIC {
        return Err(format!("result not written (magic {:#x})", b.3.2));
    }
    if a.3.0 != b.3.0 || a.3.1 != b.3.1 {
        return Err(format!(
            "{} vs {} detections, {} vs {} candidates",
            a.3.0, b.3.0, a.3.1, b.3.1
        ));
    }
    for (i, (x, y)) in a.2.iter().zip(&b.2).enumerate() {
        let d = [
            x.x1 - y.x1,
            x.y1 - y.y1,
            x.x2 - y.x2,
            x.y2 - y.y2,
            x.score - y.score,
        ];
        if x.class_id != y.class_id || d.iter().any(|v| v.is_nan() || v.abs() > GRAPH_TOLERANCE) {
            return Err(format!("detection {i}: {x:?} vs {y:?}"));
        }
    }
    Ok(())
}
