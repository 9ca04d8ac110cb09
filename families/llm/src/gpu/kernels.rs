//! The decode kernels (`kernels/llm.cu`): embedded images and one `#[repr(C)]` parameter
//! struct per kernel, mirrored field for field from the CUDA source.

use tether_runtime::cuda::{DevicePtr, KernelImage, ModuleSource};

/// The embedded kernel images (rebuilt by `runtime/kernels/build-kernels.sh
/// families/llm/kernels/llm.cu`, digests in `kernels/bin/SHA256SUMS`, architectures checked
/// by `runtime/kernels/list-archs.sh families/llm/kernels/bin` in `tests/run`).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "llm.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../../kernels/bin/llm.cu13.fatbin"),
    },
    KernelImage {
        name: "llm.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../../kernels/bin/llm.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "llm.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../../kernels/bin/llm.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "llm.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../../kernels/bin/llm.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/llm.cu");

/// Where the decode kernels come from.
pub fn module_source() -> ModuleSource {
    ModuleSource {
        images: KERNEL_IMAGES,
        source: Some(KERNEL_SOURCE),
        allow_nvrtc: false,
    }
}

/// Threads of `prep` (`PREP_THREADS`).
pub const PREP_THREADS: u32 = 1024;
/// Warps per block of `matvec` (`MV_WARPS`); each warp computes 4 rows (one per 8-lane group).
pub const MV_WARPS: u32 = 4;
/// Rows per block of `matvec` (`MV_ROWS`).
pub const MV_ROWS: u32 = MV_WARPS * 4;
/// Warps per block of `attention` (`ATTN_WARPS`): one block per query head (and row).
pub const ATTN_WARPS: u32 = 8;
/// Bits of the RoPE `form` parameter (`ROPE_FUSED`, `ROPE_INTERLEAVED`): llama.cpp's fused
/// rotation ([`crate::kernels::rope_fused`]) and its interleaved lane order.
pub const ROPE_FUSED: i32 = 1;
/// See [`ROPE_FUSED`].
pub const ROPE_INTERLEAVED: i32 = 2;

/// Warps per block of `prep_matvec` and `qkv_rope` (`FUSE_WARPS`); each warp takes one row
/// (or work item of two rows) per turn, its four 8-lane groups sharing the row's blocks.
pub const FUSE_WARPS: u32 = 8;
/// Most blocks of one `prep_matvec` / `qkv_rope` launch: wider products give each warp
/// several rows (each block prepares the input once).
pub const FUSE_MAX_BLOCKS: u32 = 1024;
/// Blocks of `prep_matvec` resident per SM (`FUSE_MIN_BLOCKS`, its launch bounds): a fused
/// launch has at most this many blocks per SM, one wave. A launch of at most one block per
/// SM takes `prep_matvec_wide` (the same arithmetic without the register cap).
pub const FUSE_MIN_BLOCKS: u32 = 3;

/// Blocks of the thread block cluster of `attention_cluster` (`ATTN_CLUSTER`): one cluster
/// per query head, each block a share of the positions and of the head's dims.
pub const ATTN_CLUSTER: u32 = 8;
/// Most positions `attention_cluster` attends over (`ATT_TILE`): a longer context takes
/// `attention_fused` (one block per head).
pub const ATT_TILE: usize = 8192;

/// `struct DecodeState`: the request state in device memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeState {
    /// The last chosen token, input of the next step.
    pub token: u32,
    /// Position of the token the next step processes.
    pub pos: u32,
    /// While `pos < prompt_len` the step reads `prompt[pos]`.
    pub prompt_len: u32,
    /// 1 + the first out-of-vocabulary id the embedding saw (0: none).
    pub bad_token: u32,
}

/// `struct EmbedParams` of `embed`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbedParams {
    /// Table rows (ggml blocks).
    pub table: DevicePtr,
    /// u32 `[context]` prompt ids.
    pub prompt: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f32 `[cols]`.
    pub out: DevicePtr,
    /// ggml type id.
    pub ty: i32,
    /// Columns (`n_embd`).
    pub cols: i32,
    /// Bytes per row.
    pub row_bytes: i32,
    /// Rows.
    pub n_vocab: i32,
}

