//! The detection pipeline as session stages: what the family contributes to a runtime
//! session (its kernels and the regions they need), in a host and a device flavour that
//! compute the same thing.
//!
//! ```text
//! frame u8 [H, stride] --letterbox--> images f32 [1, 3, h, w] --network--> output0 f32
//! [1, 4 + C, N] --decode + sort + NMS--> result DetectOutput
//! ```

use tether_runtime::session::{Check, HostIo, PipelineSpec, RegionKind};
use tether_runtime::{Plan, RegionId, RunError, Stage};

use crate::DetectError;
#[cfg(feature = "cuda")]
use crate::MAX_DETECTIONS;
use crate::config::DetectConfig;
use crate::decode::{Detections, Postprocessor};
use crate::letterbox::{FrameSpec, ImageView, Letterbox, Preprocessor};
use crate::output::{self, DetectOutput, OUTPUT_BYTES};

/// The regions of a detection session the detector reads and writes.
#[derive(Clone, Copy, Debug)]
pub struct DetectRegions {
    /// The frame (input region).
    pub frame: RegionId,
    /// The network input tensor.
    pub tensor: RegionId,
    /// The network output tensor.
    pub raw: RegionId,
    /// The result record (output region).
    pub result: RegionId,
}

fn stage_error(what: &'static str) -> RunError {
    RunError::Unsupported { what }
}

/// Letterbox, resize, normalise: frame -> network input.
pub struct LetterboxStage {
    frame: RegionId,
    tensor: RegionId,
    spec: FrameSpec,
    config: DetectConfig,
    pre: Preprocessor,
    io: [RegionId; 2],
    #[cfg(feature = "cuda")]
    device: Option<(
        tether_runtime::cuda::Function,
        crate::kernels::LetterboxParams,
    )>,
}

impl LetterboxStage {
    fn new(frame: RegionId, tensor: RegionId, spec: FrameSpec, config: DetectConfig) -> Self {
        LetterboxStage {
            frame,
            tensor,
            spec,
            config,
            pre: Preprocessor::new(config.input_width, config.input_height),
            io: [frame, tensor],
            #[cfg(feature = "cuda")]
            device: None,
        }
    }
}

