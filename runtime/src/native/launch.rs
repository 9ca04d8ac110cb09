//! The executor's launch list: every step of the IR turned into one operation with every
//! address resolved (kernel parameter structs, cuDNN buffers and algorithm, BLAS arguments).
//! Built at bind time from the bound regions' base addresses; pure logic, no CUDA, so the
//! same list can be run by the host emulator ([`super::emulate`]) in tests.

use super::Compiled;
use super::fusion::Fusion;
use super::gemm::{BlasGemm, blas_gemm};
use super::ir::{ElemType, StepKind, TensorId};
use super::kernels::{
    self, BiasActParams, CopyParams, EwParams, GatherParams, ReduceParams, ResizeParams,
    SoftmaxParams, TransposeParams,
};
use super::memory::{BUFFER_ALIGN, Region};

/// Base addresses of every region (device addresses on the GPU, host addresses in the
/// emulator).
#[derive(Clone, Copy, Debug)]
pub struct Bases<'a> {
    /// The workspace region.
    pub workspace: u64,
    /// The plan's weight blob.
    pub weights: u64,
    /// Each input region.
    pub inputs: &'a [u64],
    /// Each output region.
    pub outputs: &'a [u64],
}

/// The address of element `[0, 0, ...]` of tensor `t`.
pub fn address(c: &Compiled, b: &Bases<'_>, t: TensorId) -> u64 {
    let (region, off) = c.memory.locate(&c.graph, t);
    let base = match region {
        Region::Workspace => b.workspace,
        Region::Weights => b.weights,
        Region::Input(i) => b.inputs[i],
        Region::Output(i) => b.outputs[i],
    };
    base + off as u64
}

fn align(v: usize) -> usize {
    v.div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN
}

/// The workspace layout: activations, then cuDNN scratch, then cuBLAS workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// (offset, bytes) of cuDNN's scratch.
    pub cudnn_ws: (usize, usize),
    /// (offset, bytes) of cuBLAS's workspace.
    pub cublas_ws: (usize, usize),
    /// Total workspace bytes.
    pub workspace_bytes: usize,
}

impl Layout {
    /// Lay out `activation_bytes`, then `cudnn_bytes`, then `cublas_bytes`, 256-aligned.
    pub fn new(activation_bytes: usize, cudnn_bytes: usize, cublas_bytes: usize) -> Layout {
        let cudnn_ws = (align(activation_bytes), align(cudnn_bytes));
        let cublas_ws = (cudnn_ws.0 + cudnn_ws.1, align(cublas_bytes));
        Layout {
            cudnn_ws,
            cublas_ws,
            workspace_bytes: (cublas_ws.0 + cublas_ws.1).max(BUFFER_ALIGN),
        }
    }
}

/// The cuDNN algorithm chosen for a convolution step and the scratch it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvChoice {
    /// `cudnnConvolutionFwdAlgo_t` value (meaningful when `legacy`).
    pub algo: u32,
    /// The legacy API runs this convolution with `algo`. False for a convolution over a
    /// pitched channels-last view (`super::ir::Tensor::nhwc_pitch`), which the legacy API
    /// refuses: it runs through its graph-API plan only.
    pub legacy: bool,
    /// Scratch bytes.
    pub workspace: usize,
    /// cuDNN's time for it when it was measured at load, microseconds (profiling labels).
    pub find_us: u32,
    /// `Some(rank)`: run through cuDNN's graph API, the configuration the heuristics rank
    /// `rank` for this convolution (`cudnn_graph`); `None`: the legacy `algo` (then
    /// `legacy` holds).
    pub graph: Option<u8>,
    /// Scratch bytes of the graph-API plan (`workspace` is the legacy algorithm's, kept as
    /// the fallback when an executor cannot rebuild the plan; there is none without
    /// `legacy`).
    pub graph_workspace: usize,
    /// `Some(rank)`: the step runs with its element-wise successor fused in
    /// ([`super::fusion`]), the configuration ranked `rank` of the fused graph's heuristics;
    /// it beat the convolution plus its `bias_act` launch at load.
    pub fused: Option<u8>,
    /// Scratch bytes of the fused plan.
    pub fused_workspace: usize,
}