/// `struct PrepParams` of `prep`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PrepParams {
    /// f32 input.
    pub input: DevicePtr,
    /// f32 `Up` (SwiGLU) or null.
    pub in2: DevicePtr,
    /// RMSNorm weight or null.
    pub weight: DevicePtr,
    /// f32 output.
    pub out: DevicePtr,
    /// Q8 blocks or null.
    pub q8: DevicePtr,
    /// Q8_K blocks or null.
    pub q8k: DevicePtr,
    /// Values.
    pub n: i32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// 1: `silu(input) * in2`.
    pub swiglu: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct Proj` of `matvec`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProjParams {
    /// Weight rows.
    pub w: DevicePtr,
    /// f32 bias or null.
    pub bias: DevicePtr,
    /// f32 output.
    pub out: DevicePtr,
    /// ggml type id.
    pub ty: i32,
    /// Rows.
    pub rows: i32,
    /// Bytes per row.
    pub row_bytes: i32,
    /// 1: add into `out`.
    pub accumulate: i32,
}

/// `struct MatVecParams` of `matvec`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MatVecParams {
    /// f32 input.
    pub x: DevicePtr,
    /// Q8 blocks of the input.
    pub q8: DevicePtr,
    /// Q8_K blocks of the input.
    pub q8k: DevicePtr,
    /// The projections.
    pub p: [ProjParams; 3],
    /// Projections used.
    pub nproj: i32,
    /// Columns (input width).
    pub cols: i32,
    /// Rows of all projections.
    pub rows_total: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct HeadNormParams` of `head_norm`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadNormParams {
    /// f32 `[heads, head_dim]`, in place.
    pub x: DevicePtr,
    /// f32 `[head_dim]`.
    pub weight: DevicePtr,
    /// Heads.
    pub heads: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// Epsilon.
    pub eps: f32,
    /// Padding.
    pub pad: i32,
}

/// `struct RopeParams` of `rope`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RopeParams {
    /// f32 `[heads, head_dim]`, in place.
    pub x: DevicePtr,
    /// f32 `[context, head_dim]` RoPE table: per position `[cos; half] ++ [sin; half]`.
    pub angles: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f16 `[context, kv_dim]` keys of the layer, or null.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// f32 `V` of the step.
    pub v: DevicePtr,
    /// Heads.
    pub heads: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// `n_head_kv * head_dim`.
    pub kv_dim: i32,
    /// [`ROPE_FUSED`] | [`ROPE_INTERLEAVED`].
    pub form: i32,
}

/// `struct AttnParams` of `attention`, `attention_fused` and `attention_cluster`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AttnParams {
    /// f32 queries.
    pub q: DevicePtr,
    /// f16 keys of the layer.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// f32 `[n_head * head_dim]` output.
    pub out: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// Query heads.
    pub n_head: i32,
    /// Key/value heads.
    pub n_kv: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// `n_kv * head_dim`.
    pub kv_dim: i32,
    /// `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// 1: llama.cpp's interleaved lane order of a head (the key cache is stored in it).
    pub interleaved: i32,
    /// `attention_cluster` only (0 elsewhere): key rows of its chunk a block copies into its
    /// dynamic shared memory before its dependency wait ([`attn_stage_rows`]).
    pub stage_k: i32,
    /// `attention_cluster` only: value rows (of the block's `head_dim / ATTN_CLUSTER` dims)
    /// it copies likewise; 0 where those dims are not a multiple of 8 f16 (16-byte copies).
    pub stage_v: i32,
}

/// The most dynamic shared memory `attention_cluster` asks for to stage the cache rows of
/// the earlier positions (bytes): half for key rows, half for value rows. With head_dim 64
/// it holds every earlier row up to position 4,096 (512 key rows of a block's chunk, 4,096
/// value rows of its 8 dims); longer spans read the rows past that from the cache.
pub const ATT_STAGE_BYTES: usize = 128 * 1024;

/// The staged rows of `attention_cluster` for `budget` bytes: (key rows, value rows), each
/// no more than a context of `context` positions needs (a block's chunk: `context /
/// ATTN_CLUSTER` rounded up to a multiple of 8; every earlier position). Mirrors the
/// kernel's layout (`AttnParams::stage_k`): key rows of `head_dim` f16, value rows of
/// `head_dim / ATTN_CLUSTER` f16, staged only where that is a multiple of 8.
pub fn attn_stage_rows(head_dim: usize, context: usize, budget: usize) -> (usize, usize) {
    let dpb = head_dim / ATTN_CLUSTER as usize;
    let span = context.min(ATT_TILE);
    let chunk = span.div_ceil(ATTN_CLUSTER as usize).div_ceil(8) * 8;
    let k = (budget / 2 / (head_dim * 2).max(1)).min(chunk);
    let v = if dpb > 0 && dpb.is_multiple_of(8) {
        (budget / 2 / (dpb * 2)).min(span)
    } else {
        0
    };
    (k, v)
}