impl Stage for LetterboxStage {
    fn name(&self) -> &str {
        "letterbox"
    }
    fn reads(&self) -> &[RegionId] {
        &self.io[..1]
    }
    fn writes(&self) -> &[RegionId] {
        &self.io[1..]
    }
    fn run_host(&mut self, io: &mut HostIo<'_>) -> Result<(), RunError> {
        let ([frame], [tensor]) = io.split([self.frame], [self.tensor])?;
        let s = self.spec;
        let view = ImageView::with_stride(frame, s.width, s.height, s.stride, s.format)
            .map_err(|_| stage_error("frame region does not hold the prepared frame"))?;
        let dst = tether_runtime::tensor::view_mut::<f32>(tether_runtime::DType::F32, tensor)
            .map_err(|_| stage_error("network input region is not f32"))?;
        let c = &self.config;
        self.pre
            .run(&view, c.mean, c.std, c.pad_value, dst)
            .map_err(|_| stage_error("network input region has the wrong size"))?;
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn prepare_device(
        &mut self,
        kernels: Option<&tether_runtime::cuda::KernelModule>,
        regions: &tether_runtime::session::DeviceRegions,
    ) -> Result<(), tether_runtime::cuda::CudaError> {
        let m = kernels.ok_or_else(|| {
            tether_runtime::cuda::CudaError::Unsupported("no kernel module loaded".into())
        })?;
        let f = m.function("letterbox_bilinear_nchw")?;
        let (s, c) = (self.spec, &self.config);
        let lb = Letterbox::new(s.width, s.height, c.input_width, c.input_height);
        let off = s.format.rgb_offsets();
        let p = crate::kernels::LetterboxParams {
            frame: regions.get(self.frame)?.ptr,
            tensor: regions.get(self.tensor)?.ptr,
            src_w: s.width as i32,
            src_h: s.height as i32,
            pitch: s.stride as i32,
            ch: s.format.channels() as i32,
            off: [off[0] as i32, off[1] as i32, off[2] as i32],
            in_w: c.input_width as i32,
            in_h: c.input_height as i32,
            new_w: lb.new_width as i32,
            new_h: lb.new_height as i32,
            left: lb.left as i32,
            top: lb.top as i32,
            sx: s.width as f32 / lb.new_width as f32,
            sy: s.height as f32 / lb.new_height as f32,
            mean: c.mean,
            std: c.std,
            pad: f32::from(c.pad_value),
        };
        self.device = Some((f, p));
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn enqueue(
        &self,
        stream: &tether_runtime::cuda::Stream,
    ) -> Result<(), tether_runtime::cuda::DriverError> {
        let Some((f, p)) = &self.device else {
            return Err(not_prepared());
        };
        let grid = ((p.in_w as u32).div_ceil(32), (p.in_h as u32).div_ceil(8), 1);
        // SAFETY: `p` mirrors LetterboxParams; frame and tensor regions are sized for this
        // geometry in the session arena and outlive every launch and replay.
        unsafe { stream.launch_params(*f, grid, (32, 8, 1), 0, p) }
    }
}

#[cfg(feature = "cuda")]
fn not_prepared() -> tether_runtime::cuda::DriverError {
    tether_runtime::cuda::DriverError::unsupported("detect stage enqueued before prepare_device")
}

/// Keys sorted per block by the `sort_tiles` kernel (`TILE` in `kernels/detect.cu`): the
/// padded sort size is a power of two at least this large.
pub const SORT_TILE: u32 = 2048;

/// The padded sort size for `anchors`: the next power of two, at least [`SORT_TILE`].
pub fn padded_anchors(anchors: u32) -> u32 {
    anchors.max(SORT_TILE).next_power_of_two()
}

/// The device-only scratch regions of the post-processing.
#[derive(Clone, Copy, Debug)]
struct PostScratch {
    boxes: RegionId,
    cls: RegionId,
    scores: RegionId,
    keys: RegionId,
    state: RegionId,
}

/// Decode, sort, class-wise NMS, map back: network output -> result record.
pub struct PostStage {
    raw: RegionId,
    result: RegionId,
    /// Read by the device flavour only (`cuda`); a host session has none.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    scratch: Option<PostScratch>,
    config: DetectConfig,
    letterbox: Letterbox,
    post: Postprocessor,
    dets: Detections,
    io: Vec<RegionId>,
    #[cfg(feature = "cuda")]
    device: Option<PostLaunches>,
}

#[cfg(feature = "cuda")]
struct PostLaunches {
    state: tether_runtime::cuda::DeviceRegion,
    decode: (tether_runtime::cuda::Function, crate::kernels::DecodeParams),
    tiles: tether_runtime::cuda::Function,
    global: tether_runtime::cuda::Function,
    shared: tether_runtime::cuda::Function,
    sort: crate::kernels::SortParams,
    nms: (tether_runtime::cuda::Function, crate::kernels::NmsParams),
}

impl Stage for PostStage {
    fn name(&self) -> &str {
        "decode+nms"
    }
    fn reads(&self) -> &[RegionId] {
        &self.io[..1]
    }
    fn writes(&self) -> &[RegionId] {
        &self.io[1..]
    }
    fn run_host(&mut self, io: &mut HostIo<'_>) -> Result<(), RunError> {
        let ([raw], [result]) = io.split([self.raw], [self.result])?;
        let raw = tether_runtime::tensor::view::<f32>(tether_runtime::DType::F32, raw)
            .map_err(|_| stage_error("network output region is not f32"))?;
        let (record, _) = <DetectOutput as zerocopy::FromBytes>::mut_from_prefix(result)
            .map_err(|_| stage_error("result region is not a detection record"))?;
        let c = &self.config;
        self.post
            .run_into_record(
                raw,
                &self.letterbox,
                c.score_threshold,
                c.iou_threshold,
                c.max_detections as usize,
                &mut self.dets,
                record,
            )
            .map_err(|_| stage_error("network output has the wrong size"))?;
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn prepare_device(
        &mut self,
        kernels: Option<&tether_runtime::cuda::KernelModule>,
        regions: &tether_runtime::session::DeviceRegions,
    ) -> Result<(), tether_runtime::cuda::CudaError> {
        use crate::kernels::{DecodeParams, NmsParams, SortParams};
        let m = kernels.ok_or_else(|| {
            tether_runtime::cuda::CudaError::Unsupported("no kernel module loaded".into())
        })?;
        let s = self.scratch.ok_or_else(|| {
            tether_runtime::cuda::CudaError::Unsupported(
                "the detection post-processing needs its device scratch regions".into(),
            )
        })?;
        let c = &self.config;
        let padded = padded_anchors(c.num_anchors);
        let keys = regions.get(s.keys)?.ptr;
        let state = regions.get(s.state)?;
        let (boxes, cls, scores) = (
            regions.get(s.boxes)?.ptr,
            regions.get(s.cls)?.ptr,
            regions.get(s.scores)?.ptr,
        );
        let lb = &self.letterbox;
        self.device = Some(PostLaunches {
            state,
            decode: (
                m.function("decode_keys")?,
                DecodeParams {
                    raw: regions.get(self.raw)?.ptr,
                    boxes,
                    cls,
                    scores,
                    keys,
                    state: state.ptr,
                    num_classes: c.num_classes as i32,
                    num_anchors: c.num_anchors as i32,
                    padded: padded as i32,
                    score_thr: c.score_threshold,
                },
            ),
            tiles: m.function("sort_tiles")?,
            global: m.function("sort_merge_global")?,
            shared: m.function("sort_merge_shared")?,
            sort: SortParams {
                keys,
                state: state.ptr,
                padded,
                k: 0,
                j: 0,
                pad: 0,
            },
            nms: (
                m.function("nms_greedy")?,
                NmsParams {
                    keys,
                    boxes,
                    cls,
                    scores,
                    state: state.ptr,
                    out: regions.get(self.result)?.ptr,
                    iou_thr: c.iou_threshold,
                    max_det: (c.max_detections as usize).min(MAX_DETECTIONS) as i32,
                    ratio: lb.scale as f32,
                    left: lb.left as f32,
                    top: lb.top as f32,
                    src_w: lb.src_width as f32,
                    src_h: lb.src_height as f32,
                    pad: 0,
                },
            ),
        });
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn enqueue(
        &self,
        stream: &tether_runtime::cuda::Stream,
    ) -> Result<(), tether_runtime::cuda::DriverError> {
        use crate::kernels::{NMS_THREADS, SORT_THREADS};
        let Some(l) = &self.device else {
            return Err(not_prepared());
        };
        let padded = l.sort.padded;
        // SAFETY: every parameter struct mirrors its kernel's; every region was sized from
        // the anchors (N, and P for the keys) in the session arena and outlives every launch
        // and replay; the state block is 16 bytes, 4-byte aligned.
        unsafe {
            stream.memset_u32(l.state.ptr, 0, 4)?;
            // No memset of the keys: the decode puts this run's candidates first and the sort
            // reads every slot past their count as NO_KEY.
            let (f, p) = &l.decode;
            stream.launch_params(*f, (padded.div_ceil(256), 1, 1), (256, 1, 1), 0, p)?;
            let tiles = padded / SORT_TILE;
            stream.launch_params(l.tiles, (tiles, 1, 1), (SORT_THREADS, 1, 1), 0, &l.sort)?;
            let mut k = SORT_TILE * 2;
            while k <= padded {
                let mut j = k / 2;
                while j >= SORT_TILE {
                    let p = crate::kernels::SortParams { k, j, ..l.sort };
                    stream.launch_params(
                        l.global,
                        (padded.div_ceil(256), 1, 1),
                        (256, 1, 1),
                        0,
                        &p,
                    )?;
                    j /= 2;
                }
                let p = crate::kernels::SortParams { k, j: 0, ..l.sort };
                stream.launch_params(l.shared, (tiles, 1, 1), (SORT_THREADS, 1, 1), 0, &p)?;
                k *= 2;
            }
            let (f, p) = &l.nms;
            stream.launch_params(*f, (1, 1, 1), (NMS_THREADS, 1, 1), 0, p)?;
        }
        Ok(())
    }
}

/// Check that `plan`'s I/O is the detector the configuration describes: one input `[1, 3,
/// input_height, input_width]` and, at the configuration's head index, an output `[1, 4 +
/// num_classes, num_anchors]` (the Ultralytics YOLOv8 head). Run at open
/// ([`crate::Detector::from_bundle`]) and again for each pipeline.
///
/// # Errors
/// [`DetectError::Network`] naming the engine, the shapes seen and the shapes expected.
pub fn check_io(config: &DetectConfig, plan: &Plan) -> Result<(), DetectError> {
    let io = plan.io();
    let (c, n) = (config.num_classes as usize, config.num_anchors as usize);
    let (w, h) = (config.input_width as usize, config.input_height as usize);
    let want_in = [1, 3, h, w];
    let want_out = [1, 4 + c, n];
    // The head is the output the build chose (by name, shape and value range), never simply
    // the first one listed.
    let head = usize::from(config.head_output);
    match (io.inputs.as_slice(), io.outputs.get(head)) {
        ([i], Some(o)) if i.shape == want_in && o.shape == want_out => Ok(()),
        (i, o) => {
            let inputs: Vec<String> = i
                .iter()
                .map(|t| format!("`{}` {:?}", t.name, t.shape))
                .collect();
            let output = match o {
                Some(t) => format!("`{}` {:?}", t.name, t.shape),
                None => "none".into(),
            };
            Err(DetectError::Network(format!(
                "the bundle's network on engine {} has input {} and output {head} {output} (of {} outputs); its configuration says input {want_in:?} and output {head} {want_out:?} ({c} classes, {n} anchors at {w}x{h})",
                plan.kind(),
                if inputs.is_empty() {
                    "none".to_string()
                } else {
                    inputs.join(", ")
                },
                io.outputs.len()
            )))
        }
    }
}

/// Declare the detection pipeline for frames of `spec` around `plan` (the model's network,
/// input `[1, 3, h, w]`, output `[1, 4 + C, N]`): on a device plan the device flavour with
/// its scratch regions and kernels, on a host plan the host flavour.
///
/// # Errors
/// [`DetectError::Network`] when the plan's I/O does not match the configuration;
/// [`DetectError::Runtime`] for an inconsistent spec.
pub fn pipeline(
    config: &DetectConfig,
    plan: &Plan,
    spec: FrameSpec,
) -> Result<(PipelineSpec, DetectRegions), DetectError> {
    check_io(config, plan)?;
    let io = plan.io();
    let head = usize::from(config.head_output);
    let (c, n) = (config.num_classes as usize, config.num_anchors as usize);
    let (w, h) = (config.input_width as usize, config.input_height as usize);
    let mut s = PipelineSpec::new();
    let rt = |e: tether_runtime::session::SpecError| DetectError::Runtime(e.into());
    let frame = s
        .region(
            "frame u8 [H, stride]",
            spec.bytes(),
            RegionKind::Input,
            Check::Exact,
        )
        .map_err(rt)?;
    let tensor_bytes = 3 * h * w * 4;
    let tensor = s
        .region(
            "images f32 [1, 3, h, w]",
            tensor_bytes,
            RegionKind::Internal,
            Check::Exact,
        )
        .map_err(rt)?;
    let raw = s
        .region(
            "output0 f32 [1, 4 + C, N]",
            (4 + c) * n * 4,
            RegionKind::Internal,
            Check::F32Abs(1e-4),
        )
        .map_err(rt)?;
    // Every network output is bound in the model's order; the others (segmentation heads,
    // auxiliary outputs ...) are not read.
    let mut outs = Vec::with_capacity(io.outputs.len());
    for (k, t) in io.outputs.iter().enumerate() {
        if k == head {
            outs.push(raw);
            continue;
        }
        let bytes = t.byte_len().unwrap_or(0);
        outs.push(
            s.region(
                format!("output{k} `{}` (unused)", t.name),
                bytes,
                RegionKind::Internal,
                Check::Skip,
            )
            .map_err(rt)?,
        );
    }
    let result = s
        .region(
            "result DetectOutput",
            OUTPUT_BYTES,
            RegionKind::Output,
            Check::Custom(output::compare),
        )
        .map_err(rt)?;
    let device = plan.placement() == tether_runtime::Placement::Device;
    let scratch = if device {
        Some(post_scratch(&mut s, config).map_err(rt)?)
    } else {
        None
    };
    #[cfg(feature = "cuda")]
    if device {
        s.kernels(crate::kernels::module_source());
    }
    let warm_spec = spec;
    s.warmup(
        frame,
        Box::new(move |buf: &mut [u8]| fill_warmup_frame(&warm_spec, buf)),
    );
    s.stage(Box::new(LetterboxStage::new(frame, tensor, spec, *config)));
    s.network("model", plan.clone(), &[tensor], &outs)
        .map_err(rt)?;
    s.stage(Box::new(PostStage::new(raw, result, scratch, config, spec)));
    Ok((
        s,
        DetectRegions {
            frame,
            tensor,
            raw,
            result,
        },
    ))
}

/// The letterbox stage alone, for checking it against the CPU: the frame as an input
/// region, the network input tensor as an output region. Returns `(spec, frame, tensor)`.
///
/// # Errors
/// [`DetectError::Runtime`] for an inconsistent spec.
pub fn letterbox_pipeline(
    config: &DetectConfig,
    spec: FrameSpec,
    device: bool,
) -> Result<(PipelineSpec, RegionId, RegionId), DetectError> {
    let rt = |e: tether_runtime::session::SpecError| DetectError::Runtime(e.into());
    let (w, h) = (config.input_width as usize, config.input_height as usize);
    let mut s = PipelineSpec::new();
    let frame = s
        .region(
            "frame u8 [H, stride]",
            spec.bytes(),
            RegionKind::Input,
            Check::Exact,
        )
        .map_err(rt)?;
    let tensor = s
        .region(
            "images f32 [1, 3, h, w]",
            3 * h * w * 4,
            RegionKind::Output,
            Check::Exact,
        )
        .map_err(rt)?;
    #[cfg(feature = "cuda")]
    if device {
        s.kernels(crate::kernels::module_source());
    }
    let _ = device;
    s.stage(Box::new(LetterboxStage::new(frame, tensor, spec, *config)));
    Ok((s, frame, tensor))
}

/// The post-processing stage alone, for checking it against the CPU: the network output as
/// an input region, the result record as an output region (with the device scratch when
/// `device`). Returns `(spec, raw, result)`.
///
/// # Errors
/// [`DetectError::Runtime`] for an inconsistent spec.
pub fn post_pipeline(
    config: &DetectConfig,
    spec: FrameSpec,
    device: bool,
) -> Result<(PipelineSpec, RegionId, RegionId), DetectError> {
    let rt = |e: tether_runtime::session::SpecError| DetectError::Runtime(e.into());
    let (c, n) = (config.num_classes as usize, config.num_anchors as usize);
    let mut s = PipelineSpec::new();
    let raw = s
        .region(
            "output0 f32 [1, 4 + C, N]",
            (4 + c) * n * 4,
            RegionKind::Input,
            Check::Exact,
        )
        .map_err(rt)?;
    let result = s
        .region(
            "result DetectOutput",
            OUTPUT_BYTES,
            RegionKind::Output,
            Check::Custom(output::compare),
        )
        .map_err(rt)?;
    let scratch = if device {
        Some(post_scratch(&mut s, config).map_err(rt)?)
    } else {
        None
    };
    #[cfg(feature = "cuda")]
    if device {
        s.kernels(crate::kernels::module_source());
    }
    s.stage(Box::new(PostStage::new(raw, result, scratch, config, spec)));
    Ok((s, raw, result))
}

fn post_scratch(
    s: &mut PipelineSpec,
    config: &DetectConfig,
) -> Result<PostScratch, tether_runtime::session::SpecError> {
    let n = config.num_anchors as usize;
    let padded = padded_anchors(config.num_anchors) as usize;
    Ok(PostScratch {
        boxes: s.region(
            "post: boxes f32x4 [N]",
            n * 16,
            RegionKind::Internal,
            Check::Skip,
        )?,
        cls: s.region(
            "post: classes u32 [N]",
            n * 4,
            RegionKind::Internal,
            Check::Skip,
        )?,
        scores: s.region(
            "post: scores f32 [N]",
            n * 4,
            RegionKind::Internal,
            Check::Skip,
        )?,
        keys: s.region(
            "post: sort keys u64 [P]",
            padded * 8,
            RegionKind::Internal,
            Check::Skip,
        )?,
        state: s.region("post: counters", 16, RegionKind::Internal, Check::Skip)?,
    })
}

impl PostStage {
    fn new(
        raw: RegionId,
        result: RegionId,
        scratch: Option<PostScratch>,
        config: &DetectConfig,
        spec: FrameSpec,
    ) -> Self {
        let mut io = vec![raw, result];
        if let Some(sc) = &scratch {
            io.extend([sc.boxes, sc.cls, sc.scores, sc.keys, sc.state]);
        }
        PostStage {
            raw,
            result,
            scratch,
            config: *config,
            letterbox: Letterbox::new(
                spec.width,
                spec.height,
                config.input_width,
                config.input_height,
            ),
            post: Postprocessor::new(config.num_classes as usize, config.num_anchors as usize),
            dets: Detections::new(),
            io,
            #[cfg(feature = "cuda")]
            device: None,
        }
    }
}

/// A deterministic, non-trivial frame for warm-up and the load-time graph check (gradients
/// and stripes, so that the letterbox interpolates and the pad is visible).
pub fn fill_warmup_frame(spec: &FrameSpec, buf: &mut [u8]) {
    let ch = spec.format.channels();
    for y in 0..spec.height as usize {
        for x in 0..spec.width as usize {
            for k in 0..ch {
                if let Some(b) = buf.get_mut(y * spec.stride + x * ch + k) {
                    *b = ((x * 7 + y * 3 + k * 85) ^ (x / 16 * 31)) as u8;
                }
            }
        }
    }
}

#[cfg(test)]
mod sort_tests {
    use super::{SORT_TILE, padded_anchors};

    const NO_KEY: u64 = u64::MAX;
    /// `WARP_SORT_MAX` of `kernels/detect.cu`.
    const WARP_SORT_MAX: usize = 64;

    /// `kernels/detect.cu`'s `sorted_prefix`, transcribed.
    fn sorted_prefix(candidates: u32, padded: u32) -> u32 {
        let mut s = SORT_TILE;
        while s < candidates && s < padded {
            s <<= 1;
        }
        s
    }

    fn cmp_swap(k: &mut [u64], i: usize, l: usize, up: bool) {
        if (k[i] > k[l]) == up {
            k.swap(i, l);
        }
    }

    /// `bitonic_block`: `s` (a power of two long) sorted ascending, the direction of each
    /// compare-exchange from the global index `base + i`.
    fn bitonic_block(s: &mut [u64], base: usize) {
        let n = s.len();
        let mut k = 2;
        while k <= n {
            let mut j = k >> 1;
            while j > 0 {
                for i in 0..n {
                    let l = i ^ j;
                    if l > i {
                        cmp_swap(s, i, l, ((base + i) & k) == 0);
                    }
                }
                j >>= 1;
            }
            k <<= 1;
        }
    }

    /// The launch sequence of `PostLaunches::enqueue` over the kernels' bodies, with their
    /// early returns (`sort_tiles`, `sort_merge_global`, `sort_merge_shared`), run on the
    /// host. Slots past `candidates` hold stale keys, as on the device (no memset).
    fn device_sort(keys: &mut [u64], candidates: u32) {
        let padded = keys.len() as u32;
        let prefix = sorted_prefix(candidates, padded);
        let tile = SORT_TILE as usize;
        let c = candidates as usize;
        // sort_tiles
        for base in (0..padded as usize).step_by(tile) {
            if base as u32 >= prefix || candidates <= 1 {
                continue;
            }
            let n = if prefix == SORT_TILE {
                c.next_power_of_two()
            } else {
                tile
            };
            // Shared memory: slots past the count read as NO_KEY.
            let mut s: Vec<u64> = (base..base + n)
                .map(|i| if i < c { keys[i] } else { NO_KEY })
                .collect();
            bitonic_block(&mut s, base);
            // The warp path writes back the candidates only, the block path all n.
            let back = if n <= WARP_SORT_MAX { c } else { n };
            keys[base..base + back].copy_from_slice(&s[..back]);
        }
        let mut k = SORT_TILE * 2;
        while k <= padded {
            let mut j = k / 2;
            while j >= SORT_TILE {
                // sort_merge_global
                if k <= prefix {
                    for i in 0..prefix {
                        let l = i ^ j;
                        if l > i {
                            cmp_swap(keys, i as usize, l as usize, (i & k) == 0);
                        }
                    }
                }
                j /= 2;
            }
            // sort_merge_shared
            if k <= prefix {
                for base in (0..prefix as usize).step_by(tile) {
                    let mut j = tile >> 1;
                    while j > 0 {
                        for i in 0..tile {
                            let l = i ^ j;
                            if l > i {
                                cmp_swap(keys, base + i, base + l, ((base + i) & k as usize) == 0);
                            }
                        }
                        j >>= 1;
                    }
                }
            }
            k *= 2;
        }
    }

    /// Sorting only the prefix that can hold the candidates (and, within one tile, only the
    /// least power of two that holds them) puts every candidate in order in slots
    /// `0..count`, for every candidate count from none to every slot: the candidates (unique
    /// keys, in the arbitrary order the decode's atomic slots give them) first, the slots
    /// past them holding stale keys of an earlier run (smaller and larger than any
    /// candidate), as they do on the device.
    #[test]
    fn the_sorted_prefix_sorts_every_candidate_count() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for anchors in [2100u32, 8400, 21504] {
            let padded = padded_anchors(anchors);
            let counts = [
                0,
                1,
                2,
                3,
                31,
                32,
                33,
                63,
                64,
                65,
                100,
                1000,
                2047,
                2048,
                2049,
                4096,
                4097,
                anchors - 1,
                anchors,
            ];
            for count in counts.into_iter().filter(|&c| c <= anchors) {
                // Stale keys everywhere, then this run's candidates in the first slots.
                let mut keys: Vec<u64> = (0..padded).map(|_| next()).collect();
                for (slot, key) in keys.iter_mut().take(count as usize).enumerate() {
                    // Score bits above, the anchor (unique) below: as decode_keys builds them.
                    *key = (next() >> 32) << 32 | slot as u64;
                }
                let mut want = keys[..count as usize].to_vec();
                want.sort_unstable();
                device_sort(&mut keys, count);
                assert_eq!(
                    &keys[..count as usize],
                    &want[..],
                    "{anchors} anchors, {count} candidates"
                );
            }
        }
    }
}
