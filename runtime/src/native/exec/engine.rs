//! The native GPU engine on the backend contract ([`crate::backend`]): [`NativeBackend`]
//! prepares a [`NativePlan`] (network lowered and laid out, weights uploaded once, kernels
//! loaded, a cuDNN algorithm measured for every convolution), whose [`NativeExecutor`]s are
//! bound to regions of the session arena and enqueue the whole network on the session's
//! stream, its independent branches on side streams forked from it and joined back into it
//! with events ([`crate::native::plan::schedule`]): no allocation, no synchronisation, capture-safe.
//!
//! # Workspace layout (one region of the session arena, [`DevicePlan::workspace`])
//! `[0, activations)`: every intermediate tensor at its planned offset; then each stream's
//! cuDNN scratch (the most its own convolutions' choices need), then each stream's cuBLAS
//! workspace (for the streams that run matrix products) ([`launch::Layout`]). Every part is
//! 256-byte aligned.

use std::collections::HashMap;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use crate::backend::{
    Backend, Bindings, CaptureSafety, DeviceExecutor, DevicePlan, EngineKind, Enqueue, IoSpec,
    NetworkSource, Placement, Plan, PlanMemory, Precision, PrepareError, PrepareOptions, RunError,
    SourceFormat, StepTime, WorkspaceSpec, catch_prepare, catch_run,
};
use crate::cuda::{
    ArenaPlan, Context, DeviceArena, DevicePtr, DeviceRegion, Event, Graph as CudaGraph,
    KernelModule, ModuleSource, Stream, SyncPolicy,
};
use crate::tensor::{DType, IoMode, TensorSpec};

use crate::native::exec::kernels::{KERNEL_IMAGES, KERNEL_SOURCE, Kernels};
use crate::native::exec::launch::{self, Bases, ConvChoice, Launch, Layout, address};
use crate::native::graph::{Graph, StepKind};
use crate::native::ir::error::LowerError;
use crate::native::ir::{ElemType, TensorId};
use crate::native::libs::cublas::{self, GemmMath};
use crate::native::libs::cudnn::{self, ConvMath};
use crate::native::libs::plan_cache::PlanCache;
use crate::native::libs::{cudnn_graph, load as libs};
use crate::native::ops;
use crate::native::ops::deconv::Deconv;
use crate::native::ops::elementwise;
use crate::native::ops::op::Uses;
use crate::native::ops::pool::PoolKind;
use crate::native::passes::fusion::Fusion;
use crate::native::pipeline::Compiled;
use crate::native::plan::memory::BUFFER_ALIGN;

const ENGINE: EngineKind = EngineKind::CudaNative;

/// Options of the native backend.
#[derive(Clone, Debug)]
pub struct NativeOptions {
    /// Compile the kernel library with NVRTC when no embedded image loads (feature `nvrtc`).
    pub allow_nvrtc: bool,
    /// Most workspace bytes one convolution algorithm may use (cuDNN's algorithm search
    /// considers only algorithms within it). Default 64 MiB.
    pub conv_workspace_limit: usize,
    /// Also measure cuDNN's graph-API engine configurations for each forward convolution
    /// (the heuristics' first [`cudnn_graph::MAX_CANDIDATES`] eligible ones: in fp32 no
    /// tensor-core engine) and keep whichever of them and the legacy algorithm is fastest.
    /// Default on; `TETHER_CUDNN_GRAPH=0` turns it off.
    pub cudnn_graph: bool,
    /// Which heuristics give the graph-API candidates. Default
    /// [`cudnn_graph::Search::Heuristics`]; `TETHER_CUDNN_SEARCH=wide` asks for
    /// [`cudnn_graph::Search::Wide`] (another value: a warning, the default).
    pub cudnn_search: cudnn_graph::Search,
    /// Most configurations of cuDNN's heuristics measured for a convolution with its bias,
    /// activation and residual fused in ([`crate::native::passes::fusion`]); 0 turns fusion off. Finalising
    /// a fused configuration compiles a kernel (NVRTC), so each costs load time. Default 2;
    /// `TETHER_CUDNN_FUSION=<n>` sets it (another value: a warning, the default).
    pub fusion_candidates: usize,
    /// Activation layout; `None`: the precision's default
    /// ([`crate::native::passes::layout::ActivationLayout::for_precision`]: NHWC in fp16 and TF32, NCHW in fp32).
    /// `TETHER_NATIVE_LAYOUT=nchw`, `nhwc` or `nhwc-packed` sets it (another value: a
    /// warning, the default). When cuDNN runs nothing on a convolution's or pooling's pitched
    /// operand in a network laid out [`crate::native::passes::layout::ActivationLayout::Nhwc`], the network is
    /// prepared again [`crate::native::passes::layout::ActivationLayout::NhwcPacked`], with one warning.
    pub layout: Option<crate::native::passes::layout::ActivationLayout>,
    /// Directory of the cuDNN plan cache ([`crate::native::libs::plan_cache`]): the plans cuDNN serialises
    /// (every fused convolution's among them) finalised at one load are deserialised at the
    /// next instead of compiled again. `None` (the default): kept in memory for this plan's
    /// executors only; [`NativeOptions::from_env`] takes [`crate::native::libs::plan_cache::cache_dir`]
    /// (`TETHER_CACHE_DIR`, empty: off; else `$XDG_CACHE_HOME/tether`, `~/.cache/tether`).
    pub plan_cache: Option<std::path::PathBuf>,
    /// Threads that compile the cuDNN plans a load measures before it measures them
    /// (each with its own cuDNN handle; the plans reach the measurement through the plan
    /// cache), with tensor cores (fp16, TF32) and the graph API on: in fp32 nothing is
    /// runtime-compiled. Default the machine's available parallelism, at most 8; 1 compiles
    /// on the loading thread only, as the measurement goes. `TETHER_LOAD_THREADS=<n>` sets
    /// it (any positive count; another value: a warning, the default).
    pub load_threads: usize,
    /// Most CUDA streams one run of the network is spread over ([`crate::native::plan::schedule`]):
    /// independent branches (YOLOv8's head: box and class chains at three scales) run on
    /// their own streams, forked from and joined into the session's stream with events, so
    /// that they become parallel branches of the captured graph. Each stream has its own
    /// slice of cuDNN scratch and cuBLAS workspace. Default
    /// [`crate::native::plan::schedule::DEFAULT_STREAMS`]; 1 runs every step in program order on the
    /// session's stream. `TETHER_NATIVE_STREAMS=<n>` sets it (1 to
    /// [`crate::native::plan::schedule::MAX_STREAMS`]; another value: a warning, the default).
    pub streams: usize,
}

/// The defaults, from constants only (nothing is read from the environment): the graph API
/// on, cuDNN's default heuristics, [`DEFAULT_FUSION_CANDIDATES`], the precision's layout, no
/// plan cache on disk, [`default_load_threads`],
/// [`crate::native::plan::schedule::DEFAULT_STREAMS`].
impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions {
            allow_nvrtc: false,
            conv_workspace_limit: 64 << 20,
            cudnn_graph: true,
            cudnn_search: cudnn_graph::Search::Heuristics,
            fusion_candidates: DEFAULT_FUSION_CANDIDATES,
            layout: None,
            plan_cache: None,
            load_threads: default_load_threads(),
            streams: crate::native::plan::schedule::DEFAULT_STREAMS,
        }
    }
}

impl NativeOptions {
    /// The defaults with the environment's overrides: the one place the native engine reads
    /// environment variables. `TETHER_CUDNN_GRAPH=0` turns [`NativeOptions::cudnn_graph`]
    /// off; `TETHER_CUDNN_SEARCH=wide`, `TETHER_CUDNN_FUSION=<n>`,
    /// `TETHER_NATIVE_LAYOUT=nchw|nhwc|nhwc-packed`, `TETHER_LOAD_THREADS=<n>` and
    /// `TETHER_NATIVE_STREAMS=<n>` set the fields documented with them (a value out of range:
    /// a warning and the default); the plan cache directory is `TETHER_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/tether`, else `$HOME/.cache/tether`
    /// ([`crate::native::libs::plan_cache::cache_dir`]). [`crate::Model`] uses it unless
    /// [`crate::ModelOptions::native`] is set.
    pub fn from_env() -> Self {
        let d = NativeOptions::default();
        NativeOptions {
            cudnn_graph: std::env::var("TETHER_CUDNN_GRAPH").map_or(d.cudnn_graph, |v| v != "0"),
            cudnn_search: match std::env::var("TETHER_CUDNN_SEARCH").as_deref() {
                Ok("wide") => cudnn_graph::Search::Wide,
                Ok(other) => {
                    log::warn!(
                        "TETHER_CUDNN_SEARCH={other:?} is not `wide`: cuDNN's default heuristics"
                    );
                    d.cudnn_search
                }
                Err(_) => d.cudnn_search,
            },
            fusion_candidates: env_count(
                "TETHER_CUDNN_FUSION",
                "a count",
                |_| true,
                d.fusion_candidates,
            ),
            layout: std::env::var("TETHER_NATIVE_LAYOUT").ok().and_then(|v| {
                let layout = crate::native::passes::layout::ActivationLayout::parse(&v);
                if layout.is_none() {
                    log::warn!(
                        "TETHER_NATIVE_LAYOUT={v:?} is not `nchw`, `nhwc` or `nhwc-packed`: the precision's default layout"
                    );
                }
                layout
            }),
            plan_cache: crate::native::libs::plan_cache::cache_dir(
                std::env::var_os("TETHER_CACHE_DIR"),
                std::env::var_os("XDG_CACHE_HOME"),
                std::env::var_os("HOME"),
            ),
            load_threads: env_count(
                "TETHER_LOAD_THREADS",
                "a positive count",
                |n| n > 0,
                d.load_threads,
            ),
            streams: env_count(
                "TETHER_NATIVE_STREAMS",
                &format!("a count from 1 to {}", crate::native::plan::schedule::MAX_STREAMS),
                |n| (1..=crate::native::plan::schedule::MAX_STREAMS).contains(&n),
                d.streams,
            ),
            ..d
        }
    }
}

/// The count environment variable `var` sets: `default` when unset; when set to anything
/// but `what` (a number `ok` accepts), a warning and `default`.
fn env_count(var: &str, what: &str, ok: impl Fn(usize) -> bool, default: usize) -> usize {
    match std::env::var(var) {
        Ok(v) => v.parse().ok().filter(|&n| ok(n)).unwrap_or_else(|| {
            log::warn!("{var}={v:?} is not {what}: {default}");
            default
        }),
        Err(_) => default,
    }
}

impl NativeOptions {
    /// The activation layout a network at `precision` is first prepared with: `layout`, else
    /// the precision's default; [`crate::native::passes::layout::ActivationLayout::Nhwc`] becomes
    /// [`crate::native::passes::layout::ActivationLayout::NhwcPacked`] without the graph API (`cudnn_graph` off),
    /// since pitched operands run through cuDNN's graph API only (its legacy API refuses
    /// them).
    pub fn layout_for(
        &self,
        precision: Precision,
    ) -> crate::native::passes::layout::ActivationLayout {
        match self
            .layout
            .unwrap_or(crate::native::passes::layout::ActivationLayout::for_precision(precision))
        {
            crate::native::passes::layout::ActivationLayout::Nhwc if !self.cudnn_graph => {
                crate::native::passes::layout::ActivationLayout::NhwcPacked
            }
            layout => layout,
        }
    }
}