/// Dynamic shared memory of an `attention_cluster` launch staging `p.stage_k` key and
/// `p.stage_v` value rows (bytes).
pub fn attn_stage_bytes(p: &AttnParams) -> u32 {
    let hd = p.head_dim.max(0) as u32;
    p.stage_k.max(0) as u32 * hd * 2 + p.stage_v.max(0) as u32 * (hd / ATTN_CLUSTER) * 2
}

/// `struct PrologueParams`: the input preparation of `prep_matvec` and `qkv_rope`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PrologueParams {
    /// f32 input.
    pub input: DevicePtr,
    /// f32 `Up` (SwiGLU) or null.
    pub in2: DevicePtr,
    /// RMSNorm weight or null.
    pub norm: DevicePtr,
    /// Values.
    pub n: i32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// 1: `silu(input) * in2`.
    pub swiglu: i32,
    /// 1: Q8 blocks into shared memory.
    pub q8: i32,
    /// 1: Q8_K blocks into shared memory.
    pub q8k: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct PrepMatVecParams` of `prep_matvec` and `prep_matvec_wide`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PrepMatVecParams {
    /// The input's preparation.
    pub input: PrologueParams,
    /// The projections.
    pub p: [ProjParams; 3],
    /// Projections used.
    pub nproj: i32,
    /// Rows of all projections.
    pub rows_total: i32,
    /// Turns whose rows a warp asks of L2 ahead of their turn (at least 1).
    pub ahead: i32,
    /// Padding (0).
    pub pad: i32,
}

/// `struct QkvRopeParams` of `qkv_rope`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QkvRopeParams {
    /// The input's preparation.
    pub input: PrologueParams,
    /// Q, K, V.
    pub p: [ProjParams; 3],
    /// f32 `[context, head_dim]` RoPE table (as [`RopeParams::angles`]).
    pub angles: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f16 `[context, kv_dim]` keys of the layer.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// Query heads.
    pub n_head: i32,
    /// Key/value heads.
    pub n_kv: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// Work items: `(n_head + n_kv) * head_dim / 2` rotated pairs, then `kv_dim / 2` pairs
    /// of V rows.
    pub items: i32,
    /// [`ROPE_FUSED`] | [`ROPE_INTERLEAVED`].
    pub form: i32,
    /// Padding.
    pub pad: i32,
}

/// Blocks of the thread block cluster of `layer` (`LAYER_CLUSTER`): one cluster runs a whole
/// layer (a non-portable cluster size: compute capability 9.0 and later allow 16 with
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`).
pub const LAYER_CLUSTER: u32 = 16;

/// `struct LayerMat`: one matrix of a layer for `layer`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LayerMat {
    /// Rows (ggml blocks).
    pub w: DevicePtr,
    /// ggml type id.
    pub ty: i32,
    /// Bytes per row.
    pub row_bytes: i32,
}

