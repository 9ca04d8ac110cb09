//! The executor's launch list: every step of the IR turned into one operation with every
//! address resolved (kernel parameter structs, cuDNN buffers and algorithm, BLAS arguments).
//! Built at bind time from the bound regions' base addresses; pure logic, no CUDA, so the
//! same list can be run by the host emulator ([`crate::native::exec::emulate`]) in tests.

use crate::native::ir::{ElemType, TensorId};
use crate::native::ops;
use crate::native::ops::op::{BlasGemm, Call, KernelCall, Library, Uses};
use crate::native::passes::fusion::Fusion;
use crate::native::pipeline::Compiled;
use crate::native::plan::memory::{BUFFER_ALIGN, Region};
use crate::native::plan::schedule::MAX_STREAMS;

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

/// The workspace layout: activations, then the cuDNN scratch of every stream of the
/// network's schedule ([`crate::native::plan::schedule`]), then the cuBLAS workspace of every stream, each
/// slice 256-aligned and sized for the steps of its own stream (a stream that runs no
/// convolution or no matrix product gets an empty slice): steps that may run at the same
/// time never share scratch, and a stream of small convolutions does not reserve the scratch
/// of the largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Per stream: (offset, bytes) of its cuDNN scratch.
    pub cudnn_ws: [(usize, usize); MAX_STREAMS],
    /// Per stream: (offset, bytes) of its cuBLAS workspace.
    pub cublas_ws: [(usize, usize); MAX_STREAMS],
    /// Total workspace bytes.
    pub workspace_bytes: usize,
}

/// Per stream of `c`'s schedule: the most cuDNN scratch bytes `need(step)` gives for its
/// convolution steps, and `cublas_bytes` when it runs a matrix product (else 0); the
/// arguments of [`Layout::new`].
pub fn stream_scratch(
    c: &Compiled,
    need: impl Fn(usize) -> usize,
    cublas_bytes: usize,
) -> ([usize; MAX_STREAMS], [usize; MAX_STREAMS]) {
    let (mut cudnn, mut cublas) = ([0usize; MAX_STREAMS], [0usize; MAX_STREAMS]);
    for (i, (step, &st)) in c
        .graph
        .steps
        .iter()
        .zip(&c.memory.schedule.stream)
        .enumerate()
    {
        let st = usize::from(st).min(MAX_STREAMS - 1);
        match step.kind.uses() {
            Uses::CudnnConvolution => cudnn[st] = cudnn[st].max(need(i)),
            Uses::Cublas => cublas[st] = cublas_bytes,
            Uses::CudnnPooling | Uses::Kernels => {}
        }
    }
    (cudnn, cublas)
}

impl Layout {
    /// Lay out `activation_bytes`, then stream `s`'s `cudnn[s]` bytes of cuDNN scratch for
    /// every stream, then its `cublas[s]` bytes of cuBLAS workspace, 256-aligned
    /// ([`stream_scratch`]).
    pub fn new(
        activation_bytes: usize,
        cudnn: &[usize; MAX_STREAMS],
        cublas: &[usize; MAX_STREAMS],
    ) -> Layout {
        let mut at = align(activation_bytes);
        // Each slice from `at` on, in stream order.
        let mut slices = |bytes: &[usize; MAX_STREAMS]| {
            bytes.map(|b| {
                let ws = (at, align(b));
                at += ws.1;
                ws
            })
        };
        let cudnn_ws = slices(cudnn);
        let cublas_ws = slices(cublas);
        Layout {
            cudnn_ws,
            cublas_ws,
            workspace_bytes: at.max(BUFFER_ALIGN),
        }
    }

    /// (offset, bytes) of stream `stream`'s cuDNN scratch (empty for a stream out of range).
    pub fn cudnn_scratch(&self, stream: usize) -> (usize, usize) {
        self.cudnn_ws.get(stream).copied().unwrap_or((0, 0))
    }

    /// (offset, bytes) of stream `stream`'s cuBLAS workspace (empty for a stream out of
    /// range).
    pub fn cublas_workspace(&self, stream: usize) -> (usize, usize) {
        self.cublas_ws.get(stream).copied().unwrap_or((0, 0))
    }

    /// Total cuDNN scratch and cuBLAS workspace bytes over all streams.
    pub fn library_bytes(&self) -> (usize, usize) {
        (
            self.cudnn_ws.iter().map(|w| w.1).sum(),
            self.cublas_ws.iter().map(|w| w.1).sum(),
        )
    }
}

/// The cuDNN algorithm chosen for a convolution step and the scratch it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvChoice {
    /// `cudnnConvolutionFwdAlgo_t` value (meaningful when `legacy`).
    pub algo: u32,
    /// The legacy API runs this convolution with `algo`. False for a convolution over a
    /// pitched channels-last view (`crate::native::ir::Tensor::nhwc_pitch`), which the legacy API
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
    /// ([`crate::native::passes::fusion`]), the configuration ranked `rank` of the fused graph's heuristics;
    /// it beat the convolution plus its `bias_act` launch at load.
    pub fused: Option<u8>,
    /// Scratch bytes of the fused plan.
    pub fused_workspace: usize,
}

/// `cudnnConvolutionFwdAlgo_t` `CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM`: needs no scratch.
pub const IMPLICIT_GEMM: u32 = 0;

impl ConvChoice {
    /// Scratch bytes of what runs: the graph-API plans' (fused, and the plain one an
    /// executor falls back to) when the graph API was chosen, else the legacy algorithm's.
    /// A stream's scratch is sized by these ([`stream_scratch`]); the legacy algorithm kept
    /// behind a graph-API choice (an executor whose bound addresses are less aligned than at
    /// load) runs as [`IMPLICIT_GEMM`] when its own scratch does not fit.
    pub fn scratch(&self) -> usize {
        if self.graph.is_some() || self.fused.is_some() {
            self.graph_workspace.max(self.fused_workspace)
        } else {
            self.workspace
        }
    }
}