/// Default of [`NativeOptions::load_threads`]: the available parallelism, at most 8.
pub fn default_load_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Default of [`NativeOptions::fusion_candidates`].
pub const DEFAULT_FUSION_CANDIDATES: usize = 2;

/// The native GPU backend on one device.
#[derive(Clone, Debug)]
pub struct NativeBackend {
    ctx: Context,
    options: NativeOptions,
}

impl NativeBackend {
    /// A backend preparing plans on `ctx`'s device.
    pub fn new(ctx: Context, options: NativeOptions) -> Self {
        NativeBackend { ctx, options }
    }
}

fn backend_err(network: &str, message: impl Into<String>) -> PrepareError {
    PrepareError::Backend {
        engine: ENGINE,
        network: network.to_string(),
        message: message.into(),
    }
}

fn lower_err(network: &str, e: LowerError) -> PrepareError {
    match e {
        LowerError::Unsupported { node, op, detail } => PrepareError::Unsupported {
            engine: ENGINE,
            network: network.to_string(),
            node,
            op,
            detail,
        },
        LowerError::Model(m) => backend_err(network, m),
        LowerError::TooLarge(tensor) => PrepareError::TooLarge {
            engine: ENGINE,
            network: network.to_string(),
            tensor,
        },
    }
}

fn dtype_of(dt: ElemType) -> DType {
    match dt {
        ElemType::F32 => DType::F32,
        ElemType::F16 => DType::F16,
        ElemType::I32 => DType::I32,
        ElemType::I64 => DType::I64,
        ElemType::U8 => DType::U8,
        ElemType::I8 => DType::I8,
        ElemType::Bool => DType::Bool,
    }
}

impl Backend for NativeBackend {
    fn kind(&self) -> EngineKind {
        ENGINE
    }

    fn placement(&self) -> Placement {
        Placement::Device
    }

    fn prepare(
        &self,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
    ) -> Result<Plan, PrepareError> {
        catch_prepare(ENGINE, source.network, || {
            let layout = self.options.layout_for(options.precision);
            let mut pitched_refused = false;
            let plan = match NativePlan::prepare(
                &self.ctx,
                &self.options,
                source,
                options,
                layout,
                &mut pitched_refused,
            ) {
                // cuDNN documents no set of strides every algorithm takes: when a convolution
                // or pooling over a pitched slice of channels has none, the channels are
                // packed by copies instead (the layout of earlier versions).
                Err(e) if pitched_refused => {
                    log::warn!(
                        "{}: {e}; preparing again with packed channels-last operands",
                        source.network
                    );
                    NativePlan::prepare(
                        &self.ctx,
                        &self.options,
                        source,
                        options,
                        crate::native::passes::layout::ActivationLayout::NhwcPacked,
                        &mut false,
                    )?
                }
                r => r?,
            };
            Ok(Plan::Device(Arc::new(plan)))
        })
    }
}

/// cuDNN descriptors of one step.
enum StepDescs {
    None,
    Conv {
        x: cudnn::TensorDesc,
        w: cudnn::FilterDesc,
        y: cudnn::TensorDesc,
        conv: cudnn::ConvDesc,
    },
    Pool {
        x: cudnn::TensorDesc,
        y: cudnn::TensorDesc,
        pool: cudnn::PoolDesc,
    },
}

/// A cuDNN graph-API execution plan of one convolution step, with the operation graph its
/// configuration belongs to (dropped after the plan).
struct StepPlan {
    plan: cudnn_graph::ConvPlan,
    /// Built with the step's fused epilogue ([`PlanInner::fused_geoms`]).
    fused: bool,
    _graph: cudnn_graph::ConvGraph,
}

/// What identifies a rebuilt graph-API plan: geometry (with alignments), fused epilogue,
/// heuristics rank.
type RebuildKey = (
    cudnn_graph::ConvGeometry,
    Option<cudnn_graph::FusedEpilogue>,
    u8,
);

/// The plans measured at load and the handle they were built on, kept for the first
/// executor: it runs exactly the plans that were timed, with no second finalisation (which
/// recompiles a fused plan's kernel, and once failed to: `docs/evidence/native-h200.md`).
struct Kept {
    // Dropped before the handle they belong to.
    plans: Vec<Option<Arc<StepPlan>>>,
    handle: cudnn::Handle,
}

struct PlanInner {
    // Dropped first (with the context made current, `Drop`): a cuDNN handle.
    kept: Mutex<Option<Kept>>,
    network: String,
    ctx: Context,
    io: IoSpec,
    compiled: Compiled,
    precision: Precision,
    weights: Option<DeviceArena>,
    kernels: Kernels,
    convs: Vec<Option<ConvChoice>>,
    /// Graph-API geometry (with the load-time alignments) of each convolution run through
    /// cuDNN's graph API.
    geoms: Vec<Option<cudnn_graph::ConvGeometry>>,
    /// Per step: the fusion a convolution runs with ([`ConvChoice::fused`]).
    fusions: Vec<Option<Fusion>>,
    /// Per step: the geometry (alignments of x, w and the fused output) and epilogue of a
    /// fused convolution's graph.
    fused_geoms: Vec<Option<(cudnn_graph::ConvGeometry, cudnn_graph::FusedEpilogue)>>,
    /// The heuristics the graph-API choices index into (the same query on every handle).
    search: cudnn_graph::Search,
    /// Serialised plans: the executors after the first deserialise what the load compiled.
    plan_cache: Arc<PlanCache>,
    layout: Layout,
    uses_cudnn: bool,
    uses_cublas: bool,
    // Dropped last: the kernels above are functions of this module.
    _module: KernelModule,
}

impl Drop for PlanInner {
    fn drop(&mut self) {
        // Kept plans never taken by an executor: destroyed with the context current.
        let kept = self.kept.get_mut().map(Option::take).unwrap_or(None);
        if kept.is_some() {
            let _ = self.ctx.bind();
        }
    }
}

/// A prepared network on one device: weights uploaded, kernels loaded, algorithms chosen.
pub struct NativePlan(Arc<PlanInner>);

fn conv_math(p: Precision) -> ConvMath {
    match p {
        Precision::Fp32 => ConvMath::Fp32,
        Precision::Tf32 => ConvMath::Tf32,
        Precision::Fp16 => ConvMath::Fp16,
    }
}

fn gemm_math(p: Precision) -> GemmMath {
    match p {
        Precision::Fp32 => GemmMath::Fp32,
        Precision::Tf32 => GemmMath::Tf32,
        Precision::Fp16 => GemmMath::Fp16,
    }
}

/// 4-D view of a 1-D or 2-D NCHW shape.
fn nchw(shape: &[usize]) -> Option<[i32; 4]> {
    let d = |v: usize| i32::try_from(v).ok();
    match shape.len() {
        3 => Some([d(shape[0])?, d(shape[1])?, 1, d(shape[2])?]),
        4 => Some([d(shape[0])?, d(shape[1])?, d(shape[2])?, d(shape[3])?]),
        _ => None,
    }
}

fn pair(v: &[usize], one: usize) -> Option<[i32; 2]> {
    let d = |v: usize| i32::try_from(v).ok();
    match v.len() {
        1 => Some([d(one)?, d(v[0])?]),
        2 => Some([d(v[0])?, d(v[1])?]),
        _ => None,
    }
}

/// The pixel pitch cuDNN is given for channels-last activation `t` of NCHW-ordered dims `d`:
/// its own ([`crate::native::ir::Tensor::nhwc_pitch`]), else packed (`d[1]`; the IR is validated, so
/// only a degenerate view has none).
fn pixel_pitch(t: &crate::native::ir::Tensor, d: [i32; 4]) -> i64 {
    t.nhwc_pitch().map_or(i64::from(d[1]), |p| p as i64)
}

/// cuDNN's descriptor of activation `t` (dims `d`, NCHW order) of a convolution or pooling:
/// packed in the step's layout, or channels-last with the view's pixel pitch.
fn activation_desc(
    dt: cudarc::cudnn::sys::cudnnDataType_t,
    t: &crate::native::ir::Tensor,
    d: [i32; 4],
    channels_last: bool,
) -> Result<cudnn::TensorDesc, cudnn::CudnnError> {
    let p = pixel_pitch(t, d);
    if channels_last && p != i64::from(d[1]) {
        cudnn::TensorDesc::strided(dt, d, cudnn_graph::pitched(d.map(i64::from), p))
    } else {
        cudnn::TensorDesc::new(dt, d, channels_last)
    }
}

/// Whether convolution or pooling step `i` runs channels-last with an operand that has a
/// pixel pitch wider than its channels (a slice of channels read or written in place).
fn has_pitched_operand(g: &Graph, i: usize) -> bool {
    let (ops, channels_last) = match &g.steps[i].kind {
        StepKind::Conv(c) => ([c.x, c.y], c.channels_last),
        StepKind::Pool(p) => ([p.x, p.y], p.channels_last),
        StepKind::Elementwise(_)
        | StepKind::Copy(_)
        | StepKind::Deconv(_)
        | StepKind::Gemm(_)
        | StepKind::Softmax(_)
        | StepKind::Reduce(_)
        | StepKind::Gather(_)
        | StepKind::Resize(_)
        | StepKind::UpdateRows(_) => return false,
    };
    channels_last
        && ops.iter().any(|&t| {
            let t = g.tensor(t);
            t.shape.len() == 4 && t.nhwc_pitch() != Some(t.shape[1])
        })
}

