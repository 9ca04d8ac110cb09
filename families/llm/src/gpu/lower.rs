//! The forward pass's [`Program`] lowered to the GPU's decode kernels (batch 1): no CUDA
//! here, so the lowering and the memory plan are tested on any host.
//!
//! Rules (each [`Op`] of the program, in order):
//! - `Embed` -> [`Step::Embed`] (the token read from the request state on the device);
//! - `RmsNorm` -> [`Step::Prep`] with the norm, also quantising its output into the
//!   activation blocks the next product reading it needs ([`ActFormat`]);
//! - `SwiGlu` -> [`Step::Prep`] computing `silu(Gate) * Up` into `Gate`, quantised likewise;
//! - `Linear` -> [`Step::MatVec`] (all its projections in one launch), preceded by a
//!   quantising [`Step::Prep`] when the previous step did not prepare its input;
//! - `HeadNorm` -> [`Step::HeadNorm`];
//! - `Rope` of `Q` -> [`Step::Rope`]; `Rope` of `K` directly followed by `StoreKv` -> one
//!   [`Step::Rope`] that also writes the rotated keys and the values into the f16 cache;
//! - `Attention` -> [`Step::Attention`];
//! - then [`Step::Sample`]: the next token (greedy or sampled, per the request's
//!   [`SampleConfig`] in device memory) into the request state, position + 1.
//!
//! [`lower_fused`] then merges these steps into fewer launches, with the same arithmetic
//! (the kernels of `kernels/llm.cu` compute the same values in the same order):
//! - a `Prep` and the product reading it -> one [`Step::PrepMatVec`] (the preparation in
//!   every block's prologue, [`Prologue`]);
//! - that product for Q, K, V followed by the RoPE of Q and the RoPE + cache store of K ->
//!   one [`Step::QkvRope`] (RoPE and the f16 cache write in the product's epilogue);
//! - `Attention` -> [`Step::AttentionFused`] (the same kernel as a dependent launch).
//!
//! A layer of a Llama-style model is then 5 launches (Q/K/V + RoPE + cache, attention, o
//! with the residual, gate/up, down with SwiGLU and the residual) instead of 11; a step
//! `1 + 5 * n_layer + 2` instead of `1 + 11 * n_layer + 3`. On a GPU with 16-block
//! clusters (feature `cuda`; the steps at positions below `GpuOptions::layer_kernel_below`),
//! [`lower_layers`] merges each layer of Q8_0 / Q4_0 / Q4_1 weights into one
//! [`Step::Layer`]: `1 + n_layer + 2` launches; for the steps from that position on,
//! [`lower_tails`] keeps each such layer's `QkvRope` and `AttentionFused` and merges the rest
//! into one [`Step::Layer`] with `tail`, which also computes the next layer's `QkvRope`
//! where it can (`next`): `1 + 1 + 2 * n_layer + 2` launches.

use crate::forward::{Buf, Hparams, MatId, Op, Program, Proj, VecId};
use crate::quant::{ActFormat, TensorType};
use crate::sample::{MAX_PENALTY_WINDOW, SamplerParams};

/// One kernel launch of the decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `Residual = dequantised row of `table` for the step's token`.
    Embed {
        /// `[n_vocab, n_embd]` table.
        table: MatId,
    },
    /// `out = [RmsNorm](input or silu(Gate) * Up)`, plus its 8-bit blocks.
    Prep {
        /// Input buffer (`Gate` for SwiGLU).
        input: Buf,
        /// `silu(input) * Up` instead of `input`.
        swiglu: bool,
        /// RMSNorm weight.
        norm: Option<VecId>,
        /// Output buffer (f32).
        out: Buf,
        /// Also write Q8 blocks (32 values).
        q8: bool,
        /// Also write Q8_K blocks (256 values).
        q8k: bool,
    },
    /// Up to three projections of one prepared input.
    MatVec {
        /// Input buffer (its f32 values and the blocks the last `Prep` wrote).
        input: Buf,
        /// The projections.
        projs: [Option<Proj>; 3],
    },
    /// Per-head RMSNorm (Qwen3).
    HeadNorm {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads.
        heads: usize,
        /// Weight, `head_dim` values.
        weight: VecId,
    },
    /// Rotary embedding at the state's position; with `store`, keys and values into the cache
    /// of that layer.
    Rope {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads.
        heads: usize,
        /// The layer whose cache receives K (this buffer, rotated) and V.
        store: Option<usize>,
    },
    /// Grouped-query attention over the cache of a layer, positions `0 ..= pos`.
    Attention {
        /// Block index.
        layer: usize,
    },
    /// The next token (`sample_advance`: `src/sample.rs`'s chain, greedy when the request's
    /// temperature is <= 0) into the request state; position + 1.
    Sample,
    /// A [`Step::Prep`] and the [`Step::MatVec`] reading it in one launch (`prep_matvec`):
    /// every block prepares the input in its shared memory, then computes its rows.
    PrepMatVec {
        /// The input's preparation.
        prologue: Prologue,
        /// The projections (outputs never the prologue's inputs).
        projs: [Option<Proj>; 3],
    },
    /// The Q/K/V product of a layer with its input's preparation, RoPE at the state's
    /// position and the f16 cache write of K and V in one launch (`qkv_rope`).
    QkvRope {
        /// The input's preparation.
        prologue: Prologue,
        /// Q, K, V projections (outputs `Q`, `K`, `V`, not accumulated).
        projs: [Option<Proj>; 3],
        /// The layer whose cache receives K and V.
        layer: usize,
    },
    /// [`Step::Attention`] as a programmatic dependent launch of the fused step
    /// (`attention_fused`; `attention_cluster`, a cluster of blocks per head, on SM 9.0 and
    /// later with a context of at most 8,192 positions).
    AttentionFused {
        /// Block index.
        layer: usize,
    },
    /// A whole Llama-style layer in one launch of one thread block cluster (`layer`, SM 9.0
    /// and later): the five fused steps `QkvRope`, `AttentionFused`, `PrepMatVec` of the
    /// output projection, of gate/up, of down, as phases separated by cluster barriers
    /// ([`lower_layers`]). Reads and writes only the residual (and the layer's cache).
    ///
    /// With `tail`, only the layer's last three phases ([`lower_tails`]): the output
    /// projection (+ residual), the FFN norm with gate/up and SwiGLU, and down (+ residual) in
    /// one cluster launch after the layer's `QkvRope` and `AttentionFused`, reading the
    /// attention output from `Attn` (the same values: the same phases on the same inputs).
    /// With `next` too, the same launch then computes the next layer's `QkvRope` (its norm,
    /// Q/K/V, RoPE, cache write; Q into `Q`), which then has no launch of its own.
    Layer {
        /// Block index.
        layer: usize,
        /// RMSNorm weight before attention.
        attn_norm: VecId,
        /// RMSNorm weight before the feed-forward.
        ffn_norm: VecId,
        /// Q, K, V, output, gate, up, down weights (no biases).
        mats: [MatId; 7],
        /// Only the phases after the attention (reads `Attn`).
        tail: bool,
        /// With `tail`: the next layer's attention input, computed in the same launch.
        next: Option<LayerNext>,
    },
}

