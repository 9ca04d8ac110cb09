//! The GPU decoder: weights uploaded once, buffers placed once, the decode step captured as
//! one CUDA graph at load (two where the layer kernel's step runs below a position) and
//! checked against an eager run (see the [module docs](super)).

use std::sync::Arc;
use std::time::Instant;

use tether_runtime::cuda::{
    ArenaPlan, Context, CudaError, DeviceArena, DevicePtr, DriverError, Event, Function, Graph,
    KernelModule, PinnedBuffer, Stream, SyncPolicy,
};

use super::kernels::{
    self, AttnParams, DecodeState, EmbedParams, GridParams, HeadNormParams, LayerMat, LayerParams,
    MatVecParams, PrepMatVecParams, PrepParams, ProjParams, PrologueParams, QkvRopeParams,
    RopeParams, SampleParams,
};
use super::lower::{
    CONFIG_BYTES, LowerError, MemoryPlan, Prologue, SampleConfig, Step, lower, lower_fused,
    lower_layers, lower_tails, prologue_shared_bytes,
};
use super::prefill::PrefillError;
use super::prefill_graph::{DecodeSide, PrefillGraph};
use super::weights::{DeviceWeights, WeightRegions};
use crate::cache::ContextFull;
use crate::forward::{Buf, Hparams, MatId, Model};
use crate::quant::TensorType;
use crate::sample::SamplerParams;

/// Options of [`GpuDecoder::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// KV cache positions (at most the model's training context; the caller checks).
    pub context: usize,
    /// How the host waits for each token.
    pub sync: SyncPolicy,
    /// Lower with [`lower_fused`] (5 launches per Llama-style layer) rather than [`lower()`]
    /// (12): the same logits bit for bit (`tests/gpu_fuse.rs`), fewer launches per token.
    pub fused: bool,
    /// Prompt tokens per replay of the prefill graph ([`super::prefill`]; default
    /// [`PREFILL_CHUNK`](super::PREFILL_CHUNK)); 0: no prefill graph, the prompt runs
    /// through the decode graph one token at a time.
    pub prefill_chunk: usize,
    /// Launch the fused kernels (`prep_matvec` / `prep_matvec_wide`, `qkv_rope`,
    /// `attention_fused` / `attention_cluster`) as
    /// programmatic dependent launches ([`Stream::launch_params_dependent`]): each starts
    /// while the previous kernel finishes and requests its weight rows from L2 before waiting
    /// for it. Only where the kernel image has SASS with `griddepcontrol` (compute capability
    /// 9.0, 10.0, 11.0; elsewhere, and without `fused`, plain launches). The same values.
    pub dependent_launch: bool,
    /// With `fused` and `dependent_launch` on compute capability 9.0 and later, the steps at
    /// positions below this one run each Llama-style layer whose matrices are all Q8_0 /
    /// Q4_0 / Q4_1 (no biases) and whose weight slices fit a block's shared memory as ONE
    /// launch of a 16-block thread block cluster (`layer` in `kernels/llm.cu`,
    /// [`lower_layers`]): 1 launch per layer instead of 5, the same values. Where the steps
    /// of later positions take the fused step (with [`layer_tail`](Self::layer_tail), its
    /// layers' tails; the layer kernel attends with one block per head, slower at long
    /// spans), the decoder captures both graphs at load, checks each
    /// against its eager run and the two against each other bit for bit, and launches the one
    /// of the step's position. 0: never (one graph); at least `context`: always (one graph).
    /// [`LAYER_KERNEL_BELOW`] by default ([`layer_kernel_below`]).
    pub layer_kernel_below: usize,
    /// Where the layer kernel's step runs (above), run all its merged layers as ONE launch of
    /// one block per SM (`layers_grid` in `kernels/llm.cu`, a cooperative launch) instead of
    /// one cluster launch per layer: each phase's rows spread over every SM, the values
    /// handed on through tagged words in global memory instead of cluster barriers; the same
    /// values, checked at load like the other graphs. Where the device cannot hold a block
    /// on every SM at once, the layer kernel's launches stay. On by default ([`grid_layers`]:
    /// `TETHER_LLM_GRID=0` off): on the real SmolLM2-135M with [`GRID_STAGE_ROWS`] staged
    /// rows, faster than the layer kernel at every position it runs (H200, session 58, means
    /// of one call: 1,374 against 1,202 tok/s at 128, 1,307 / 1,191 at 192, 1,132 / 1,110 at
    /// 512, 1,090 / 1,084 at 576; H100, session 50, 192 rows: +9 % at 128, +3 % at 512).
    pub grid_layers: bool,
    /// Where the fused step's graph runs (from [`layer_kernel_below`](Self::layer_kernel_below)
    /// on, or at every position where the layer kernel is off) on compute capability 9.0 and
    /// later, run each layer the layer kernel would take as its "tail": the fused step's
    /// `qkv_rope` and attention (`attention_cluster`, a cluster of blocks per head, with a
    /// context of at most 8,192 positions), then the layer
    /// kernel's last three phases (output projection, FFN norm, gate/up, SwiGLU, down) as one
    /// cluster launch that also computes the next such layer's `qkv_rope` where its Q/K/V
    /// have this layer's types ([`lower_tails`]): 2 launches a layer instead of 5 (64 a step
    /// instead of 153 on SmolLM2-135M; `TETHER_LLM_TAIL_PAIR=0` keeps each `qkv_rope`, 3 a
    /// layer, for comparisons). The same values, checked at load as the other graphs.
    /// [`layer_tail`] (`TETHER_LLM_LAYER_TAIL=0|1`, on by default): on an H100 with
    /// SmolLM2-135M Q4_1, 1,000 tok/s at position 2,048 against the fused step's 842
    /// (docs/evidence/llm-gpu.md, session 49, call 9).
    pub layer_tail: bool,
    /// The CPU engine's prompt tokens per forward chunk
    /// ([`GeneratorOptions::max_batch`](crate::generate::GeneratorOptions::max_batch), 512 by
    /// default): the prefill graph computes each prompt token's attention in the order the
    /// CPU engine uses for it (the one-token order only for a last token alone in its
    /// chunk), so that a prompt's logits equal the CPU engine's whatever `prefill_chunk` is.
    pub prompt_batch: usize,
}

/// The default [`GpuOptions::layer_kernel_below`]: where the layer kernel's step stops being
/// faster than the layers' tails ([`GpuOptions::layer_tail`]; H100, SmolLM2-135M Q4_1,
/// `tether bench`'s 128-token windows, session 49: the layer kernel 2.4 % ahead at 512-639,
/// 2.6 % behind at 768-895; the rates cross near 635 interpolating between the windows'
/// first positions, near 700 between their centres (session 43's way), and the two graphs
/// differ by under 1 % in between; the tails' rate is flat from 128 to 1,536;
/// docs/evidence/llm-gpu.md). One card's measurement. (Before the tails, against the fused
/// step: 1,536, session 43.)
pub const LAYER_KERNEL_BELOW: usize = 640;

/// [`GpuOptions::layer_kernel_below`] as the environment asks: `TETHER_LLM_LAYER_KERNEL=0`
/// never, `=1` always, `TETHER_LLM_LAYER_KERNEL_BELOW=N` below position N, else
/// [`LAYER_KERNEL_BELOW`]. A value that is not a number is ignored (said in the log).
pub fn layer_kernel_below() -> usize {
    let var = |name: &str| std::env::var(name).ok();
    layer_kernel_below_of(
        var("TETHER_LLM_LAYER_KERNEL").as_deref(),
        var("TETHER_LLM_LAYER_KERNEL_BELOW").as_deref(),
    )
}

/// [`GpuOptions::grid_layers`] as the environment asks: `TETHER_LLM_GRID=0` off, unset or
/// `1` on; another value is ignored (said in the log).
pub fn grid_layers() -> bool {
    switch_of(
        "TETHER_LLM_GRID",
        std::env::var("TETHER_LLM_GRID").ok().as_deref(),
    )
    .unwrap_or(true)
}

/// [`GpuOptions::layer_tail`] as the environment asks: `TETHER_LLM_LAYER_TAIL=0` off, `1`
/// on, unset on; another value is ignored (said in the log).
pub fn layer_tail() -> bool {
    switch_of(
        "TETHER_LLM_LAYER_TAIL",
        std::env::var("TETHER_LLM_LAYER_TAIL").ok().as_deref(),
    )
    .unwrap_or(true)
}

/// Whether the layers' tails are paired with the next layer's Q/K/V ([`lower_tails`]'s
/// `pair`): `TETHER_LLM_TAIL_PAIR=0` not (3 launches a layer, for comparisons), unset or `1`
/// paired; another value is ignored (said in the log).
pub fn tail_pair() -> bool {
    switch_of(
        "TETHER_LLM_TAIL_PAIR",
        std::env::var("TETHER_LLM_TAIL_PAIR").ok().as_deref(),
    )
    .unwrap_or(true)
}

/// Cache rows a `layers_grid` attention block stages in shared memory at most:
/// `TETHER_LLM_GRID_STAGE=N` (for comparisons), else [`GRID_STAGE_ROWS`]; a value that is not
/// a number is ignored (said in the log).
fn grid_stage_rows_of(value: Option<&str>) -> usize {
    match value {
        Some(v) => v.trim().parse().unwrap_or_else(|_| {
            log::warn!("TETHER_LLM_GRID_STAGE={v:?} is not a number; {GRID_STAGE_ROWS} taken");
            GRID_STAGE_ROWS
        }),
        None => GRID_STAGE_ROWS,
    }
}

/// A `0` / `1` switch of the environment named `name` with value `value`: `Some(false)`,
/// `Some(true)`, or `None` when unset or any other value (which is said in the log and
/// ignored).
fn switch_of(name: &str, value: Option<&str>) -> Option<bool> {
    match value {
        Some("0") => Some(false),
        Some("1") => Some(true),
        Some(other) => {
            log::warn!("{name}={other:?} is neither 0 nor 1: ignored");
            None
        }
        None => None,
    }
}

/// [`layer_kernel_below`] of the two variables' values.
fn layer_kernel_below_of(kernel: Option<&str>, below: Option<&str>) -> usize {
    match switch_of("TETHER_LLM_LAYER_KERNEL", kernel) {
        Some(false) => return 0,
        Some(true) => return usize::MAX,
        None => {}
    }
    match below {
        Some(v) => v.trim().parse().unwrap_or_else(|_| {
            log::warn!(
                "TETHER_LLM_LAYER_KERNEL_BELOW={v:?} is not a position; {LAYER_KERNEL_BELOW} taken"
            );
            LAYER_KERNEL_BELOW
        }),
        None => LAYER_KERNEL_BELOW,
    }
}

/// Whether a fused product is one projection of a 32-block type (Q8_0, Q4_0 or Q4_1: what
/// `prep_matvec_group` reads).
fn one_q32_projection(projs: &[ProjParams]) -> bool {
    let q32 = [TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1].map(|t| t.ggml_id() as i32);
    matches!(projs, [p] if q32.contains(&p.ty))
}