/// The fused epilogue of a convolution launch: which fusion, and its operands' addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvEpilogue {
    /// The fusion ([`crate::native::passes::fusion`]).
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
    /// A kernel of `native.cu` ([`Call::Kernel`]).
    Kernel {
        /// Its position in the registry's kernels ([`ops::kernel_index`]).
        kernel: usize,
        /// Grid, block and parameters.
        call: KernelCall,
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
}

/// Resolve every step of `c` against `bases` into `out` (cleared first by the caller), one
/// launch per step: what the step's operator enqueues ([`crate::native::ops::op::Op::call`]),
/// with the algorithm and scratch the executor chose for a library call. `fusions[i]` (when
/// `Some`, for a convolution step `i` run by a fused graph-API plan) fuses step `i`'s
/// element-wise successor into it: that step becomes [`Launch::Fused`].
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
    let schedule = &c.memory.schedule;
    if schedule.stream.len() != g.steps.len() {
        return Err(format!(
            "a schedule of {} steps for a graph of {}",
            schedule.stream.len(),
            g.steps.len()
        ));
    }
    let fusion = |i: usize| fusions.get(i).copied().flatten();
    for (i, step) in g.steps.iter().enumerate() {
        let name = &step.node;
        if let Some(f) = i.checked_sub(1).and_then(fusion).filter(|f| f.ew == i) {
            out.push(Launch::Fused { into: f.ew - 1 });
            continue;
        }
        let launch = match step.kind.call(g, name, &addr).map_err(|e| e.to_string())? {
            Call::Kernel(call) => Launch::Kernel {
                kernel: ops::kernel_index(call.kernel).ok_or_else(|| {
                    format!("{name}: kernel `{}` is not in the registry", call.kernel)
                })?,
                call,
            },
            Call::Memcpy { dst, src, bytes } => Launch::Memcpy { dst, src, bytes },
            Call::Library(Library::Pooling { x, y }) => Launch::Pool { step: i, x, y },
            Call::Library(Library::Gemm { p, dtype, a, b, c }) => {
                Launch::Gemm { p, dtype, a, b, c }
            }
            Call::Library(
                lib @ (Library::Convolution { x, w, y }
                | Library::TransposedConvolution { x, w, y }),
            ) => {
                let choice = convs
                    .get(i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| format!("{name}: convolution without an algorithm"))?;
                let st = usize::from(schedule.stream[i]);
                let (ws, ws_len) = layout.cudnn_scratch(st);
                if choice.scratch() > ws_len {
                    return Err(format!(
                        "{name}: scratch of {} bytes exceeds stream {st}'s {ws_len}",
                        choice.scratch()
                    ));
                }
                // The legacy algorithm: what runs when the graph API was not chosen (it then
                // fits), else the fallback, without scratch when its own does not fit.
                let (algo, ws_bytes) = if choice.workspace <= ws_len {
                    (choice.algo, choice.workspace)
                } else {
                    (IMPLICIT_GEMM, 0)
                };
                let ws = bases.workspace + ws as u64;
                let epilogue = fusion(i).map(|f| ConvEpilogue {
                    fusion: f,
                    b: addr(f.bias),
                    r: f.residual.map(addr),
                });
                let y = epilogue.map_or(y, |e| addr(e.fusion.out));
                if let Library::TransposedConvolution { .. } = lib {
                    if epilogue.is_some() {
                        return Err(format!("{name}: a transposed convolution has no fusion"));
                    }
                    Launch::Deconv {
                        step: i,
                        x,
                        w,
                        y,
                        algo,
                        ws,
                        ws_bytes,
                    }
                } else {
                    Launch::Conv {
                        step: i,
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
        };
        out.push(launch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_has_its_own_aligned_slice_sized_for_it() {
        let mut cudnn = [0usize; MAX_STREAMS];
        let mut cublas = [0usize; MAX_STREAMS];
        cudnn[0] = 1000;
        cudnn[2] = 64 << 20;
        cudnn[3] = 1;
        cublas[1] = 32 << 20;
        let l = Layout::new(5000, &cudnn, &cublas);
        // Activations first, then the slices in stream order, each 256-aligned.
        assert_eq!(l.cudnn_scratch(0), (5120, 1024));
        assert_eq!(l.cudnn_scratch(1), (6144, 0));
        assert_eq!(l.cudnn_scratch(2), (6144, 64 << 20));
        assert_eq!(l.cudnn_scratch(3), (6144 + (64 << 20), 256));
        assert_eq!(l.cublas_workspace(1), (6400 + (64 << 20), 32 << 20));
        assert_eq!(l.cublas_workspace(0).1, 0);
        assert_eq!(l.workspace_bytes, 6400 + (96 << 20));
        assert_eq!(l.library_bytes(), (1024 + (64 << 20) + 256, 32 << 20));
        // No two non-empty slices overlap, and all lie inside the workspace.
        let slices: Vec<(usize, usize)> = l
            .cudnn_ws
            .iter()
            .chain(&l.cublas_ws)
            .copied()
            .filter(|s| s.1 > 0)
            .collect();
        for (k, a) in slices.iter().enumerate() {
            assert!(a.0 % BUFFER_ALIGN == 0 && a.0 + a.1 <= l.workspace_bytes);
            for b in &slices[k + 1..] {
                assert!(a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0, "{a:?} {b:?}");
            }
        }
        assert_eq!(l.cudnn_scratch(MAX_STREAMS), (0, 0));
    }
}