/// The next layer's Q/K/V that a layer's tail computes in its launch ([`Step::Layer`]): its
/// `QkvRope` of the residual with `attn_norm`, no biases, rows of the same types as the
/// tail's layer's (so the same bytes: the tail's weight slice holds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNext {
    /// Block index.
    pub layer: usize,
    /// RMSNorm weight before attention.
    pub attn_norm: VecId,
    /// Q, K, V weights.
    pub mats: [MatId; 3],
}

/// The preparation of a product's input inside the product's launch: `input` (or
/// `silu(Gate) * Up`), RMSNorm'd with `norm`, into the block's shared memory: the f32 values
/// (F32 / F16 / BF16 weights read them) and the 8-bit blocks the product's weights read
/// (`PrologueParams` of `kernels/llm.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prologue {
    /// Input buffer (`Gate` for SwiGLU).
    pub input: Buf,
    /// `silu(input) * Up` instead of `input`.
    pub swiglu: bool,
    /// RMSNorm weight.
    pub norm: Option<VecId>,
    /// Q8 blocks (32 values) for Q8_0 / Q4_0 / Q4_1 weights.
    pub q8: bool,
    /// Q8_K blocks (256 values) for Q4_K / Q6_K weights.
    pub q8k: bool,
}

/// Shared memory a fused product may ask for, in bytes (of the 48 KiB a block gets without
/// opting in; the kernels' static shared memory stays below 1 KiB). A product whose input
/// needs more (an input wider than about 9,000 values) keeps its own `Prep` launch.
pub const FUSE_SHARED_MAX: usize = 46 * 1024;

/// Shared memory of a [`Prologue`] over `n` values, in bytes: its Q8 blocks, Q8_K blocks,
/// then the n f32 values, in that order (`prologue` of `kernels/llm.cu`).
pub fn prologue_shared_bytes(n: usize, q8: bool, q8k: bool) -> usize {
    usize::from(q8) * (n / 32) * BLOCK_Q8_BYTES
        + usize::from(q8k) * (n / 256) * BLOCK_Q8K_BYTES
        + n * 4
}

/// Kernel launches of `steps` (graph nodes): one per step.
pub fn launches(steps: &[Step]) -> usize {
    steps.len()
}

/// A program the GPU lowering cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// `StoreKv` not directly after the `Rope` of `K` (the fused kernel needs the pair).
    #[error("op {index}: StoreKv of layer {layer} does not follow the RoPE of K (seen: {before})")]
    UnfusedStore {
        /// Index of the op.
        index: usize,
        /// Its layer.
        layer: usize,
        /// The op before it.
        before: String,
    },
    /// A `Rope` of a buffer other than `Q` or `K`.
    #[error("op {index}: RoPE of {buf:?} (only Q and K are rotated)")]
    RopeBuffer {
        /// Index of the op.
        index: usize,
        /// The buffer.
        buf: Buf,
    },
}

/// The activation formats the first product reading `buf` after op `from` needs.
pub(crate) fn formats_for(
    program: &Program,
    from: usize,
    buf: Buf,
    ty: &dyn Fn(MatId) -> TensorType,
) -> (bool, bool) {
    for op in &program.ops[from..] {
        if let Op::Linear { input, projs, .. } = op
            && *input == buf
        {
            let (mut q8, mut q8k) = (false, false);
            for p in projs.iter().flatten() {
                match ty(p.weight).act_format() {
                    ActFormat::Q8 => q8 = true,
                    ActFormat::Q8K => q8k = true,
                    ActFormat::F32 => {}
                }
            }
            return (q8, q8k);
        }
    }
    (false, false)
}

/// Lowers `program` to the decode step's launches; `ty` gives each matrix's element type.
///
/// # Errors
/// [`LowerError`] for an op sequence the fused kernels cannot express.
pub fn lower(program: &Program, ty: &dyn Fn(MatId) -> TensorType) -> Result<Vec<Step>, LowerError> {
    let mut steps: Vec<Step> = Vec::with_capacity(program.ops.len() + 32);
    let ops = &program.ops;
    let mut i = 0;
    while i < ops.len() {
        match ops[i] {
            Op::Embed { table } => steps.push(Step::Embed { table }),
            Op::RmsNorm {
                input, weight, out, ..
            } => {
                let (q8, q8k) = formats_for(program, i + 1, out, ty);
                steps.push(Step::Prep {
                    input,
                    swiglu: false,
                    norm: Some(weight),
                    out,
                    q8,
                    q8k,
                });
            }
            Op::SwiGlu => {
                let (q8, q8k) = formats_for(program, i + 1, Buf::Gate, ty);
                steps.push(Step::Prep {
                    input: Buf::Gate,
                    swiglu: true,
                    norm: None,
                    out: Buf::Gate,
                    q8,
                    q8k,
                });
            }
            Op::Linear { input, projs, .. } => {
                let prepared =
                    matches!(steps.last(), Some(Step::Prep { out, .. }) if *out == input);
                if !prepared {
                    let (q8, q8k) = formats_for(program, i, input, ty);
                    steps.push(Step::Prep {
                        input,
                        swiglu: false,
                        norm: None,
                        out: input,
                        q8,
                        q8k,
                    });
                }
                steps.push(Step::MatVec { input, projs });
            }
            Op::HeadNorm { buf, heads, weight } => {
                steps.push(Step::HeadNorm { buf, heads, weight })
            }
            Op::Rope { buf, heads } => match buf {
                Buf::Q => steps.push(Step::Rope {
                    buf,
                    heads,
                    store: None,
                }),
                Buf::K => {
                    if let Some(Op::StoreKv { layer }) = ops.get(i + 1) {
                        steps.push(Step::Rope {
                            buf,
                            heads,
                            store: Some(*layer),
                        });
                        i += 1;
                    } else {
                        steps.push(Step::Rope {
                            buf,
                            heads,
                            store: None,
                        });
                    }
                }
                _ => return Err(LowerError::RopeBuffer { index: i, buf }),
            },
            Op::StoreKv { layer } => {
                return Err(LowerError::UnfusedStore {
                    index: i,
                    layer,
                    before: if i == 0 {
                        "nothing".into()
                    } else {
                        format!("{:?}", ops[i - 1])
                    },
                });
            }
            Op::Attention { layer } => steps.push(Step::Attention { layer }),
        }
        i += 1;
    }
    steps.push(Step::Sample);
    Ok(steps)
}