/// `struct LayerParams` of `layer`: a whole Llama-style layer in one cluster launch.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LayerParams {
    /// f32 `[width]` residual (read, then written).
    pub x: DevicePtr,
    /// f32 `[width]` RMSNorm weight before attention.
    pub attn_norm: DevicePtr,
    /// f32 `[width]` RMSNorm weight before the feed-forward.
    pub ffn_norm: DevicePtr,
    /// Q, K, V, output, gate, up, down.
    pub m: [LayerMat; 7],
    /// f32 `[context, head_dim]` RoPE table (as [`RopeParams::angles`]).
    pub angles: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f16 `[context, kv_dim]` keys of the layer.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// `n_embd` (= `n_head * head_dim`).
    pub width: i32,
    /// `n_ff`.
    pub ffn: i32,
    /// Query heads.
    pub n_head: i32,
    /// Key/value heads.
    pub n_kv: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// [`ROPE_FUSED`] | [`ROPE_INTERLEAVED`].
    pub form: i32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// `1 / sqrt(head_dim)` ([`AttnParams::scale`]).
    pub scale: f32,
    /// Bytes of the largest block's weight slice ([`SliceShape::layer_bytes`]).
    pub slice_bytes: i32,
    /// Padding (the profiling harness's layer index).
    pub pad: i32,
    /// The cache's positions (`n_ctx`): the launch asks L2 for the K and V rows of the
    /// positions before the state's (at most `kv_rows`) before its dependency wait; 0: it
    /// does not.
    pub kv_rows: i32,
    /// Padding.
    pub pad2: i32,
    /// The layer's tail only ([`Step::Layer`](super::lower::Step::Layer) with `tail`): f32
    /// `[width]` attention output (`Attn`, written by the launch before); the launch skips the
    /// Q/K/V product and the attention and starts at the output projection. 0 (null): the
    /// whole layer; always 0 in `layers_grid`'s table.
    pub att: DevicePtr,
    /// A tail paired with the next layer's Q/K/V (`q_out` not 0; with `att`): f32 `[width]`
    /// attention norm of the next layer.
    pub next_norm: DevicePtr,
    /// The next layer's Q, K, V (rows of the same bytes as this layer's).
    pub next_m: [LayerMat; 3],
    /// f16 `[context, kv_dim]` keys of the next layer.
    pub next_k: DevicePtr,
    /// f16 values of the next layer.
    pub next_v: DevicePtr,
    /// f32 `[n_head * head_dim]`: the next layer's rotated Q (`Q`); 0: not paired.
    pub q_out: DevicePtr,
}

/// A layer's shape as the weight slices of `layer` and `layers_grid` see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceShape {
    /// `n_embd`.
    pub width: usize,
    /// `n_ff`.
    pub ffn: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv: usize,
    /// Lanes per head.
    pub head_dim: usize,
    /// Bytes per row of Q, K, V, output, gate, up, down.
    pub row_bytes: [usize; 7],
}

impl SliceShape {
    /// Block `b` of `blocks`' rows of each phase: Q/K/V work items (`qkv_rope`'s: a rotated
    /// pair of Q or K rows, or two V rows), output rows, gate (= up) rows, down rows; each
    /// phase's n split into runs of `ceil(n / blocks)`, the last block fewer (`layer_range`
    /// of `kernels/llm.cu`).
    pub fn rows(&self, b: usize, blocks: usize) -> [usize; 4] {
        let count = |n: usize| {
            let per = n.div_ceil(blocks);
            let r0 = n.min(b * per);
            n.min(r0 + per) - r0
        };
        let items = (self.n_head + self.n_kv) * self.head_dim / 2 + self.n_kv * self.head_dim / 2;
        [
            count(items),
            count(self.width),
            count(self.ffn),
            count(self.width),
        ]
    }

    /// Bytes of the weight slice block `b` of a `layer` cluster copies into its shared memory
    /// (`layer_slice` of `kernels/llm.cu`, which this mirrors: [`rows`](Self::rows) of
    /// [`LAYER_CLUSTER`] blocks, items of two rows at the widest of Q, K, V, each region
    /// 16-byte aligned).
    pub fn layer_bytes(&self, b: usize) -> usize {
        let [items, o, f, d] = self.rows(b, LAYER_CLUSTER as usize);
        let rb = self.row_bytes;
        let a16 = |v: usize| v.next_multiple_of(16);
        let item_stride = 2 * rb[0].max(rb[1]).max(rb[2]);
        let mut off = a16(items * item_stride);
        off = a16(off + o * rb[3]);
        off = a16(off + f * rb[4]);
        off = a16(off + f * rb[5]);
        a16(off + d * rb[6])
    }

    /// Bytes of block `b` of `blocks`' weight slice in a `layers_grid` ring slot
    /// (`grid_slice` of `kernels/llm.cu`, which this mirrors): the same rows, each region
    /// (an item's row; the output, gate, up, down rows) one bulk copy of the 16-byte-aligned
    /// bytes around it, so each region its rows' bytes rounded up to 16, plus 32.
    pub fn grid_bytes(&self, b: usize, blocks: usize) -> usize {
        let [items, o, f, d] = self.rows(b, blocks);
        let rb = self.row_bytes;
        let a16 = |v: usize| v.next_multiple_of(16);
        let item_stride = 2 * (a16(rb[0].max(rb[1]).max(rb[2])) + 32);
        items * item_stride
            + a16(o * rb[3])
            + a16(f * rb[4])
            + a16(f * rb[5])
            + a16(d * rb[6])
            + 4 * 32
    }
}