/// Rows a fused product's whole grid of `grid` blocks takes in one turn: `FUSE_WARPS` warps a
/// block, `per_warp` rows a warp (1 for `prep_matvec`, 4 for `prep_matvec_group`).
fn rows_per_turn(grid: u32, per_warp: usize) -> usize {
    grid as usize * kernels::FUSE_WARPS as usize * per_warp
}

/// Whether the layer kernel asks L2 for the cache rows before its wait, as
/// `TETHER_LLM_KV_PREFETCH` asks: `0` no, unset or `1` yes; another value is ignored (said in
/// the log), as the other `TETHER_LLM_*` switches do.
fn kv_prefetch_of(value: Option<&str>) -> bool {
    switch_of("TETHER_LLM_KV_PREFETCH", value).unwrap_or(true)
}

/// Errors of the GPU decoder.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The CUDA layer (driver missing, no device, out of memory, capture failure, ...).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A program the kernels cannot express.
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// A program the prefill (chunk) kernels cannot express.
    #[error(transparent)]
    Prefill(#[from] PrefillError),
    /// A weight type the kernels do not read.
    #[error(
        "matrix {id} is {ty:?}: the GPU kernels read F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K"
    )]
    MatrixType {
        /// Matrix index of the program.
        id: u32,
        /// Its type.
        ty: TensorType,
    },
    /// A head dimension the attention kernel cannot run: above 256 (its registers and shared
    /// memory) or not a multiple of 8 (it reads cache rows in 16-byte pieces).
    #[error("head_dim {0}: the GPU attention kernel handles multiples of 8 up to 256")]
    HeadDim(usize),
    /// The replayed graph did not reproduce the eager run (never handed out).
    #[error("decode graph replay differs from the eager run: {0}")]
    ReplayMismatch(String),
    /// The layer kernel's step graph did not reproduce the fused step's (never handed out).
    #[error("the layer kernel's step differs from the fused step: {0}")]
    LayerMismatch(String),
    /// The load-time check step produced non-finite logits (a buffer read before written).
    #[error(
        "the load-time check step left {count} non-finite logits of {n_vocab} (first at {first})"
    )]
    NonFinite {
        /// Non-finite values.
        count: usize,
        /// Vocabulary.
        n_vocab: usize,
        /// First index.
        first: usize,
    },
    /// The request does not fit the cache.
    #[error(transparent)]
    ContextFull(#[from] ContextFull),
    /// A sampling option the device sampler does not implement.
    #[error("--device cuda cannot sample this request: {what} (--device cpu can)")]
    Sampling {
        /// The option and its value.
        what: String,
    },
    /// A decoder asked to share another decoder's weights ([`GpuDecoder::new_sharing`])
    /// that cannot: another device, a longer context than the other's RoPE table, other
    /// weights (their CRC-32 differs, or a matrix the step reads was not uploaded), or the
    /// same weights with other RoPE angles.
    #[error("cannot share the weights already on the GPU: {reason}")]
    SharedWeights {
        /// What differs, with the values seen.
        reason: String,
    },
    /// A token id the embedding refused (reported by the device).
    #[error("token id {token} is beyond the vocabulary of {n_vocab}")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// Vocabulary.
        n_vocab: usize,
    },
}

impl From<DriverError> for GpuError {
    fn from(e: DriverError) -> Self {
        GpuError::Cuda(CudaError::Driver(e))
    }
}

/// Checks that the device sampler serves `params` over a vocabulary of `n_vocab` tokens
/// (everything `src/sample.rs` does, but a repetition penalty over a vocabulary beyond
/// [`SAMPLE_MAX_VOCAB`](super::lower::SAMPLE_MAX_VOCAB)).
///
/// # Errors
/// [`GpuError::Sampling`] naming the option and its value.
pub fn check_sampling(params: &SamplerParams, n_vocab: usize) -> Result<(), GpuError> {
    config_of(params, n_vocab).map(|_| ())
}

fn config_of(params: &SamplerParams, n_vocab: usize) -> Result<SampleConfig, GpuError> {
    SampleConfig::new(params, n_vocab).map_err(|e| GpuError::Sampling { what: e.what })
}

#[derive(Clone, Copy, Debug)]
enum Params {
    Embed(EmbedParams),
    Prep(PrepParams),
    MatVec(MatVecParams),
    HeadNorm(HeadNormParams),
    Rope(RopeParams),
    Attention(AttnParams),
    Sample(SampleParams),
    PrepMatVec(PrepMatVecParams),
    QkvRope(QkvRopeParams),
    AttnFused(AttnParams),
    /// A whole layer; with the dynamic shared memory of its launch.
    Layer(LayerParams, u32),
    /// Every merged layer, one block per SM; with the dynamic shared memory of its launch.
    Grid(GridParams, u32),
}

/// Dynamic shared memory of a kernel whose input is prepared by `p` (its prologue).
fn prologue_bytes(p: &PrologueParams) -> u32 {
    prologue_shared_bytes(p.n as usize, p.q8 != 0, p.q8k != 0) as u32
}

#[derive(Clone, Copy, Debug)]
struct Launch {
    f: Function,
    grid: (u32, u32),
    block: u32,
    params: Params,
    /// Blocks per thread block cluster along x (1: no cluster).
    cluster: u32,
}

impl Launch {
    /// Enqueue on `s`; with `dependent` the fused kernels as programmatic dependent launches
    /// (they wait for the previous kernel in `griddepcontrol.wait`).
    fn enqueue(&self, s: &Stream, dependent: bool) -> Result<(), DriverError> {
        let (g, b) = ((self.grid.0, self.grid.1, 1), (self.block, 1, 1));
        // SAFETY: each params struct mirrors its kernel's (kernels.rs, size-checked), and
        // every address inside points into the decoder's arenas, which live as long as the
        // graph and the launch list.
        unsafe {
            match &self.params {
                Params::Embed(p) => s.launch_params(self.f, g, b, 0, p),
                Params::Prep(p) => s.launch_params(self.f, g, b, 0, p),
                Params::MatVec(p) => s.launch_params(self.f, g, b, 0, p),
                Params::HeadNorm(p) => s.launch_params(self.f, g, b, 0, p),
                Params::Rope(p) => s.launch_params(self.f, g, b, 0, p),
                Params::Attention(p) => s.launch_params(self.f, g, b, 0, p),
                Params::Sample(p) => s.launch_params(self.f, g, b, 0, p),
                Params::PrepMatVec(p) if dependent => {
                    s.launch_params_dependent(self.f, g, b, prologue_bytes(&p.input), p)
                }
                Params::QkvRope(p) if dependent => {
                    s.launch_params_dependent(self.f, g, b, prologue_bytes(&p.input), p)
                }
                Params::AttnFused(p) if self.cluster > 1 => s.launch_params_ex(
                    self.f,
                    g,
                    b,
                    kernels::attn_stage_bytes(p),
                    p,
                    dependent,
                    self.cluster,
                ),
                Params::AttnFused(p) if dependent => s.launch_params_dependent(self.f, g, b, 0, p),
                Params::PrepMatVec(p) => s.launch_params(self.f, g, b, prologue_bytes(&p.input), p),
                Params::QkvRope(p) => s.launch_params(self.f, g, b, prologue_bytes(&p.input), p),
                Params::AttnFused(p) => s.launch_params(self.f, g, b, 0, p),
                // A cluster launch; dependent whenever the step is (the merge needs it).
                Params::Layer(p, bytes) => {
                    s.launch_params_ex(self.f, g, b, *bytes, p, dependent, self.cluster)
                }
                // Every block at once (they wait for each other's values).
                Params::Grid(p, bytes) => {
                    s.launch_params_cooperative(self.f, g, b, *bytes, p, dependent)
                }
            }
        }
    }
}

/// A model's decode step on one GPU (see the [module docs](super)).
pub struct GpuDecoder {
    // Declared before the arenas and the module they launch from: dropped first.
    prefill: Option<PrefillGraph>,
    /// The step of positions `below.1` and later (of every position without `below`).
    graph: StepGraph,
    /// The layer kernel's step and the position below which it runs instead of `graph`.
    below: Option<(StepGraph, usize)>,
    stream: Stream,
    work: DeviceArena,
    /// `layers_grid`'s memory (its layers' parameters, the tagged words its phases hand on,
    /// the blocks' launch counts).
    _grid: Option<DeviceArena>,
    weights: Arc<DeviceWeights>,
    _module: KernelModule,
    state: DevicePtr,
    seq: DevicePtr,
    config: DevicePtr,
    logits: DevicePtr,
    pinned: PinnedBuffer,
    /// Completion events of the two token slots (pinned bytes 32..36 and 36..40).
    marks: [Event; 2],
    /// Steps launched whose token the host has not taken (0, 1 or 2).
    ahead: usize,
    /// The slot of the oldest step in flight.
    slot: usize,
    cache: Vec<(DevicePtr, DevicePtr)>,
    kv_dim: usize,
    pos: usize,
    context: usize,
    n_vocab: usize,
    memory: MemoryPlan,
    image: String,
    device: String,
    check: String,
    _ctx: Context,
}

impl Drop for GpuDecoder {
    /// Lets a step launched ahead finish before the graphs and arenas go.
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
    }
}

impl std::fmt::Debug for GpuDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecoder")
            .field("device", &self.device)
            .field("launches", &self.graph.launches.len())
            .field("graph_nodes", &self.graph.graph.nodes())
            .field(
                "below",
                &self.below.as_ref().map(|(g, at)| (*at, g.launches.len())),
            )
            .field("memory", &self.memory)
            .finish()
    }
}

/// One captured step: its graph and the launches it was captured from.
struct StepGraph {
    graph: Graph,
    launches: Vec<Launch>,
}