/// Whether step `s` reads buffer `b`.
fn reads(s: &Step, b: Buf) -> bool {
    let acc =
        |projs: &[Option<Proj>; 3]| projs.iter().flatten().any(|p| p.accumulate && p.out == b);
    match *s {
        Step::Embed { .. } => false,
        Step::Prep { input, swiglu, .. } => input == b || (swiglu && b == Buf::Up),
        Step::MatVec { input, ref projs } => input == b || acc(projs),
        Step::PrepMatVec {
            prologue,
            ref projs,
            ..
        } => prologue.input == b || (prologue.swiglu && b == Buf::Up) || acc(projs),
        Step::QkvRope { prologue, .. } => prologue.input == b,
        Step::HeadNorm { buf, .. } => buf == b,
        Step::Rope { buf, store, .. } => buf == b || (store.is_some() && b == Buf::V),
        Step::Attention { .. } | Step::AttentionFused { .. } => b == Buf::Q,
        Step::Sample => b == Buf::Logits,
        Step::Layer { tail, .. } => b == Buf::Residual || (tail && b == Buf::Attn),
    }
}

/// Whether step `s` writes buffer `b`.
fn writes(s: &Step, b: Buf) -> bool {
    let outs = |projs: &[Option<Proj>; 3]| projs.iter().flatten().any(|p| p.out == b);
    match *s {
        Step::Embed { .. } => b == Buf::Residual,
        Step::Prep { out, .. } => out == b,
        Step::MatVec { ref projs, .. }
        | Step::PrepMatVec { ref projs, .. }
        | Step::QkvRope { ref projs, .. } => outs(projs),
        Step::HeadNorm { buf, .. } | Step::Rope { buf, .. } => buf == b,
        Step::Attention { .. } | Step::AttentionFused { .. } => b == Buf::Attn,
        Step::Sample => false,
        Step::Layer { next, .. } => b == Buf::Residual || (next.is_some() && b == Buf::Q),
    }
}

/// Whether a step of `rest` reads `b` before one writes it.
fn read_before_written(rest: &[Step], b: Buf) -> bool {
    for s in rest {
        if reads(s, b) {
            return true;
        }
        if writes(s, b) {
            return false;
        }
    }
    false
}

/// The Q, K, V projections of a layer: outputs `Q`, `K`, `V` in that order, none accumulated.
fn is_qkv(projs: &[Option<Proj>; 3]) -> bool {
    let outs = projs.map(|p| p.filter(|p| !p.accumulate).map(|p| p.out));
    outs == [Some(Buf::Q), Some(Buf::K), Some(Buf::V)]
}

/// [`lower`], then its steps merged into fewer launches (see the [module docs](self)):
/// each `Prep` with the product reading it, the Q/K/V product with the RoPE of Q and K and
/// the cache store after it, each attention as `attention_fused` (or `attention_cluster`). A `Prep` stays its own launch
/// where merging would change a value: its output read by a later step, a product writing
/// the prologue's input, or an input wider than [`FUSE_SHARED_MAX`] allows.
///
/// # Errors
/// [`LowerError`] as [`lower`].
pub fn lower_fused(
    program: &Program,
    hp: &Hparams,
    ty: &dyn Fn(MatId) -> TensorType,
) -> Result<Vec<Step>, LowerError> {
    let steps = lower(program, ty)?;
    let mut fused = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        if let Step::Prep {
            input,
            swiglu,
            norm,
            out,
            q8,
            q8k,
        } = steps[i]
            && let Some(&Step::MatVec { input: read, projs }) = steps.get(i + 1)
            && read == out
        {
            let prologue = Prologue {
                input,
                swiglu,
                norm,
                q8,
                q8k,
            };
            let unchanged = out == input && !swiglu && norm.is_none();
            let fits = prologue_shared_bytes(hp.width(input), q8, q8k) <= FUSE_SHARED_MAX;
            let overwrites = projs
                .iter()
                .flatten()
                .any(|p| p.out == input || (swiglu && p.out == Buf::Up));
            if fits && !overwrites && (unchanged || !read_before_written(&steps[i + 2..], out)) {
                if let (
                    Some(&Step::Rope {
                        buf: Buf::Q,
                        heads: hq,
                        store: None,
                    }),
                    Some(&Step::Rope {
                        buf: Buf::K,
                        heads: hk,
                        store: Some(layer),
                    }),
                ) = (steps.get(i + 2), steps.get(i + 3))
                    && is_qkv(&projs)
                    && (hq, hk) == (hp.n_head, hp.n_head_kv)
                {
                    fused.push(Step::QkvRope {
                        prologue,
                        projs,
                        layer,
                    });
                    i += 4;
                    continue;
                }
                fused.push(Step::PrepMatVec { prologue, projs });
                i += 2;
                continue;
            }
        }
        fused.push(match steps[i] {
            Step::Attention { layer } => Step::AttentionFused { layer },
            s => s,
        });
        i += 1;
    }
    Ok(fused)
}

/// The five fused steps of a Llama-style layer (`steps[i..i + 5]` of [`lower_fused`]) as one
/// [`Step::Layer`], when they are exactly: `QkvRope` of the residual with its norm (Q, K, V,
/// no biases), `AttentionFused` of the same layer, `PrepMatVec` of `Attn` into the residual
/// (accumulated), `PrepMatVec` of the residual with a norm into `Gate` and `Up`, `PrepMatVec`
/// of SwiGLU(`Gate`, `Up`) into the residual (accumulated); every matrix Q8_0 / Q4_0 / Q4_1
/// (`ty`); and no later step reads `Q`, `K`, `V`, `Attn`, `Gate` or `Up` before writing it
/// (the layer kernel keeps them in shared memory). `None` otherwise.
fn layer_of(steps: &[Step], i: usize, ty: &dyn Fn(MatId) -> TensorType) -> Option<Step> {
    let plain = |p: &Option<Proj>, out: Buf, accumulate: bool| {
        p.filter(|p| p.out == out && p.accumulate == accumulate && p.bias.is_none())
            .map(|p| p.weight)
    };
    let q8_only = |pr: &Prologue| pr.q8 && !pr.q8k;
    let Some(
        &[
            Step::QkvRope {
                prologue: pa,
                projs: qkv,
                layer,
            },
            Step::AttentionFused { layer: la },
            Step::PrepMatVec {
                prologue: po,
                projs: o,
            },
            Step::PrepMatVec {
                prologue: pf,
                projs: gu,
            },
            Step::PrepMatVec {
                prologue: pd,
                projs: d,
            },
        ],
    ) = steps.get(i..i + 5)
    else {
        return None;
    };
    let attn_norm = pa
        .norm
        .filter(|_| pa.input == Buf::Residual && !pa.swiglu)?;
    let ffn_norm = pf
        .norm
        .filter(|_| pf.input == Buf::Residual && !pf.swiglu)?;
    let o_in = po.input == Buf::Attn && !po.swiglu && po.norm.is_none();
    let d_in = pd.input == Buf::Gate && pd.swiglu && pd.norm.is_none();
    if la != layer || !o_in || !d_in || ![pa, po, pf, pd].iter().all(q8_only) {
        return None;
    }
    let mats = [
        plain(&qkv[0], Buf::Q, false)?,
        plain(&qkv[1], Buf::K, false)?,
        plain(&qkv[2], Buf::V, false)?,
        plain(&o[0], Buf::Residual, true)?,
        plain(&gu[0], Buf::Gate, false)?,
        plain(&gu[1], Buf::Up, false)?,
        plain(&d[0], Buf::Residual, true)?,
    ];
    let single =
        o[1].is_none() && o[2].is_none() && gu[2].is_none() && d[1].is_none() && d[2].is_none();
    let q32 = mats.iter().all(|&m| {
        matches!(
            ty(m),
            TensorType::Q8_0 | TensorType::Q4_0 | TensorType::Q4_1
        )
    });
    let rest = &steps[i + 5..];
    let internal = [Buf::Q, Buf::K, Buf::V, Buf::Attn, Buf::Gate, Buf::Up]
        .iter()
        .all(|&b| !read_before_written(rest, b));
    (single && q32 && internal).then_some(Step::Layer {
        layer,
        attn_norm,
        ffn_norm,
        mats,
        tail: false,
        next: None,
    })
}