/// Slots of `layers_grid`'s ring of weight slices (`GRID_RING`): the layer computed and the
/// `GRID_RING - 1` after it in flight.
pub const GRID_RING: usize = 4;

/// `struct GridParams` of `layers_grid`: every merged layer of a step in one launch of one
/// block per SM, the phases' values handed on as tagged 64-bit words.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GridParams {
    /// `[n_layers]` [`LayerParams`] in device memory.
    pub layers: DevicePtr,
    /// u64 `[n_layers, xch_words]` tagged words (value bits low, tag high), zero at load,
    /// outside the poisoned work arena.
    pub xch: DevicePtr,
    /// u32 `[blocks]` launches each block completed, zero at load.
    pub seq: DevicePtr,
    /// Layers.
    pub n_layers: i32,
    /// Bytes of one ring slot (the largest slice of any block and layer).
    pub slot_bytes: i32,
    /// Words a layer ([`grid_xch_words`]).
    pub xch_words: i32,
    /// Cache rows of a head (K and V, f16) the attention blocks stage in shared memory: the
    /// steps at positions below it read the span from there.
    pub stage_rows: i32,
}

/// Tagged words of one layer in `layers_grid`'s exchange: Q `[q_dim]`, K and V `[kv_dim]`
/// each, the attention output, x1 and the residual `[width]` each, the SwiGLU product
/// `[ffn]`.
pub fn grid_xch_words(q_dim: usize, kv_dim: usize, width: usize, ffn: usize) -> usize {
    q_dim + 2 * kv_dim + 3 * width + ffn
}

/// Dynamic shared memory of a `layer` block: the largest weight slice (`slice_bytes`), the
/// prologue's area for the widest input (its Q8 blocks and f32 values, each 16-byte
/// aligned), then Q, the attention output, the residual after the output projection and the
/// SwiGLU product (f32).
pub fn layer_dynamic_bytes(
    slice_bytes: usize,
    width: usize,
    ffn: usize,
    n_head: usize,
    head_dim: usize,
) -> usize {
    let widest = width.max(ffn);
    let a16 = |v: usize| v.next_multiple_of(16);
    slice_bytes
        + a16(widest / 32 * super::lower::BLOCK_Q8_BYTES)
        + a16(widest * 4)
        + (n_head * head_dim + 2 * width + ffn) * 4
}

/// `struct SampleParams` of `sample_advance`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleParams {
    /// f32 `[n]` logits (the repetition penalty is applied in place).
    pub logits: DevicePtr,
    /// u32 `[seq_cap]`: the request's prompt, then each chosen token at `pos + 1`.
    pub seq: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// The request's `SampleConfig` ([`super::lower::SampleConfig`]).
    pub config: DevicePtr,
    /// Vocabulary.
    pub n: i32,
    /// Ids the sequence buffer holds (`context + 1`).
    pub seq_cap: i32,
}

/// Threads of `sample_advance` (`SAMPLE_THREADS`).
pub const SAMPLE_THREADS: u32 = 1024;

const _: () = assert!(std::mem::size_of::<DecodeState>() == super::lower::STATE_BYTES);
const _: () = assert!(std::mem::size_of::<EmbedParams>() == 32 + 16);
const _: () = assert!(std::mem::size_of::<PrepParams>() == 48 + 16);
const _: () = assert!(std::mem::size_of::<ProjParams>() == 40);
const _: () = assert!(std::mem::size_of::<MatVecParams>() == 24 + 120 + 16);
const _: () = assert!(std::mem::size_of::<HeadNormParams>() == 32);
const _: () = assert!(std::mem::size_of::<RopeParams>() == 48 + 16);
const _: () = assert!(std::mem::size_of::<AttnParams>() == 40 + 32);
const _: () = assert!(std::mem::size_of::<SampleParams>() == 40);
const _: () = assert!(std::mem::size_of::<PrologueParams>() == 24 + 24);
const _: () = assert!(std::mem::size_of::<PrepMatVecParams>() == 48 + 120 + 16);
const _: () = assert!(std::mem::size_of::<QkvRopeParams>() == 48 + 120 + 32 + 24);
const _: () = assert!(std::mem::size_of::<LayerMat>() == 16);
const _: () = assert!(std::mem::size_of::<GridParams>() == 40);
const _: () =
    assert!(std::mem::size_of::<LayerParams>() == 24 + 112 + 32 + 24 + 8 + 8 + 8 + 8 + 48 + 32);