/// The fused epilogue of a convolution launch: which fusion, and its operands' addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvEpilogue {
    /// The fusion ([`super::fusion`]).
    pub fusion: Fusion,
    /// The bias.
    pub b: u64,
    /// The residual, when the fusion has one.
    pub r: Option<u64>,
}

/// One enqueued operation, with every address resolved.
// Inline parameter structs (not boxed): built into a vector reserved at executor creation,
// so re-binding does not allocate either.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Launch {
    /// `ew_program`.
    Ew {
        /// Parameters.
        params: EwParams,
        /// Blocks of 256 threads (grid-stride).
        grid: u32,
    },
    /// `bias_act`: an element-wise step that is a convolution's bias and activation.
    BiasAct {
        /// Parameters.
        params: BiasActParams,
        /// Blocks of 256 threads (grid-stride).
        grid: u32,
    },
    /// `strided_copy`.
    Copy {
        /// Parameters.
        params: CopyParams,
        /// Blocks (grid-stride).
        grid: u32,
    },
    /// `tiled_transpose`: a copy between layouts (blocks of 32 x 8 threads).
    Transpose {
        /// Parameters.
        params: TransposeParams,
        /// Grid: tiles along the destination's and the source's contiguous dimension, and
        /// planes of the others.
        grid: [u32; 3],
    },
    /// `cuMemcpyDtoDAsync`.
    Memcpy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes.
        bytes: usize,
    },
    /// `cudnnConvolutionForward` of IR step `step`, or its cuDNN graph-API plan (with the
    /// next step's bias, activation and residual fused in when `epilogue` is set).
    Conv {
        /// The step (its descriptors).
        step: usize,
        /// Input.
        x: u64,
        /// Weights.
        w: u64,
        /// Output: the convolution's, or with `epilogue` the fused element-wise step's.
        y: u64,
        /// The fused epilogue (only with a fused graph-API plan).
        epilogue: Option<ConvEpilogue>,
        /// Algorithm.
        algo: u32,
        /// Scratch.
        ws: u64,
        /// Scratch bytes the algorithm needs.
        ws_bytes: usize,
    },
    /// Nothing: an element-wise step fused into convolution step `into`.
    Fused {
        /// The convolution step that computes it.
        into: usize,
    },
    /// `cudnnConvolutionBackwardData` of IR step `step` (a transposed convolution).
    Deconv {
        /// The step (its descriptors).
        step: usize,
        /// Input (cuDNN's `dy`).
        x: u64,
        /// Forward filter.
        w: u64,
        /// Output (cuDNN's `dx`).
        y: u64,
        /// Algorithm (`cudnnConvolutionBwdDataAlgo_t`).
        algo: u32,
        /// Scratch.
        ws: u64,
        /// Scratch bytes the algorithm needs.
        ws_bytes: usize,
    },
    /// `cudnnPoolingForward` of IR step `step`.
    Pool {
        /// The step.
        step: usize,
        /// Input.
        x: u64,
        /// Output.
        y: u64,
    },
    /// `cublasGemmStridedBatchedEx`.
    Gemm {
        /// The BLAS arguments.
        p: BlasGemm,
        /// Storage type of all three operands.
        dtype: ElemType,
        /// BLAS's first operand (the IR's `b` when `p.swapped`).
        a: u64,
        /// BLAS's second operand.
        b: u64,
        /// Result.
        c: u64,
    },
    /// `softmax_rows` (rows) or `softmax_cols`.
    Softmax {
        /// Parameters.
        params: SoftmaxParams,
        /// Warp per row (inner == 1).
        rows: bool,
        /// Blocks of 256 threads covering every row / column.
        grid: u32,
    },
    /// `reduce_rows` (rows) or `reduce_cols`.
    Reduce {
        /// Parameters.
        params: ReduceParams,
        /// Warp per row (inner == 1).
        rows: bool,
        /// Blocks of 256 threads covering every row / column.
        grid: u32,
    },
    /// `gather`.
    Gather {
        /// Parameters.
        params: GatherParams,
        /// Blocks (grid-stride).
        grid: u32,
    },
    /// `resize2d`.
    Resize {
        /// Parameters.
        params: ResizeParams,
        /// Blocks (grid-stride).
        grid: u32,
    },
}