/// [`lower_fused`]'s steps with every layer that [`layer_of`] accepts (and `fits`, the
/// decoder's test that the layer's weight slices fit a block's shared memory) merged into one
/// [`Step::Layer`]: a Llama-style layer of Q8_0 / Q4_0 / Q4_1 weights becomes 1 launch
/// instead of 5, the same values (every phase runs the fused kernels' device functions in
/// their order). Other layers keep their five steps.
pub fn lower_layers(
    fused: &[Step],
    ty: &dyn Fn(MatId) -> TensorType,
    fits: &dyn Fn(&Step) -> bool,
) -> Vec<Step> {
    let mut out = Vec::with_capacity(fused.len());
    let mut i = 0;
    while i < fused.len() {
        if let Some(l) = layer_of(fused, i, ty).filter(|l| fits(l)) {
            out.push(l);
            i += 5;
        } else {
            out.push(fused[i]);
            i += 1;
        }
    }
    out
}

/// [`lower_fused`]'s steps with the last three launches of every layer that [`layer_of`]
/// accepts (and `fits`, as for [`lower_layers`]) merged into one [`Step::Layer`] with `tail`:
/// such a layer becomes 3 launches instead of 5 (`QkvRope`, `AttentionFused`, the layer
/// kernel's output projection and FFN), keeping the fused step's attention (a cluster of
/// blocks per head), which is faster than the layer kernel's one block per head at long
/// spans. With `pair`, a tail followed by such a layer whose Q, K, V have the tail's layer's
/// types also computes that layer's `QkvRope` (`next`): 2 launches a layer. The same values.
/// Other layers keep their five steps.
pub fn lower_tails(
    fused: &[Step],
    ty: &dyn Fn(MatId) -> TensorType,
    fits: &dyn Fn(&Step) -> bool,
    pair: bool,
) -> Vec<Step> {
    let mut out = Vec::with_capacity(fused.len());
    let mut i = 0;
    while i < fused.len() {
        match layer_of(fused, i, ty).filter(|l| fits(l)) {
            Some(Step::Layer {
                layer,
                attn_norm,
                ffn_norm,
                mats,
                ..
            }) => {
                out.extend_from_slice(&fused[i..i + 2]);
                out.push(Step::Layer {
                    layer,
                    attn_norm,
                    ffn_norm,
                    mats,
                    tail: true,
                    next: None,
                });
                i += 5;
            }
            _ => {
                out.push(fused[i]);
                i += 1;
            }
        }
    }
    if !pair {
        return out;
    }
    // A tail, then a merged layer's QkvRope, AttentionFused and tail: the QkvRope into the
    // first tail's launch.
    let mut paired: Vec<Step> = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        let mut s = out[i];
        if let Step::Layer {
            tail: true,
            next: None,
            mats: m0,
            ..
        } = s
            && let Some(
                &[
                    Step::QkvRope { .. },
                    Step::AttentionFused { .. },
                    Step::Layer {
                        layer,
                        attn_norm,
                        mats: m1,
                        tail: true,
                        ..
                    },
                ],
            ) = out.get(i + 1..i + 4)
            && (0..3).all(|k| ty(m0[k]) == ty(m1[k]))
            && let Step::Layer { ref mut next, .. } = s
        {
            *next = Some(LayerNext {
                layer,
                attn_norm,
                mats: [m1[0], m1[1], m1[2]],
            });
            paired.push(s);
            i += 2;
            continue;
        }
        paired.push(s);
        i += 1;
    }
    paired
}

/// Bytes of one ggml Q8 activation block on the device (`BlockQ8` in `kernels/llm.cu`).
pub const BLOCK_Q8_BYTES: usize = 4 + 4 + 32;
/// Bytes of one Q8_K activation block on the device (`BlockQ8K`).
pub const BLOCK_Q8K_BYTES: usize = 4 + 256 + 2 * 16;
/// Bytes of the request state (`DecodeState`).
pub const STATE_BYTES: usize = 16;
/// Bytes of the request's sampler configuration (`SampleConfig`).
pub const CONFIG_BYTES: usize = 64;
/// Largest vocabulary the device's repetition penalty handles (`SAMPLE_MAX_VOCAB`: one bit
/// per token in the sampler's shared memory, 32 KiB).
pub const SAMPLE_MAX_VOCAB: usize = 262_144;

/// `struct SampleConfig` of `kernels/llm.cu`: a request's [`SamplerParams`] as the device
/// sampler reads them, written once at the request's start. The host computes `1 /
/// temperature` and `ln(min_p)` in f32 exactly as `src/sample.rs` does, so the device adds
/// and multiplies the same values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SampleConfig {
    /// `1 / temperature` (f32 division); 0 when greedy.
    pub inv_temp: f32,
    /// 1: greedy (`temperature <= 0`).
    pub greedy: u32,
    /// Top-k, saturated to `u32::MAX`; 0 or `>= n_vocab`: off.
    pub top_k: u32,
    /// Nucleus mass; 1: off.
    pub top_p: f32,
    /// Minimum relative probability; 0: off.
    pub min_p: f32,
    /// `ln(min_p)` (f32 `ln`); 0 when min-p is off.
    pub ln_min_p: f32,
    /// Repetition penalty.
    pub penalty: f32,
    /// Penalty window in tokens: `min(repeat_last_n, MAX_PENALTY_WINDOW)`, 0 when the
    /// penalty is off (`repeat_penalty == 1` or `repeat_last_n == 0`).
    pub window: u32,
    /// Seed, low and high words (Philox key).
    pub seed: [u32; 2],
    /// Request stream, low and high words (Philox counter words 2 and 3).
    pub request: [u32; 2],
    /// Padding to 64 bytes.
    pub pad: [u32; 4],
}

/// A sampling request the device sampler cannot serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct UnsupportedSampling {
    /// The option and the value seen.
    pub what: String,
}