// ---------------------------------------------------------------------------------------
// Prefill (section PREFILL of llm.cu): one struct per chunk kernel.
// ---------------------------------------------------------------------------------------

/// Warps per block of `matmul_chunk` (`MM_WARPS`), four 8-lane groups each.
pub const MM_WARPS: u32 = 4;
/// Rows per 8-lane group of `matmul_chunk` (`MM_R`) when every projection of the launch has
/// 32-value blocks (Q8_0, Q4_0, Q4_1): each activation block is then read once for this many
/// rows. Other launches take one row per group.
pub const MM_R: u32 = 4;

/// `struct EmbedChunkParams` of `embed_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbedChunkParams {
    /// Table rows (ggml blocks).
    pub table: DevicePtr,
    /// u32 `[context]` prompt ids.
    pub prompt: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f32 `[chunk, cols]`.
    pub out: DevicePtr,
    /// ggml type id.
    pub ty: i32,
    /// Columns.
    pub cols: i32,
    /// Bytes per table row.
    pub row_bytes: i32,
    /// Rows of the table.
    pub n_vocab: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct PrepChunkParams` of `prep_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PrepChunkParams {
    /// f32 `[chunk, stride]` input.
    pub input: DevicePtr,
    /// f32 `Up` rows (SwiGLU) or null.
    pub in2: DevicePtr,
    /// RMSNorm weight or null.
    pub weight: DevicePtr,
    /// f32 output rows.
    pub out: DevicePtr,
    /// Q8 blocks `[chunk, q8_stride]` or null.
    pub q8: DevicePtr,
    /// Q8_K blocks `[chunk, q8k_stride]` or null.
    pub q8k: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// Values per row.
    pub n: i32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// 1: `silu(input) * in2`.
    pub swiglu: i32,
    /// Floats per row of the input, `in2` and the output.
    pub stride: i32,
    /// Q8 blocks per row.
    pub q8_stride: i32,
    /// Q8_K blocks per row.
    pub q8k_stride: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// 1: the chunk's last row only, in the prompt's last chunk only.
    pub last: i32,
}

/// `struct ProjChunk` of `matmul_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProjChunkParams {
    /// Weight rows.
    pub w: DevicePtr,
    /// f32 bias or null.
    pub bias: DevicePtr,
    /// f32 output rows.
    pub out: DevicePtr,
    /// ggml type id.
    pub ty: i32,
    /// Rows of the weight.
    pub rows: i32,
    /// Bytes per weight row.
    pub row_bytes: i32,
    /// 1: add into `out`.
    pub accumulate: i32,
    /// Floats per token row of `out` (0: a single row).
    pub out_stride: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct MatMulChunkParams` of `matmul_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MatMulChunkParams {
    /// f32 input rows.
    pub x: DevicePtr,
    /// Q8 blocks of the rows.
    pub q8: DevicePtr,
    /// Q8_K blocks of the rows.
    pub q8k: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// The projections.
    pub p: [ProjChunkParams; 3],
    /// Projections used.
    pub nproj: i32,
    /// Columns (input width).
    pub cols: i32,
    /// Rows of all projections.
    pub rows_total: i32,
    /// Floats per input row.
    pub x_stride: i32,
    /// Q8 blocks per row.
    pub q8_stride: i32,
    /// Q8_K blocks per row.
    pub q8k_stride: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// 1: the chunk's last row only, in the prompt's last chunk only.
    pub last: i32,
    /// Tokens per warp (the grid's y covers the chunk in these), a multiple of `MM_TOK`.
    pub tok_per_warp: i32,
    /// Rows per 8-lane group: [`MM_R`] when every projection is Q8_0, Q4_0 or Q4_1, else 1;
    /// a block covers `MM_WARPS * 4 * group_rows` rows.
    pub group_rows: i32,
}