/// Build the cuDNN descriptors of step `i`.
fn step_descs(g: &Graph, i: usize, precision: Precision) -> Result<StepDescs, String> {
    let e = |e: cudnn::CudnnError| format!("step {i} ({}): {e}", g.steps[i].node);
    let kind = &g.steps[i].kind;
    let other = || format!("step {i}: a {} is no cuDNN step", kind.name());
    match kind.uses() {
        Uses::CudnnConvolution => {
            let (StepKind::Conv(c) | StepKind::Deconv(Deconv(c))) = kind else {
                return Err(other());
            };
            let transposed = matches!(kind, StepKind::Deconv(_));
            let (xt, wt, yt) = (g.tensor(c.x), g.tensor(c.w), g.tensor(c.y));
            let dt = cudnn::data_type(xt.dtype)
                .filter(|_| wt.dtype == xt.dtype && yt.dtype == xt.dtype)
                .ok_or_else(|| {
                    format!(
                        "convolution over {} / {} / {}",
                        xt.dtype, wt.dtype, yt.dtype
                    )
                })?;
            let bad = || {
                format!(
                    "convolution shapes {:?} {:?} {:?}",
                    xt.shape, wt.shape, yt.shape
                )
            };
            let xd = nchw(&xt.shape).ok_or_else(bad)?;
            let wd = nchw(&wt.shape).ok_or_else(bad)?;
            let yd = nchw(&yt.shape).ok_or_else(bad)?;
            let cl = c.channels_last;
            let x = activation_desc(dt, xt, xd, cl).map_err(e)?;
            let w = cudnn::FilterDesc::new(dt, wd, cl).map_err(e)?;
            let y = activation_desc(dt, yt, yd, cl).map_err(e)?;
            let conv = cudnn::ConvDesc::new(
                pair(&c.pads, 0).ok_or_else(bad)?,
                pair(&c.strides, 1).ok_or_else(bad)?,
                pair(&c.dilations, 1).ok_or_else(bad)?,
                i32::try_from(c.group).map_err(|_| bad())?,
                conv_math(precision),
            )
            .map_err(e)?;
            // A transposed convolution is the backward data of the forward convolution that
            // maps the output's shape to the input's: check that one.
            let (from, to, want) = if transposed {
                (&y, &x, xd)
            } else {
                (&x, &y, yd)
            };
            let _ = to;
            let out = conv.output_dims(from, &w).map_err(e)?;
            if out != want {
                return Err(format!(
                    "step {i} ({}): cuDNN computes {out:?}, the network says {want:?}",
                    g.steps[i].node
                ));
            }
            Ok(StepDescs::Conv { x, w, y, conv })
        }
        Uses::CudnnPooling => {
            let StepKind::Pool(p) = kind else {
                return Err(other());
            };
            let (xt, yt) = (g.tensor(p.x), g.tensor(p.y));
            let dt = cudnn::data_type(xt.dtype)
                .filter(|_| yt.dtype == xt.dtype)
                .ok_or_else(|| format!("pooling over {} / {}", xt.dtype, yt.dtype))?;
            let bad = || format!("pooling shapes {:?} {:?}", xt.shape, yt.shape);
            use cudarc::cudnn::sys::cudnnPoolingMode_t as M;
            let mode = match p.kind {
                PoolKind::Max => M::CUDNN_POOLING_MAX,
                PoolKind::AvgIncludePad => M::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                PoolKind::AvgExcludePad => M::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
            };
            let pool = cudnn::PoolDesc::new(
                mode,
                pair(&p.kernel, 1).ok_or_else(bad)?,
                pair(&p.pads, 0).ok_or_else(bad)?,
                pair(&p.strides, 1).ok_or_else(bad)?,
            )
            .map_err(e)?;
            let cl = p.channels_last;
            Ok(StepDescs::Pool {
                x: activation_desc(dt, xt, nchw(&xt.shape).ok_or_else(bad)?, cl).map_err(e)?,
                y: activation_desc(dt, yt, nchw(&yt.shape).ok_or_else(bad)?, cl).map_err(e)?,
                pool,
            })
        }
        Uses::Kernels | Uses::Cublas => Ok(StepDescs::None),
    }
}

/// The graph-API geometry of forward convolution step `i` with its operands at `x`, `w`, `y`
/// (their alignment is read off the addresses). `None` for anything but a 1-D or 2-D forward
/// convolution over f32 or f16.
fn conv_geometry(g: &Graph, i: usize, x: u64, w: u64, y: u64) -> Option<cudnn_graph::ConvGeometry> {
    let StepKind::Conv(c) = &g.steps[i].kind else {
        return None;
    };
    let (xt, wt, yt) = (g.tensor(c.x), g.tensor(c.w), g.tensor(c.y));
    let half = match xt.dtype {
        ElemType::F32 => false,
        ElemType::F16 => true,
        _ => return None,
    };
    let d4 = |s: &[usize]| -> Option<[i64; 4]> {
        let d = nchw(s)?;
        Some(d.map(i64::from))
    };
    let p2 = |v: &[usize], one: usize| -> Option<[i64; 2]> { Some(pair(v, one)?.map(i64::from)) };
    let pads = p2(&c.pads, 0)?;
    Some(cudnn_graph::ConvGeometry {
        x: d4(&xt.shape)?,
        w: d4(&wt.shape)?,
        y: d4(&yt.shape)?,
        pre: pads,
        post: pads,
        strides: p2(&c.strides, 1)?,
        dilations: p2(&c.dilations, 1)?,
        align: [x, w, y].map(cudnn_graph::alignment),
        half,
        channels_last: c.channels_last,
        pitch: [
            pixel_pitch(xt, nchw(&xt.shape)?),
            pixel_pitch(yt, nchw(&yt.shape)?),
        ],
    })
}

/// The cuDNN epilogue of fusion `f` of `g`, the bias and residual at `b` and `r` (their
/// addresses give the alignments cuDNN is told).
pub fn epilogue_of(f: &Fusion, g: &Graph, b: u64, r: Option<u64>) -> cudnn_graph::FusedEpilogue {
    cudnn_graph::FusedEpilogue {
        act: if f.silu {
            cudnn_graph::FusedAct::Silu
        } else {
            cudnn_graph::FusedAct::Identity
        },
        y_strides: Some(cudnn_strides(g, f.out)),
        residual: f.residual.map(|t| cudnn_strides(g, t)),
        align: [
            cudnn_graph::alignment(b),
            r.map_or(16, cudnn_graph::alignment),
        ],
        bias_f32: g.tensor(f.bias).dtype == ElemType::F32,
    }
}

/// Element strides of a 4-D view as cuDNN takes them: an axis of size 1 (stride 0 or
/// anything in the IR) gets the view's extent, a valid stride it never steps.
fn cudnn_strides(g: &Graph, t: TensorId) -> [i64; 4] {
    let t = g.tensor(t);
    let extent = t
        .shape
        .iter()
        .zip(&t.strides)
        .map(|(&n, &s)| n as i64 * s as i64)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut out = [extent; 4];
    for (d, o) in out.iter_mut().enumerate() {
        if t.shape.get(d).copied().unwrap_or(1) > 1 {
            *o = t.strides[d] as i64;
        }
    }
    out
}

/// The cuDNN epilogue of fusion `f` with its operands at `addr`, and the byte alignment of
/// the output it stores (the fused graph's `y`).
fn fused_epilogue(
    g: &Graph,
    f: &Fusion,
    addr: &dyn Fn(TensorId) -> u64,
) -> (cudnn_graph::FusedEpilogue, i64) {
    (
        epilogue_of(f, g, addr(f.bias), f.residual.map(addr)),
        cudnn_graph::alignment(addr(f.out)),
    )
}

/// A pitched operand cuDNN runs nothing on: the load is refused with `e`, flagged so that the
/// backend prepares the network again with packed operands, and what this load compiled is
/// saved first (the packed attempt's identical graphs deserialise it).
fn pitched_refusal(refused: &mut bool, cache: &PlanCache, e: PrepareError) -> PrepareError {
    *refused = true;
    let _ = cache.save();
    e
}

/// One cuDNN operation graph whose candidates a load measures: its geometry, its fused
/// epilogue (`None`: the plain convolution) and how many of its candidates are measured.
type GraphJob = (
    cudnn_graph::ConvGeometry,
    Option<cudnn_graph::FusedEpilogue>,
    usize,
);

/// The distinct operation graphs the measurement of `compiled`'s convolutions builds (the
/// same geometries, epilogues and candidate counts as the measurement loop of
/// [`NativePlan::prepare`]), with their operands at `addr`.
fn graph_jobs(
    compiled: &Compiled,
    opts: &NativeOptions,
    addr: &dyn Fn(TensorId) -> u64,
) -> Vec<GraphJob> {
    let g = &compiled.graph;
    let mut seen = std::collections::HashSet::new();
    let mut jobs = Vec::new();
    for (i, step) in g.steps.iter().enumerate() {
        let StepKind::Conv(c) = &step.kind else {
            continue;
        };
        let Some(geo) = conv_geometry(g, i, addr(c.x), addr(c.w), addr(c.y)) else {
            continue;
        };
        let mut push = |job: GraphJob| {
            if seen.insert((job.0, job.1)) {
                jobs.push(job);
            }
        };
        push((geo, None, usize::MAX));
        if opts.fusion_candidates == 0 {
            continue;
        }
        if let Some(f) = compiled.memory.fusion(&compiled.graph, i) {
            let (epi, out_align) = fused_epilogue(g, &f, addr);
            push((
                geo.with_output_alignment(out_align),
                Some(epi),
                opts.fusion_candidates,
            ));
        }
    }
    jobs
}