fn i32_of(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

impl GpuDecoder {
    /// Uploads `model`'s weights to device `options.ordinal`, places the cache (f16,
    /// `options.context` positions), the activations and the request state, lowers the
    /// program, runs the step eagerly on poisoned buffers, captures it as one graph and
    /// checks that replaying the graph reproduces the eager run bit for bit; where the layer
    /// kernel's step runs below a position ([`GpuOptions::layer_kernel_below`]) it does the same
    /// for that step's graph and checks that the two graphs leave the same logits and state.
    ///
    /// # Errors
    /// [`GpuError`]: CUDA (no driver or device, out of memory, capture), lowering, weight
    /// types, [`GpuError::ReplayMismatch`] / [`GpuError::NonFinite`] from the load check,
    /// [`GpuError::LayerMismatch`] when the two graphs differ (a bug: never handed out).
    pub fn new(model: &Model<'_>, options: GpuOptions) -> Result<GpuDecoder, GpuError> {
        Self::build(model, options, None)
    }

    /// A second decoder of the same model on the same device that reads `other`'s weights
    /// instead of uploading its own: its own cache (`options.context` positions), activations,
    /// request state and graphs, checked at load as [`new`](Self::new) checks. Two
    /// generators on one model then hold one copy of the weights ([`MemoryPlan::shared_weights`]).
    ///
    /// # Errors
    /// [`GpuError::SharedWeights`]: `options.ordinal` is not `other`'s device, the context is
    /// longer than the RoPE table `other` uploaded, `model`'s weights are not `other`'s
    /// (CRC-32 of every matrix and vector compared) or its RoPE angles differ (compared
    /// bit for bit with the uploaded table, read back); otherwise as [`new`](Self::new).
    pub fn new_sharing(
        model: &Model<'_>,
        options: GpuOptions,
        other: &GpuDecoder,
    ) -> Result<GpuDecoder, GpuError> {
        Self::build(model, options, Some(other.weights.clone()))
    }

    /// The weights this decoder reads (shared with the decoders made from it).
    pub fn device_weights(&self) -> &Arc<DeviceWeights> {
        &self.weights
    }

    fn build(
        model: &Model<'_>,
        options: GpuOptions,
        shared: Option<Arc<DeviceWeights>>,
    ) -> Result<GpuDecoder, GpuError> {
        let hp = model.hparams();
        if hp.head_dim > 256 || !hp.head_dim.is_multiple_of(8) {
            return Err(GpuError::HeadDim(hp.head_dim));
        }
        let ty = |id: MatId| model.matrix(id).ty;
        let fused_steps = if options.fused {
            lower_fused(model.program(), hp, &ty)?
        } else {
            lower(model.program(), &ty)?
        };
        let ctx = Context::new(options.ordinal, options.sync)?;
        let stream = Stream::new(&ctx, options.sync)?;
        let module = KernelModule::load(&ctx, kernels::module_source())?;
        let kernels = DecodeKernels::of(&module)?;
        // SASS built for these (sm_90, sm_100, sm_110) has `griddepcontrol` and clusters;
        // PTX JIT-compiled for another device is not relied on for either.
        let sm90_sass = [90, 100, 110].contains(&ctx.properties().sm());
        let (layer_steps, tail_steps, layer_shared) = if options.fused
            && options.dependent_launch
            && (options.layer_kernel_below > 0 || options.layer_tail)
            && sm90_sass
        {
            merge_layers(
                model,
                &fused_steps,
                &kernels,
                ctx.properties().shared_per_block_optin,
            )?
        } else {
            (Vec::new(), Vec::new(), 0)
        };
        // The fused step, its layers' tails merged where asked.
        let fused_steps = if layer_shared > 0 && options.layer_tail {
            tail_steps
        } else {
            fused_steps
        };
        // The step lists to capture: (all positions or those from `below`), and the layer
        // kernel's for positions below `below` where both run.
        let (steps, below_steps) = if layer_shared == 0 || options.layer_kernel_below == 0 {
            (fused_steps, None)
        } else if options.layer_kernel_below >= options.context {
            (layer_steps, None)
        } else {
            (fused_steps, Some(layer_steps))
        };

        let (rope_fused, rope_interleaved) = model.rope().form();
        let rope_form = if rope_fused { kernels::ROPE_FUSED } else { 0 }
            | if rope_interleaved {
                kernels::ROPE_INTERLEAVED
            } else {
                0
            };
        let shared_weights = shared.is_some();
        let all_steps: Vec<Step> = steps
            .iter()
            .chain(below_steps.iter().flatten())
            .cloned()
            .collect();
        let regions = WeightRegions::of_steps(model, &all_steps)?;
        let weights = match shared {
            Some(w) => {
                w.check_shareable(model, &regions, options.context, options.ordinal, &stream)?;
                w
            }
            None => DeviceWeights::upload(
                &ctx,
                &stream,
                model,
                regions,
                options.context,
                options.ordinal,
            )?,
        };
        let mut memory = MemoryPlan::new(hp, options.context, weights.bytes());
        memory.shared_weights = shared_weights;
        let work = Work::place(&ctx, model, options.context)?;
        let attn_cluster = sm90_sass && options.context <= kernels::ATT_TILE;
        let max_blocks = (ctx.properties().multiprocessors * kernels::FUSE_MIN_BLOCKS)
            .clamp(1, kernels::FUSE_MAX_BLOCKS);
        let binding = Binding {
            model,
            weights: &weights,
            kernels,
            work: &work,
            rope_form,
            rope_interleaved,
            max_blocks,
            sms: ctx.properties().multiprocessors,
            l2_bytes: ctx.properties().l2_bytes as usize,
            attn_cluster,
            attn_stage: if attn_cluster {
                attn_stage(
                    model,
                    &kernels,
                    options.context,
                    ctx.properties().shared_per_block_optin,
                )?
            } else {
                (0, 0)
            },
            layer_shared,
            kv_prefetch: kv_prefetch_of(std::env::var("TETHER_LLM_KV_PREFETCH").ok().as_deref()),
            matvec_group: switch_of(
                "TETHER_LLM_MATVEC_GROUP",
                std::env::var("TETHER_LLM_MATVEC_GROUP").ok().as_deref(),
            )
            .unwrap_or(true),
            context: options.context,
        };
        let grid_on = layer_shared > 0 && options.grid_layers;
        let mut grid_mem = None;
        let mut fold = |launches: Vec<Launch>| -> Result<Vec<Launch>, GpuError> {
            if !grid_on {
                return Ok(launches);
            }
            let (out, mem) = fold_grid(
                &ctx,
                &stream,
                &binding.kernels,
                launches,
                model,
                options.context,
            )?;
            if mem.is_some() {
                grid_mem = mem;
            }
            Ok(out)
        };
        let launches: Vec<Launch> = steps.iter().map(|s| binding.launch(s)).collect();
        let launches = if below_steps.is_none() {
            fold(launches)?
        } else {
            launches
        };
        // Programmatic dependent launches only where the image has the SASS of this device
        // (built for sm_90, sm_100, sm_110, each with `griddepcontrol`); not from PTX.
        let dependent = options.fused && options.dependent_launch && sm90_sass;

        // Pinned staging: [0, 16) state out, [16, 32) state in, [32, 36) token in,
        // [64, 128) sampler configuration out.
        let mut pinned = PinnedBuffer::new(&ctx, 128, false)?;
        let mut capture = |launches: &[Launch]| {
            check_and_capture(&stream, &work, launches, dependent, hp.n_vocab, &mut pinned)
        };
        let (graph, mut check, outcome) = capture(&launches)?;
        let graph = StepGraph { graph, launches };
        let below = match below_steps {
            None => None,
            Some(layer_steps) => {
                let launches: Vec<Launch> = layer_steps.iter().map(|s| binding.launch(s)).collect();
                let launches = fold(launches)?;
                let (layer_graph, layer_check, layer_outcome) = capture(&launches)?;
                same_outcome(&outcome, &layer_outcome)?;
                let at = options.layer_kernel_below;
                check = format!(
                    "{check}; below position {at}: {layer_check}, equal to the {} bit for bit",
                    if options.layer_tail {
                        "graph of the layers' tails"
                    } else {
                        "fused step's"
                    }
                );
                Some((
                    StepGraph {
                        graph: layer_graph,
                        launches,
                    },
                    at,
                ))
            }
        };
        let prefill = if options.prefill_chunk > 0 {
            let side = DecodeSide {
                weights: &weights,
                rope_form,
                prompt_batch: options.prompt_batch,
                state: work.state,
                seq: work.seq,
                config: work.config,
                logits: work.buf(Buf::Logits),
                cache: &work.cache,
                work: (work.arena.base(), work.arena.plan().total_bytes()),
                context: options.context,
            };
            let p = PrefillGraph::new(&stream, &module, model, &side, options.prefill_chunk)?;
            check = format!("{check}; {}", p.check_summary());
            Some(p)
        } else {
            None
        };
        // `layers_grid`'s memory (its layers' parameters, the words its phases hand on, the
        // blocks' launch counts) counts as activations.
        if let Some(g) = &grid_mem {
            memory.activations += g.plan().total_bytes();
        }
        let device = ctx.properties().name.clone();
        let marks = [stream.completion_event()?, stream.completion_event()?];
        let Work {
            arena,
            bufs,
            state,
            seq,
            config,
            cache,
            ..
        } = work;
        Ok(GpuDecoder {
            prefill,
            graph,
            below,
            stream,
            work: arena,
            _grid: grid_mem,
            weights,
            image: module.image.clone(),
            _module: module,
            state,
            seq,
            config,
            logits: bufs[Buf::Logits.index()],
            marks,
            ahead: 0,
            slot: 0,
            pinned,
            cache,
            kv_dim: hp.kv_dim(),
            pos: 0,
            context: options.context,
            n_vocab: hp.n_vocab,
            memory,
            device,
            check,
            _ctx: ctx,
        })
    }

    /// Device memory placed at load.
    pub fn memory(&self) -> MemoryPlan {
        self.memory
    }

    /// The GPU's name.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// Which kernel image was loaded.
    pub fn kernel_image(&self) -> &str {
        &self.image
    }

    /// Launches of one step (graph nodes): of every position, or of the positions from
    /// [`layer_kernel_below`](Self::layer_kernel_below)'s position on where the layer
    /// kernel's step runs below it.
    pub fn launches(&self) -> usize {
        self.graph.launches.len()
    }

    /// Where the decoder switches graphs by position: `(position, launches)`, the layer
    /// kernel's step of `launches` launches running below `position` and the one of
    /// [`launches`](Self::launches) from there. None: one graph for every position.
    pub fn layer_kernel_below(&self) -> Option<(usize, usize)> {
        self.below.as_ref().map(|(g, at)| (*at, g.launches.len()))
    }

    /// The launches of one step in words: `"153 launches"`, or `"33 launches below position
    /// 640, 64 from there"` where the decoder switches graphs
    /// ([`layer_kernel_below`](Self::layer_kernel_below)).
    pub fn launches_summary(&self) -> String {
        match self.layer_kernel_below() {
            Some((at, n)) => format!(
                "{n} launches below position {at}, {} from there",
                self.launches()
            ),
            None => format!("{} launches", self.launches()),
        }
    }

    /// Launches of the step graph that runs at position `pos`.
    pub fn launches_at(&self, pos: usize) -> usize {
        self.step_at(pos).launches.len()
    }

    /// The step graph that runs at position `pos`.
    fn step_at(&self, pos: usize) -> &StepGraph {
        match &self.below {
            Some((g, at)) if pos < *at => g,
            _ => &self.graph,
        }
    }

    /// The CUDA graph of [`step_at`](Self::step_at).
    fn graph_at(&self, pos: usize) -> &Graph {
        &self.step_at(pos).graph
    }

    /// What the load-time replay check found.
    pub fn check_summary(&self) -> &str {
        &self.check
    }

    /// Positions of the cache.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Positions used by the current request whose tokens the host has taken (a step
    /// launched ahead, [`step_ahead`](Self::step_ahead), is not counted until its token is).
    pub fn position(&self) -> usize {
        self.pos - self.ahead
    }

    /// Starts a request: copies `prompt` and the sampler configuration of `params` to the
    /// device, resets the request state, replays the prefill graph once per chunk of the
    /// prompt (without one, the decode graph once per prompt token) and returns the first
    /// generated token (greedy or drawn on the device, `src/sample.rs`'s chain with draw
    /// step 0; each [`step`](Self::step) draws the next).
    ///
    /// # Errors
    /// [`GpuError::ContextFull`] when the prompt (plus the token it produces) does not fit;
    /// [`GpuError::TokenOutOfRange`]; [`GpuError::Sampling`]; a driver error.
    pub fn prefill(&mut self, prompt: &[u32], params: &SamplerParams) -> Result<u32, GpuError> {
        self.prefill_with(prompt, params, true)
    }

    /// [`prefill`](Self::prefill) through the decode graph, one replay per prompt token,
    /// also when a prefill graph exists (the reference the prefill graph is tested against).
    ///
    /// # Errors
    /// As [`prefill`](Self::prefill).
    #[doc(hidden)]
    pub fn prefill_token_by_token(
        &mut self,
        prompt: &[u32],
        params: &SamplerParams,
    ) -> Result<u32, GpuError> {
        self.prefill_with(prompt, params, false)
    }

    /// Tokens per chunk of the prefill graph (0: none, prompts run token by token).
    pub fn prefill_chunk(&self) -> usize {
        self.prefill.as_ref().map_or(0, |p| p.chunk())
    }

    /// Launches of one prefill chunk (graph nodes; 0 without a prefill graph).
    pub fn prefill_launches(&self) -> usize {
        self.prefill.as_ref().map_or(0, |p| p.launches())
    }

    /// Device bytes of the prefill graph's chunk buffers (beside [`memory`](Self::memory)).
    pub fn prefill_memory(&self) -> usize {
        self.prefill.as_ref().map_or(0, |p| p.bytes())
    }

    /// Copies positions `0 .. positions` of layer `layer`'s cache (f16 bits, `[positions,
    /// kv_dim]`) into `k` and `v` (for tests).
    ///
    /// # Errors
    /// [`CudaError::Invalid`] for a layer or a range outside the cache or buffers shorter
    /// than the range; a driver error.
    #[doc(hidden)]
    pub fn cache_rows(
        &self,
        layer: usize,
        positions: usize,
        k: &mut [u16],
        v: &mut [u16],
    ) -> Result<(), GpuError> {
        let n = positions * self.kv_dim;
        if layer >= self.cache.len() || positions > self.context || k.len() < n || v.len() < n {
            return Err(GpuError::Cuda(CudaError::Invalid(format!(
                "cache rows: layer {layer} of {}, {positions} positions of {}, buffers of {} and {} for {n} values",
                self.cache.len(),
                self.context,
                k.len(),
                v.len()
            ))));
        }
        let (kp, vp) = self.cache[layer];
        // SAFETY: n f16 of each region (n <= context * kv_dim) into buffers of >= n values,
        // synchronised below.
        unsafe {
            self.stream
                .memcpy_dtoh(k.as_mut_ptr() as *mut u8, kp, n * 2)?;
            self.stream
                .memcpy_dtoh(v.as_mut_ptr() as *mut u8, vp, n * 2)?;
        }
        self.stream.synchronize()?;
        Ok(())
    }

    fn prefill_with(
        &mut self,
        prompt: &[u32],
        params: &SamplerParams,
        chunked: bool,
    ) -> Result<u32, GpuError> {
        let config = config_of(params, self.n_vocab)?;
        if prompt.is_empty() || prompt.len() > self.context {
            return Err(ContextFull {
                needed: prompt.len().max(1),
                context: self.context,
                used: 0,
            }
            .into());
        }
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.n_vocab) {
            return Err(GpuError::TokenOutOfRange {
                token: t,
                n_vocab: self.n_vocab,
            });
        }
        self.prefill_state(prompt, &config)?;
        match &self.prefill {
            Some(p) if chunked => p.run(&self.stream, prompt.len())?,
            _ => {
                for pos in 0..prompt.len() {
                    self.graph_at(pos).launch(&self.stream)?;
                }
            }
        }
        self.pos = prompt.len();
        self.read_token()
    }

    /// One decode step: the token chosen last is processed at the next position and the
    /// next token (chosen as the request's [`prefill`](Self::prefill) asked) returned. The
    /// graph launch and a 4-byte read; no allocation. The same as
    /// [`step_ahead(false)`](Self::step_ahead).
    ///
    /// # Errors
    /// [`GpuError::ContextFull`] when the cache is full; a driver error.
    pub fn step(&mut self) -> Result<u32, GpuError> {
        self.step_ahead(false)
    }

    /// [`step`](Self::step), with the following step launched before waiting for this one's
    /// token when `launch_next` is true and the cache has room: the GPU runs step n + 1
    /// while the host takes token n (detokenises, streams it), so consecutive steps run back
    /// to back and a late host costs nothing up to one step's time. Step n + 1 needs nothing
    /// from the host (it reads token n from the request state on the device). A step launched
    /// ahead and never taken (the request stopped at an end-of-generation token or a stop
    /// string) has run on the device: [`position`](Self::position) counts it only once its
    /// token is taken, and the next [`prefill`](Self::prefill) starts over anyway.
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn step_ahead(&mut self, launch_next: bool) -> Result<u32, GpuError> {
        if self.ahead == 0 {
            if self.pos >= self.context {
                return Err(ContextFull {
                    needed: self.pos + 1,
                    context: self.context,
                    used: self.pos,
                }
                .into());
            }
            self.launch_step()?;
        }
        if launch_next {
            self.launch_ahead()?;
        }
        self.take_token()
    }

    /// Launches the next step now, ahead of the [`step_ahead`](Self::step_ahead) call that
    /// will take its token (e.g. right after [`prefill`](Self::prefill), while the host
    /// handles the first token). False (nothing launched) when the cache is full or two
    /// steps are already in flight.
    ///
    /// # Errors
    /// A driver error.
    pub fn launch_ahead(&mut self) -> Result<bool, GpuError> {
        if self.ahead >= 2 || self.pos >= self.context {
            return Ok(false);
        }
        self.launch_step()?;
        Ok(true)
    }

    /// Launches the step graph and the 4-byte copy of the token it chooses into the next
    /// free slot, then records that slot's event.
    fn launch_step(&mut self) -> Result<(), GpuError> {
        let s = (self.slot + self.ahead) % 2;
        self.graph_at(self.pos).launch(&self.stream)?;
        // SAFETY: 4 bytes of the state (the token) into pinned slot s, which is read only
        // after its event completes and not written again before it is read.
        unsafe {
            self.stream.memcpy_dtoh(
                self.pinned.as_mut_ptr().wrapping_add(32 + 4 * s),
                self.state,
                4,
            )
        }?;
        self.marks[s].record(&self.stream)?;
        self.pos += 1;
        self.ahead += 1;
        Ok(())
    }

    /// Waits (as the sync policy says) for the oldest step in flight and returns its token.
    fn take_token(&mut self) -> Result<u32, GpuError> {
        let s = self.slot;
        self.stream.wait_host(&self.marks[s])?;
        let b = &self.pinned.as_slice()[32 + 4 * s..36 + 4 * s];
        let token = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        self.slot ^= 1;
        self.ahead -= 1;
        Ok(token)
    }

    /// Lets any step launched ahead finish and forgets its token (before anything that
    /// restarts the request, reads device memory or rewrites the pinned buffer).
    fn settle(&mut self) -> Result<(), GpuError> {
        if self.ahead > 0 {
            self.stream.synchronize()?;
            self.ahead = 0;
        }
        self.slot = 0;
        Ok(())
    }

    fn read_token(&mut self) -> Result<u32, GpuError> {
        // SAFETY: 4 bytes of the state (the token) into the pinned buffer, read after the
        // synchronisation.
        unsafe {
            self.stream
                .memcpy_dtoh(self.pinned.as_mut_ptr().wrapping_add(32), self.state, 4)
        }?;
        self.stream.synchronize()?;
        let s = &self.pinned.as_slice()[32..36];
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// The logits of the last step launched (`n_vocab` f32; after
    /// [`step_ahead(true)`](Self::step_ahead), of the step launched ahead), for tests and
    /// teacher forcing.
    ///
    /// # Errors
    /// A driver error.
    pub fn logits(&self, out: &mut [f32]) -> Result<(), GpuError> {
        let n = out.len().min(self.n_vocab);
        // SAFETY: n <= n_vocab f32 of the logits region into `out`, synchronised below.
        unsafe {
            self.stream
                .memcpy_dtoh(out.as_mut_ptr() as *mut u8, self.logits, n * 4)
        }?;
        self.stream.synchronize()?;
        Ok(())
    }

    /// Teacher forcing: runs `tokens` (from position 0) one step at a time and copies each
    /// step's logits into `out` (`tokens.len() * n_vocab` f32, row per token).
    ///
    /// # Errors
    /// As [`prefill`](Self::prefill); `out` shorter than the rows.
    pub fn teacher_forced(&mut self, tokens: &[u32], out: &mut [f32]) -> Result<(), GpuError> {
        let n = self.n_vocab;
        if out.len() < tokens.len() * n {
            return Err(GpuError::Cuda(CudaError::Invalid(format!(
                "teacher forcing {} tokens needs {} logits, the buffer holds {}",
                tokens.len(),
                tokens.len() * n,
                out.len()
            ))));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= n) {
            return Err(GpuError::TokenOutOfRange {
                token: t,
                n_vocab: n,
            });
        }
        // The prompt is the whole sequence: each replay embeds prompt[pos]. Greedy: the
        // last row's logits are read as the model left them (no penalty).
        let greedy = config_of(&SamplerParams::greedy(), n)?;
        self.prefill_state(tokens, &greedy)?;
        for (t, row) in out.chunks_exact_mut(n).take(tokens.len()).enumerate() {
            self.graph_at(t).launch(&self.stream)?;
            // SAFETY: n f32 of the logits region into this row, synchronised below.
            unsafe {
                self.stream
                    .memcpy_dtoh(row.as_mut_ptr() as *mut u8, self.logits, n * 4)
            }?;
            self.pos = t + 1;
        }
        self.stream.synchronize()?;
        Ok(())
    }

    fn prefill_state(&mut self, prompt: &[u32], config: &SampleConfig) -> Result<(), GpuError> {
        self.settle()?;
        if prompt.len() > self.context {
            return Err(ContextFull {
                needed: prompt.len(),
                context: self.context,
                used: 0,
            }
            .into());
        }
        // SAFETY: the sequence region holds `context + 1` ids; the caller synchronises
        // before the source goes away.
        unsafe {
            self.stream
                .memcpy_htod(self.seq, prompt.as_ptr() as *const u8, prompt.len() * 4)
        }?;
        let st = DecodeState {
            token: 0,
            pos: 0,
            prompt_len: prompt.len() as u32,
            bad_token: 0,
        };
        self.pinned.as_mut_slice()[..16].copy_from_slice(&state_bytes(&st));
        self.pinned.as_mut_slice()[64..128].copy_from_slice(&config.to_bytes());
        // SAFETY: 16 pinned bytes into the state region, 64 into the configuration's; the
        // pinned buffer is rewritten only after the next synchronisation.
        unsafe {
            self.stream
                .memcpy_htod(self.state, self.pinned.as_ptr(), 16)?;
            self.stream.memcpy_htod(
                self.config,
                self.pinned.as_ptr().wrapping_add(64),
                CONFIG_BYTES,
            )
        }?;
        self.pos = 0;
        Ok(())
    }

    /// Times decoding: a prompt of `at` pseudo-random ids (from `seed`), then `tokens`
    /// steps choosing as `params` asks, each timed on the host (launch to token in hand).
    /// Returns (prefill ms, per-step ms).
    ///
    /// # Errors
    /// As [`prefill`](Self::prefill) and [`step`](Self::step).
    pub fn time_decode(
        &mut self,
        at: usize,
        tokens: usize,
        seed: u64,
        params: &SamplerParams,
    ) -> Result<(f64, Vec<f64>), GpuError> {
        self.time_decode_with(at, tokens, seed, params, false)
    }

    /// [`time_decode`](Self::time_decode) with each step's successor launched before its
    /// token is taken when `ahead` ([`step_ahead`](Self::step_ahead), as
    /// [`crate::Generator`] runs the GPU: the next step launched right after the prompt,
    /// then one step ahead until the last token); each step timed from the previous token
    /// in hand (or the prompt's) to its token in hand.
    ///
    /// # Errors
    /// As [`prefill`](Self::prefill) and [`step`](Self::step).
    pub fn time_decode_with(
        &mut self,
        at: usize,
        tokens: usize,
        seed: u64,
        params: &SamplerParams,
        ahead: bool,
    ) -> Result<(f64, Vec<f64>), GpuError> {
        let prompt: Vec<u32> = (0..at as u64)
            .map(|i| {
                (crate::sample::philox4x32_10(
                    [i as u32, 0, 0, 0],
                    [seed as u32, (seed >> 32) as u32],
                )[0] as usize
                    % self.n_vocab) as u32
            })
            .collect();
        let t0 = Instant::now();
        self.prefill(&prompt, params)?;
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        if ahead && tokens > 0 {
            self.launch_ahead()?;
        }
        let mut steps = Vec::with_capacity(tokens);
        let mut prev = Instant::now();
        for i in 0..tokens {
            self.step_ahead(ahead && i + 1 < tokens)?;
            let now = Instant::now();
            steps.push((now - prev).as_secs_f64() * 1e3);
            prev = now;
        }
        Ok((prefill_ms, steps))
    }

    /// Fills the decoder's device memory but the weights (cache, activations, state, the
    /// prefill graph's chunk buffers) with 0xFF bytes, NaN as f32 and f16, so that a test
    /// sees any value read before it was written (for tests).
    ///
    /// # Errors
    /// A driver error.
    #[doc(hidden)]
    pub fn poison(&mut self) -> Result<(), GpuError> {
        self.settle()?;
        // SAFETY: the whole work arena and the whole prefill arena.
        unsafe {
            self.stream
                .memset_u8(self.work.base(), 0xFF, self.work.plan().total_bytes())?;
            if let Some(p) = &self.prefill {
                p.poison(&self.stream)?;
            }
        }
        self.stream.synchronize()?;
        Ok(())
    }

    /// The work arena's base (tests poison it).
    #[doc(hidden)]
    pub fn work_base(&self) -> DevicePtr {
        self.work.base()
    }
}

/// What the load check's replay left: the logits (`n_vocab` f32) and the request state.
type CheckOutcome = (Vec<f32>, DecodeState);

/// The load check: the step run eagerly for a short greedy request on poisoned buffers (also
/// the warm-up), captured as one graph, the graph replayed on poisoned buffers, and the
/// logits and request state of both compared bit for bit. Returns the graph, a summary
/// line and what the replay left (logits, state). `pinned` is the decoder's 128-byte
/// staging.
///
/// # Errors
/// [`GpuError::NonFinite`] (the eager run left non-finite logits: a buffer read before it
/// was written), [`GpuError::ReplayMismatch`], CUDA (capture included).
fn check_and_capture(
    stream: &Stream,
    work: &Work,
    launches: &[Launch],
    dependent: bool,
    n_vocab: usize,
    pinned: &mut PinnedBuffer,
) -> Result<(Graph, String, CheckOutcome), GpuError> {
    let greedy = config_of(&SamplerParams::greedy(), n_vocab)?;
    // Eager run on poisoned buffers (also the warm-up), capture, replay on poisoned
    // buffers, compare.
    let check_prompt: Vec<u32> = (0..4u32).map(|i| (i * 7919 + 1) % n_vocab as u32).collect();
    let check_steps = check_prompt.len() + 2;
    let run_check = |graph: Option<&Graph>,
                     pinned: &mut PinnedBuffer|
     -> Result<(Vec<f32>, DecodeState), GpuError> {
        // SAFETY: the whole work arena; NaN bit patterns everywhere.
        unsafe { stream.memset_u8(work.arena.base(), 0xFF, work.arena.plan().total_bytes()) }?;
        // SAFETY: sequence region holds context + 1 >= 4 ids; source lives until the sync.
        unsafe {
            stream.memcpy_htod(
                work.seq,
                check_prompt.as_ptr() as *const u8,
                check_prompt.len() * 4,
            )
        }?;
        let st = DecodeState {
            token: 0,
            pos: 0,
            prompt_len: check_prompt.len() as u32,
            bad_token: 0,
        };
        pinned.as_mut_slice()[..16].copy_from_slice(&state_bytes(&st));
        pinned.as_mut_slice()[64..128].copy_from_slice(&greedy.to_bytes());
        // SAFETY: 16 pinned bytes into the 16-byte state region, 64 into the
        // configuration's.
        unsafe {
            stream.memcpy_htod(work.state, pinned.as_ptr(), 16)?;
            stream.memcpy_htod(work.config, pinned.as_ptr().wrapping_add(64), CONFIG_BYTES)
        }?;
        for _ in 0..check_steps {
            match graph {
                Some(g) => g.launch(stream)?,
                None => {
                    for l in launches {
                        l.enqueue(stream, dependent)?;
                    }
                }
            }
        }
        let mut out = vec![0f32; n_vocab];
        // SAFETY: logits region holds n_vocab f32.
        unsafe {
            stream.memcpy_dtoh(
                out.as_mut_ptr() as *mut u8,
                work.buf(Buf::Logits),
                n_vocab * 4,
            )
        }?;
        // SAFETY: 16 bytes of state into the pinned buffer.
        unsafe { stream.memcpy_dtoh(pinned.as_mut_ptr().wrapping_add(16), work.state, 16) }?;
        stream.synchronize()?;
        let s = &pinned.as_slice()[16..32];
        let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        Ok((
            out,
            DecodeState {
                token: w(0),
                pos: w(1),
                prompt_len: w(2),
                bad_token: w(3),
            },
        ))
    };
    let (eager, eager_state) = run_check(None, pinned)?;
    let bad: Vec<usize> = (0..eager.len())
        .filter(|&i| !eager[i].is_finite())
        .collect();
    if let Some(&first) = bad.first() {
        return Err(GpuError::NonFinite {
            count: bad.len(),
            n_vocab,
            first,
        });
    }
    let graph = Graph::capture(stream, |s| -> Result<(), DriverError> {
        for l in launches {
            l.enqueue(s, dependent)?;
        }
        Ok(())
    })?;
    let (replay, replay_state) = run_check(Some(&graph), pinned)?;
    if replay_state != eager_state {
        return Err(GpuError::ReplayMismatch(format!(
            "state after {check_steps} steps: eager {eager_state:?}, graph {replay_state:?}"
        )));
    }
    if let Some(i) = (0..eager.len()).find(|&i| eager[i].to_bits() != replay[i].to_bits()) {
        return Err(GpuError::ReplayMismatch(format!(
            "logit {i}: eager {}, graph {}",
            eager[i], replay[i]
        )));
    }
    let check = format!(
        "graph of {} nodes{} replayed {check_steps} steps bit-identical to the eager run on poisoned buffers (token {}, position {})",
        graph.nodes(),
        match (
            dependent,
            launches.iter().any(|l| l.cluster == kernels::LAYER_CLUSTER),
            launches.iter().any(|l| l.cluster == kernels::ATTN_CLUSTER),
        ) {
            (true, true, clusters)
                if launches
                    .iter()
                    .any(|l| matches!(l.params, Params::Layer(p, _) if p.att != DevicePtr(0))) =>
            {
                if clusters {
                    " (dependent launches, attention in clusters, the layers' tails in cluster launches)"
                } else {
                    " (dependent launches, the layers' tails in cluster launches)"
                }
            }
            (true, true, _) => " (dependent launches, one cluster launch per layer)",
            (true, false, true) => " (dependent launches, attention in clusters)",
            (true, false, false) => " (dependent launches)",
            (false, _, true) => " (attention in clusters)",
            (false, _, false) => "",
        },
        eager_state.token,
        eager_state.pos
    );
    Ok((graph, check, (replay, replay_state)))
}

/// The layer kernel's load check against the fused step's: the same request state and the
/// same logits bit for bit after the same check request (both from [`check_and_capture`]).
///
/// # Errors
/// [`GpuError::LayerMismatch`] naming the first difference.
fn same_outcome(fused: &CheckOutcome, layer: &CheckOutcome) -> Result<(), GpuError> {
    if fused.1 != layer.1 {
        return Err(GpuError::LayerMismatch(format!(
            "state after the check request: fused {:?}, layer kernel {:?}",
            fused.1, layer.1
        )));
    }
    match (0..fused.0.len()).find(|&i| fused.0[i].to_bits() != layer.0[i].to_bits()) {
        Some(i) => Err(GpuError::LayerMismatch(format!(
            "logit {i}: fused {}, layer kernel {}",
            fused.0[i], layer.0[i]
        ))),
        None => Ok(()),
    }
}

/// The kernels of the decode step.
#[derive(Clone, Copy)]
struct DecodeKernels {
    embed: Function,
    prep: Function,
    matvec: Function,
    head_norm: Function,
    rope: Function,
    attention: Function,
    sample: Function,
    prep_matvec: Function,
    prep_matvec_wide: Function,
    prep_matvec_group: Function,
    qkv_rope: Function,
    attention_fused: Function,
    attention_cluster: Function,
    layer: Function,
    layers_grid: Function,
}

impl DecodeKernels {
    fn of(module: &KernelModule) -> Result<Self, GpuError> {
        let f = |n: &str| module.function(n);
        Ok(DecodeKernels {
            embed: f("embed")?,
            prep: f("prep")?,
            matvec: f("matvec")?,
            head_norm: f("head_norm")?,
            rope: f("rope")?,
            attention: f("attention")?,
            sample: f("sample_advance")?,
            prep_matvec: f("prep_matvec")?,
            prep_matvec_wide: f("prep_matvec_wide")?,
            prep_matvec_group: f("prep_matvec_group")?,
            qkv_rope: f("qkv_rope")?,
            attention_fused: f("attention_fused")?,
            attention_cluster: f("attention_cluster")?,
            layer: f("layer")?,
            layers_grid: f("layers_grid")?,
        })
    }
}

/// The decoder's work memory, placed once: the activations ([`Buf`]), the 8-bit blocks of
/// the widest input, the token sequence (`context + 1` ids), the request state, the sampler
/// configuration and each layer's f16 key and value cache (`context * kv_dim` each).
struct Work {
    arena: DeviceArena,
    /// Each [`Buf`] at its index.
    bufs: Vec<DevicePtr>,
    q8: DevicePtr,
    q8k: DevicePtr,
    seq: DevicePtr,
    state: DevicePtr,
    config: DevicePtr,
    /// Keys and values of each layer.
    cache: Vec<(DevicePtr, DevicePtr)>,
}

impl Work {
    /// Places the work memory of `model` with a cache of `context` positions.
    ///
    /// # Errors
    /// CUDA (out of memory), the arena's layout errors.
    fn place(ctx: &Context, model: &Model<'_>, context: usize) -> Result<Work, GpuError> {
        let hp = model.hparams();
        let mut plan = ArenaPlan::new();
        let mut buf_r = Vec::new();
        for b in Buf::ALL {
            buf_r.push(plan.add(format!("{b:?}"), hp.width(b) * 4)?);
        }
        let widest = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
        let q8_r = plan.add("q8", widest.div_ceil(32) * super::lower::BLOCK_Q8_BYTES)?;
        let q8k_r = plan.add("q8k", widest.div_ceil(256) * super::lower::BLOCK_Q8K_BYTES)?;
        let seq_r = plan.add("sequence", (context + 1) * 4)?;
        let state_r = plan.add("state", super::lower::STATE_BYTES)?;
        let config_r = plan.add("sampler configuration", CONFIG_BYTES)?;
        let layer_cache = context * hp.kv_dim() * 2;
        let mut cache_r = Vec::new();
        for l in 0..hp.n_layer {
            cache_r.push((
                plan.add(format!("k{l}"), layer_cache)?,
                plan.add(format!("v{l}"), layer_cache)?,
            ));
        }
        let arena = DeviceArena::new(ctx, plan)?;
        Ok(Work {
            bufs: buf_r.iter().map(|&r| arena.ptr(r)).collect(),
            q8: arena.ptr(q8_r),
            q8k: arena.ptr(q8k_r),
            seq: arena.ptr(seq_r),
            state: arena.ptr(state_r),
            config: arena.ptr(config_r),
            cache: cache_r
                .iter()
                .map(|&(k, v)| (arena.ptr(k), arena.ptr(v)))
                .collect(),
            arena,
        })
    }

    fn buf(&self, b: Buf) -> DevicePtr {
        self.bufs[b.index()]
    }
}

/// What a decode step's launches are bound to: the model's shapes, the uploaded weights,
/// the work memory and the kernels.
struct Binding<'m, 'a> {
    model: &'a Model<'m>,
    weights: &'a DeviceWeights,
    kernels: DecodeKernels,
    work: &'a Work,
    /// [`kernels::ROPE_FUSED`] | [`kernels::ROPE_INTERLEAVED`] of the model's rule.
    rope_form: i32,
    rope_interleaved: bool,
    /// Blocks of one wave of the fused kernels (`FUSE_MIN_BLOCKS` per SM).
    max_blocks: u32,
    /// The device's L2 cache (bytes): a third of it bounds the rows asked for ahead.
    l2_bytes: usize,
    /// The device's SMs: a fused product of at most this many blocks takes
    /// `prep_matvec_wide` (one block per SM, no register cap).
    sms: u32,
    /// The fused step's attention as `attention_cluster` (SM 9.0 and later, a context of at
    /// most [`kernels::ATT_TILE`] positions).
    attn_cluster: bool,
    /// `attention_cluster`'s staged cache rows (key rows, value rows; [`attn_stage`]).
    attn_stage: (usize, usize),
    /// Dynamic shared memory of every `layer` launch ([`merge_layers`]; 0: none).
    layer_shared: u32,
    /// `layer` asks L2 for the cache rows it attends over before its dependency wait
    /// (`LayerParams::kv_rows`; `TETHER_LLM_KV_PREFETCH=0` turns it off, for comparisons).
    kv_prefetch: bool,
    /// Products of several turns of one projection of a 32-block type (the head) take
    /// `prep_matvec_group` (a row per 8-lane group, four rows a warp in flight). On by
    /// default since session 54 (docs/evidence/llm-gpu.md: bit-equal to `prep` + `matvec`
    /// in every `gpu_fuse` comparison, decode +2-3 % on the real model, H100);
    /// `TETHER_LLM_MATVEC_GROUP=0` takes `prep_matvec`, one row a warp (for comparisons).
    matvec_group: bool,
    context: usize,
}

impl Binding<'_, '_> {
    /// The launch of step `s`.
    fn launch(&self, s: &Step) -> Launch {
        let hp = self.model.hparams();
        match *s {
            Step::Embed { table } => {
                let m = self.model.matrix(table);
                Launch {
                    f: self.kernels.embed,
                    grid: (1, 1),
                    block: 256,
                    params: Params::Embed(EmbedParams {
                        table: self.weights.mat_ptr(table),
                        prompt: self.work.seq,
                        state: self.work.state,
                        out: self.work.buf(Buf::Residual),
                        ty: m.ty.ggml_id() as i32,
                        cols: i32_of(m.cols),
                        row_bytes: i32_of(m.row_bytes()),
                        n_vocab: i32_of(m.rows),
                    }),
                    cluster: 1,
                }
            }
            Step::Prep {
                input,
                swiglu,
                norm,
                out,
                q8: want8,
                q8k: want8k,
            } => Launch {
                f: self.kernels.prep,
                grid: (1, 1),
                block: kernels::PREP_THREADS,
                params: Params::Prep(PrepParams {
                    input: self.work.buf(input),
                    in2: if swiglu {
                        self.work.buf(Buf::Up)
                    } else {
                        DevicePtr(0)
                    },
                    weight: norm.map_or(DevicePtr(0), |v| self.weights.vec_ptr(v)),
                    out: self.work.buf(out),
                    q8: if want8 { self.work.q8 } else { DevicePtr(0) },
                    q8k: if want8k { self.work.q8k } else { DevicePtr(0) },
                    n: i32_of(hp.width(input)),
                    eps: hp.norm_eps,
                    swiglu: i32::from(swiglu),
                    pad: 0,
                }),
                cluster: 1,
            },
            Step::MatVec { input, projs } => {
                let (p, nproj, total) = self.projs(&projs);
                let p = MatVecParams {
                    x: self.work.buf(input),
                    q8: self.work.q8,
                    q8k: self.work.q8k,
                    p,
                    nproj: i32_of(nproj),
                    cols: i32_of(hp.width(input)),
                    rows_total: i32_of(total),
                    ..MatVecParams::default()
                };
                Launch {
                    f: self.kernels.matvec,
                    grid: (total.div_ceil(kernels::MV_ROWS as usize) as u32, 1),
                    block: kernels::MV_WARPS * 32,
                    params: Params::MatVec(p),
                    cluster: 1,
                }
            }
            Step::HeadNorm { buf, heads, weight } => Launch {
                f: self.kernels.head_norm,
                grid: (heads.div_ceil(4) as u32, 1),
                block: 128,
                params: Params::HeadNorm(HeadNormParams {
                    x: self.work.buf(buf),
                    weight: self.weights.vec_ptr(weight),
                    heads: i32_of(heads),
                    head_dim: i32_of(hp.head_dim),
                    eps: hp.norm_eps,
                    pad: 0,
                }),
                cluster: 1,
            },
            Step::Rope { buf, heads, store } => {
                let (kc, vc) = match store {
                    Some(l) => self.work.cache[l],
                    None => (DevicePtr(0), DevicePtr(0)),
                };
                Launch {
                    f: self.kernels.rope,
                    grid: ((heads * hp.head_dim / 2).div_ceil(128) as u32, 1),
                    block: 128,
                    params: Params::Rope(RopeParams {
                        x: self.work.buf(buf),
                        angles: self.weights.angles_ptr(),
                        state: self.work.state,
                        kcache: kc,
                        vcache: vc,
                        v: self.work.buf(Buf::V),
                        heads: i32_of(heads),
                        head_dim: i32_of(hp.head_dim),
                        kv_dim: i32_of(hp.kv_dim()),
                        form: self.rope_form,
                    }),
                    cluster: 1,
                }
            }
            Step::Attention { layer } => Launch {
                f: self.kernels.attention,
                grid: (hp.n_head as u32, 1),
                block: kernels::ATTN_WARPS * 32,
                params: Params::Attention(self.attn(layer)),
                cluster: 1,
            },
            Step::PrepMatVec { prologue, projs } => {
                let (p, nproj, rows) = self.projs(&projs);
                let grid = self.fused_grid(rows);
                let group = self.matvec_group
                    && grid > self.sms
                    && rows > rows_per_turn(grid, 1)
                    && one_q32_projection(&p[..nproj]);
                Launch {
                    f: if group {
                        self.kernels.prep_matvec_group
                    } else if grid <= self.sms {
                        self.kernels.prep_matvec_wide
                    } else {
                        self.kernels.prep_matvec
                    },
                    grid: (grid, 1),
                    block: kernels::FUSE_WARPS * 32,
                    params: Params::PrepMatVec(PrepMatVecParams {
                        input: self.prologue(&prologue),
                        p,
                        nproj: i32_of(nproj),
                        rows_total: i32_of(rows),
                        ahead: self.turns_ahead(&p[..nproj], rows, grid, if group { 4 } else { 1 }),
                        pad: 0,
                    }),
                    cluster: 1,
                }
            }
            Step::QkvRope {
                prologue,
                projs,
                layer,
            } => {
                let (p, _, _) = self.projs(&projs);
                let items = (hp.n_head + hp.n_head_kv) * hp.head_dim / 2 + hp.kv_dim() / 2;
                Launch {
                    f: self.kernels.qkv_rope,
                    grid: (self.fused_grid(items), 1),
                    block: kernels::FUSE_WARPS * 32,
                    params: Params::QkvRope(QkvRopeParams {
                        input: self.prologue(&prologue),
                        p,
                        angles: self.weights.angles_ptr(),
                        state: self.work.state,
                        kcache: self.work.cache[layer].0,
                        vcache: self.work.cache[layer].1,
                        n_head: i32_of(hp.n_head),
                        n_kv: i32_of(hp.n_head_kv),
                        head_dim: i32_of(hp.head_dim),
                        items: i32_of(items),
                        form: self.rope_form,
                        pad: 0,
                    }),
                    cluster: 1,
                }
            }
            Step::AttentionFused { layer } if self.attn_cluster => Launch {
                f: self.kernels.attention_cluster,
                grid: (hp.n_head as u32 * kernels::ATTN_CLUSTER, 1),
                block: kernels::ATTN_WARPS * 32,
                params: Params::AttnFused(AttnParams {
                    stage_k: i32_of(self.attn_stage.0),
                    stage_v: i32_of(self.attn_stage.1),
                    ..self.attn(layer)
                }),
                cluster: kernels::ATTN_CLUSTER,
            },
            Step::AttentionFused { layer } => Launch {
                f: self.kernels.attention_fused,
                grid: (hp.n_head as u32, 1),
                block: kernels::ATTN_WARPS * 32,
                params: Params::AttnFused(self.attn(layer)),
                cluster: 1,
            },
            Step::Layer {
                layer,
                attn_norm,
                ffn_norm,
                mats,
                tail,
                next,
            } => {
                let m = mats.map(|id| self.layer_mat(id));
                Launch {
                    f: self.kernels.layer,
                    grid: (kernels::LAYER_CLUSTER, 1),
                    block: kernels::FUSE_WARPS * 32,
                    params: Params::Layer(
                        LayerParams {
                            x: self.work.buf(Buf::Residual),
                            attn_norm: self.weights.vec_ptr(attn_norm),
                            ffn_norm: self.weights.vec_ptr(ffn_norm),
                            m,
                            angles: self.weights.angles_ptr(),
                            state: self.work.state,
                            kcache: self.work.cache[layer].0,
                            vcache: self.work.cache[layer].1,
                            width: i32_of(hp.n_embd),
                            ffn: i32_of(hp.n_ff),
                            n_head: i32_of(hp.n_head),
                            n_kv: i32_of(hp.n_head_kv),
                            head_dim: i32_of(hp.head_dim),
                            form: self.rope_form,
                            eps: hp.norm_eps,
                            scale: 1.0 / (hp.head_dim as f32).sqrt(),
                            slice_bytes: i32_of(layer_slice_max(self.model, &mats)),
                            pad: 0,
                            // The tail does not attend: no cache rows asked of L2.
                            kv_rows: if self.kv_prefetch && !tail {
                                i32_of(self.context)
                            } else {
                                0
                            },
                            pad2: 0,
                            att: if tail {
                                self.work.buf(Buf::Attn)
                            } else {
                                DevicePtr(0)
                            },
                            next_norm: next
                                .map_or(DevicePtr(0), |n| self.weights.vec_ptr(n.attn_norm)),
                            next_m: next.map_or([LayerMat::default(); 3], |n| {
                                n.mats.map(|id| self.layer_mat(id))
                            }),
                            next_k: next.map_or(DevicePtr(0), |n| self.work.cache[n.layer].0),
                            next_v: next.map_or(DevicePtr(0), |n| self.work.cache[n.layer].1),
                            q_out: next.map_or(DevicePtr(0), |_| self.work.buf(Buf::Q)),
                        },
                        self.layer_shared,
                    ),
                    cluster: kernels::LAYER_CLUSTER,
                }
            }
            Step::Sample => Launch {
                f: self.kernels.sample,
                grid: (1, 1),
                block: kernels::SAMPLE_THREADS,
                params: Params::Sample(SampleParams {
                    logits: self.work.buf(Buf::Logits),
                    seq: self.work.seq,
                    state: self.work.state,
                    config: self.work.config,
                    n: i32_of(hp.n_vocab),
                    seq_cap: i32_of(self.context + 1),
                }),
                cluster: 1,
            },
        }
    }

    /// Matrix `id` as the layer kernel reads it.
    fn layer_mat(&self, id: MatId) -> LayerMat {
        let mm = self.model.matrix(id);
        LayerMat {
            w: self.weights.mat_ptr(id),
            ty: mm.ty.ggml_id() as i32,
            row_bytes: i32_of(mm.row_bytes()),
        }
    }

    /// The parameters of a fused kernel's prologue `pr`.
    fn prologue(&self, pr: &Prologue) -> PrologueParams {
        let hp = self.model.hparams();
        PrologueParams {
            input: self.work.buf(pr.input),
            in2: if pr.swiglu {
                self.work.buf(Buf::Up)
            } else {
                DevicePtr(0)
            },
            norm: pr.norm.map_or(DevicePtr(0), |v| self.weights.vec_ptr(v)),
            n: i32_of(hp.width(pr.input)),
            eps: hp.norm_eps,
            swiglu: i32::from(pr.swiglu),
            q8: i32::from(pr.q8),
            q8k: i32::from(pr.q8k),
            pad: 0,
        }
    }

    /// The parameters of up to three projections, how many there are, and their rows.
    fn projs(&self, projs: &[Option<crate::forward::Proj>; 3]) -> ([ProjParams; 3], usize, usize) {
        let mut out = [ProjParams::default(); 3];
        let mut rows = 0usize;
        for (k, pr) in projs.iter().flatten().enumerate() {
            let m = self.model.matrix(pr.weight);
            out[k] = ProjParams {
                w: self.weights.mat_ptr(pr.weight),
                bias: pr.bias.map_or(DevicePtr(0), |v| self.weights.vec_ptr(v)),
                out: self.work.buf(pr.out),
                ty: m.ty.ggml_id() as i32,
                rows: i32_of(m.rows),
                row_bytes: i32_of(m.row_bytes()),
                accumulate: i32::from(pr.accumulate),
            };
            rows += m.rows;
        }
        (out, projs.iter().flatten().count(), rows)
    }

    /// Blocks of a fused kernel over `items` rows or items: each warp takes one per turn, at
    /// most one wave of blocks (the head's rows in several turns).
    fn fused_grid(&self, items: usize) -> u32 {
        (items.div_ceil(kernels::FUSE_WARPS as usize) as u32).clamp(1, self.max_blocks)
    }

    /// Turns of a fused product whose rows each warp asks of L2 ahead of their turn: as many
    /// as a third of the L2 cache holds (the rows of one turn of the whole grid at the widest
    /// row), at least 1 (the next turn), at most the turns there are; `per_warp` rows a warp
    /// and turn (4 for `prep_matvec_group`). The head of a 49,152 x 576 Q4_1 model (16 turns
    /// of 1.1 MB on an H200's 396 blocks, one row a warp) asks for 15 turns at once with 50 MB
    /// of L2; a Jetson AGX Orin (4 MB of L2, 16 SMs: 48 blocks, 138 KB a turn) about 10.
    fn turns_ahead(&self, projs: &[ProjParams], rows: usize, grid: u32, per_warp: usize) -> i32 {
        let per_turn = rows_per_turn(grid, per_warp);
        let turns = rows.div_ceil(per_turn.max(1));
        let row_bytes = projs
            .iter()
            .map(|p| p.row_bytes as usize)
            .max()
            .unwrap_or(1);
        let fit = self.l2_bytes / 3 / (per_turn * row_bytes).max(1);
        i32_of(fit.clamp(1, turns.max(1)))
    }

    /// The attention parameters of `layer`.
    fn attn(&self, layer: usize) -> AttnParams {
        let hp = self.model.hparams();
        AttnParams {
            q: self.work.buf(Buf::Q),
            kcache: self.work.cache[layer].0,
            vcache: self.work.cache[layer].1,
            out: self.work.buf(Buf::Attn),
            state: self.work.state,
            n_head: i32_of(hp.n_head),
            n_kv: i32_of(hp.n_head_kv),
            head_dim: i32_of(hp.head_dim),
            kv_dim: i32_of(hp.kv_dim()),
            scale: 1.0 / (hp.head_dim as f32).sqrt(),
            interleaved: i32::from(self.rope_interleaved),
            stage_k: 0,
            stage_v: 0,
        }
    }
}

/// The largest weight slice a block of `layer` copies for matrices `mats` (bytes).
fn layer_slice_max(model: &Model<'_>, mats: &[MatId; 7]) -> usize {
    let hp = model.hparams();
    let shape = slice_shape(hp, mats.map(|id| model.matrix(id).row_bytes()));
    (0..kernels::LAYER_CLUSTER as usize)
        .map(|b| shape.layer_bytes(b))
        .max()
        .unwrap_or(0)
}

/// The slices' view of a layer of `hp` with these row sizes.
fn slice_shape(hp: &Hparams, row_bytes: [usize; 7]) -> kernels::SliceShape {
    kernels::SliceShape {
        width: hp.n_embd,
        ffn: hp.n_ff,
        n_head: hp.n_head,
        n_kv: hp.n_head_kv,
        head_dim: hp.head_dim,
        row_bytes,
    }
}

/// Cache rows a `layers_grid` attention block stages in shared memory at most (K and V of
/// one head; 64 KiB at head_dim 64): staged, the step at position 128 took 0.736 ms against
/// 0.787 without (H100, synthetic SmolLM2 shape, session 47). 256 rather than 192 (session
/// 58, H200, the real SmolLM2-135M): a 128-token run from position 128 stays staged
/// throughout, 1,374 against 1,306 tok/s (one call's means), inter-token p99.9 / p50 1.04
/// against 1.13 (its steps no longer fall in two levels at position 192), the same speed
/// from 256 on; 320 and 384 rows were 5 % slower at 512 (less L1 for the steps not staged;
/// 384 rows 5 % faster at 256, where they still hold the whole span).
pub const GRID_STAGE_ROWS: usize = 256;

/// `launches` with their run of `layer` launches replaced by one `layers_grid` launch of
/// one block per SM, and the memory it reads; unchanged, with `None` (said in the log), where
/// there is no `layer` launch, where they are not one run (a layer that keeps its five
/// launches between merged ones), where `3 * head_dim > 2 * width + ffn` (the attention
/// blocks' staging of Q, K and V would not fit the areas it borrows) or where the device
/// cannot hold a block on every SM at once.
fn fold_grid(
    ctx: &Context,
    stream: &Stream,
    kernels: &DecodeKernels,
    launches: Vec<Launch>,
    model: &Model<'_>,
    context: usize,
) -> Result<(Vec<Launch>, Option<DeviceArena>), GpuError> {
    let hp = model.hparams();
    // Whole layers only (a layer's tail keeps its launch).
    let whole = |l: &Launch| matches!(l.params, Params::Layer(p, _) if p.att == DevicePtr(0));
    let Some(first) = launches.iter().position(whole) else {
        return Ok((launches, None));
    };
    let layers: Vec<LayerParams> = launches[first..]
        .iter()
        .map_while(|l| match l.params {
            Params::Layer(p, _) if p.att == DevicePtr(0) => Some(p),
            _ => None,
        })
        .collect();
    let n = layers.len();
    if launches[first + n..].iter().any(whole) {
        log::info!("layers_grid: the layer launches are not one run; one launch per layer");
        return Ok((launches, None));
    }
    let nb = ctx.properties().multiprocessors as usize;
    let slot = layers
        .iter()
        .flat_map(|p| {
            let shape = slice_shape(hp, p.m.map(|m| m.row_bytes as usize));
            (0..nb).map(move |b| shape.grid_bytes(b, nb))
        })
        .max()
        .unwrap_or(0);
    let bytes = kernels::layer_dynamic_bytes(
        kernels::GRID_RING * slot,
        hp.n_embd,
        hp.n_ff,
        hp.n_head,
        hp.head_dim,
    );
    // The attention blocks' staged cache rows (K and V of one head, f16) in what the
    // device's per-block limit leaves, up to the context.
    let bytes = bytes.next_multiple_of(16) + hp.n_ff.next_multiple_of(16) * 4 - hp.n_ff * 4;
    let static_bytes = kernels.layers_grid.static_shared_bytes()? as usize;
    let optin = ctx.properties().shared_per_block_optin as usize;
    // At most GRID_STAGE_ROWS rows: the rest of the unified memory stays L1, which the
    // attention of the steps whose span does not fit reads through (320 rows measured
    // slower than 192 from 512 positions on, session 47).
    let cap = grid_stage_rows_of(std::env::var("TETHER_LLM_GRID_STAGE").ok().as_deref());
    // Only where each head has a block of its own (the kernel's condition).
    let stage_rows = if nb >= hp.n_head {
        (optin.saturating_sub(static_bytes + bytes) / (4 * hp.head_dim))
            .min(context)
            .min(cap)
    } else {
        0
    };
    let bytes = bytes + stage_rows * 4 * hp.head_dim;
    let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
    let block = kernels::FUSE_WARPS * 32;
    let resident = kernels
        .layers_grid
        .set_launch_limits(bytes, false)
        .and_then(|()| kernels.layers_grid.max_active_clusters(1, block, bytes))
        .unwrap_or(0) as usize;
    if resident < nb {
        log::info!(
            "layers_grid: {resident} blocks of {bytes} bytes resident, {nb} SMs; one launch per layer"
        );
        return Ok((launches, None));
    }
    if 3 * hp.head_dim > 2 * hp.n_embd + hp.n_ff {
        log::info!("layers_grid: 3 * head_dim > 2 * width + ffn; one launch per layer");
        return Ok((launches, None));
    }
    let words = kernels::grid_xch_words(hp.q_dim(), hp.kv_dim(), hp.n_embd, hp.n_ff);
    let mut plan = ArenaPlan::new();
    let table_r = plan.add("grid layers", n * std::mem::size_of::<LayerParams>())?;
    let xch_r = plan.add("grid exchange", n * words * 8)?;
    let seq_r = plan.add("grid launches", nb * 4)?;
    let arena = DeviceArena::new(ctx, plan)?;
    // SAFETY: the arena's bytes; the table's source lives until the synchronisation below,
    // and LayerParams is plain data (repr(C), integers and addresses).
    unsafe {
        stream.memset_u8(arena.base(), 0, arena.plan().total_bytes())?;
        stream.memcpy_htod(
            arena.ptr(table_r),
            layers.as_ptr() as *const u8,
            n * std::mem::size_of::<LayerParams>(),
        )?;
    }
    stream.synchronize()?;
    let launch = Launch {
        f: kernels.layers_grid,
        grid: (nb as u32, 1),
        block,
        params: Params::Grid(
            GridParams {
                layers: arena.ptr(table_r),
                xch: arena.ptr(xch_r),
                seq: arena.ptr(seq_r),
                n_layers: n as i32,
                slot_bytes: slot as i32,
                xch_words: words as i32,
                stage_rows: stage_rows as i32,
            },
            bytes,
        ),
        cluster: 1,
    };
    log::debug!(
        "layers_grid: {n} layers in one launch of {nb} blocks, {bytes} bytes of shared memory a block"
    );
    let mut out = launches[..first].to_vec();
    out.push(launch);
    out.extend_from_slice(&launches[first + n..]);
    Ok((out, Some(arena)))
}

/// `steps` with each layer [`lower_layers`] accepts as one `layer` launch, where the model's
/// query width is its width, its rows are multiples of 4 bytes, the layer's dynamic shared
/// memory and the kernel's static shared memory fit `optin` (the device's per-block limit)
/// and the device runs at least one such cluster; the same layers' tails merged
/// ([`lower_tails`]); the dynamic shared memory every `layer` launch asks for (0: no layer
/// merged, both step lists `steps` unchanged).
///
/// # Errors
/// The driver's errors setting the kernel's launch limits or asking its occupancy.
fn merge_layers(
    model: &Model<'_>,
    steps: &[Step],
    kernels: &DecodeKernels,
    optin: u32,
) -> Result<(Vec<Step>, Vec<Step>, u32), GpuError> {
    let hp = model.hparams();
    let ty = |id: MatId| model.matrix(id).ty;
    let static_bytes = kernels.layer.static_shared_bytes()? as usize;
    let dynamic = |s: &Step| match s {
        Step::Layer { mats, .. } => kernels::layer_dynamic_bytes(
            layer_slice_max(model, mats),
            hp.n_embd,
            hp.n_ff,
            hp.n_head,
            hp.head_dim,
        ),
        _ => 0,
    };
    let shape =
        hp.q_dim() == hp.n_embd && hp.n_head_kv > 0 && hp.n_head.is_multiple_of(hp.n_head_kv);
    // The kernel copies rows 4 bytes at a time (`cp.async`): every row a multiple of 4
    // bytes (a Q8_0 or Q4_0 row of an odd number of blocks is not).
    let aligned = |s: &Step| match s {
        Step::Layer { mats, .. } => mats
            .iter()
            .all(|&m| model.matrix(m).row_bytes().is_multiple_of(4)),
        _ => false,
    };
    let fits = |s: &Step| shape && aligned(s) && static_bytes + dynamic(s) <= optin as usize;
    let merged = lower_layers(steps, &ty, &fits);
    // The same layers' tails ([`tail_pair`]); a tail's launch asks for its whole layer's
    // shared memory (the same slice layout).
    let tails = lower_tails(steps, &ty, &fits, tail_pair());
    let bytes = merged.iter().map(dynamic).max().unwrap_or(0);
    if bytes == 0 {
        return Ok((steps.to_vec(), steps.to_vec(), 0));
    }
    let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
    // A device or driver that refuses the limits or the cluster size keeps the five launches
    // per layer (said in the log), as one where no cluster fits.
    let clusters = kernels
        .layer
        .set_launch_limits(bytes, true)
        .and_then(|()| {
            kernels.layer.max_active_clusters(
                kernels::LAYER_CLUSTER,
                kernels::FUSE_WARPS * 32,
                bytes,
            )
        })
        .unwrap_or_else(|e| {
            log::info!("layer kernel: {e}; 5 launches per layer");
            0
        });
    if clusters == 0 {
        log::info!(
            "layer kernel: no cluster of {} blocks with {bytes} bytes of shared memory fits this GPU; 5 launches per layer",
            kernels::LAYER_CLUSTER
        );
        return Ok((steps.to_vec(), steps.to_vec(), 0));
    }
    log::debug!(
        "layer kernel: {} of {} layers in one launch each ({bytes} bytes of dynamic shared memory a block, {clusters} clusters resident at most)",
        merged
            .iter()
            .filter(|s| matches!(s, Step::Layer { .. }))
            .count(),
        hp.n_layer
    );
    Ok((merged, tails, bytes))
}

/// The cache rows `attention_cluster` stages in shared memory before its dependency wait
/// (key rows, value rows; [`kernels::attn_stage_rows`]): as many as
/// [`kernels::ATT_STAGE_BYTES`] holds, halved until every head's cluster is resident at once
/// (the launch stays one wave; none below 16 KiB). (0, 0) with `TETHER_LLM_ATT_STAGE=0` (for
/// comparisons) or where the driver refuses the limit (said in the log). The same values
/// either way: the staged rows are copies the kernel reads instead of the cache.
///
/// # Errors
/// The driver's error reading the kernel's static shared memory.
fn attn_stage(
    model: &Model<'_>,
    kernels: &DecodeKernels,
    context: usize,
    optin: u32,
) -> Result<(usize, usize), GpuError> {
    if !switch_of(
        "TETHER_LLM_ATT_STAGE",
        std::env::var("TETHER_LLM_ATT_STAGE").ok().as_deref(),
    )
    .unwrap_or(true)
    {
        return Ok((0, 0));
    }
    let hp = model.hparams();
    let f = kernels.attention_cluster;
    let room = (optin as usize).saturating_sub(f.static_shared_bytes()? as usize);
    let mut budget = kernels::ATT_STAGE_BYTES.min(room);
    while budget >= 16 * 1024 {
        let (k, v) = kernels::attn_stage_rows(hp.head_dim, context, budget);
        let bytes = kernels::attn_stage_bytes(&AttnParams {
            head_dim: i32_of(hp.head_dim),
            stage_k: i32_of(k),
            stage_v: i32_of(v),
            ..AttnParams::default()
        });
        let resident = f.set_launch_limits(bytes, false).and_then(|()| {
            f.max_active_clusters(kernels::ATTN_CLUSTER, kernels::ATTN_WARPS * 32, bytes)
        });
        match resident {
            Ok(n) if n as usize >= hp.n_head => {
                log::debug!(
                    "attention_cluster: {k} key and {v} value rows staged a block ({bytes} bytes of shared memory, {n} clusters resident)"
                );
                return Ok((k, v));
            }
            Ok(_) => budget /= 2,
            Err(e) => {
                log::info!("attention_cluster: {e}; no cache rows staged");
                return Ok((0, 0));
            }
        }
    }
    Ok((0, 0))
}

fn state_bytes(s: &DecodeState) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (i, v) in [s.token, s.pos, s.prompt_len, s.bad_token]
        .iter()
        .enumerate()
    {
        b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_stage_rows_reads_its_variable() {
        assert_eq!(grid_stage_rows_of(None), GRID_STAGE_ROWS);
        assert_eq!(grid_stage_rows_of(Some("0")), 0);
        assert_eq!(grid_stage_rows_of(Some(" 320 ")), 320);
        assert_eq!(grid_stage_rows_of(Some("many")), GRID_STAGE_ROWS);
        assert_eq!(grid_stage_rows_of(Some("-1")), GRID_STAGE_ROWS);
    }

    #[test]
    fn layer_kernel_below_reads_the_two_variables() {
        assert_eq!(layer_kernel_below_of(None, None), LAYER_KERNEL_BELOW);
        assert_eq!(layer_kernel_below_of(Some("0"), Some("900")), 0);
        assert_eq!(layer_kernel_below_of(Some("1"), None), usize::MAX);
        assert_eq!(layer_kernel_below_of(None, Some(" 900 ")), 900);
        assert_eq!(layer_kernel_below_of(Some("yes"), Some("0")), 0);
        assert_eq!(
            layer_kernel_below_of(None, Some("soon")),
            LAYER_KERNEL_BELOW
        );
        assert_eq!(layer_kernel_below_of(None, Some("-5")), LAYER_KERNEL_BELOW);
    }

    #[test]
    fn the_group_product_takes_one_projection_of_a_32_block_type() {
        let p = |ty: TensorType| ProjParams {
            ty: ty.ggml_id() as i32,
            ..ProjParams::default()
        };
        for ty in [TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1] {
            assert!(one_q32_projection(&[p(ty)]), "{ty:?}");
            assert!(!one_q32_projection(&[p(ty), p(ty)]), "{ty:?} twice");
        }
        for ty in [
            TensorType::Q4K,
            TensorType::Q6K,
            TensorType::F16,
            TensorType::F32,
        ] {
            assert!(!one_q32_projection(&[p(ty)]), "{ty:?}");
        }
        assert!(!one_q32_projection(&[]));
    }

    #[test]
    fn kv_prefetch_is_off_only_for_zero() {
        assert!(kv_prefetch_of(None));
        assert!(kv_prefetch_of(Some("1")));
        assert!(!kv_prefetch_of(Some("0")));
        assert!(kv_prefetch_of(Some("off")));
        assert!(kv_prefetch_of(Some(" 0")));
    }
}