/// `struct HeadNormChunkParams` of `head_norm_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadNormChunkParams {
    /// f32 rows, in place.
    pub x: DevicePtr,
    /// f32 `[head_dim]`.
    pub weight: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// Heads.
    pub heads: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// Epsilon.
    pub eps: f32,
    /// Floats per row.
    pub stride: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct RopeChunkParams` of `rope_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RopeChunkParams {
    /// f32 rows, in place.
    pub x: DevicePtr,
    /// f32 `[context, head_dim]` RoPE table (as [`RopeParams::angles`]).
    pub angles: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// f16 keys of the layer, or null.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// f32 `V` rows.
    pub v: DevicePtr,
    /// Heads.
    pub heads: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// `n_head_kv * head_dim`.
    pub kv_dim: i32,
    /// Floats per row of `x`.
    pub x_stride: i32,
    /// Floats per row of `v`.
    pub v_stride: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// [`ROPE_FUSED`] | [`ROPE_INTERLEAVED`].
    pub form: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct AttnChunkParams` of `attention_chunk`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AttnChunkParams {
    /// f32 query rows.
    pub q: DevicePtr,
    /// f16 keys of the layer.
    pub kcache: DevicePtr,
    /// f16 values of the layer.
    pub vcache: DevicePtr,
    /// f32 `[chunk, q_stride]` output rows.
    pub out: DevicePtr,
    /// The request state.
    pub state: DevicePtr,
    /// Query heads.
    pub n_head: i32,
    /// Key/value heads.
    pub n_kv: i32,
    /// Lanes per head.
    pub head_dim: i32,
    /// `n_kv * head_dim`.
    pub kv_dim: i32,
    /// `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// The CPU engine's prompt tokens per forward chunk ([`super::GpuOptions::prompt_batch`]):
    /// decides which rows use the one-token (Gemv) order.
    pub batch: i32,
    /// Floats per query (and output) row.
    pub q_stride: i32,
    /// Tokens per chunk.
    pub chunk: i32,
    /// 1: interleaved lane order.
    pub interleaved: i32,
    /// Padding.
    pub pad: i32,
}

/// `struct ChunkAdvanceParams` of `chunk_advance`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkAdvanceParams {
    /// The request state.
    pub state: DevicePtr,
    /// Tokens per chunk.
    pub chunk: i32,
    /// Padding.
    pub pad: i32,
}