impl SampleConfig {
    /// The configuration of `params` for a vocabulary of `n_vocab` tokens.
    ///
    /// # Errors
    /// [`UnsupportedSampling`] for a repetition penalty over a vocabulary beyond
    /// [`SAMPLE_MAX_VOCAB`] (the device's bitmap of penalised tokens).
    pub fn new(
        params: &SamplerParams,
        n_vocab: usize,
    ) -> Result<SampleConfig, UnsupportedSampling> {
        let greedy = params.temperature <= 0.0;
        let penalty_on = params.repeat_penalty != 1.0 && params.repeat_last_n != 0;
        if penalty_on && n_vocab > SAMPLE_MAX_VOCAB {
            return Err(UnsupportedSampling {
                what: format!(
                    "repeat penalty {} over a vocabulary of {n_vocab} tokens (the device penalty handles at most {SAMPLE_MAX_VOCAB})",
                    params.repeat_penalty
                ),
            });
        }
        let split = |v: u64| [v as u32, (v >> 32) as u32];
        Ok(SampleConfig {
            inv_temp: if greedy {
                0.0
            } else {
                1.0 / params.temperature
            },
            greedy: u32::from(greedy),
            top_k: u32::try_from(params.top_k).unwrap_or(u32::MAX),
            top_p: params.top_p,
            min_p: params.min_p,
            ln_min_p: if params.min_p > 0.0 {
                params.min_p.ln()
            } else {
                0.0
            },
            penalty: params.repeat_penalty,
            window: if penalty_on {
                params.repeat_last_n.min(MAX_PENALTY_WINDOW) as u32
            } else {
                0
            },
            seed: split(params.seed),
            request: split(params.request),
            pad: [0; 4],
        })
    }

    /// The little-endian bytes the device reads.
    pub fn to_bytes(&self) -> [u8; CONFIG_BYTES] {
        let words = [
            self.inv_temp.to_bits(),
            self.greedy,
            self.top_k,
            self.top_p.to_bits(),
            self.min_p.to_bits(),
            self.ln_min_p.to_bits(),
            self.penalty.to_bits(),
            self.window,
            self.seed[0],
            self.seed[1],
            self.request[0],
            self.request[1],
            self.pad[0],
            self.pad[1],
            self.pad[2],
            self.pad[3],
        ];
        let mut b = [0u8; CONFIG_BYTES];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

const _: () = assert!(std::mem::size_of::<SampleConfig>() == CONFIG_BYTES);

/// The device memory a decoder places at load, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Weight matrices as stored (ggml blocks), norm weights and biases (f32), the RoPE
    /// table (`context * head_dim` f32, computed at load by the CPU engine's code).
    pub weights: usize,
    /// The f16 KV cache: `n_layer * 2 * context * kv_dim * 2`.
    pub cache: usize,
    /// Activations (f32 buffers but the logits, their 8-bit blocks), the request's token
    /// sequence (`context + 1` ids: the prompt, then each chosen token, read by the embedding
    /// and the penalty window), the request state and the sampler configuration; with
    /// `GpuOptions::grid_layers`, `layers_grid`'s memory too (its layers' parameters, the
    /// 64-bit words its phases hand on, a count per block).
    pub activations: usize,
    /// The logits, `n_vocab` f32.
    pub logits: usize,
    /// `weights` were uploaded by another decoder and are shared with it
    /// (`GpuDecoder::new_sharing`): this decoder added `total() - weights` bytes.
    pub shared_weights: bool,
}

impl MemoryPlan {
    /// Sum of the parts.
    pub fn total(&self) -> usize {
        self.weights + self.cache + self.activations + self.logits
    }