/// Compile the candidates of `jobs` into `cache` on up to [`NativeOptions::load_threads`]
/// threads, each with the context bound and its own cuDNN handle (cuDNN is thread-safe with
/// one handle per thread): finalising a fused configuration compiles a kernel (NVRTC and the
/// driver's JIT), the bulk of a first load, and those compiles are independent. The
/// measurement then deserialises every plan cuDNN serialises instead of compiling it, on
/// its own handle. Nothing here is required: a job that fails (a refused graph or
/// configuration, a thread without a handle) is measured, or refused, by the loop as before.
fn compile_in_parallel(
    ctx: &Context,
    jobs: &[GraphJob],
    opts: &NativeOptions,
    tensor_cores: bool,
    cache: &PlanCache,
    network: &str,
) {
    let start = std::time::Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let added = std::sync::atomic::AtomicUsize::new(0);
    let threads = opts.load_threads.min(jobs.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                if ctx.bind().is_err() {
                    return;
                }
                let Ok(h) = cudnn::Handle::new() else {
                    return;
                };
                loop {
                    let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((geo, epi, max)) = jobs.get(j) else {
                        break;
                    };
                    let graph = match epi {
                        Some(e) => cudnn_graph::ConvGraph::new_fused(
                            &h,
                            geo,
                            opts.cudnn_search,
                            tensor_cores,
                            *e,
                        ),
                        None => {
                            cudnn_graph::ConvGraph::new(&h, geo, opts.cudnn_search, tensor_cores)
                        }
                    };
                    let Ok(cg) = graph else {
                        continue;
                    };
                    for rank in 0..cg.candidates().min(*max) {
                        if let Ok(true) = cg.compile_into(&h, rank, cache) {
                            added.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    log::info!(
        "{network}: {} cuDNN plans compiled on {threads} threads in {:.2} s for {} operation graphs",
        added.into_inner(),
        start.elapsed().as_secs_f64(),
        jobs.len()
    );
}

/// The fastest of the first `max` engine configurations of `graph` (an operation graph built
/// on `handle`, `fused` when it carries an epilogue) that beats `best_us` (the time to beat,
/// measured the same way), each finalised, bound by `pack` (its operands and a scratch of
/// `limit` bytes) and timed on `stream`: its heuristics rank, plan (with the graph it belongs
/// to) and time. A graph or configuration cuDNN refuses is passed over with a debug line
/// under `label`. Plans come from (and go to) `cache` ([`cudnn_graph::ConvGraph::plan`]).
///
/// # Errors
/// A driver error synchronising the stream after the measurements.
#[allow(clippy::too_many_arguments)]
fn fastest_plan(
    ctx: &Context,
    stream: &Stream,
    handle: &cudnn::Handle,
    graph: Result<cudnn_graph::ConvGraph, cudnn::CudnnError>,
    fused: bool,
    max: usize,
    limit: usize,
    best_us: f32,
    label: &str,
    cache: &PlanCache,
    pack: impl Fn(&cudnn_graph::ConvPlan) -> Result<cudnn_graph::VariantPack, cudnn::CudnnError>,
) -> Result<Option<(u8, Arc<StepPlan>, f32)>, crate::cuda::CudaError> {
    let cg = match graph {
        Ok(cg) => cg,
        Err(e) => {
            let what = if fused {
                "fused convolution"
            } else {
                "convolution"
            };
            log::debug!("{label}: cuDNN graph API refused the {what}: {e}");
            return Ok(None);
        }
    };
    let mut best = None;
    let mut best_us = best_us;
    for rank in 0..cg.candidates().min(max) {
        let tc = cg.uses_tensor_cores(rank).unwrap_or(true);
        let Ok(plan) = cg.plan(handle, rank, Some(cache)) else {
            continue;
        };
        if plan.workspace > limit {
            continue;
        }
        let Ok(pack) = pack(&plan) else {
            continue;
        };
        // SAFETY: the pack's addresses lie in the caller's buffers for this geometry, the
        // scratch holds `limit` bytes.
        let us = time_us(ctx, stream, 3, 20, || unsafe {
            plan.execute(handle, &pack).is_ok()
        });
        log::debug!(
            "{label}: cuDNN graph candidate {rank}: {us:?} us, {} bytes of workspace{}",
            plan.workspace,
            if tc { ", tensor cores" } else { "" }
        );
        if let Some(us) = us.filter(|&us| us < best_us) {
            best_us = us;
            best = Some((rank as u8, plan, us));
        }
    }
    stream.synchronize()?;
    Ok(best.map(|(rank, plan, us)| {
        let plan = Arc::new(StepPlan {
            plan,
            fused,
            _graph: cg,
        });
        (rank, plan, us)
    }))
}

/// Whether the graph-API candidates of a plan at `precision` may use tensor cores: not in
/// fp32 (TF32 off). The measurement at load and every executor's rebuild ask the same
/// query, so the chosen position in the list names the same configuration.
fn graph_tensor_cores(precision: Precision) -> bool {
    precision != Precision::Fp32
}

/// The plan cache for this device and cuDNN: the file in `opts.plan_cache` when there is
/// one (a file that is not valid is ignored with a warning naming why, and replaced when the
/// load saves), else in memory.
fn open_plan_cache(ctx: &Context, opts: &NativeOptions, network: &str) -> PlanCache {
    let props = ctx.properties();
    let identity = crate::native::libs::plan_cache::identity(
        libs::cudnn().map_or(0, |l| l.version_code),
        &props.name,
        props.sm(),
        props.multiprocessors,
    );
    match &opts.plan_cache {
        Some(dir) => {
            let (cache, err) = PlanCache::open(dir, identity);
            if let Some(e) = err {
                log::warn!("{network}: {e}: ignored, replaced at this load's save");
            }
            cache
        }
        None => PlanCache::in_memory(identity),
    }
}

/// Mean GPU time of `runs` back-to-back enqueues of `f` on `stream` after `warmup`, in
/// microseconds (CUDA events around the batch). `None` when an enqueue failed.
fn time_us(
    ctx: &Context,
    stream: &Stream,
    warmup: usize,
    runs: usize,
    mut f: impl FnMut() -> bool,
) -> Option<f32> {
    let (a, b) = (
        Event::new(ctx, true, false).ok()?,
        Event::new(ctx, true, false).ok()?,
    );
    for _ in 0..warmup {
        if !f() {
            return None;
        }
    }
    a.record(stream).ok()?;
    for _ in 0..runs {
        if !f() {
            return None;
        }
    }
    b.record(stream).ok()?;
    stream.synchronize().ok()?;
    Some(Event::elapsed_ms(&a, &b).ok()? * 1e3 / runs as f32)
}

/// What the algorithm search decided for each step (`None` where a step has nothing to
/// decide), and the plans it measured, kept for the first executor.
struct Decisions {
    convs: Vec<Option<ConvChoice>>,
    geoms: Vec<Option<cudnn_graph::ConvGeometry>>,
    fusions: Vec<Option<Fusion>>,
    fused_geoms: Vec<Option<(cudnn_graph::ConvGeometry, cudnn_graph::FusedEpilogue)>>,
    kept: Option<Kept>,
}

impl Decisions {
    /// Nothing decided for any of `steps` steps (a network without convolutions).
    fn none(steps: usize) -> Self {
        Decisions {
            convs: vec![None; steps],
            geoms: vec![None; steps],
            fusions: vec![None; steps],
            fused_geoms: vec![None; steps],
            kept: None,
        }
    }
}

/// What one measurement decides, shared by the identical convolutions after it.
struct Measured {
    choice: ConvChoice,
    geo: Option<cudnn_graph::ConvGeometry>,
    fused_geo: Option<(cudnn_graph::ConvGeometry, cudnn_graph::FusedEpilogue)>,
    plan: Option<Arc<StepPlan>>,
}

/// The algorithm search's world: a temporary arena laid out as the session's (same offsets,
/// so the same pointer alignments as at run time), the weights, and a cuDNN handle on the
/// load stream.
struct AlgoSearch<'a> {
    ctx: &'a Context,
    opts: &'a NativeOptions,
    precision: Precision,
    network: &'a str,
    compiled: &'a Compiled,
    kernels: &'a Kernels,
    stream: &'a Stream,
    handle: &'a cudnn::Handle,
    plan_cache: &'a PlanCache,
    bases: Bases<'a>,
    /// The cuDNN scratch region of the temporary arena, `limit` bytes.
    scratch: u64,
    limit: usize,
    tensor_cores: bool,
}

impl AlgoSearch<'_> {
    /// Device address of tensor `t` in the temporary arena or the weights.
    fn addr(&self, t: TensorId) -> u64 {
        address(self.compiled, &self.bases, t)
    }

    /// What makes two convolutions the same measurement: views, parameters, operand
    /// alignments and the fused epilogue (repeated blocks of a network share the choice and
    /// the plan).
    fn conv_key(
        &self,
        c: &ops::conv::Conv,
        transposed: bool,
        epilogue: Option<(cudnn_graph::FusedEpilogue, i64)>,
    ) -> String {
        let g = &self.compiled.graph;
        let view = |t: TensorId| {
            let t = g.tensor(t);
            format!("{:?}{:?}{:?}", t.shape, t.strides, t.dtype)
        };
        let align = [self.addr(c.x), self.addr(c.w), self.addr(c.y)].map(cudnn_graph::alignment);
        format!(
            "{transposed} {} {} {} {} {:?} {:?} {:?} {} {align:?} {epilogue:?}",
            c.channels_last,
            view(c.x),
            view(c.w),
            view(c.y),
            c.pads,
            c.strides,
            c.dilations,
            c.group
        )
    }

    /// Measure convolution step `i` (`transposed`: a deconvolution): cuDNN's legacy
    /// algorithm search, then (forward convolutions, graph API on) the graph API's candidates
    /// and the fused graph ([`Self::time_graph_plans`]). A pitched operand no API runs is
    /// refused through [`pitched_refusal`].
    fn measure_conv(
        &self,
        i: usize,
        c: &ops::conv::Conv,
        transposed: bool,
        fusion: Option<Fusion>,
        epilogue: Option<(cudnn_graph::FusedEpilogue, i64)>,
        pitched_refused: &mut bool,
    ) -> Result<Measured, PrepareError> {
        let (g, network, opts) = (&self.compiled.graph, self.network, self.opts);
        let step = &g.steps[i];
        let (xa, wa, ya) = (self.addr(c.x), self.addr(c.w), self.addr(c.y));
        let StepDescs::Conv { x, w, y, conv } =
            step_descs(g, i, self.precision).map_err(|m| backend_err(network, m))?
        else {
            unreachable!("a convolution step has convolution descriptors")
        };
        let (handle, scratch_ptr, limit) = (self.handle, self.scratch, self.limit);
        // SAFETY: addresses resolve into the temporary arena and the weights, sized
        // by the memory plan for these descriptors; the scratch holds `limit` bytes.
        let found = if transposed {
            unsafe {
                cudnn::find_bwd_data_algo(handle, &w, wa, &x, xa, &conv, &y, ya, scratch_ptr, limit)
            }
        } else {
            // SAFETY: as above.
            unsafe { cudnn::find_algo(handle, &x, xa, &w, wa, &conv, &y, ya, scratch_ptr, limit) }
        };
        let step_err = |e: &dyn std::fmt::Display| {
            backend_err(network, format!("step {i} ({}): {e}", step.node))
        };
        // cuDNN's legacy API runs no algorithm on a channels-last view with a pixel
        // pitch (a slice of channels read or written in place; H200, cuDNN 9,
        // `docs/evidence/native-h200.md`, ninth run): such a convolution runs through
        // the graph API only, and is refused when that has no plan either.
        let pitched = !transposed && has_pitched_operand(g, i);
        let (found, legacy_error) = match found {
            Ok(found) => (found, None),
            Err(e) if pitched && opts.cudnn_graph => (
                cudnn::ConvAlgo {
                    algo: 0,
                    workspace: 0,
                    time_us: u32::MAX,
                },
                Some(e),
            ),
            Err(e) if pitched => {
                return Err(pitched_refusal(
                    pitched_refused,
                    self.plan_cache,
                    step_err(&e),
                ));
            }
            Err(e) => return Err(step_err(&e)),
        };
        if let Some(e) = &legacy_error {
            log::debug!(
                "{network}: {}: legacy API: {e}; its pitched operands run through the graph API only",
                step.node
            );
        }
        let mut m = Measured {
            choice: ConvChoice {
                algo: found.algo,
                legacy: legacy_error.is_none(),
                workspace: found.workspace,
                find_us: found.time_us,
                graph: None,
                graph_workspace: 0,
                fused: None,
                fused_workspace: 0,
            },
            geo: None,
            fused_geo: None,
            plan: None,
        };
        if !transposed && opts.cudnn_graph {
            self.time_graph_plans(i, (&x, &w, &conv, &y), found, fusion, epilogue, &mut m)?;
        }
        let choice = m.choice;
        if let Some(e) = legacy_error
            && choice.graph.is_none()
            && choice.fused.is_none()
        {
            return Err(pitched_refusal(
                pitched_refused,
                self.plan_cache,
                step_err(&format!(
                    "{e}; and no cuDNN graph-API plan runs its pitched channels-last operands"
                )),
            ));
        }
        log::debug!(
            "{network}: {}: {} ({} bytes of workspace, {} us)",
            step.node,
            match (choice.fused, choice.graph) {
                (Some(r), _) => format!("cuDNN graph API fused, heuristics rank {r}"),
                (None, Some(r)) => format!("cuDNN graph API, heuristics rank {r}"),
                (None, None) => format!("cuDNN algorithm {}", choice.algo),
            },
            if choice.fused.is_some() {
                choice.fused_workspace
            } else if choice.graph.is_some() {
                choice.graph_workspace
            } else {
                choice.workspace
            },
            choice.find_us
        );
        Ok(m)
    }

    /// The graph API's candidates for forward convolution step `i` against the legacy
    /// algorithm `found` (descriptors `x, w, conv, y`), each timed the same way on the real
    /// layout; the fastest is kept in `m`. Then the fused graph against the fastest plus the
    /// `bias_act` launch it would save.
    fn time_graph_plans(
        &self,
        i: usize,
        (x, w, conv, y): (
            &cudnn::TensorDesc,
            &cudnn::FilterDesc,
            &cudnn::ConvDesc,
            &cudnn::TensorDesc,
        ),
        found: cudnn::ConvAlgo,
        fusion: Option<Fusion>,
        epilogue: Option<(cudnn_graph::FusedEpilogue, i64)>,
        m: &mut Measured,
    ) -> Result<(), PrepareError> {
        let (ctx, stream, handle, opts) = (self.ctx, self.stream, self.handle, self.opts);
        let (g, network) = (&self.compiled.graph, self.network);
        let step = &g.steps[i];
        let StepKind::Conv(c) = &step.kind else {
            unreachable!("graph-API plans are timed for forward convolutions")
        };
        let (xa, wa, ya) = (self.addr(c.x), self.addr(c.w), self.addr(c.y));
        let (scratch_ptr, limit, tensor_cores) = (self.scratch, self.limit, self.tensor_cores);
        let addr = |t: TensorId| self.addr(t);
        let choice = &mut m.choice;
        let _ = handle.set_stream(stream.raw());
        let legacy_us = choice
            .legacy
            .then(|| {
                time_us(ctx, stream, 3, 20, || {
                    // SAFETY: as for the legacy search in `measure_conv`.
                    unsafe {
                        cudnn::conv_forward(
                            handle,
                            x,
                            xa,
                            w,
                            wa,
                            conv,
                            cudnn::fwd_algo(found.algo),
                            scratch_ptr,
                            found.workspace,
                            y,
                            ya,
                        )
                    }
                    .is_ok()
                })
            })
            .flatten();
        let mut best = legacy_us.unwrap_or(f32::INFINITY);
        let label = format!("{network}: {}", step.node);
        if let Some(geo) = conv_geometry(g, i, xa, wa, ya) {
            if let Some((rank, plan, us)) = fastest_plan(
                ctx,
                stream,
                handle,
                cudnn_graph::ConvGraph::new(handle, &geo, opts.cudnn_search, tensor_cores),
                false,
                usize::MAX,
                limit,
                best,
                &label,
                self.plan_cache,
                |p| p.variant_pack(xa, wa, ya, scratch_ptr),
            )? {
                best = us;
                choice.graph = Some(rank);
                choice.graph_workspace = plan.plan.workspace;
                m.geo = Some(geo);
                m.plan = Some(plan);
            }
            if let (Some(f), Some((epi, out_align))) = (fusion, epilogue) {
                let StepKind::Elementwise(e) = &g.steps[f.ew].kind else {
                    unreachable!("a fusion's successor is element-wise")
                };
                let ew_us = elementwise::bias_act(g, e, &addr).and_then(|mut call| {
                    let f = ops::kernel_index(call.kernel).and_then(|k| self.kernels.get(k))?;
                    let [gx, gy, gz] = call.grid;
                    let [bx, by, bz] = call.block;
                    time_us(ctx, stream, 3, 20, || {
                        let mut args = [call.params.as_mut_ptr() as *mut c_void];
                        // SAFETY: the kernel's one parameter struct, every address in
                        // the temporary arena or the weights.
                        unsafe { stream.launch(f, (gx, gy, gz), (bx, by, bz), 0, &mut args) }
                            .is_ok()
                    })
                });
                let geo_f = geo.with_output_alignment(out_align);
                let (ba, ra, oa) = (addr(f.bias), f.residual.map(addr), addr(f.out));
                let unfused = best + ew_us.unwrap_or(f32::INFINITY);
                if let Some((rank, plan, us)) = fastest_plan(
                    ctx,
                    stream,
                    handle,
                    cudnn_graph::ConvGraph::new_fused(
                        handle,
                        &geo_f,
                        opts.cudnn_search,
                        tensor_cores,
                        epi,
                    ),
                    true,
                    opts.fusion_candidates,
                    limit,
                    unfused,
                    &label,
                    self.plan_cache,
                    |p| p.variant_pack_fused(xa, wa, ba, ra, oa, scratch_ptr),
                )? {
                    log::debug!(
                        "{label}: fused with its bias/activation: {us} us against {best} + {ew_us:?} us"
                    );
                    best = us;
                    choice.fused = Some(rank);
                    choice.fused_workspace = plan.plan.workspace;
                    m.fused_geo = Some((geo_f, epi));
                    m.plan = Some(plan);
                }
            }
        }
        choice.find_us = best.min(u32::MAX as f32) as u32;
        Ok(())
    }

    /// A pooling over a pitched operand runs once here: cuDNN refusing it is a load-time
    /// error (the engine then lays the channels out packed), never a failed frame.
    fn try_pitched_pooling(
        &self,
        i: usize,
        pitched_refused: &mut bool,
    ) -> Result<(), PrepareError> {
        let (g, network) = (&self.compiled.graph, self.network);
        let step = &g.steps[i];
        let StepKind::Pool(pl) = &step.kind else {
            return Ok(());
        };
        let StepDescs::Pool { x, y, pool } =
            step_descs(g, i, self.precision).map_err(|m| backend_err(network, m))?
        else {
            unreachable!("a pooling step has pooling descriptors")
        };
        let _ = self.handle.set_stream(self.stream.raw());
        // SAFETY: addresses resolve into the temporary arena, sized by the memory
        // plan for these descriptors.
        unsafe { pool.forward(self.handle, &x, self.addr(pl.x), &y, self.addr(pl.y)) }.map_err(
            |e| {
                let e = backend_err(network, format!("step {i} ({}): {e}", step.node));
                pitched_refusal(pitched_refused, self.plan_cache, e)
            },
        )
    }
}

/// The algorithm search of a load: every convolution measured (and every pooling over a
/// pitched operand tried) on a zeroed temporary arena laid out as the session's, identical
/// convolutions measured once; graph-API plans compiled first on `opts.load_threads`
/// threads where kernels are compiled; the plan cache saved and trimmed to the chosen plans.
#[allow(clippy::too_many_arguments)]
fn search_algorithms(
    ctx: &Context,
    opts: &NativeOptions,
    precision: Precision,
    network: &str,
    compiled: &Compiled,
    io: &IoSpec,
    kernels: &Kernels,
    stream: &Stream,
    weights: Option<&DeviceArena>,
    plan_cache: &PlanCache,
    pitched_refused: &mut bool,
) -> Result<Decisions, PrepareError> {
    let g = &compiled.graph;
    let mut d = Decisions::none(g.steps.len());
    let mut kept_plans: Vec<Option<Arc<StepPlan>>> = vec![None; g.steps.len()];
    let limit = opts.conv_workspace_limit;
    let mut ap = ArenaPlan::new();
    let act = ap.add(
        "activations (algorithm search)",
        compiled.memory.activation_bytes.max(1),
    )?;
    let scratch = ap.add("cuDNN scratch (algorithm search)", limit.max(1))?;
    let ins: Vec<_> = io
        .inputs
        .iter()
        .map(|t| ap.add("input (algorithm search)", t.byte_len().unwrap_or(0).max(1)))
        .collect::<Result<_, _>>()?;
    let outs: Vec<_> = io
        .outputs
        .iter()
        .map(|t| {
            ap.add(
                "output (algorithm search)",
                t.byte_len().unwrap_or(0).max(1),
            )
        })
        .collect::<Result<_, _>>()?;
    let total = ap.total_bytes();
    let temp = DeviceArena::new(ctx, ap).map_err(crate::cuda::CudaError::from)?;
    // Zeroes, not garbage: NaN or denormal garbage can skew the timings.
    // SAFETY: the whole arena, 4-byte multiple (total is 256-aligned).
    unsafe { stream.memset_u32(temp.base(), 0, total / 4) }
        .and_then(|_| stream.synchronize())
        .map_err(crate::cuda::CudaError::from)?;
    let in_regions: Vec<u64> = ins.iter().map(|&r| temp.ptr(r).0).collect();
    let out_regions: Vec<u64> = outs.iter().map(|&r| temp.ptr(r).0).collect();
    let handle = cudnn::Handle::new().map_err(|e| backend_err(network, e.to_string()))?;
    let _ = handle.set_stream(stream.raw());
    let search = AlgoSearch {
        ctx,
        opts,
        precision,
        network,
        compiled,
        kernels,
        stream,
        handle: &handle,
        plan_cache,
        bases: Bases {
            workspace: temp.ptr(act).0,
            weights: weights.map_or(0, |w| w.base().0),
            inputs: &in_regions,
            outputs: &out_regions,
        },
        scratch: temp.ptr(scratch).0,
        limit,
        tensor_cores: graph_tensor_cores(precision),
    };
    let addr = |t: TensorId| search.addr(t);
    let fusion_start = std::time::Instant::now();
    // Only where kernels are compiled: with tensor cores (fp16, TF32) cuDNN fuses and
    // runtime-compiles; in fp32 its plans finalise in milliseconds, and deserialising
    // them is no cheaper (H200: 320 fp32 loaded 0.7 s slower with 8 threads,
    // `docs/evidence/native-h200.md`, ninth run).
    if opts.cudnn_graph && opts.load_threads > 1 && search.tensor_cores {
        let jobs = graph_jobs(compiled, opts, &addr);
        if !jobs.is_empty() {
            compile_in_parallel(ctx, &jobs, opts, search.tensor_cores, plan_cache, network);
        }
    }
    let mut measured: HashMap<String, Measured> = HashMap::new();
    for (i, step) in g.steps.iter().enumerate() {
        let (StepKind::Conv(c) | StepKind::Deconv(Deconv(c))) = &step.kind else {
            continue;
        };
        let transposed = matches!(step.kind, StepKind::Deconv(_));
        // The fusion this convolution could take, its epilogue and output alignment.
        let fusion = (!transposed && opts.cudnn_graph && opts.fusion_candidates > 0)
            .then(|| compiled.memory.fusion(&compiled.graph, i))
            .flatten();
        let epilogue = fusion.map(|f| fused_epilogue(g, &f, &addr));
        let key = search.conv_key(c, transposed, epilogue);
        if !measured.contains_key(&key) {
            let m = search.measure_conv(i, c, transposed, fusion, epilogue, pitched_refused)?;
            measured.insert(key.clone(), m);
        }
        // The measurement's decision recorded for step `i` (with the fusion the step would
        // take), the same for a fresh measurement and an identical convolution's.
        let m = &measured[&key];
        d.convs[i] = Some(m.choice);
        d.geoms[i] = m.geo;
        if m.choice.fused.is_some() {
            d.fusions[i] = fusion;
            d.fused_geoms[i] = m.fused_geo;
        }
        kept_plans[i] = m.plan.clone();
    }
    for i in (0..g.steps.len()).filter(|&i| has_pitched_operand(g, i)) {
        search.try_pitched_pooling(i, pitched_refused)?;
    }
    ctx.synchronize().map_err(crate::cuda::CudaError::from)?;
    let (held, hits, added) = plan_cache.counts();
    log::info!(
        "{network}: convolution algorithms measured in {:.2} s; cuDNN plan cache {}: \
         {hits} plans deserialised, {added} added, {held} held",
        fusion_start.elapsed().as_secs_f64(),
        plan_cache
            .path()
            .map_or_else(|| "in memory".to_string(), |p| p.display().to_string()),
    );
    if let Err(e) = plan_cache.save() {
        log::warn!("{network}: {e}: plans compiled again at the next load");
    }
    // In memory, only the chosen plans' serialisations: what a later executor rebuilds.
    let keep: std::collections::HashSet<&str> = kept_plans
        .iter()
        .flatten()
        .filter_map(|p| p.plan.cache_key.as_deref())
        .collect();
    plan_cache.retain(&keep);
    drop(measured);
    // The load stream dies with this function: the first executor sets its own.
    let _ = handle.set_stream(std::ptr::null_mut());
    d.kept = Some(Kept {
        plans: kept_plans,
        handle,
    });
    drop(temp);
    Ok(d)
}

/// The inputs and outputs of the lowered graph `g`, by name, with their element types and
/// shapes.
fn io_spec(g: &Graph) -> IoSpec {
    let spec = |io: &crate::native::graph::Io, mode: IoMode| {
        let t = g.tensor(io.tensor);
        TensorSpec {
            name: io.name.clone(),
            mode,
            dtype: dtype_of(t.dtype),
            shape: t.shape.clone(),
        }
    };
    IoSpec {
        inputs: g.inputs.iter().map(|io| spec(io, IoMode::Input)).collect(),
        outputs: g
            .outputs
            .iter()
            .map(|io| spec(io, IoMode::Output))
            .collect(),
    }
}

/// The compiled graph's weights in one device allocation, uploaded once (`None`: no
/// weights).
fn upload_weights(
    ctx: &Context,
    stream: &Stream,
    compiled: &Compiled,
) -> Result<Option<DeviceArena>, PrepareError> {
    let blob = compiled.memory.weight_blob(&compiled.graph);
    if blob.is_empty() {
        return Ok(None);
    }
    let mut ap = ArenaPlan::new();
    let id = ap.add("native weights", blob.len())?;
    let arena = DeviceArena::new(ctx, ap).map_err(crate::cuda::CudaError::from)?;
    // SAFETY: the arena region holds blob.len() bytes; blob lives until synchronize.
    unsafe { stream.memcpy_htod(arena.ptr(id), blob.as_ptr(), blob.len()) }
        .and_then(|_| stream.synchronize())
        .map_err(crate::cuda::CudaError::from)?;
    Ok(Some(arena))
}

/// The final memory plan of graph `g`: only the fusions that won the search keep their
/// outputs live from the convolution on (the measurement ran on the plan that allows them
/// all, which costs memory), and each must still hold under it (else it is dropped from
/// `fusions`, unfused).
fn final_memory(
    network: &str,
    g: &Graph,
    fusions: &mut [Option<Fusion>],
    streams: usize,
) -> Result<crate::native::plan::memory::MemoryPlan, PrepareError> {
    let winners: Vec<usize> = (0..g.steps.len())
        .filter(|&i| fusions[i].is_some())
        .collect();
    let memory = crate::native::plan::memory::MemoryPlan::for_fusions(g, &winners, streams)
        .and_then(|m| m.check(g).map(|_| m))
        .map_err(|e| backend_err(network, format!("internal: memory plan: {e}")))?;
    for &i in &winners {
        if memory.fusion(g, i) != fusions[i] {
            log::warn!(
                "{network}: step {i}: fusion does not hold under the final memory plan: unfused"
            );
            fusions[i] = None;
        }
    }
    Ok(memory)
}

impl NativePlan {
    /// Compile `source` for this device, front to back: lower and lay out the network
    /// ([`crate::native::pipeline::compile_fixed`]), check the libraries it needs, load the
    /// kernels, upload the weights, search the convolution algorithms
    /// ([`search_algorithms`]), plan the memory again for the fusions that won
    /// ([`final_memory`]) and lay out the workspace.
    fn prepare(
        ctx: &Context,
        opts: &NativeOptions,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
        layout: crate::native::passes::layout::ActivationLayout,
        pitched_refused: &mut bool,
    ) -> Result<Self, PrepareError> {
        let network = source.network;
        if source.format != SourceFormat::Onnx {
            return Err(backend_err(
                network,
                "the native engine runs ONNX networks only",
            ));
        }
        let compiled = crate::native::pipeline::compile_fixed(
            source.bytes,
            &options.input_shapes,
            &options.fixed_inputs,
            options.precision,
            layout,
            options.tensor_limit(),
        )
        .map_err(|e| lower_err(network, e))?;
        let g = &compiled.graph;
        let uses = |u: Uses| g.steps.iter().any(|s| s.kind.uses() == u);
        let uses_cudnn = uses(Uses::CudnnConvolution) || uses(Uses::CudnnPooling);
        let uses_cublas = uses(Uses::Cublas);
        // Libraries first: a missing cuDNN is a refusal with the paths tried, not a panic.
        if uses_cudnn {
            libs::cudnn().map_err(|e| backend_err(network, e.to_string()))?;
        }
        if uses_cublas {
            libs::cublas().map_err(|e| backend_err(network, e.to_string()))?;
        }
        ctx.bind().map_err(crate::cuda::CudaError::from)?;
        let io = io_spec(g);
        let module = KernelModule::load(
            ctx,
            ModuleSource {
                images: KERNEL_IMAGES,
                source: Some(KERNEL_SOURCE),
                allow_nvrtc: opts.allow_nvrtc,
            },
        )?;
        let kernel_set = Kernels::new(&module)?;
        let stream =
            Stream::new(ctx, SyncPolicy::Blocking).map_err(crate::cuda::CudaError::from)?;
        let weights = upload_weights(ctx, &stream, &compiled)?;

        let has_convs = uses(Uses::CudnnConvolution);
        // Read only where graph-API plans are built.
        let plan_cache = Arc::new(if has_convs && opts.cudnn_graph {
            open_plan_cache(ctx, opts, network)
        } else {
            PlanCache::in_memory(String::new())
        });
        let mut d = if has_convs || (0..g.steps.len()).any(|i| has_pitched_operand(g, i)) {
            search_algorithms(
                ctx,
                opts,
                options.precision,
                network,
                &compiled,
                &io,
                &kernel_set,
                &stream,
                weights.as_ref(),
                &plan_cache,
                pitched_refused,
            )?
        } else {
            Decisions::none(g.steps.len())
        };
        let memory = final_memory(network, g, &mut d.fusions, opts.streams)?;

        // Workspace layout.
        let cublas_bytes = if uses_cublas {
            // cuBLAS's documented recommendation: 32 MiB on Hopper and newer, 4 MiB before.
            if ctx.properties().sm() >= 90 {
                32 << 20
            } else {
                4 << 20
            }
        } else {
            0
        };
        let compiled = Compiled {
            graph: compiled.graph,
            memory,
        };
        // Each stream's scratch: the most its own convolutions' choices need
        // (`ConvChoice::scratch`).
        let (cudnn_ws, cublas_ws) = launch::stream_scratch(
            &compiled,
            |i| d.convs[i].map_or(0, |c| c.scratch()),
            cublas_bytes,
        );
        let layout = Layout::new(compiled.memory.activation_bytes, &cudnn_ws, &cublas_ws);
        let (g, memory) = (&compiled.graph, &compiled.memory);
        log::info!(
            "{network}: native engine plan: {} steps ({} convolutions, {} with bias/activation \
             fused, {} matrix products), weights {} bytes, activations {} bytes, cuDNN scratch \
             {} bytes, cuBLAS workspace {} bytes, precision {:?}, kernels {}",
            g.steps.len(),
            g.steps
                .iter()
                .filter(|s| matches!(s.kind, StepKind::Conv(_)))
                .count(),
            d.fusions.iter().flatten().count(),
            g.steps
                .iter()
                .filter(|s| matches!(s.kind, StepKind::Gemm(_)))
                .count(),
            memory.weight_bytes,
            memory.activation_bytes,
            layout.library_bytes().0,
            layout.library_bytes().1,
            options.precision,
            module.image
        );
        Ok(NativePlan(Arc::new(PlanInner {
            kept: Mutex::new(d.kept),
            network: network.to_string(),
            ctx: ctx.clone(),
            io,
            compiled,
            precision: options.precision,
            weights,
            kernels: kernel_set,
            convs: d.convs,
            geoms: d.geoms,
            fusions: d.fusions,
            fused_geoms: d.fused_geoms,
            search: opts.cudnn_search,
            plan_cache,
            layout,
            uses_cudnn,
            uses_cublas,
            _module: module,
        })))
    }

    /// The lowered graph and its memory plan (for `inspect` and tests).
    pub fn compiled(&self) -> &Compiled {
        &self.0.compiled
    }

    /// Step `i`'s chosen graph-API plan rebuilt on `h`: the fused configuration when one was
    /// chosen, else (or when it cannot be rebuilt) the plain one; `None`: the legacy
    /// algorithm. `built` shares one finalisation between identical convolutions (a fused
    /// plan's finalisation compiles a kernel).
    fn rebuild(
        &self,
        h: &cudnn::Handle,
        i: usize,
        built: &mut HashMap<RebuildKey, Option<Arc<StepPlan>>>,
    ) -> Option<Arc<StepPlan>> {
        let p = &*self.0;
        let choice = p.convs.get(i).copied().flatten()?;
        let tc = graph_tensor_cores(p.precision);
        // The scratch of the step's stream.
        let scratch = p
            .layout
            .cudnn_scratch(usize::from(p.compiled.memory.schedule.stream[i]))
            .1;
        let mut build = |geo: &cudnn_graph::ConvGeometry,
                         epi: Option<cudnn_graph::FusedEpilogue>,
                         rank: u8| {
            let fused = epi.is_some();
            let key = (*geo, epi, rank);
            // Identical convolutions share a rebuilt plan, but streams' scratch differs:
            // checked against this step's stream too.
            if let Some(plan) = built.get(&key) {
                return plan.clone().filter(|sp| sp.plan.workspace <= scratch);
            }
            let graph = match epi {
                Some(epi) => cudnn_graph::ConvGraph::new_fused(h, geo, p.search, tc, epi),
                None => cudnn_graph::ConvGraph::new(h, geo, p.search, tc),
            };
            let what = if fused { "fused plan" } else { "plan" };
            let plan = match graph.and_then(|cg| {
                cg.plan(h, usize::from(rank), Some(&p.plan_cache))
                    .map(|plan| (plan, cg))
            }) {
                Ok((plan, cg)) if plan.workspace <= scratch => Some(Arc::new(StepPlan {
                    plan,
                    fused,
                    _graph: cg,
                })),
                Ok((plan, _)) => {
                    log::warn!(
                        "{}: step {i}: cuDNN graph {what} needs {} bytes of scratch, the plan has {}",
                        p.network,
                        plan.workspace,
                        scratch
                    );
                    None
                }
                Err(e) => {
                    log::warn!(
                        "{}: step {i}: cuDNN graph {what} not rebuilt ({e})",
                        p.network
                    );
                    None
                }
            };
            built.insert(key, plan.clone());
            plan
        };
        let fused = match (choice.fused, &p.fused_geoms[i]) {
            (Some(rank), Some((geo, epi))) => build(geo, Some(*epi), rank),
            _ => None,
        };
        fused.or_else(|| match (choice.graph, &p.geoms[i]) {
            (Some(rank), Some(geo)) => build(geo, None, rank),
            _ => None,
        })
    }
}

impl DevicePlan for NativePlan {
    fn kind(&self) -> EngineKind {
        ENGINE
    }

    fn io(&self) -> &IoSpec {
        &self.0.io
    }

    fn ordinal(&self) -> usize {
        self.0.ctx.properties().ordinal
    }

    fn workspace(&self) -> WorkspaceSpec {
        WorkspaceSpec {
            bytes: self.0.layout.workspace_bytes,
            align: BUFFER_ALIGN,
        }
    }

    fn memory(&self) -> PlanMemory {
        PlanMemory {
            weights_bytes: self.0.compiled.memory.weight_bytes,
            activation_bytes: self.0.compiled.memory.activation_bytes,
        }
    }

    fn capture_safety(&self) -> CaptureSafety {
        CaptureSafety::Safe
    }

    fn executor(&self, ctx: &Context) -> Result<Box<dyn DeviceExecutor>, PrepareError> {
        let p = &self.0;
        if ctx.raw() != p.ctx.raw() {
            return Err(backend_err(
                &p.network,
                "executor requested on another device than the plan's",
            ));
        }
        ctx.bind().map_err(crate::cuda::CudaError::from)?;
        let g = &p.compiled.graph;
        let cublas = if p.uses_cublas {
            Some(cublas::Handle::new().map_err(|e| backend_err(&p.network, e.to_string()))?)
        } else {
            None
        };
        let descs = (0..g.steps.len())
            .map(|i| step_descs(g, i, p.precision))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| backend_err(&p.network, m))?;
        // The first executor takes the plans measured at load with their handle. Another
        // rebuilds the chosen configurations on its own handle by their rank in the same
        // heuristics query (an execution plan belongs to the handle it was built with): the
        // fused one, else the plain one, else the legacy algorithm measured with them (a
        // convolution without one, over pitched operands, then fails at bind).
        let kept = p.kept.lock().ok().and_then(|mut k| k.take());
        let (cudnn, graph_plans) = match kept {
            Some(k) => (Some(k.handle), k.plans),
            None => {
                let cudnn = if p.uses_cudnn {
                    Some(cudnn::Handle::new().map_err(|e| backend_err(&p.network, e.to_string()))?)
                } else {
                    None
                };
                let mut built = HashMap::new();
                let plans = (0..g.steps.len())
                    .map(|i| cudnn.as_ref().and_then(|h| self.rebuild(h, i, &mut built)))
                    .collect();
                (cudnn, plans)
            }
        };
        let packs = (0..g.steps.len()).map(|_| None).collect();
        // The schedule's side streams and events, created once here: a run only records and
        // waits on them.
        let schedule = &p.compiled.memory.schedule;
        let side = (1..schedule.streams)
            .map(|_| Stream::new(&p.ctx, SyncPolicy::Spin))
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::cuda::CudaError::from)?;
        let events = (0..schedule.events + usize::from(schedule.streams > 1))
            .map(|_| Event::new(&p.ctx, false, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::cuda::CudaError::from)?;
        let streams = Rc::new(StreamSet { side, events });
        Ok(Box::new(NativeExecutor {
            fusions: Vec::with_capacity(g.steps.len()),
            plan: Arc::clone(p),
            cudnn,
            cublas,
            graph_plans,
            packs,
            descs,
            launches: Vec::with_capacity(g.steps.len()),
            workspace: 0,
            cudnn_stream: None,
            cublas_stream: None,
            streams,
            bound: false,
        }))
    }
}

/// Per-session state of a [`NativePlan`]: library handles, descriptors, and the resolved
/// launches of the last binding.
pub struct NativeExecutor {
    plan: Arc<PlanInner>,
    // Fields drop in declaration order: the graph-API descriptors, which refer to the cuDNN
    // handle, go before it.
    /// Per step: the variant pack (addresses) of the last binding for a graph-API plan;
    /// `None` runs the legacy algorithm (a convolution without one fails at bind instead).
    packs: Vec<Option<cudnn_graph::VariantPack>>,
    /// Per step: the cuDNN graph-API execution plan of a convolution that runs through it
    /// (shared by identical convolutions).
    graph_plans: Vec<Option<Arc<StepPlan>>>,
    /// Per step: the fusion the last binding runs (a fused plan whose operands are aligned
    /// as at load).
    fusions: Vec<Option<Fusion>>,
    cudnn: Option<cudnn::Handle>,
    cublas: Option<cublas::Handle>,
    descs: Vec<StepDescs>,
    launches: Vec<Launch>,
    /// Device address of the bound workspace.
    workspace: u64,
    /// The stream the cuDNN handle was last set to: set again only when it changes.
    cudnn_stream: Option<usize>,
    /// The stream and workspace slice the cuBLAS handle was last set to.
    cublas_stream: Option<(usize, usize)>,
    /// The schedule's side streams and events (shared with a run, so that its launches may
    /// borrow the executor mutably; the run's clone never outlives it, so the executor holds
    /// the only reference whenever it can be sent to another thread).
    streams: Rc<StreamSet>,
    bound: bool,
}

/// Streams 1.. of a plan's schedule ([`crate::native::plan::schedule`]; stream 0 is the caller's), and its
/// events, then (with side streams) the fork event.
struct StreamSet {
    side: Vec<Stream>,
    events: Vec<Event>,
}

// SAFETY: the descriptors and handles are plain host objects used only through &mut self.
unsafe impl Send for NativeExecutor {}

impl Drop for NativeExecutor {
    fn drop(&mut self) {
        // The cuDNN/cuBLAS handles are destroyed right after this (field drops): make the
        // plan's context current on this thread first, as for every driver object here.
        if let Err(e) = self.plan.ctx.bind() {
            log::warn!(
                "{}: native executor dropped without its context: {e}",
                self.plan.network
            );
        }
    }
}

fn check_regions(
    what: &'static str,
    given: &[DeviceRegion],
    specs: &[TensorSpec],
) -> Result<(), RunError> {
    if given.len() != specs.len() {
        return Err(RunError::BufferCount {
            what,
            expected: specs.len(),
            actual: given.len(),
        });
    }
    for (index, (r, s)) in given.iter().zip(specs).enumerate() {
        let need = s.byte_len().unwrap_or(usize::MAX);
        if r.bytes < need {
            return Err(RunError::BufferSize {
                what: if what == "inputs" { "input" } else { "output" },
                index,
                expected: need,
                actual: r.bytes,
            });
        }
    }
    Ok(())
}

impl NativeExecutor {
    fn resolve(&mut self, b: &Bindings<'_>) -> Result<(), String> {
        let p = &*self.plan;
        let inputs: Vec<u64> = b.inputs.iter().map(|r| r.ptr.0).collect();
        let outputs: Vec<u64> = b.outputs.iter().map(|r| r.ptr.0).collect();
        let bases = Bases {
            workspace: b.workspace.ptr.0,
            weights: p.weights.as_ref().map_or(0, |w| w.base().0),
            inputs: &inputs,
            outputs: &outputs,
        };
        self.workspace = b.workspace.ptr.0;
        // A graph-API plan runs when the bound addresses are at least as aligned as the ones
        // it was chosen for; a fused one that cannot runs the legacy algorithm unfused (and a
        // convolution without one, over pitched operands, fails the check after the packs).
        let aligned = |addrs: &[u64], want: &[i64]| {
            addrs
                .iter()
                .zip(want)
                .all(|(&a, &w)| cudnn_graph::alignment(a) >= w)
        };
        let g = &p.compiled.graph;
        let addr = |t: TensorId| address(&p.compiled, &bases, t);
        self.fusions.clear();
        for (i, sp) in self.graph_plans.iter().enumerate() {
            let fusion = match (sp, p.fusions[i], &p.fused_geoms[i], &g.steps[i].kind) {
                (Some(sp), Some(f), Some((geo, epi)), StepKind::Conv(cv)) if sp.fused => {
                    let operands = [addr(cv.x), addr(cv.w), addr(f.out)];
                    let extra = [addr(f.bias), f.residual.map_or(16, addr)];
                    (aligned(&operands, &geo.align) && aligned(&extra, &epi.align)).then_some(f)
                }
                _ => None,
            };
            if sp.as_ref().is_some_and(|sp| sp.fused) && fusion.is_none() {
                log::debug!(
                    "{}: step {i}: bound addresses less aligned than at load: legacy algorithm, unfused",
                    p.network
                );
            }
            self.fusions.push(fusion);
        }
        self.launches.clear();
        launch::build(
            &p.compiled,
            &p.convs,
            &self.fusions,
            &p.layout,
            &bases,
            &mut self.launches,
        )?;
        for pack in &mut self.packs {
            *pack = None;
        }
        for l in &self.launches {
            // `ws`: the scratch of the step's stream.
            let Launch::Conv {
                step,
                x,
                w,
                y,
                epilogue,
                ws,
                ..
            } = l
            else {
                continue;
            };
            let cudnn_ws = *ws;
            let Some(sp) = &self.graph_plans[*step] else {
                continue;
            };
            let pack = match (epilogue, sp.fused, &p.geoms[*step]) {
                (Some(e), true, _) => sp.plan.variant_pack_fused(*x, *w, e.b, e.r, *y, cudnn_ws),
                (None, false, Some(geo)) if aligned(&[*x, *w, *y], &geo.align) => {
                    sp.plan.variant_pack(*x, *w, *y, cudnn_ws)
                }
                _ => {
                    if !sp.fused {
                        log::debug!(
                            "{}: step {step}: bound addresses less aligned than at load: legacy algorithm",
                            p.network
                        );
                    }
                    continue;
                }
            };
            self.packs[*step] =
                Some(pack.map_err(|e| format!("step {step}: cuDNN variant pack: {e}"))?);
        }
        // A convolution the legacy API cannot run (pitched operands) needs its graph-API
        // plan: rebuilt on this executor's handle, and bound as aligned as at load.
        for l in &self.launches {
            if let Launch::Conv { step, .. } = l
                && self.packs[*step].is_none()
                && p.convs[*step].is_some_and(|c| !c.legacy)
            {
                return Err(format!(
                    "step {step} ({}): its pitched channels-last operands run through a cuDNN \
                     graph-API plan only, and this executor has none for them (not rebuilt, or \
                     bound addresses less aligned than at load)",
                    g.steps[*step].node
                ));
            }
        }
        Ok(())
    }

    fn fail(&self, what: &'static str, detail: &dyn std::fmt::Display) -> RunError {
        log::error!("{}: native engine: {what}: {detail}", self.plan.network);
        RunError::Backend {
            engine: ENGINE,
            what,
        }
    }

    /// Enqueue the run on `stream` and, with a schedule of several streams, on the side
    /// streams forked from it and joined back into it ([`crate::native::plan::schedule`]).
    fn run(&mut self, stream: &Stream) -> Result<(), RunError> {
        self.begin(stream)?;
        let plan = Arc::clone(&self.plan);
        let schedule = &plan.compiled.memory.schedule;
        if schedule.streams == 1 {
            for i in 0..self.launches.len() {
                self.launch_one(stream, i)?;
            }
            return Ok(());
        }
        // Shared for the run (no allocation), so that launches may borrow self mutably. On
        // an error part-way, the side streams are not joined: the run has failed (eagerly,
        // its partial work stays unordered with what follows; a capture is invalid anyway).
        let set = Rc::clone(&self.streams);
        let inconsistent = |what| RunError::Backend {
            engine: ENGINE,
            what,
        };
        let (fork, events) = set
            .events
            .split_last()
            .ok_or(inconsistent("schedule without its fork event"))?;
        let on = |st: u8| -> Result<&Stream, RunError> {
            match st {
                0 => Ok(stream),
                k => set
                    .side
                    .get(usize::from(k) - 1)
                    .ok_or(inconsistent("schedule names a stream the executor lacks")),
            }
        };
        let event = |j: u32| -> Result<&Event, RunError> {
            schedule.event[j as usize]
                .and_then(|e| events.get(e as usize))
                .ok_or(inconsistent("schedule waits on a step without an event"))
        };
        fork.record(stream)?;
        for i in 0..self.launches.len() {
            let s = on(schedule.stream[i])?;
            if schedule.starts[i] {
                s.wait(fork)?;
            }
            for &d in &schedule.waits[i] {
                s.wait(event(d)?)?;
            }
            self.launch_one(s, i)?;
            if schedule.event[i].is_some() {
                event(i as u32)?.record(s)?;
            }
        }
        for &j in &schedule.joins {
            stream.wait(event(j)?)?;
        }
        Ok(())
    }

    /// Per-step GPU times inside a CUDA graph (see [`DeviceExecutor::step_times`]): the run
    /// is captured with an event record node between every two steps, the graph replayed
    /// `runs` times, and each step reports its median.
    fn profile(&mut self, stream: &Stream, runs: usize) -> Result<Vec<StepTime>, RunError> {
        self.begin(stream)?;
        let n = self.launches.len();
        let events = (0..=n)
            .map(|_| Event::new(&self.plan.ctx, true, false))
            .collect::<Result<Vec<_>, _>>()?;
        let graph = CudaGraph::capture(stream, |s| -> Result<(), RunError> {
            events[0].record_captured(s)?;
            for (i, e) in events[1..].iter().enumerate() {
                self.launch_one(s, i)?;
                e.record_captured(s)?;
            }
            Ok(())
        })
        .map_err(|e| self.fail("step_times capture", &e))?;
        let mut samples = vec![Vec::with_capacity(runs.max(1)); n];
        for _ in 0..runs.max(1) {
            graph.launch(stream)?;
            stream.synchronize()?;
            for (i, s) in samples.iter_mut().enumerate() {
                s.push(f64::from(Event::elapsed_ms(&events[i], &events[i + 1])?));
            }
        }
        let g = &self.plan.compiled.graph;
        Ok(samples
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                s.sort_by(f64::total_cmp);
                let step = &g.steps[i];
                let w = g.tensor(step.writes());
                // What this executor runs: the graph-API plan when it rebuilt one, else the
                // legacy algorithm.
                let fused = self.fusions.get(i).copied().flatten();
                let algo = match (
                    self.plan.convs.get(i).copied().flatten(),
                    self.packs.get(i).is_some_and(Option::is_some),
                    &self.launches[i],
                ) {
                    (_, _, Launch::Fused { into }) => format!(" [fused into step {into}]"),
                    (Some(c), true, _) if fused.is_some() => format!(
                        " [cuDNN graph API fused with step {}, heuristics rank {}, {} us at load]",
                        i + 1,
                        c.fused.unwrap_or_default(),
                        c.find_us
                    ),
                    (Some(c), true, _) => format!(
                        " [cuDNN graph API, eligible heuristics rank {}, {} us at load]",
                        c.graph.unwrap_or_default(),
                        c.find_us
                    ),
                    (Some(c), false, _) if c.legacy => {
                        format!(" [cuDNN algorithm {}, {} us at load]", c.algo, c.find_us)
                    }
                    (Some(_), false, _) => " [no algorithm]".to_string(),
                    (None, _, _) => String::new(),
                };
                StepTime {
                    kind: step.kind_name(),
                    label: format!(
                        "{i} {} {}{:?} ({}){algo}",
                        step.kind_name(),
                        w.name,
                        w.shape,
                        step.node
                    ),
                    ms: s[s.len() / 2],
                }
            })
            .collect())
    }

    /// Check the binding and make the context current.
    fn begin(&mut self, stream: &Stream) -> Result<(), RunError> {
        if !self.bound {
            return Err(RunError::NotBound { engine: ENGINE });
        }
        stream.bind()?;
        Ok(())
    }

    /// Point the library handle launch `i` uses at `stream` (cuBLAS with the workspace of
    /// step `i`'s stream in the schedule), when it is not already.
    fn libraries_for(&mut self, stream: &Stream, i: usize) -> Result<(), RunError> {
        let key = stream.raw() as usize;
        let slot = usize::from(self.plan.compiled.memory.schedule.stream[i]);
        match self.launches[i] {
            Launch::Conv { .. } | Launch::Deconv { .. } | Launch::Pool { .. } => {
                if self.cudnn_stream != Some(key) {
                    self.cudnn_stream = None;
                    if let Some(h) = &self.cudnn {
                        h.set_stream(stream.raw())
                            .map_err(|e| self.fail("cudnnSetStream", &e))?;
                    }
                    self.cudnn_stream = Some(key);
                }
            }
            Launch::Gemm { .. } => {
                if self.cublas_stream != Some((key, slot)) {
                    self.cublas_stream = None;
                    let (off, bytes) = self.plan.layout.cublas_workspace(slot);
                    if let Some(h) = &self.cublas {
                        // cublasSetStream resets the workspace to cuBLAS's own pool: set ours
                        // after.
                        h.bind(stream.raw(), self.workspace + off as u64, bytes)
                            .map_err(|e| self.fail("cublasSetStream/Workspace", &e))?;
                    }
                    self.cublas_stream = Some((key, slot));
                }
            }
            Launch::Kernel { .. } | Launch::Memcpy { .. } | Launch::Fused { .. } => {}
        }
        Ok(())
    }

    /// Enqueue launch `i` of the bound run on `stream` ([`Self::begin`] first).
    fn launch_one(&mut self, stream: &Stream, i: usize) -> Result<(), RunError> {
        self.libraries_for(stream, i)?;
        let k = &self.plan.kernels;
        let precision = self.plan.precision;
        {
            match &mut self.launches[i] {
                Launch::Kernel { kernel, call } => {
                    let Some(f) = k.get(*kernel) else {
                        return Err(self.fail("cuLaunchKernel", &"kernel not loaded"));
                    };
                    let [gx, gy, gz] = call.grid;
                    let [bx, by, bz] = call.block;
                    let mut args = [call.params.as_mut_ptr() as *mut c_void];
                    // SAFETY: one parameter, the struct the kernel takes by value (its operator
                    // mirrors the CUDA struct); every address in it was resolved from the
                    // bound regions at bind time.
                    unsafe { stream.launch(f, (gx, gy, gz), (bx, by, bz), 0, &mut args) }?;
                }
                Launch::Memcpy { dst, src, bytes } => {
                    // SAFETY: both ranges lie in bound regions (or the plan's weights).
                    unsafe { stream.memcpy_dtod(DevicePtr(*dst), DevicePtr(*src), *bytes) }?;
                }
                Launch::Fused { .. } => {}
                Launch::Conv {
                    step,
                    x,
                    w,
                    y,
                    epilogue,
                    algo,
                    ws,
                    ws_bytes,
                } => {
                    let (
                        Some(h),
                        StepDescs::Conv {
                            x: xd,
                            w: wd,
                            y: yd,
                            conv,
                        },
                    ) = (&self.cudnn, &self.descs[*step])
                    else {
                        return Err(self.fail("cudnnConvolutionForward", &"no descriptors"));
                    };
                    if let (Some(sp), Some(pack)) = (&self.graph_plans[*step], &self.packs[*step]) {
                        // SAFETY: the pack holds this step's bound addresses and the cuDNN
                        // scratch region (at least the plan's workspace, checked at load or
                        // executor creation); the plan was built on this handle.
                        if let Err(e) = unsafe { sp.plan.execute(h, pack) } {
                            return Err(self.fail("cudnnBackendExecute", &e));
                        }
                        return Ok(());
                    }
                    if epilogue.is_some() {
                        // Cannot happen: a fusion is bound only with its fused plan's pack.
                        return Err(
                            self.fail("cudnnBackendExecute", &"fused step without its plan")
                        );
                    }
                    // SAFETY: descriptors built for these buffers; addresses resolved from
                    // the bound regions; the scratch region holds ws_bytes.
                    let r = unsafe {
                        cudnn::conv_forward(
                            h,
                            xd,
                            *x,
                            wd,
                            *w,
                            conv,
                            cudnn::fwd_algo(*algo),
                            *ws,
                            *ws_bytes,
                            yd,
                            *y,
                        )
                    };
                    if let Err(e) = r {
                        return Err(self.fail("cudnnConvolutionForward", &e));
                    }
                }
                Launch::Deconv {
                    step,
                    x,
                    w,
                    y,
                    algo,
                    ws,
                    ws_bytes,
                } => {
                    let (
                        Some(h),
                        StepDescs::Conv {
                            x: xd,
                            w: wd,
                            y: yd,
                            conv,
                        },
                    ) = (&self.cudnn, &self.descs[*step])
                    else {
                        return Err(self.fail("cudnnConvolutionBackwardData", &"no descriptors"));
                    };
                    // SAFETY: as for the convolution.
                    let r = unsafe {
                        cudnn::deconv_forward(
                            h,
                            wd,
                            *w,
                            xd,
                            *x,
                            conv,
                            cudnn::bwd_data_algo(*algo),
                            *ws,
                            *ws_bytes,
                            yd,
                            *y,
                        )
                    };
                    if let Err(e) = r {
                        return Err(self.fail("cudnnConvolutionBackwardData", &e));
                    }
                }
                Launch::Pool { step, x, y } => {
                    let (Some(h), StepDescs::Pool { x: xd, y: yd, pool }) =
                        (&self.cudnn, &self.descs[*step])
                    else {
                        return Err(self.fail("cudnnPoolingForward", &"no descriptors"));
                    };
                    // SAFETY: as above.
                    let r = unsafe { pool.forward(h, xd, *x, yd, *y) };
                    if let Err(e) = r {
                        return Err(self.fail("cudnnPoolingForward", &e));
                    }
                }
                Launch::Gemm { p, dtype, a, b, c } => {
                    let Some(h) = &self.cublas else {
                        return Err(self.fail("cublasGemmStridedBatchedEx", &"no handle"));
                    };
                    // SAFETY: the BLAS call's strides were derived from these tensors' views;
                    // addresses resolved from the bound regions.
                    let r = unsafe { h.gemm(p, *dtype, gemm_math(precision), *a, *b, *c) };
                    if let Err(e) = r {
                        return Err(self.fail("cublasGemmStridedBatchedEx", &e));
                    }
                }
            }
        }
        Ok(())
    }
}