fn step_kind(k: &StepKind) -> &'static str {
    match k {
        StepKind::Deconv(_) => "deconv",
        _ => "other",
    }
}

/// Resolve every step of `c` against `bases` into `out` (cleared first by the caller), one
/// launch per step. `fusions[i]` (when `Some`, for a convolution step `i` run by a fused
/// graph-API plan) fuses step `i`'s element-wise successor into it: that step becomes
/// [`Launch::Fused`].
///
/// # Errors
/// A description when a step does not fit the kernels' index ranges or has no algorithm.
pub fn build(
    c: &Compiled,
    convs: &[Option<ConvChoice>],
    fusions: &[Option<Fusion>],
    layout: &Layout,
    bases: &Bases<'_>,
    out: &mut Vec<Launch>,
) -> Result<(), String> {
    let g = &c.graph;
    let addr = |t: TensorId| address(c, bases, t);
    let cudnn_ws = bases.workspace + layout.cudnn_ws.0 as u64;
    let fusion = |i: usize| fusions.get(i).copied().flatten();
    for (i, step) in g.steps.iter().enumerate() {
        let name = &step.node;
        let u = |v: usize| u32::try_from(v).map_err(|_| format!("{name}: {v} too large"));
        if let Some(f) = i.checked_sub(1).and_then(fusion).filter(|f| f.ew == i) {
            out.push(Launch::Fused { into: f.ew - 1 });
            continue;
        }
        let launch = match &step.kind {
            StepKind::Elementwise {
                inputs,
                output,
                program,
            } => {
                if let Some(params) = kernels::bias_act_params(g, inputs, *output, program, &addr) {
                    Launch::BiasAct {
                        grid: kernels::grid_for(params.threads()),
                        params,
                    }
                } else {
                    let params = kernels::ew_params(g, name, inputs, *output, program, &addr)
                        .map_err(|e| e.to_string())?;
                    Launch::Ew {
                        grid: kernels::grid_for(params.n),
                        params,
                    }
                }
            }
            StepKind::Copy { src, dst } => {
                if kernels::is_block_copy(g, *src, *dst) {
                    let t = g.tensor(*dst);
                    Launch::Memcpy {
                        dst: addr(*dst),
                        src: addr(*src),
                        bytes: t.numel() * t.dtype.size(),
                    }
                } else {
                    let params = kernels::copy_params(g, name, *src, *dst, &addr)
                        .map_err(|e| e.to_string())?;
                    match kernels::transpose_params(&params) {
                        Some((params, grid)) => Launch::Transpose { params, grid },
                        None => Launch::Copy {
                            grid: kernels::grid_for(params.n),
                            params,
                        },
                    }
                }
            }
            StepKind::Conv(cv) | StepKind::Deconv(cv) => {
                let choice = convs
                    .get(i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| format!("{name}: convolution without an algorithm"))?;
                if choice.workspace > layout.cudnn_ws.1 {
                    return Err(format!("{name}: algorithm scratch exceeds the workspace"));
                }
                let (step, x, w) = (i, addr(cv.x), addr(cv.w));
                let (algo, ws, ws_bytes) = (choice.algo, cudnn_ws, choice.workspace);
                let epilogue = fusion(i).map(|f| ConvEpilogue {
                    fusion: f,
                    b: addr(f.bias),
                    r: f.residual.map(addr),
                });
                let y = epilogue.map_or(addr(cv.y), |e| addr(e.fusion.out));
                if matches!(step_kind(&g.steps[i].kind), "deconv") {
                    if epilogue.is_some() {
                        return Err(format!("{name}: a transposed convolution has no fusion"));
                    }
                    Launch::Deconv {
                        step,
                        x,
                        w,
                        y,
                        algo,
                        ws,
                        ws_bytes,
                    }
                } else {
                    Launch::Conv {
                        step,
                        x,
                        w,
                        y,
                        epilogue,
                        algo,
                        ws,
                        ws_bytes,
                    }
                }
            }
            StepKind::Pool(pl) => Launch::Pool {
                step: i,
                x: addr(pl.x),
                y: addr(pl.y),
            },
            StepKind::Gemm(gm) => {
                let bp = blas_gemm(gm)
                    .ok_or_else(|| format!("{name}: a matrix product that fits no BLAS call"))?;
                let (a, b) = if bp.swapped {
                    (addr(gm.b), addr(gm.a))
                } else {
                    (addr(gm.a), addr(gm.b))
                };
                Launch::Gemm {
                    p: bp,
                    dtype: g.tensor(gm.c).dtype,
                    a,
                    b,
                    c: addr(gm.c),
                }
            }
            StepKind::Softmax(s) => {
                let rows = s.inner == 1;
                let threads = if rows {
                    s.outer * 32
                } else {
                    s.outer * s.inner
                };
                Launch::Softmax {
                    params: SoftmaxParams {
                        x: addr(s.x),
                        y: addr(s.y),
                        outer: u(s.outer)?,
                        n: u(s.n)?,
                        inner: u(s.inner)?,
                        dtype: g.tensor(s.x).dtype as u32,
                        log: s.log as u32,
                        pad: 0,
                    },
                    rows,
                    grid: u(threads.div_ceil(256))?.max(1),
                }
            }
            StepKind::Reduce(r) => {
                let rows = r.inner == 1;
                let threads = if rows {
                    r.outer * 32
                } else {
                    r.outer * r.inner
                };
                Launch::Reduce {
                    params: ReduceParams {
                        x: addr(r.x),
                        y: addr(r.y),
                        outer: u(r.outer)?,
                        n: u(r.n)?,
                        inner: u(r.inner)?,
                        kind: r.kind as u32,
                        dtype: g.tensor(r.x).dtype as u32,
                        pad: 0,
                    },
                    rows,
                    grid: u(threads.div_ceil(256))?.max(1),
                }
            }
            StepKind::Gather(gt) => Launch::Gather {
                params: GatherParams {
                    data: addr(gt.data),
                    indices: addr(gt.indices),
                    y: addr(gt.y),
                    outer: u(gt.outer)?,
                    n: u(gt.n)?,
                    inner: u(gt.inner)?,
                    count: u(gt.count)?,
                    elem_bytes: g.tensor(gt.data).dtype.size() as u32,
                    index_bytes: g.tensor(gt.indices).dtype.size() as u32,
                },
                grid: kernels::grid_for(u(gt.outer * gt.count * gt.inner)?),
            },
            StepKind::Resize(r) => Launch::Resize {
                params: ResizeParams {
                    x: addr(r.x),
                    y: addr(r.y),
                    iy: addr(r.iy),
                    wy: addr(r.wy),
                    ix: addr(r.ix),
                    wx: addr(r.wx),
                    outer: u(r.outer)?,
                    h_in: u(r.h_in)?,
                    w_in: u(r.w_in)?,
                    h_out: u(r.h_out)?,
                    w_out: u(r.w_out)?,
                    win_h: u(r.win_h)?,
                    win_w: u(r.win_w)?,
                    x_dtype: g.tensor(r.x).dtype as u32,
                    y_dtype: g.tensor(r.y).dtype as u32,
                    pad: 0,
                },
                grid: kernels::grid_for(u(r.outer * r.h_out * r.w_out)?),
            },
        };
        out.push(launch);
    }
    Ok(())
}