    /// The plan for `context` positions; `weight_bytes` as uploaded.
    pub fn new(hp: &Hparams, context: usize, weight_bytes: usize) -> MemoryPlan {
        // Every activation buffer but the logits (counted on their own below).
        let widths: usize = Buf::ALL
            .iter()
            .filter(|&&b| b != Buf::Logits)
            .map(|&b| hp.width(b) * 4)
            .sum();
        let widest = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
        let act = widths
            + widest.div_ceil(32) * BLOCK_Q8_BYTES
            + widest.div_ceil(256) * BLOCK_Q8K_BYTES
            + (context + 1) * 4
            + STATE_BYTES
            + CONFIG_BYTES;
        MemoryPlan {
            weights: weight_bytes,
            cache: hp.n_layer * 2 * context * hp.kv_dim() * 2,
            activations: act,
            logits: hp.n_vocab * 4,
            shared_weights: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::Tokens;

    fn hp() -> Hparams {
        Hparams {
            n_layer: 2,
            n_embd: 64,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            n_ff: 128,
            n_vocab: 100,
            norm_eps: 1e-5,
            rope_inv_freq: vec![1.0; 8],
        }
    }

    #[test]
    fn a_layer_lowers_to_eleven_launches_with_fused_rope_store_and_prepared_inputs() {
        let cfg = crate::testing::tiny_config();
        let weights = crate::testing::tiny_weights(&cfg);
        let tensors = weights.model(&cfg).expect("tensors");
        let hp = Hparams::from_config(&cfg, None).expect("hparams");
        let parts = crate::forward::ModelParts::from_tensors(&tensors).expect("parts");
        let model =
            crate::forward::Model::new(hp, parts, crate::kernels::Isa::Scalar).expect("model");
        // Alternate the types so that both activation formats are asked for.
        let ty = |id: MatId| {
            if id.0.is_multiple_of(2) {
                TensorType::Q4_1
            } else {
                TensorType::Q6K
            }
        };
        let steps = lower(model.program(), &ty).expect("lowers");
        let hp = model.hparams();
        // embed + per layer (prep, qkv, rope q, rope k+store, attention, prep, wo, prep,
        // gate/up, swiglu prep, down) + final prep + head + sample.
        assert_eq!(steps.len(), 1 + 11 * hp.n_layer + 3);
        assert_eq!(
            steps
                .iter()
                .filter(|s| matches!(s, Step::Rope { store: Some(_), .. }))
                .count(),
            hp.n_layer
        );
        // Every product follows a Prep writing its input, with the Q8 blocks its weights need.
        for (k, s) in steps.iter().enumerate() {
            if let Step::MatVec { input, projs } = s {
                let Step::Prep { out, q8, q8k, .. } = steps[k - 1] else {
                    panic!("step {k}: product not prepared: {:?}", steps[k - 1]);
                };
                assert_eq!(out, *input);
                let needs = |f: ActFormat| {
                    projs
                        .iter()
                        .flatten()
                        .any(|p| ty(p.weight).act_format() == f)
                };
                assert_eq!(q8, needs(ActFormat::Q8), "step {k}");
                assert_eq!(q8k, needs(ActFormat::Q8K), "step {k}");
            }
        }
        assert_eq!(steps.last(), Some(&Step::Sample));
        assert_eq!(steps[0], Step::Embed { table: MatId(0) });
    }

    fn tiny_model_steps(
        qk_norm: bool,
        ty: &dyn Fn(MatId) -> TensorType,
    ) -> (Hparams, Vec<Step>, Vec<Step>) {
        let mut cfg = crate::testing::tiny_config();
        cfg.qk_norm = qk_norm;
        let weights = crate::testing::tiny_weights(&cfg);
        let tensors = weights.model(&cfg).expect("tensors");
        let hp = Hparams::from_config(&cfg, None).expect("hparams");
        let parts = crate::forward::ModelParts::from_tensors(&tensors).expect("parts");
        let model =
            crate::forward::Model::new(hp, parts, crate::kernels::Isa::Scalar).expect("model");
        let hp = model.hparams().clone();
        let plain = lower(model.program(), ty).expect("lowers");
        let fused = lower_fused(model.program(), &hp, ty).expect("lowers fused");
        (hp, plain, fused)
    }

    /// The formats a product's weights read.
    fn needs(projs: &[Option<Proj>; 3], ty: &dyn Fn(MatId) -> TensorType, f: ActFormat) -> bool {
        projs
            .iter()
            .flatten()
            .any(|p| ty(p.weight).act_format() == f)
    }

    #[test]
    fn a_fused_layer_is_five_launches_each_product_preparing_its_own_input() {
        // The three activation formats: Q8 (Q4_1), Q8_K (Q6_K) and f32 (F16).
        let ty = |id: MatId| match id.0 % 3 {
            0 => TensorType::Q4_1,
            1 => TensorType::Q6K,
            _ => TensorType::F16,
        };
        let (hp, plain, fused) = tiny_model_steps(false, &ty);
        let n = hp.n_layer;
        assert_eq!(launches(&plain), 1 + 11 * n + 3);
        // embed + per layer (qkv+rope+cache, attention+combine, o + residual, norm + gate/up,
        // swiglu + down + residual) + (norm + head) + sample.
        assert_eq!(launches(&fused), 1 + 5 * n + 2);
        assert_eq!(launches(&fused), fused.len());
        assert_eq!(fused[0], plain[0]);
        assert_eq!(fused.last(), Some(&Step::Sample));
        for l in 0..n {
            let layer = &fused[1 + 5 * l..1 + 5 * (l + 1)];
            let Step::QkvRope {
                prologue,
                projs,
                layer: cache_layer,
            } = layer[0]
            else {
                panic!("layer {l}: {:?}", layer[0]);
            };
            assert_eq!(cache_layer, l);
            assert!(is_qkv(&projs));
            assert!(prologue.norm.is_some() && !prologue.swiglu);
            assert_eq!(prologue.input, Buf::Residual);
            assert_eq!(layer[1], Step::AttentionFused { layer: l });
            let Step::PrepMatVec { prologue: o, .. } = layer[2] else {
                panic!("layer {l}: {:?}", layer[2]);
            };
            assert_eq!((o.input, o.norm, o.swiglu), (Buf::Attn, None, false));
            let Step::PrepMatVec { prologue: gu, .. } = layer[3] else {
                panic!("layer {l}: {:?}", layer[3]);
            };
            assert_eq!(gu.input, Buf::Residual);
            assert!(gu.norm.is_some());
            let Step::PrepMatVec { prologue: d, .. } = layer[4] else {
                panic!("layer {l}: {:?}", layer[4]);
            };
            assert_eq!((d.input, d.norm, d.swiglu), (Buf::Gate, None, true));
        }
        // Every product prepares its input with exactly the formats its weights read, and
        // its norm is the unfused Prep's.
        let mut products = 0;
        for s in &fused {
            let (Step::PrepMatVec { prologue, projs }
            | Step::QkvRope {
                prologue, projs, ..
            }) = *s
            else {
                assert!(
                    !matches!(
                        s,
                        Step::Prep { .. } | Step::MatVec { .. } | Step::Rope { .. }
                    ),
                    "left unfused: {s:?}"
                );
                continue;
            };
            products += 1;
            assert_eq!(prologue.q8, needs(&projs, &ty, ActFormat::Q8), "{s:?}");
            assert_eq!(prologue.q8k, needs(&projs, &ty, ActFormat::Q8K), "{s:?}");
            let unfused = plain
                .iter()
                .zip(&plain[1..])
                .find_map(|(p, m)| match (*p, *m) {
                    (
                        Step::Prep {
                            input,
                            swiglu,
                            norm,
                            ..
                        },
                        Step::MatVec { projs: mp, .. },
                    ) if mp == projs => Some((input, swiglu, norm)),
                    _ => None,
                })
                .expect("the unfused Prep + MatVec");
            assert_eq!(unfused, (prologue.input, prologue.swiglu, prologue.norm));
        }
        assert_eq!(products, 4 * n + 1);
    }

    #[test]
    fn a_layer_of_8_bit_block_weights_is_one_cluster_launch_and_others_keep_five() {
        let q32 = |id: MatId| match id.0 % 3 {
            0 => TensorType::Q4_1,
            1 => TensorType::Q8_0,
            _ => TensorType::Q4_0,
        };
        let (hp, _, fused) = tiny_model_steps(false, &q32);
        let n = hp.n_layer;
        assert!(n >= 2, "{n}");
        let all = lower_layers(&fused, &q32, &|_| true);
        let tails = lower_tails(&fused, &q32, &|_| true, false);
        // embed + one launch per layer + (norm + head) + sample.
        assert_eq!(launches(&all), 1 + n + 2);
        for l in 0..n {
            let Step::QkvRope { projs: qkv, .. } = fused[1 + 5 * l] else {
                panic!("{:?}", fused[1 + 5 * l]);
            };
            let weight = |s: &Step, k: usize| match s {
                Step::PrepMatVec { projs, .. } => projs[k].map(|p| p.weight),
                _ => None,
            };
            // The layer's step, whole or its tail.
            let want = |tail: bool| Step::Layer {
                layer: l,
                attn_norm: match fused[1 + 5 * l] {
                    Step::QkvRope { prologue, .. } => prologue.norm.unwrap(),
                    _ => unreachable!(),
                },
                ffn_norm: match fused[4 + 5 * l] {
                    Step::PrepMatVec { prologue, .. } => prologue.norm.unwrap(),
                    _ => unreachable!(),
                },
                mats: [
                    qkv[0].unwrap().weight,
                    qkv[1].unwrap().weight,
                    qkv[2].unwrap().weight,
                    weight(&fused[3 + 5 * l], 0).unwrap(),
                    weight(&fused[4 + 5 * l], 0).unwrap(),
                    weight(&fused[4 + 5 * l], 1).unwrap(),
                    weight(&fused[5 + 5 * l], 0).unwrap(),
                ],
                tail,
                next: None,
            };
            assert_eq!(all[1 + l], want(false), "layer {l}");
            // The tail: the layer's QKV and attention launches, then the same layer step.
            assert_eq!(&tails[1 + 3 * l..3 + 3 * l], &fused[1 + 5 * l..3 + 5 * l]);
            assert_eq!(tails[3 + 3 * l], want(true), "layer {l}");
        }
        assert_eq!(launches(&tails), 1 + 3 * n + 2);
        assert_eq!(&tails[1 + 3 * n..], &fused[1 + 5 * n..]);
        assert_eq!(lower_tails(&fused, &q32, &|_| false, false), fused);
        assert_eq!(lower_tails(&fused, &q32, &|_| false, true), fused);
        // Paired: layer 0's QkvRope, then each layer's attention and tail, every tail but the
        // last carrying the next layer's QkvRope.
        let one = |_: MatId| TensorType::Q4_1;
        let (_, _, fused) = tiny_model_steps(false, &one);
        let paired = lower_tails(&fused, &one, &|_| true, true);
        assert_eq!(launches(&paired), 1 + 1 + 2 * n + 2);
        assert_eq!(paired[1], fused[1]);
        for l in 0..n {
            assert_eq!(paired[2 + 2 * l], fused[2 + 5 * l], "layer {l}");
            let Step::Layer {
                layer,
                tail: true,
                next,
                ..
            } = paired[3 + 2 * l]
            else {
                panic!("{:?}", paired[3 + 2 * l]);
            };
            assert_eq!(layer, l);
            let want = (l + 1 < n).then(|| {
                let Step::QkvRope {
                    prologue, projs, ..
                } = fused[1 + 5 * (l + 1)]
                else {
                    unreachable!()
                };
                LayerNext {
                    layer: l + 1,
                    attn_norm: prologue.norm.unwrap(),
                    mats: projs.map(|p| p.unwrap().weight),
                }
            });
            assert_eq!(next, want, "layer {l}");
        }
        assert_eq!(&paired[2 + 2 * n..], &fused[1 + 5 * n..]);
        // Layers whose Q/K/V types differ (`q32` cycles them by id): a tail carries the next
        // layer's QkvRope exactly where the three types agree.
        let (_, _, fused) = tiny_model_steps(false, &q32);
        let mixed = lower_tails(&fused, &q32, &|_| true, true);
        let qkv_types = |l: usize| match fused[1 + 5 * l] {
            Step::QkvRope { projs, .. } => projs.map(|p| q32(p.unwrap().weight)),
            _ => unreachable!(),
        };
        let pairs = (0..n - 1)
            .filter(|&l| qkv_types(l) == qkv_types(l + 1))
            .count();
        assert_eq!(launches(&mixed), 1 + 3 * n + 2 - pairs);
        let mut l = 0;
        for s in &mixed {
            if let Step::Layer { layer, next, .. } = *s {
                assert_eq!(layer, l);
                let want = l + 1 < n && qkv_types(l) == qkv_types(l + 1);
                assert_eq!(next.map(|x| x.layer), want.then_some(l + 1), "layer {l}");
                l += 1;
            }
        }
        assert_eq!(l, n);
        // A paired tail writes Q besides the residual.
        for b in Buf::ALL {
            assert_eq!(
                writes(&paired[3], b),
                b == Buf::Residual || b == Buf::Q,
                "{b:?}"
            );
        }
        // The tail reads the attention output besides the residual, and writes the residual.
        for b in Buf::ALL {
            assert_eq!(
                reads(&tails[3], b),
                b == Buf::Residual || b == Buf::Attn,
                "{b:?}"
            );
            assert_eq!(writes(&tails[3], b), b == Buf::Residual, "{b:?}");
        }
        assert_eq!(&all[1 + n..], &fused[1 + 5 * n..]);
        // Layer 1's down projection Q6_K: layer 1 keeps its five launches, layer 0 merges.
        let Step::Layer { mats, .. } = all[2] else {
            panic!("{:?}", all[2]);
        };
        let k_down = mats[6];
        let mixed = |id: MatId| {
            if id == k_down {
                TensorType::Q6K
            } else {
                q32(id)
            }
        };
        let (_, _, fused_mixed) = tiny_model_steps(false, &mixed);
        let some = lower_layers(&fused_mixed, &mixed, &|_| true);
        assert_eq!(launches(&some), 1 + 1 + 5 * (n - 1) + 2);
        assert!(matches!(some[1], Step::Layer { layer: 0, .. }));
        assert_eq!(some[2], fused_mixed[6]);
        // Nothing merges where the slices do not fit, nor with Qwen3's head norms.
        assert_eq!(lower_layers(&fused, &q32, &|_| false), fused);
        let (_, _, qwen) = tiny_model_steps(true, &q32);
        assert_eq!(lower_layers(&qwen, &q32, &|_| true), qwen);
        // The layer kernel keeps Q, K, V, Attn, Gate and Up in shared memory: none is read
        // after it, and it reads and writes only the residual.
        for b in Buf::ALL {
            assert_eq!(reads(&all[1], b), b == Buf::Residual, "{b:?}");
            assert_eq!(writes(&all[1], b), b == Buf::Residual, "{b:?}");
        }
    }

    #[test]
    fn with_head_norms_the_qkv_product_keeps_its_rope_launches() {
        let ty = |_: MatId| TensorType::Q8_0;
        let (hp, plain, fused) = tiny_model_steps(true, &ty);
        let n = hp.n_layer;
        assert_eq!(launches(&plain), 1 + 13 * n + 3);
        // qkv, head norm q, head norm k, rope q, rope k + store, attention, o, gate/up, down.
        assert_eq!(launches(&fused), 1 + 9 * n + 2);
        assert!(matches!(fused[1], Step::PrepMatVec { .. }));
        assert!(matches!(fused[2], Step::HeadNorm { buf: Buf::Q, .. }));
        assert!(matches!(fused[5], Step::Rope { store: Some(0), .. }));
        assert!(!fused.iter().any(|s| matches!(s, Step::QkvRope { .. })));
    }

    #[test]
    fn a_prep_whose_output_is_read_later_or_too_wide_stays_its_own_launch() {
        let proj = |weight, out| {
            Some(Proj {
                weight: MatId(weight),
                bias: None,
                out,
                accumulate: false,
            })
        };
        // Normed is read again by the second product: its Prep stays; the second product's
        // own (unchanged copy) Prep fuses.
        let program = Program {
            ops: vec![
                Op::RmsNorm {
                    input: Buf::Residual,
                    weight: VecId(0),
                    out: Buf::Normed,
                    tokens: Tokens::All,
                },
                Op::Linear {
                    input: Buf::Normed,
                    projs: [proj(1, Buf::Q), None, None],
                    tokens: Tokens::All,
                },
                Op::Linear {
                    input: Buf::Normed,
                    projs: [proj(2, Buf::K), None, None],
                    tokens: Tokens::All,
                },
            ],
        };
        let mut h = hp();
        let steps = lower_fused(&program, &h, &|_| TensorType::Q4_1).expect("lowers");
        assert!(
            matches!(
                steps[0],
                Step::Prep {
                    out: Buf::Normed,
                    ..
                }
            ),
            "{steps:?}"
        );
        assert!(matches!(steps[1], Step::MatVec { .. }));
        assert!(matches!(
            steps[2],
            Step::PrepMatVec {
                prologue: Prologue {
                    input: Buf::Normed,
                    norm: None,
                    ..
                },
                ..
            }
        ));
        // A product writing its own input is not fused.
        let program = Program {
            ops: vec![Op::Linear {
                input: Buf::Attn,
                projs: [proj(1, Buf::Attn), None, None],
                tokens: Tokens::All,
            }],
        };
        let steps = lower_fused(&program, &h, &|_| TensorType::Q4_1).expect("lowers");
        assert!(matches!(steps[0], Step::Prep { .. }) && matches!(steps[1], Step::MatVec { .. }));
        // An input too wide for the shared memory: 16,384 values (64 KiB of f32) stay
        // unfused; 8,192 (32 KiB, and 10 KiB of Q8 blocks) fuse.
        h.n_embd = 16_384;
        let program = Program {
            ops: vec![
                Op::RmsNorm {
                    input: Buf::Residual,
                    weight: VecId(0),
                    out: Buf::Normed,
                    tokens: Tokens::Logits,
                },
                Op::Linear {
                    input: Buf::Normed,
                    projs: [proj(1, Buf::Logits), None, None],
                    tokens: Tokens::Logits,
                },
            ],
        };
        let steps = lower_fused(&program, &h, &|_| TensorType::Q4_1).expect("lowers");
        assert_eq!(launches(&steps), 3);
        assert!(matches!(steps[0], Step::Prep { .. }));
        h.n_embd = 8192;
        for t in [TensorType::Q4_1, TensorType::F16] {
            let steps = lower_fused(&program, &h, &|_| t).expect("lowers");
            assert_eq!(launches(&steps), 2, "{t:?}");
        }
        assert_eq!(prologue_shared_bytes(8192, true, false), 256 * 40 + 32_768);
        assert_eq!(prologue_shared_bytes(16_384, false, false), 65_536);
        assert_eq!(
            prologue_shared_bytes(1536, true, true),
            48 * BLOCK_Q8_BYTES + 6 * BLOCK_Q8K_BYTES + 1536 * 4
        );
    }

    #[test]
    fn a_store_without_its_rope_is_refused_with_the_op_named() {
        let program = Program {
            ops: vec![Op::Embed { table: MatId(0) }, Op::StoreKv { layer: 3 }],
        };
        let e = lower(&program, &|_| TensorType::F32).unwrap_err();
        assert!(
            matches!(
                e,
                LowerError::UnfusedStore {
                    index: 1,
                    layer: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            lower_fused(&program, &hp(), &|_| TensorType::F32).unwrap_err(),
            e
        );
        let program = Program {
            ops: vec![Op::Rope {
                buf: Buf::V,
                heads: 2,
            }],
        };
        assert!(matches!(
            lower(&program, &|_| TensorType::F32),
            Err(LowerError::RopeBuffer {
                index: 0,
                buf: Buf::V
            })
        ));
        assert!(matches!(
            lower_fused(&program, &hp(), &|_| TensorType::F32),
            Err(LowerError::RopeBuffer {
                index: 0,
                buf: Buf::V
            })
        ));
        // A product whose input no norm prepared gets its own quantising Prep.
        let program = Program {
            ops: vec![Op::Linear {
                input: Buf::Attn,
                projs: [
                    Some(Proj {
                        weight: MatId(1),
                        bias: None,
                        out: Buf::Residual,
                        accumulate: true,
                    }),
                    None,
                    None,
                ],
                tokens: Tokens::All,
            }],
        };
        let steps = lower(&program, &|_| TensorType::Q6K).expect("lowers");
        assert_eq!(
            steps[0],
            Step::Prep {
                input: Buf::Attn,
                swiglu: false,
                norm: None,
                out: Buf::Attn,
                q8: false,
                q8k: true
            }
        );
    }

    #[test]
    fn the_memory_plan_counts_cache_activations_and_logits() {
        let hp = hp();
        let p = MemoryPlan::new(&hp, 256, 1000);
        assert_eq!(p.cache, 2 * 2 * 256 * 32 * 2);
        assert_eq!(p.logits, 400);
        let widths = (64 + 64 + 64 + 32 + 32 + 64 + 128 + 128) * 4;
        assert_eq!(
            p.activations,
            widths + 4 * BLOCK_Q8_BYTES + BLOCK_Q8K_BYTES + 257 * 4 + STATE_BYTES + CONFIG_BYTES
        );
        assert_eq!(p.total(), 1000 + p.cache + p.activations + p.logits);
    }

    #[test]
    fn sample_config_packs_the_kernel_struct_as_sample_rs_computes_it() {
        let p = SamplerParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            repeat_penalty: 1.3,
            repeat_last_n: 10_000,
            seed: 0x0123_4567_89ab_cdef,
            request: 0x1_0000_0002,
        };
        let c = SampleConfig::new(&p, 49_152).expect("served");
        assert_eq!(c.inv_temp, 1.0 / 0.7f32);
        assert_eq!(c.ln_min_p, 0.05f32.ln());
        assert_eq!((c.greedy, c.top_k), (0, 40));
        // The window is the CPU sampler's: repeat_last_n, at most MAX_PENALTY_WINDOW.
        assert_eq!(c.window, MAX_PENALTY_WINDOW as u32);
        assert_eq!(c.seed, [0x89ab_cdef, 0x0123_4567]);
        assert_eq!(c.request, [2, 1]);
        // Byte offsets of `struct SampleConfig` in kernels/llm.cu.
        let b = c.to_bytes();
        let word =
            |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        assert_eq!(word(0), (1.0 / 0.7f32).to_bits());
        assert_eq!(word(2), 40);
        assert_eq!(word(3), 0.9f32.to_bits());
        assert_eq!(word(4), 0.05f32.to_bits());
        assert_eq!(word(6), 1.3f32.to_bits());
        assert_eq!(word(7), 4096);
        assert_eq!(
            [word(8), word(9), word(10), word(11)],
            [0x89ab_cdef, 0x0123_4567, 2, 1]
        );
        assert!((12..16).all(|i| word(i) == 0));

        // Greedy; no penalty when either penalty knob is off; top-k saturates; min-p off.
        let g = SampleConfig::new(&SamplerParams::greedy(), 96).expect("greedy");
        assert_eq!((g.greedy, g.inv_temp, g.window), (1, 0.0, 0));
        let q = SamplerParams {
            repeat_penalty: 1.2,
            repeat_last_n: 0,
            top_k: usize::MAX,
            min_p: 0.0,
            ..SamplerParams::default()
        };
        let c = SampleConfig::new(&q, 96).expect("served");
        assert_eq!((c.window, c.top_k, c.ln_min_p), (0, u32::MAX, 0.0));
    }

    #[test]
    fn a_penalty_over_a_vocabulary_beyond_the_device_bitmap_is_refused_with_its_values() {
        let p = SamplerParams {
            repeat_penalty: 1.1,
            ..SamplerParams::default()
        };
        let e = SampleConfig::new(&p, SAMPLE_MAX_VOCAB + 1).unwrap_err();
        assert_eq!(
            e.what,
            "repeat penalty 1.1 over a vocabulary of 262145 tokens (the device penalty handles at most 262144)"
        );
        // The same vocabulary without a penalty, and the largest one with it, are served.
        assert!(SampleConfig::new(&SamplerParams::default(), SAMPLE_MAX_VOCAB + 1).is_ok());
        assert!(SampleConfig::new(&p, SAMPLE_MAX_VOCAB).is_ok());
    }
}