impl DeviceExecutor for NativeExecutor {
    unsafe fn bind(&mut self, bindings: &Bindings<'_>) -> Result<(), RunError> {
        let io = &self.plan.io;
        check_regions("inputs", bindings.inputs, &io.inputs)?;
        check_regions("outputs", bindings.outputs, &io.outputs)?;
        if bindings.workspace.bytes < self.plan.layout.workspace_bytes {
            return Err(RunError::BufferSize {
                what: "workspace",
                index: 0,
                expected: self.plan.layout.workspace_bytes,
                actual: bindings.workspace.bytes,
            });
        }
        self.bound = false;
        self.cudnn_stream = None;
        self.cublas_stream = None;
        if let Err(m) = self.resolve(bindings) {
            log::error!("{}: native engine: bind: {m}", self.plan.network);
            return Err(RunError::Backend {
                engine: ENGINE,
                what: "bind",
            });
        }
        self.bound = true;
        Ok(())
    }

    fn enqueue(&mut self, stream: &Stream, _mode: Enqueue) -> Result<(), RunError> {
        // Eager and captured runs enqueue the same work: nothing here depends on device data,
        // allocates, or synchronises.
        catch_run(ENGINE, "enqueue", || self.run(stream))
    }

    fn step_times(
        &mut self,
        stream: &Stream,
        runs: usize,
    ) -> Option<Result<Vec<StepTime>, RunError>> {
        Some(catch_run(ENGINE, "step_times", || {
            self.profile(stream, runs)
        }))
    }
}