const _: () = assert!(std::mem::size_of::<EmbedChunkParams>() == 32 + 24);
const _: () = assert!(std::mem::size_of::<PrepChunkParams>() == 56 + 32);
const _: () = assert!(std::mem::size_of::<ProjChunkParams>() == 48);
const _: () = assert!(std::mem::size_of::<MatMulChunkParams>() == 32 + 144 + 40);
const _: () = assert!(std::mem::size_of::<HeadNormChunkParams>() == 24 + 24);
const _: () = assert!(std::mem::size_of::<RopeChunkParams>() == 48 + 32);
const _: () = assert!(std::mem::size_of::<AttnChunkParams>() == 40 + 40);
const _: () = assert!(std::mem::size_of::<ChunkAdvanceParams>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    /// `attention_cluster`'s staged rows: half the budget each for key rows (at most a
    /// block's chunk of the context) and value rows (at most the context), no value rows
    /// where a block's dims are not whole 16-byte copies; the bytes of the layout.
    #[test]
    fn attention_stage_rows_fit_the_budget_and_the_context() {
        let b = ATT_STAGE_BYTES;
        // head_dim 64: 128-byte key rows, 8 dims (16 bytes) a block.
        assert_eq!(attn_stage_rows(64, 8192, b), (512, 4096));
        assert_eq!(attn_stage_rows(64, 2048, b), (256, 2048));
        // A chunk is rounded up to a multiple of 8 rows.
        assert_eq!(attn_stage_rows(64, 100, b), (16, 100));
        assert_eq!(attn_stage_rows(128, 8192, b), (256, 2048));
        // 5 or 4 dims a block: keys only.
        assert_eq!(attn_stage_rows(40, 8192, b).1, 0);
        assert_eq!(attn_stage_rows(32, 8192, b).1, 0);
        // Past ATT_TILE the cluster kernel is not used; the rows stop there.
        assert_eq!(attn_stage_rows(64, 1 << 20, b), (512, 4096));
        let p = |hd: usize, (k, v): (usize, usize)| AttnParams {
            head_dim: hd as i32,
            stage_k: k as i32,
            stage_v: v as i32,
            ..AttnParams::default()
        };
        assert_eq!(
            attn_stage_bytes(&p(64, attn_stage_rows(64, 8192, b))),
            b as u32
        );
        assert_eq!(
            attn_stage_bytes(&p(128, attn_stage_rows(128, 8192, b))),
            b as u32
        );
        assert!(attn_stage_bytes(&p(64, attn_stage_rows(64, 2048, b))) < b as u32);
        assert_eq!(attn_stage_bytes(&AttnParams::default()), 0);
    }

    /// SmolLM2-135M at Q4_1: rows of 18 blocks of 20 bytes (576 columns), down rows of 48.
    fn smollm2_q4_1() -> SliceShape {
        SliceShape {
            width: 576,
            ffn: 1536,
            n_head: 9,
            n_kv: 3,
            head_dim: 64,
            row_bytes: [360, 360, 360, 360, 360, 360, 960],
        }
    }

    /// SmolLM2-135M at Q4_1 (width 576, 9 heads / 3 KV heads of 64, FFN 1,536; rows of 18 or
    /// 48 blocks of 20 bytes): block 0 takes 30 Q/K/V items (two 360-byte rows each), 36
    /// output rows, 96 gate and 96 up rows and 36 down rows (960 bytes):
    /// 21,600 + 12,960 + 34,560 + 34,560 + 34,560 = 138,240 bytes, every region a multiple
    /// of 16 already. The last block takes what is left of each phase.
    #[test]
    fn a_layer_slice_holds_its_blocks_rows_of_each_phase() {
        let smollm2 = smollm2_q4_1();
        assert_eq!(smollm2.layer_bytes(0), 138_240);
        assert_eq!(smollm2.layer_bytes(15), 138_240);
        let small = |width, ffn, head_dim| SliceShape {
            width,
            ffn,
            n_head: 1,
            n_kv: 1,
            head_dim,
            row_bytes: [4; 7],
        };
        // 100 rows over 16 blocks: 7 each, block 14 takes 2 and block 15 none.
        assert_eq!(small(100, 100, 4).layer_bytes(15), 0);
        // Regions are 16-byte aligned: one 4-byte row of each kind in block 0.
        assert_eq!(small(16, 16, 4).layer_bytes(0), 16 * 5);
        // The dynamic shared memory adds the prologue's area and the values handed on.
        let dynamic = layer_dynamic_bytes(138_240, 576, 1536, 9, 64);
        assert_eq!(
            dynamic,
            138_240 + 48 * 40 + 1536 * 4 + (576 + 2 * 576 + 1536) * 4
        );
    }

    /// SmolLM2-135M at Q4_1 over 132 blocks (an H100's or H200's SMs): block 0 takes 4 of
    /// the 480 Q/K/V items (ceil(480 / 132)), 5 output rows (ceil(576 / 132)), 12 gate and
    /// 12 up rows (ceil(1,536 / 132)) and 5 down rows; each item row sits in 360 rounded to
    /// 16 (368) + 32 bytes, each other region in its rows rounded to 16 + 32:
    /// 4 * 2 * 400 + (1,808 + 32) + 2 * (4,320 + 32) + (4,800 + 32) = 18,576 bytes. Blocks
    /// 0-119 take the items, 0-114 five output and down rows each and 115 the last one, 0-127
    /// the gate rows; block 131 none of them: the paddings alone.
    #[test]
    fn a_grid_slice_pads_each_region_for_its_bulk_copy() {
        let smollm2 = smollm2_q4_1();
        assert_eq!(smollm2.rows(0, 132), [4, 5, 12, 5]);
        assert_eq!(smollm2.rows(115, 132), [4, 1, 12, 1]);
        assert_eq!(smollm2.rows(119, 132), [4, 0, 12, 0]);
        assert_eq!(smollm2.rows(131, 132), [0, 0, 0, 0]);
        assert_eq!(smollm2.grid_bytes(0, 132), 18_576);
        assert_eq!(smollm2.grid_bytes(131, 132), 4 * 32);
        assert_eq!(smollm2.rows(0, 16), [30, 36, 96, 36]);
        assert_eq!(
            grid_xch_words(576, 192, 576, 1536),
            576 + 2 * 192 + 3 * 576 + 1536
        );
    }
}
