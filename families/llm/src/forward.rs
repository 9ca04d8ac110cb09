//! The transformer forward pass, defined once as a program of typed operations.
//!
//! [`Model::new`] turns the hyper-parameters into a [`Program`], a flat list of [`Op`]s over named
//! activation buffers ([`Buf`]) and weight handles ([`MatId`], [`VecId`]); the CPU engine
//! ([`Model::forward`]) interprets that list, and a GPU engine (issue 26) lowers the same
//! list to kernels and captures it: the architecture (pre-norm, GQA attention with RoPE,
//! optional q/k/v biases and q/k RMSNorm, SwiGLU, tied or untied output) is written down in
//! exactly one place. Every difference between Llama, Qwen2 and Qwen3 is a field of
//! [`Hparams`] or the presence of a weight, never a model name.
//!
//! One decoder block, for a chunk of `n` tokens at positions `pos0 .. pos0 + n`:
//!
//! ```text
//! Normed   = RmsNorm(Residual) * attn_norm
//! Q, K, V  = Normed · Wq^T (+ bq), Normed · Wk^T (+ bk), Normed · Wv^T (+ bv)   one product
//! Q, K     = HeadNorm(Q) * q_norm, HeadNorm(K) * k_norm                          (Qwen3)
//! Q, K     = RoPE(Q), RoPE(K)                 rotate-half pairs (i, i + head_dim / 2)
//! cache    <- K, V                            (f16, positions pos0 ..)
//! Attn     = softmax(Q K^T / sqrt(head_dim), causal) V     query head h reads KV head
//!                                                          h / (n_head / n_head_kv)
//! Residual += Attn · Wo^T
//! Normed   = RmsNorm(Residual) * ffn_norm
//! Gate, Up = Normed · Wgate^T, Normed · Wup^T                                    one product
//! Gate     = silu(Gate) * Up
//! Residual += Gate · Wdown^T
//! ```
//!
//! then `Logits = (RmsNorm(Residual) * output_norm) · Wout^T` for the tokens whose logits are
//! wanted (`Wout` is the token embedding when the checkpoint ties them).
//!
//! RoPE follows the canonical layout of [`crate::tensor`]: Q/K rows in Hugging Face order, so
//! lanes `i` and `i + head_dim / 2` rotate together by `pos * inv_freq[i]` (computed in f32,
//! as transformers' `LlamaRotaryEmbedding`).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::cache::{CacheShape, ContextFull, KvCache};
use crate::kernels::pool::{Ctx, ThreadPool, split_range};
use crate::kernels::{self, Acts, Isa, Matrix, OutMatrix};
use crate::quant::{ActFormat, BlockQ8, BlockQ8K, QK, QK_K, TensorType};

/// Hyper-parameters the forward pass reads (from [`crate::config::LlmConfig`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (divides `n_head`).
    pub n_head_kv: usize,
    /// Lanes per head (even).
    pub head_dim: usize,
    /// Feed-forward width.
    pub n_ff: usize,
    /// Vocabulary (rows of the output projection).
    pub n_vocab: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Inverse rotary frequencies, `head_dim / 2` values (scaling applied).
    pub rope_inv_freq: Vec<f32>,
}

impl Hparams {
    /// `n_head * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// `n_head_kv * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of a buffer.
    pub fn width(&self, b: Buf) -> usize {
        match b {
            Buf::Residual | Buf::Normed => self.n_embd,
            Buf::Q | Buf::Attn => self.q_dim(),
            Buf::K | Buf::V => self.kv_dim(),
            Buf::Gate | Buf::Up => self.n_ff,
            Buf::Logits => self.n_vocab,
        }
    }
}

/// An activation buffer of the forward pass: `[tokens, width]` f32, row-major, width from
/// [`Hparams::width`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The residual stream, `n_embd`.
    Residual,
    /// A normalised copy of the residual, `n_embd`.
    Normed,
    /// Queries, `n_head * head_dim`.
    Q,
    /// Keys of the chunk, `n_head_kv * head_dim`.
    K,
    /// Values of the chunk, `n_head_kv * head_dim`.
    V,
    /// Attention output, `n_head * head_dim`.
    Attn,
    /// Feed-forward gate (then the SwiGLU product), `n_ff`.
    Gate,
    /// Feed-forward up projection, `n_ff`.
    Up,
    /// Logits, `n_vocab`; one row per token whose logits are wanted.
    Logits,
}

impl Buf {
    /// Every buffer, in [`Buf::index`] order.
    pub const ALL: [Buf; 9] = [
        Buf::Residual,
        Buf::Normed,
        Buf::Q,
        Buf::K,
        Buf::V,
        Buf::Attn,
        Buf::Gate,
        Buf::Up,
        Buf::Logits,
    ];

    /// The buffer's place among the nine (`Residual` 0 ... `Logits` 8): the index an
    /// engine's table of activation buffers is kept in, one per [`Buf`].
    pub fn index(self) -> usize {
        match self {
            Buf::Residual => 0,
            Buf::Normed => 1,
            Buf::Q => 2,
            Buf::K => 3,
            Buf::V => 4,
            Buf::Attn => 5,
            Buf::Gate => 6,
            Buf::Up => 7,
            Buf::Logits => 8,
        }
    }
}

/// A weight matrix of the model (index into [`Model`]'s matrices).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatId(pub u32);

/// A vector weight (norm weight or bias, f32; index into [`Model`]'s vectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VecId(pub u32);

/// Which tokens of the chunk an operation processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tokens {
    /// Every token.
    All,
    /// The tokens whose logits are wanted (the last one, or all for teacher forcing).
    Logits,
}

/// One projection of a [`Op::Linear`]: `out[t] (+)= W · input[t] + bias`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Proj {
    /// `[rows, cols]` weight, `cols` = the input's width, `rows` = the output's.
    pub weight: MatId,
    /// Optional bias, `rows` values.
    pub bias: Option<VecId>,
    /// Output buffer.
    pub out: Buf,
    /// Add into `out` (a residual connection) instead of overwriting it.
    pub accumulate: bool,
}

/// One operation of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `Residual[t] = table row tokens[t]` (dequantised).
    Embed {
        /// `[n_vocab, n_embd]` table.
        table: MatId,
    },
    /// `out[t] = input[t] / sqrt(mean(input[t]^2) + eps) * weight`.
    RmsNorm {
        /// Input buffer.
        input: Buf,
        /// Weight, the input's width.
        weight: VecId,
        /// Output buffer (same width).
        out: Buf,
        /// Tokens processed.
        tokens: Tokens,
    },
    /// Up to three projections of one input, computed as one parallel product over all
    /// their rows (the input is quantised once).
    Linear {
        /// Input buffer.
        input: Buf,
        /// The projections (`None` entries unused).
        projs: [Option<Proj>; 3],
        /// Tokens processed.
        tokens: Tokens,
    },
    /// RMSNorm of each head's `head_dim` lanes, times `weight` (`head_dim` values): Qwen3's
    /// q/k norm.
    HeadNorm {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads in the buffer.
        heads: usize,
        /// Weight, `head_dim` values.
        weight: VecId,
    },
    /// Rotary position embedding (rotate-half pairs) of each head at its token's position.
    Rope {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads in the buffer.
        heads: usize,
    },
    /// Writes the chunk's `K` and `V` rows into the cache of `layer` (f16).
    StoreKv {
        /// Block index.
        layer: usize,
    },
    /// Causal grouped-query attention of the chunk's queries over the cache of `layer`
    /// (positions `0 ..= pos`), into `Attn`.
    Attention {
        /// Block index.
        layer: usize,
    },
    /// `Gate = silu(Gate) * Up`.
    SwiGlu,
}

/// The model's weights handed to [`Model::new`]: matrices borrowed (from a memory map or a
/// bundle), norms and biases as f32.
#[derive(Clone, Debug)]
pub struct ModelParts<'w> {
    /// `[n_vocab, n_embd]` token embedding.
    pub token_embd: Matrix<'w>,
    /// `[n_vocab, n_embd]` output projection; `None` when tied to the embedding.
    pub output: Option<Matrix<'w>>,
    /// Final RMSNorm weight, `n_embd`.
    pub output_norm: Vec<f32>,
    /// The blocks.
    pub layers: Vec<LayerParts<'w>>,
}

/// The weights of one block.
#[derive(Clone, Debug)]
pub struct LayerParts<'w> {
    /// RMSNorm before attention, `n_embd`.
    pub attn_norm: Vec<f32>,
    /// `[q_dim, n_embd]`.
    pub wq: Matrix<'w>,
    /// `[kv_dim, n_embd]`.
    pub wk: Matrix<'w>,
    /// `[kv_dim, n_embd]`.
    pub wv: Matrix<'w>,
    /// Biases (Qwen2): `q_dim`, `kv_dim`, `kv_dim`.
    pub bq: Option<Vec<f32>>,
    /// Key bias.
    pub bk: Option<Vec<f32>>,
    /// Value bias.
    pub bv: Option<Vec<f32>>,
    /// Per-head q/k RMSNorm weights (Qwen3), `head_dim` each.
    pub q_norm: Option<Vec<f32>>,
    /// Key norm.
    pub k_norm: Option<Vec<f32>>,
    /// `[n_embd, q_dim]`.
    pub wo: Matrix<'w>,
    /// RMSNorm before the feed-forward, `n_embd`.
    pub ffn_norm: Vec<f32>,
    /// `[n_ff, n_embd]`.
    pub w_gate: Matrix<'w>,
    /// `[n_ff, n_embd]`.
    pub w_up: Matrix<'w>,
    /// `[n_embd, n_ff]`.
    pub w_down: Matrix<'w>,
}

/// Errors of building or running the forward pass.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ForwardError {
    /// A weight's shape or size disagrees with the hyper-parameters.
    #[error("weight `{name}`: {detail}")]
    Weight {
        /// Which weight (`blk.3.attn_q`, `output_norm`, ...).
        name: String,
        /// Expected and seen.
        detail: String,
    },
    /// A hyper-parameter the kernels cannot handle.
    #[error("hyper-parameter `{field}`: {detail}")]
    Hparam {
        /// Field.
        field: &'static str,
        /// Value and limit.
        detail: String,
    },
    /// The tokens do not fit the cache.
    #[error(transparent)]
    ContextFull(#[from] ContextFull),
    /// A token id beyond the vocabulary.
    #[error("token id {token} at index {index} is beyond the vocabulary of {n_vocab}")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// Its index in the input.
        index: usize,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// More logit rows asked for than the state holds.
    #[error("logits for {tokens} tokens asked, the state holds {rows} rows")]
    TooManyLogits {
        /// Tokens whose logits were asked for.
        tokens: usize,
        /// Rows of the state's logits buffer.
        rows: usize,
    },
    /// No tokens.
    #[error("no tokens to run")]
    Empty,
}

/// The ordered operations of one forward pass (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// Operations, in order; each reads what earlier ones wrote.
    pub ops: Vec<Op>,
}

/// Where each weight of [`ModelParts`] went in the model's tables.
struct Tables<'w> {
    mats: Vec<Matrix<'w>>,
    vecs: Vec<Vec<f32>>,
}

impl<'w> Tables<'w> {
    fn mat(&mut self, m: Matrix<'w>) -> MatId {
        self.mats.push(m);
        MatId(self.mats.len() as u32 - 1)
    }
    fn vec(&mut self, v: Vec<f32>) -> VecId {
        self.vecs.push(v);
        VecId(self.vecs.len() as u32 - 1)
    }
}

impl Program {
    /// Builds the program and the weight tables from the parts (checked by the caller).
    fn build<'w>(hp: &Hparams, parts: ModelParts<'w>) -> (Program, Tables<'w>) {
        let mut t = Tables {
            mats: Vec::new(),
            vecs: Vec::new(),
        };
        let mut ops = Vec::new();
        let embd = t.mat(parts.token_embd);
        ops.push(Op::Embed { table: embd });
        let proj = |weight, bias, out, accumulate| {
            Some(Proj {
                weight,
                bias,
                out,
                accumulate,
            })
        };
        for (layer, l) in parts.layers.into_iter().enumerate() {
            let attn_norm = t.vec(l.attn_norm);
            ops.push(Op::RmsNorm {
                input: Buf::Residual,
                weight: attn_norm,
                out: Buf::Normed,
                tokens: Tokens::All,
            });
            let (wq, wk, wv) = (t.mat(l.wq), t.mat(l.wk), t.mat(l.wv));
            let (bq, bk, bv) = (
                l.bq.map(|b| t.vec(b)),
                l.bk.map(|b| t.vec(b)),
                l.bv.map(|b| t.vec(b)),
            );
            ops.push(Op::Linear {
                input: Buf::Normed,
                projs: [
                    proj(wq, bq, Buf::Q, false),
                    proj(wk, bk, Buf::K, false),
                    proj(wv, bv, Buf::V, false),
                ],
                tokens: Tokens::All,
            });
            if let Some(w) = l.q_norm {
                let weight = t.vec(w);
                ops.push(Op::HeadNorm {
                    buf: Buf::Q,
                    heads: hp.n_head,
                    weight,
                });
            }
            if let Some(w) = l.k_norm {
                let weight = t.vec(w);
                ops.push(Op::HeadNorm {
                    buf: Buf::K,
                    heads: hp.n_head_kv,
                    weight,
                });
            }
            ops.push(Op::Rope {
                buf: Buf::Q,
                heads: hp.n_head,
            });
            ops.push(Op::Rope {
                buf: Buf::K,
                heads: hp.n_head_kv,
            });
            ops.push(Op::StoreKv { layer });
            ops.push(Op::Attention { layer });
            let wo = t.mat(l.wo);
            ops.push(Op::Linear {
                input: Buf::Attn,
                projs: [proj(wo, None, Buf::Residual, true), None, None],
                tokens: Tokens::All,
            });
            let ffn_norm = t.vec(l.ffn_norm);
            ops.push(Op::RmsNorm {
                input: Buf::Residual,
                weight: ffn_norm,
                out: Buf::Normed,
                tokens: Tokens::All,
            });
            let (wg, wu, wd) = (t.mat(l.w_gate), t.mat(l.w_up), t.mat(l.w_down));
            ops.push(Op::Linear {
                input: Buf::Normed,
                projs: [
                    proj(wg, None, Buf::Gate, false),
                    proj(wu, None, Buf::Up, false),
                    None,
                ],
                tokens: Tokens::All,
            });
            ops.push(Op::SwiGlu);
            ops.push(Op::Linear {
                input: Buf::Gate,
                projs: [proj(wd, None, Buf::Residual, true), None, None],
                tokens: Tokens::All,
            });
        }
        let out_norm = t.vec(parts.output_norm);
        ops.push(Op::RmsNorm {
            input: Buf::Residual,
            weight: out_norm,
            out: Buf::Normed,
            tokens: Tokens::Logits,
        });
        let head = match parts.output {
            Some(m) => t.mat(m),
            None => embd,
        };
        ops.push(Op::Linear {
            input: Buf::Normed,
            projs: [proj(head, None, Buf::Logits, false), None, None],
            tokens: Tokens::Logits,
        });
        (Program { ops }, t)
    }
}

/// A loaded model on the CPU: hyper-parameters, the program, the weight tables. Immutable
/// and shareable between threads; each sequence runs with its own [`State`].
pub struct Model<'w> {
    hp: Hparams,
    program: Program,
    mats: Vec<Matrix<'w>>,
    vecs: Vec<Vec<f32>>,
    isa: Isa,
    rope: RopeRule,
    needs_q8: bool,
    needs_q8k: bool,
    /// The program grouped into the CPU engine's parallel steps.
    steps: Vec<Step>,
}

/// How the CPU engine computes the rotary angles, rotates queries and keys, and orders a
/// head's lanes in the attention's sums. Every form gives the same values up to f32
/// rounding; they differ in the rounding, which decides whether logits equal a reference's
/// bit for bit.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeRule {
    /// transformers' (`LlamaRotaryEmbedding`, `apply_rotary_pos_emb`): angle
    /// `pos * inv_freq[i]` ([`Hparams::rope_inv_freq`]), separate products, lanes in
    /// Hugging Face order. What [`Model::new`] uses.
    Transformers,
    /// llama.cpp's ([`LlamaCppRope`]): what the generator uses, llama.cpp being the reference
    /// of this family's numerics.
    LlamaCpp(LlamaCppRope),
}

/// llama.cpp's rotary embedding on the CPU (ggml-cpu `ggml_compute_forward_rope_flt`,
/// `ggml_rope_cache_init`, `rope_yarn`, `rotate_pairs`), and its lane order of a head.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaCppRope {
    /// `powf(base, -2 / head_dim)` in f32: pair `i + 1`'s angle is pair `i`'s times this,
    /// a running f32 product from `pos` (not `pos * base^(-2i/d)`).
    pub theta_scale: f32,
    /// `1 / factor` of linear scaling, 1 without.
    pub freq_scale: f32,
    /// Per-pair divisors of the angle (`rope_freqs.weight`), empty when the model has none.
    pub freq_factors: Vec<f32>,
    /// The head's lanes as llama.cpp holds them: `true` for interleaved pairs (lane `i` of
    /// the Hugging Face order at `2i`, lane `i + head_dim/2` at `2i + 1`; its
    /// `LLAMA_ROPE_TYPE_NORM`, the `llama` architecture, whose GGUF rows are permuted so),
    /// `false` for halves (`LLAMA_ROPE_TYPE_NEOX`: `qwen2`, `qwen3`). The attention's sums
    /// run over the lanes in this order.
    pub interleaved: bool,
}

impl LlamaCppRope {
    /// llama.cpp's parameters for a checkpoint: `rope_freqs` is the `rope_freqs.weight`
    /// tensor when the configuration scales frequencies with it.
    pub fn from_config(cfg: &crate::config::LlmConfig, rope_freqs: Option<&[f32]>) -> LlamaCppRope {
        use crate::config::RopeScaling;
        let freq_scale = match cfg.rope_scaling {
            RopeScaling::Linear { factor } => 1.0 / factor,
            _ => 1.0,
        };
        let freq_factors = match cfg.rope_scaling {
            RopeScaling::FreqFactors { .. } => rope_freqs.map(<[f32]>::to_vec).unwrap_or_default(),
            _ => Vec::new(),
        };
        LlamaCppRope {
            theta_scale: cfg.rope_theta.powf(-2.0 / cfg.head_dim as f32),
            freq_scale,
            freq_factors,
            // llama.cpp's llama_model_rope_type: LLM_ARCH_LLAMA is NORM; the checkpoint
            // reader un-permutes exactly these GGUFs (crate::checkpoint).
            interleaved: cfg.architecture == "llama",
        }
    }
}

impl RopeRule {
    /// (fused rotation, interleaved lanes): whether a pair is rotated with llama.cpp's fused
    /// multiply-adds ([`kernels::rope_fused`]) and whether the attention's sums run over a
    /// head's lanes in llama.cpp's interleaved order ([`LlamaCppRope::interleaved`]).
    pub fn form(&self) -> (bool, bool) {
        match self {
            RopeRule::Transformers => (false, false),
            RopeRule::LlamaCpp(r) => (true, r.interleaved),
        }
    }
}

impl std::fmt::Debug for Model<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hp", &self.hp)
            .field("ops", &self.program.ops.len())
            .field("isa", &self.isa)
            .finish()
    }
}

fn check_matrix(name: &str, m: &Matrix<'_>, rows: usize, cols: usize) -> Result<(), ForwardError> {
    let err = |detail: String| ForwardError::Weight {
        name: name.to_owned(),
        detail,
    };
    if m.rows != rows || m.cols != cols {
        return Err(err(format!(
            "[{}, {}] (rows, cols), expected [{rows}, {cols}]",
            m.rows, m.cols
        )));
    }
    let Some(rb) = m.ty.row_bytes(cols) else {
        return Err(err(format!(
            "{cols} columns are not a whole number of {:?} blocks",
            m.ty
        )));
    };
    if m.data.len() != rb * rows {
        return Err(err(format!(
            "{} bytes, expected {} for {rows} rows of {:?}",
            m.data.len(),
            rb * rows,
            m.ty
        )));
    }
    Ok(())
}

fn check_vec(name: &str, v: &[f32], len: usize) -> Result<(), ForwardError> {
    if v.len() != len {
        return Err(ForwardError::Weight {
            name: name.to_owned(),
            detail: format!("{} values, expected {len}", v.len()),
        });
    }
    Ok(())
}

impl<'w> Model<'w> {
    /// Checks the parts against the hyper-parameters and builds the program.
    ///
    /// # Errors
    /// [`ForwardError::Weight`] naming the first weight whose shape, size or block layout
    /// is wrong; [`ForwardError::Hparam`] for hyper-parameters the kernels cannot run
    /// (an odd head dimension, `n_head` not a multiple of `n_head_kv`, a matrix input width
    /// that is not a whole number of its type's blocks).
    pub fn new(hp: Hparams, parts: ModelParts<'w>, isa: Isa) -> Result<Model<'w>, ForwardError> {
        let bad = |field: &'static str, detail: String| Err(ForwardError::Hparam { field, detail });
        if hp.n_layer == 0 || hp.n_embd == 0 || hp.n_head == 0 || hp.n_ff == 0 || hp.n_vocab == 0 {
            return bad("dimensions", format!("{hp:?} has a zero dimension"));
        }
        if hp.n_head_kv == 0 || !hp.n_head.is_multiple_of(hp.n_head_kv) {
            return bad(
                "n_head_kv",
                format!("{} does not divide n_head {}", hp.n_head_kv, hp.n_head),
            );
        }
        let max_hd = crate::config::MAX_HEAD_DIM as usize;
        if hp.head_dim == 0 || !hp.head_dim.is_multiple_of(2) || hp.head_dim > max_hd {
            return bad(
                "head_dim",
                format!("{} (must be even, > 0 and <= {max_hd})", hp.head_dim),
            );
        }
        if hp.rope_inv_freq.len() != hp.head_dim / 2 {
            return bad(
                "rope_inv_freq",
                format!(
                    "{} values, expected {}",
                    hp.rope_inv_freq.len(),
                    hp.head_dim / 2
                ),
            );
        }
        if parts.layers.len() != hp.n_layer {
            return bad(
                "n_layer",
                format!(
                    "{} blocks of weights for {} layers",
                    parts.layers.len(),
                    hp.n_layer
                ),
            );
        }
        let (e, q, kv, ff, v) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.n_ff, hp.n_vocab);
        check_matrix("token_embd", &parts.token_embd, v, e)?;
        if let Some(o) = &parts.output {
            check_matrix("output", o, v, e)?;
        }
        check_vec("output_norm", &parts.output_norm, e)?;
        for (i, l) in parts.layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{i}.{s}");
            check_vec(&n("attn_norm"), &l.attn_norm, e)?;
            check_matrix(&n("attn_q"), &l.wq, q, e)?;
            check_matrix(&n("attn_k"), &l.wk, kv, e)?;
            check_matrix(&n("attn_v"), &l.wv, kv, e)?;
            for (name, b, len) in [
                ("attn_q.bias", &l.bq, q),
                ("attn_k.bias", &l.bk, kv),
                ("attn_v.bias", &l.bv, kv),
            ] {
                if let Some(b) = b {
                    check_vec(&n(name), b, len)?;
                }
            }
            for (name, w) in [("attn_q_norm", &l.q_norm), ("attn_k_norm", &l.k_norm)] {
                if let Some(w) = w {
                    check_vec(&n(name), w, hp.head_dim)?;
                }
            }
            check_matrix(&n("attn_output"), &l.wo, e, q)?;
            check_vec(&n("ffn_norm"), &l.ffn_norm, e)?;
            check_matrix(&n("ffn_gate"), &l.w_gate, ff, e)?;
            check_matrix(&n("ffn_up"), &l.w_up, ff, e)?;
            check_matrix(&n("ffn_down"), &l.w_down, e, ff)?;
        }
        let (program, t) = Program::build(&hp, parts);
        let mut needs_q8 = false;
        let mut needs_q8k = false;
        for op in &program.ops {
            if let Op::Linear { projs, .. } = op {
                for p in projs.iter().flatten() {
                    match t.mats[p.weight.0 as usize].ty.act_format() {
                        ActFormat::Q8 => needs_q8 = true,
                        ActFormat::Q8K => needs_q8k = true,
                        ActFormat::F32 => {}
                    }
                }
            }
        }
        let steps = Step::plan(&program);
        Ok(Model {
            hp,
            program,
            mats: t.mats,
            vecs: t.vecs,
            isa,
            rope: RopeRule::Transformers,
            needs_q8,
            needs_q8k,
            steps,
        })
    }

    /// The model with another [`RopeRule`] ([`Model::new`] uses
    /// [`RopeRule::Transformers`]).
    ///
    /// # Errors
    /// [`ForwardError::Hparam`] when llama.cpp's frequency factors are not `head_dim / 2`
    /// finite values > 0.
    pub fn with_rope(mut self, rope: RopeRule) -> Result<Model<'w>, ForwardError> {
        if let RopeRule::LlamaCpp(r) = &rope {
            let half = self.hp.head_dim / 2;
            let f = &r.freq_factors;
            if !f.is_empty() && (f.len() != half || f.iter().any(|&v| !(v.is_finite() && v > 0.0)))
            {
                return Err(ForwardError::Hparam {
                    field: "rope_freqs",
                    detail: format!("{} values (need {half} finite values > 0)", f.len()),
                });
            }
        }
        self.rope = rope;
        Ok(self)
    }

    /// The rotary rule.
    pub fn rope(&self) -> &RopeRule {
        &self.rope
    }

    /// The rotary angles of position `pos` as the forward pass uses them: `angles[i]` =
    /// cos, `angles[head_dim / 2 + i]` = sin of pair `i`'s angle, by the [`RopeRule`]
    /// (transformers: `pos * inv_freq[i]`; llama.cpp: `ggml_rope_cache_init`'s running
    /// product). The GPU decoder uploads a table of these at load, so both engines rotate by
    /// the same bits.
    ///
    /// # Panics
    /// When `angles` holds fewer than `head_dim` values.
    pub fn rope_angles(&self, pos: usize, angles: &mut [f32]) {
        let hp = &self.hp;
        let half = hp.head_dim / 2;
        let angles = &mut angles[..2 * half];
        let pos = pos as f32;
        match &self.rope {
            RopeRule::Transformers => {
                for (i, &f) in hp.rope_inv_freq.iter().enumerate() {
                    let (s, c) = (pos * f).sin_cos();
                    angles[i] = c;
                    angles[half + i] = s;
                }
            }
            RopeRule::LlamaCpp(r) => {
                // ggml_rope_cache_init: the angle of pair i + 1 is that of pair i times
                // theta_scale (a running product), divided by the pair's frequency factor,
                // times freq_scale (rope_yarn without extrapolation mixing).
                let mut theta = pos;
                for i in 0..half {
                    let ff = r.freq_factors.get(i).copied().unwrap_or(1.0);
                    let (s, c) = (r.freq_scale * (theta / ff)).sin_cos();
                    angles[i] = c;
                    angles[half + i] = s;
                    theta *= r.theta_scale;
                }
            }
        }
    }

    /// The hyper-parameters.
    pub fn hparams(&self) -> &Hparams {
        &self.hp
    }

    /// The program the engines run.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// A weight matrix of the program.
    pub fn matrix(&self, id: MatId) -> &Matrix<'w> {
        &self.mats[id.0 as usize]
    }

    /// A vector weight of the program.
    pub fn vector(&self, id: VecId) -> &[f32] {
        &self.vecs[id.0 as usize]
    }

    /// The instruction set the kernels run on.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Bytes of weights one token's forward pass reads (every matrix once, the embedding
    /// table's one row instead of the table unless it is also the output projection).
    pub fn weight_bytes_per_token(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        for op in &self.program.ops {
            if let Op::Linear { projs, .. } = op {
                for p in projs.iter().flatten() {
                    if seen.insert(p.weight) {
                        total += self.matrix(p.weight).data.len();
                    }
                }
            }
        }
        total
    }

    /// Runs `tokens` at the next positions of `state`'s cache (appending to it), in chunks
    /// of at most [`State::max_batch`] tokens, and leaves logits in [`State::logits`]: for
    /// the last token ([`LogitsFor::Last`]) or for every token ([`LogitsFor::All`], at most
    /// [`State::logit_rows`] tokens).
    ///
    /// Allocates nothing.
    ///
    /// # Errors
    /// [`ForwardError::Empty`], [`ForwardError::TokenOutOfRange`],
    /// [`ForwardError::ContextFull`] (nothing is run then: a prompt longer than the context
    /// is never truncated), [`ForwardError::TooManyLogits`].
    pub fn forward(
        &self,
        state: &mut State,
        tokens: &[u32],
        logits: LogitsFor,
    ) -> Result<(), ForwardError> {
        self.forward_until(state, tokens, logits, None).map(|_| ())
    }

    /// [`forward`](Self::forward) that stops early once `cancel` is set: the flag is read
    /// between the engine's steps (a layer runs a few), so a long chunk of prompt stops within
    /// a layer, as llama.cpp's abort callback stops its CPU graph between nodes. A chunk
    /// stopped part-way is not appended to the cache (its rows past the cache's length are
    /// left unused) and gives no logits.
    ///
    /// Returns the tokens run and appended to the cache: all of `tokens` unless cancelled
    /// (then the tokens of the chunks completed before the flag was seen). Allocates nothing.
    ///
    /// # Errors
    /// As [`forward`](Self::forward).
    pub fn forward_cancellable(
        &self,
        state: &mut State,
        tokens: &[u32],
        logits: LogitsFor,
        cancel: &AtomicBool,
    ) -> Result<usize, ForwardError> {
        self.forward_until(state, tokens, logits, Some(cancel))
    }

    fn forward_until(
        &self,
        state: &mut State,
        tokens: &[u32],
        logits: LogitsFor,
        cancel: Option<&AtomicBool>,
    ) -> Result<usize, ForwardError> {
        if tokens.is_empty() {
            return Err(ForwardError::Empty);
        }
        if let Some((index, &token)) = tokens
            .iter()
            .enumerate()
            .find(|&(_, &t)| t as usize >= self.hp.n_vocab)
        {
            return Err(ForwardError::TokenOutOfRange {
                token,
                index,
                n_vocab: self.hp.n_vocab,
            });
        }
        state.check_shape(self);
        state.cache.check_room(tokens.len())?;
        if logits == LogitsFor::All && tokens.len() > state.logit_rows {
            return Err(ForwardError::TooManyLogits {
                tokens: tokens.len(),
                rows: state.logit_rows,
            });
        }
        state.n_logits = 0;
        let chunks = tokens.chunks(state.max_batch);
        let n_chunks = chunks.len();
        let mut logit_row = 0;
        let mut run = 0;
        for (i, chunk) in chunks.enumerate() {
            let last = i + 1 == n_chunks;
            let (sel, n_sel) = match logits {
                LogitsFor::All => (0..chunk.len(), chunk.len()),
                LogitsFor::Last if last => (chunk.len() - 1..chunk.len(), 1),
                LogitsFor::Last => (chunk.len()..chunk.len(), 0),
                LogitsFor::None => (chunk.len()..chunk.len(), 0),
            };
            debug_assert_eq!(sel.len(), n_sel);
            if !self.forward_chunk(state, chunk, sel, logit_row, cancel) {
                break;
            }
            logit_row += n_sel;
            run += chunk.len();
        }
        state.n_logits = logit_row;
        Ok(run)
    }

    /// One chunk; false (and the cache not advanced) when `cancel` stopped it part-way.
    fn forward_chunk(
        &self,
        state: &mut State,
        tokens: &[u32],
        logit_tokens: Range<usize>,
        logit_row: usize,
        cancel: Option<&AtomicBool>,
    ) -> bool {
        let n = tokens.len();
        let pos0 = state.cache.len();
        state.tokens[..n].copy_from_slice(tokens);
        let frame = Frame::new(self, state, n, pos0, logit_tokens, logit_row);
        // The first step not to run once cancelled. Only thread 0 reads the flag and writes
        // this, once, before a barrier; every thread reads it after that barrier, so all
        // stop at the same step (one reading a later step's value does not stop early).
        let stop_at = AtomicUsize::new(usize::MAX);
        let n_steps = self.steps.len();
        state.pool.run(&|ctx: &Ctx<'_>| {
            for (i, step) in self.steps.iter().enumerate() {
                if i > 0 && stop_at.load(Ordering::Acquire) <= i {
                    break;
                }
                frame.run_step(ctx, i, step);
                if i + 1 < n_steps {
                    if ctx.thread == 0 && cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
                        let _ = stop_at.compare_exchange(
                            usize::MAX,
                            i + 1,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                    ctx.barrier();
                }
            }
        });
        if stop_at.load(Ordering::Acquire) != usize::MAX {
            return false;
        }
        state.cache.advance(n);
        true
    }
}

/// A step of the CPU engine: consecutive operations of the [`Program`] run in one parallel
/// region, one barrier after it. Grouping is an execution detail of this engine (the program
/// stays the definition): an RMSNorm feeding a projection, the q/k norms, RoPE and the
/// cache write of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Embed {
        table: MatId,
    },
    /// `RmsNorm(src) -> input` (when `norm`), then the projections of `input`.
    Linear {
        norm: Option<(Buf, VecId)>,
        input: Buf,
        projs: [Option<Proj>; 3],
        tokens: Tokens,
    },
    /// `[HeadNorm(Q), HeadNorm(K),] Rope(Q), Rope(K), StoreKv`.
    QkRopeStore {
        layer: usize,
        q_norm: Option<VecId>,
        k_norm: Option<VecId>,
    },
    Attention {
        layer: usize,
    },
    SwiGlu,
}

impl Step {
    /// Groups the program's operations into steps.
    ///
    /// # Panics
    /// On a sequence the CPU engine does not group (the programs [`Program::build`] makes
    /// are always grouped completely).
    fn plan(p: &Program) -> Vec<Step> {
        let ops = &p.ops;
        let mut steps = Vec::new();
        let mut i = 0;
        while i < ops.len() {
            match ops[i] {
                Op::Embed { table } => {
                    steps.push(Step::Embed { table });
                    i += 1;
                }
                Op::RmsNorm {
                    input: src,
                    weight,
                    out,
                    tokens,
                } => match ops.get(i + 1) {
                    Some(&Op::Linear {
                        input,
                        projs,
                        tokens: lt,
                    }) if input == out && lt == tokens => {
                        steps.push(Step::Linear {
                            norm: Some((src, weight)),
                            input,
                            projs,
                            tokens,
                        });
                        i += 2;
                    }
                    other => {
                        panic!("RMSNorm not followed by a projection of its output: {other:?}")
                    }
                },
                Op::Linear {
                    input,
                    projs,
                    tokens,
                } => {
                    steps.push(Step::Linear {
                        norm: None,
                        input,
                        projs,
                        tokens,
                    });
                    i += 1;
                }
                Op::HeadNorm { .. } | Op::Rope { .. } => {
                    let mut q_norm = None;
                    let mut k_norm = None;
                    let mut j = i;
                    while let Some(&Op::HeadNorm { buf, weight, .. }) = ops.get(j) {
                        match buf {
                            Buf::Q => q_norm = Some(weight),
                            Buf::K => k_norm = Some(weight),
                            other => panic!("head norm of {other:?}"),
                        }
                        j += 1;
                    }
                    match (ops.get(j), ops.get(j + 1), ops.get(j + 2)) {
                        (
                            Some(Op::Rope { buf: Buf::Q, .. }),
                            Some(Op::Rope { buf: Buf::K, .. }),
                            Some(&Op::StoreKv { layer }),
                        ) => {
                            steps.push(Step::QkRopeStore {
                                layer,
                                q_norm,
                                k_norm,
                            });
                            i = j + 3;
                        }
                        other => panic!("RoPE sequence not grouped: {other:?}"),
                    }
                }
                Op::StoreKv { .. } => panic!("StoreKv without RoPE before it"),
                Op::Attention { layer } => {
                    steps.push(Step::Attention { layer });
                    i += 1;
                }
                Op::SwiGlu => {
                    steps.push(Step::SwiGlu);
                    i += 1;
                }
            }
        }
        steps
    }
}

/// Which tokens' logits a forward call produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFor {
    /// None (a prompt chunk whose logits nobody reads).
    None,
    /// The last token's (generation).
    Last,
    /// Every token's (teacher-forced evaluation).
    All,
}

/// The mutable state of one sequence: its KV cache, the activation buffers, the thread
/// pool. Everything is allocated at creation; a forward pass allocates nothing.
pub struct State {
    cache: KvCache,
    pool: ThreadPool,
    max_batch: usize,
    logit_rows: usize,
    n_logits: usize,
    bufs: [Vec<f32>; 9],
    q8: Vec<BlockQ8>,
    q8k: Vec<BlockQ8K>,
    /// Per thread: one normalised row and its quantised blocks (single-token steps).
    private: Vec<f32>,
    private_q8: Vec<BlockQ8>,
    private_q8k: Vec<BlockQ8K>,
    max_in: usize,
    rope: Vec<f32>,
    scores: Vec<f32>,
    tokens: Vec<u32>,
    /// One work counter per CPU step.
    counters: Vec<AtomicUsize>,
    hp: Hparams,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("cache", &self.cache)
            .field("max_batch", &self.max_batch)
            .finish()
    }
}

/// Options of a [`State`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateOptions {
    /// Positions of the KV cache (the context), at least 1.
    pub context: usize,
    /// Tokens per forward chunk (prompt processing runs chunks of this many), at least 1.
    pub max_batch: usize,
    /// Rows of the logits buffer ([`LogitsFor::All`] handles at most this many tokens).
    pub logit_rows: usize,
    /// Threads of the pool (the caller counts as one).
    pub threads: usize,
}

impl State {
    /// Allocates the cache and buffers for `model` and starts the thread pool.
    ///
    /// # Errors
    /// The OS error when a thread cannot be started.
    pub fn new(model: &Model<'_>, o: StateOptions) -> std::io::Result<State> {
        let hp = model.hp.clone();
        let context = o.context.max(1);
        let max_batch = o.max_batch.max(1);
        let logit_rows = o.logit_rows.max(1);
        let pool = ThreadPool::new(o.threads.max(1))?;
        let bufs = Buf::ALL.map(|b| {
            let rows = if b == Buf::Logits {
                logit_rows
            } else {
                max_batch
            };
            vec![0.0f32; rows * hp.width(b)]
        });
        let max_in = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
        let q8 = if model.needs_q8 {
            vec![BlockQ8::default(); max_batch * max_in.div_ceil(QK)]
        } else {
            Vec::new()
        };
        let q8k = if model.needs_q8k {
            vec![BlockQ8K::default(); max_batch * max_in.div_ceil(QK_K)]
        } else {
            Vec::new()
        };
        let cache = KvCache::new(CacheShape {
            n_layer: hp.n_layer,
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            context,
        });
        let threads = pool.n_threads();
        let (per_q8, per_q8k) = (max_in.div_ceil(QK), max_in.div_ceil(QK_K));
        Ok(State {
            cache,
            max_batch,
            logit_rows,
            n_logits: 0,
            bufs,
            q8,
            q8k,
            private: vec![0.0; threads * max_in],
            private_q8: if model.needs_q8 {
                vec![BlockQ8::default(); threads * per_q8]
            } else {
                Vec::new()
            },
            private_q8k: if model.needs_q8k {
                vec![BlockQ8K::default(); threads * per_q8k]
            } else {
                Vec::new()
            },
            max_in,
            counters: (0..model.steps.len())
                .map(|_| AtomicUsize::new(0))
                .collect(),
            rope: vec![0.0; max_batch * hp.head_dim],
            scores: vec![0.0; pool.n_threads() * attention_scratch(context, hp.head_dim)],
            tokens: vec![0; max_batch],
            pool,
            hp,
        })
    }

    fn check_shape(&self, model: &Model<'_>) {
        assert_eq!(
            self.hp, model.hp,
            "a State runs only the model it was created for"
        );
        assert!(!model.needs_q8 || !self.q8.is_empty());
        assert_eq!(self.counters.len(), model.steps.len());
        assert!(!model.needs_q8k || !self.q8k.is_empty());
    }

    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// The KV cache, to reset or truncate it.
    pub fn cache_mut(&mut self) -> &mut KvCache {
        &mut self.cache
    }

    /// Tokens per forward chunk.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Rows of the logits buffer.
    pub fn logit_rows(&self) -> usize {
        self.logit_rows
    }

    /// Threads of the pool.
    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Logits of the last forward call: one row of `n_vocab` values per token asked for
    /// (`[n, n_vocab]` row-major).
    pub fn logits(&self) -> &[f32] {
        &self.bufs[Buf::Logits.index()][..self.n_logits * self.hp.n_vocab]
    }

    /// Logits, writable (the sampler applies penalties in place).
    pub fn logits_mut(&mut self) -> &mut [f32] {
        let n = self.n_logits * self.hp.n_vocab;
        &mut self.bufs[Buf::Logits.index()][..n]
    }

    /// Host bytes held (cache, activations, scratch).
    pub fn bytes(&self) -> usize {
        self.cache.shape().bytes()
            + self.bufs.iter().map(|b| b.len() * 4).sum::<usize>()
            + self.q8.len() * size_of::<BlockQ8>()
            + self.q8k.len() * size_of::<BlockQ8K>()
            + (self.rope.len() + self.scores.len()) * 4
    }
}

/// A raw view of one buffer for the parallel region.
struct Raw<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Raw<T> {}

impl<T> Raw<T> {
    fn of(v: &mut [T]) -> Raw<T> {
        Raw {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// # Safety
    /// No thread writes `range` while the returned slice lives (its lifetime is the
    /// caller's to bound: at most the parallel region).
    #[inline(always)]
    unsafe fn get<'a>(self, range: Range<usize>) -> &'a [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked); no concurrent writer (caller).
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) }
    }

    /// # Safety
    /// No other thread reads or writes `range` while the returned slice lives.
    #[inline(always)]
    unsafe fn get_mut<'a>(self, range: Range<usize>) -> &'a mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked); exclusive (caller).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

/// Everything one forward chunk touches, as raw views: threads access disjoint parts
/// between barriers (each `exec` arm says which).
struct Frame<'m, 'w> {
    model: &'m Model<'w>,
    bufs: [Raw<f32>; 9],
    q8: Raw<BlockQ8>,
    q8k: Raw<BlockQ8K>,
    private: Raw<f32>,
    private_q8: Raw<BlockQ8>,
    private_q8k: Raw<BlockQ8K>,
    max_in: usize,
    rope: Raw<f32>,
    scores: Raw<f32>,
    keys: Raw<u16>,
    values: Raw<u16>,
    cache_shape: CacheShape,
    tokens: Raw<u32>,
    counters: Raw<AtomicUsize>,
    n: usize,
    pos0: usize,
    logit_tokens: Range<usize>,
    logit_row: usize,
}

// SAFETY: the raw views point into a `State` that the forward call borrows mutably for the
// whole parallel region; the access discipline (disjoint writes between barriers) is kept
// by `exec`.
unsafe impl Sync for Frame<'_, '_> {}

impl<'m, 'w> Frame<'m, 'w> {
    fn new(
        model: &'m Model<'w>,
        s: &mut State,
        n: usize,
        pos0: usize,
        logit_tokens: Range<usize>,
        logit_row: usize,
    ) -> Self {
        let cache_shape = s.cache.shape();
        let cache_len = cache_shape.n_layer * cache_shape.layer_elems();
        let (k, v) = s.cache.raw();
        let [b0, b1, b2, b3, b4, b5, b6, b7, b8] = &mut s.bufs;
        for c in &s.counters {
            c.store(0, Ordering::Relaxed);
        }
        Frame {
            model,
            bufs: [
                Raw::of(b0),
                Raw::of(b1),
                Raw::of(b2),
                Raw::of(b3),
                Raw::of(b4),
                Raw::of(b5),
                Raw::of(b6),
                Raw::of(b7),
                Raw::of(b8),
            ],
            q8: Raw::of(&mut s.q8),
            q8k: Raw::of(&mut s.q8k),
            private: Raw::of(&mut s.private),
            private_q8: Raw::of(&mut s.private_q8),
            private_q8k: Raw::of(&mut s.private_q8k),
            max_in: s.max_in,
            rope: Raw::of(&mut s.rope),
            scores: Raw::of(&mut s.scores),
            keys: Raw {
                ptr: k,
                len: cache_len,
            },
            values: Raw {
                ptr: v,
                len: cache_len,
            },
            cache_shape,
            tokens: Raw::of(&mut s.tokens),
            counters: Raw::of(&mut s.counters),
            n,
            pos0,
            logit_tokens,
            logit_row,
        }
    }

    fn hp(&self) -> &Hparams {
        &self.model.hp
    }

    fn buf(&self, b: Buf) -> Raw<f32> {
        self.bufs[b.index()]
    }

    /// Token range of an operation.
    fn token_range(&self, t: Tokens) -> Range<usize> {
        match t {
            Tokens::All => 0..self.n,
            Tokens::Logits => self.logit_tokens.clone(),
        }
    }

    /// The shared work counter of step `i` (reset to 0 before the region).
    fn counter(&self, i: usize) -> &AtomicUsize {
        // SAFETY: counters are only ever accessed through shared references (atomics).
        unsafe { &self.counters.get(i..i + 1)[0] }
    }

    /// Runs step `i` on this thread.
    fn run_step(&self, ctx: &Ctx<'_>, i: usize, step: &Step) {
        match *step {
            Step::Embed { table } => self.embed(ctx, table),
            Step::Linear {
                norm,
                input,
                ref projs,
                tokens,
            } => self.linear(ctx, i, norm, input, projs, tokens),
            Step::QkRopeStore {
                layer,
                q_norm,
                k_norm,
            } => self.qk_rope_store(ctx, layer, q_norm, k_norm),
            Step::Attention { layer } => self.attention(ctx, i, layer),
            Step::SwiGlu => {
                let ff = self.hp().n_ff;
                let r = ctx.split(self.n * ff, 16);
                // SAFETY: elements `r` of Gate (written) and Up (read) are this thread's.
                let (g, u) = unsafe {
                    (
                        self.buf(Buf::Gate).get_mut(r.clone()),
                        self.buf(Buf::Up).get(r),
                    )
                };
                kernels::silu_mul(self.model.isa, g, u);
            }
        }
    }

    /// Embedding rows and the RoPE angles of this thread's tokens: `rope[t][i]` = cos,
    /// `rope[t][half + i]` = sin of `(pos0 + t) * inv_freq[i]`.
    fn embed(&self, ctx: &Ctx<'_>, table: MatId) {
        let hp = self.hp();
        let m = self.model.matrix(table);
        let (e, half) = (hp.n_embd, hp.head_dim / 2);
        for t in ctx.split(self.n, 1) {
            // SAFETY: token ids are only read in the region; row `t` of Residual and of the
            // angles are this thread's.
            let (token, out, angles) = unsafe {
                (
                    self.tokens.get(t..t + 1)[0] as usize,
                    self.buf(Buf::Residual).get_mut(t * e..(t + 1) * e),
                    self.rope.get_mut(t * 2 * half..(t + 1) * 2 * half),
                )
            };
            crate::quant::dequantize_row(m.ty, m.row(token), out)
                .expect("row shape checked at load");
            self.model.rope_angles(self.pos0 + t, angles);
        }
    }

    /// Optional q/k head norms, RoPE of Q and K, and the K/V rows into the cache: item
    /// `(t, g)` is KV head `g` of token `t` and the query heads of its group.
    fn qk_rope_store(
        &self,
        ctx: &Ctx<'_>,
        layer: usize,
        q_norm: Option<VecId>,
        k_norm: Option<VecId>,
    ) {
        let hp = self.hp();
        let (hd, q_dim, kv) = (hp.head_dim, hp.q_dim(), hp.kv_dim());
        let group = hp.n_head / hp.n_head_kv;
        let qn = q_norm.map(|v| self.model.vector(v));
        let kn = k_norm.map(|v| self.model.vector(v));
        let (fused, interleaved) = self.model.rope.form();
        let isa = self.model.isa;
        for i in ctx.split(self.n * hp.n_head_kv, 1) {
            let (t, g) = (i / hp.n_head_kv, i % hp.n_head_kv);
            // SAFETY: the angles of token `t` are read-only; the query heads of group `g`,
            // K/V head `g` of token `t` and their cache rows are this item's, and items are
            // split between threads.
            let angles = unsafe { self.rope.get(t * hd..(t + 1) * hd) };
            for h in g * group..(g + 1) * group {
                let at = t * q_dim + h * hd;
                let q = unsafe { self.buf(Buf::Q).get_mut(at..at + hd) };
                if let Some(w) = qn {
                    rms_norm_in_place(q, w, hp.norm_eps);
                }
                rope(isa, q, angles, fused);
            }
            let at = t * kv + g * hd;
            let k = unsafe { self.buf(Buf::K).get_mut(at..at + hd) };
            if let Some(w) = kn {
                rms_norm_in_place(k, w, hp.norm_eps);
            }
            rope(isa, k, angles, fused);
            // Key rows in the attention's lane order (see `Model::with_rope`).
            let mut lanes = [0.0f32; crate::config::MAX_HEAD_DIM as usize];
            to_lane_order(k, &mut lanes[..hd], interleaved);
            let o = KvCache::offset_in(&self.cache_shape, layer, g, self.pos0 + t);
            unsafe {
                let v = self.buf(Buf::V).get(at..at + hd);
                kernels::to_f16(&lanes[..hd], self.keys.get_mut(o..o + hd));
                kernels::to_f16(v, self.values.get_mut(o..o + hd));
            }
        }
    }

    /// Causal attention of this chunk's tokens, as llama.cpp computes it on the CPU without
    /// flash attention (`llm_graph_context::build_attn_mha`, then ggml-cpu's `mul_mat` and
    /// `soft_max`): the query rounded to f16 (`ggml_mul_mat` converts it to the f16 key
    /// cache's type), scores `q . k` over the head's lanes in the [`RopeRule`]'s order and
    /// the chunk's [`kernels::F16Order`], times
    /// `1 / sqrt(head_dim)`, softmax with ggml's `exp` and sum ([`kernels::softmax_exp`]),
    /// the probabilities scaled by `1 / sum` (computed in f64, applied in f32) and rounded to
    /// f16 (the value cache is f16), then their weighted sum of the value rows in the same
    /// order.
    fn attention(&self, ctx: &Ctx<'_>, step: usize, layer: usize) {
        let hp = self.hp();
        let (hd, q_dim) = (hp.head_dim, hp.q_dim());
        let group = hp.n_head / hp.n_head_kv;
        let scale = 1.0 / (hd as f32).sqrt();
        let isa = self.model.isa;
        let order = if self.n == 1 {
            kernels::F16Order::Gemv
        } else {
            kernels::F16Order::Gemm
        };
        let (_, interleaved) = self.model.rope.form();
        let context = self.cache_shape.context;
        let per_thread = attention_scratch(context, hd);
        // SAFETY: this thread's scratch: scores, the rounded query, the accumulators.
        let scratch = unsafe {
            self.scores
                .get_mut(ctx.thread * per_thread..(ctx.thread + 1) * per_thread)
        };
        let (scores_all, rest) = scratch.split_at_mut(context);
        let (qf, acc) = rest.split_at_mut(hd);
        // Items (token, head) taken one at a time from a shared counter, the last token
        // (the longest causal span) first, so threads finish together even when one of them
        // is slowed by another process.
        let items = self.n * hp.n_head;
        let counter = self.counter(step);
        loop {
            let i = counter.fetch_add(1, Ordering::Relaxed);
            if i >= items {
                break;
            }
            let (t, h) = (self.n - 1 - i / hp.n_head, i % hp.n_head);
            let g = h / group;
            let len = self.pos0 + t + 1;
            let base = KvCache::offset_in(&self.cache_shape, layer, g, 0);
            let at = t * q_dim + h * hd;
            // SAFETY: Q is read-only here; head `h` of token `t` in Attn is this item's, and
            // the counter hands each item to one thread; the cache rows were written before
            // the barrier.
            let (q, out, keys, values) = unsafe {
                (
                    self.buf(Buf::Q).get(at..at + hd),
                    self.buf(Buf::Attn).get_mut(at..at + hd),
                    self.keys.get(base..base + len * hd),
                    self.values.get(base..base + len * hd),
                )
            };
            to_lane_order(q, qf, interleaved);
            kernels::round_to_f16(qf);
            let scores = &mut scores_all[..len];
            let mut max = f32::NEG_INFINITY;
            for (s, k) in scores.iter_mut().zip(keys.chunks_exact(hd)) {
                *s = kernels::dot_f16(isa, order, qf, k) * scale;
                max = max.max(*s);
            }
            let sum = kernels::softmax_exp(isa, scores, max);
            let inv = (1.0 / sum) as f32;
            for s in scores.iter_mut() {
                *s *= inv;
            }
            kernels::round_to_f16(scores);
            kernels::weighted_sum_f16(isa, order, scores, values, acc, out);
        }
    }

    /// An optional RMSNorm and up to three projections of its output.
    ///
    /// One token (generation): every thread normalises and quantises the row itself into
    /// its private scratch (no barrier), then takes chunks of output rows from the step's
    /// counter. Several tokens: threads normalise (into `Normed`) and quantise their share
    /// of the tokens, a barrier, then chunks of rows.
    fn linear(
        &self,
        ctx: &Ctx<'_>,
        step: usize,
        norm: Option<(Buf, VecId)>,
        input: Buf,
        projs: &[Option<Proj>; 3],
        tokens: Tokens,
    ) {
        let hp = self.hp();
        let range = self.token_range(tokens);
        if range.is_empty() {
            return;
        }
        let cols = hp.width(input);
        let model = self.model;
        let mut q8 = false;
        let mut q8k = false;
        for p in projs.iter().flatten() {
            match model.matrix(p.weight).ty.act_format() {
                ActFormat::Q8 => q8 = true,
                ActFormat::Q8K => q8k = true,
                ActFormat::F32 => {}
            }
        }
        let n_tok = range.len();
        let private = n_tok == 1;
        let (x_f32, q8_acts, q8k_acts): (&[f32], &[BlockQ8], &[BlockQ8K]) = if private {
            let t = range.start;
            let mi = self.max_in;
            // SAFETY: this thread's private scratch; the input rows are read-only in this step.
            let x = unsafe {
                match norm {
                    Some((src, w)) => {
                        let y = self
                            .private
                            .get_mut(ctx.thread * mi..ctx.thread * mi + cols);
                        let x = self.buf(src).get(t * cols..(t + 1) * cols);
                        rms_norm(x, model.vector(w), hp.norm_eps, y);
                        &*y
                    }
                    None => self.buf(input).get(t * cols..(t + 1) * cols),
                }
            };
            let (mut a8, mut a8k): (&[BlockQ8], &[BlockQ8K]) = (&[], &[]);
            if q8 {
                let per = mi.div_ceil(QK);
                // SAFETY: this thread's private blocks.
                let out = unsafe {
                    self.private_q8
                        .get_mut(ctx.thread * per..ctx.thread * per + cols / QK)
                };
                kernels::quantize_q8(model.isa, x, cols, 0..1, cols, out);
                a8 = out;
            }
            if q8k {
                let per = mi.div_ceil(QK_K);
                // SAFETY: this thread's private super-blocks.
                let out = unsafe {
                    self.private_q8k
                        .get_mut(ctx.thread * per..ctx.thread * per + cols / QK_K)
                };
                kernels::quantize_q8k(x, cols, 0..1, cols, out);
                a8k = out;
            }
            (x, a8, a8k)
        } else {
            let mine = split_range(n_tok, 1, ctx.thread, ctx.n_threads);
            let rows = mine.start + range.start..mine.end + range.start;
            if !rows.is_empty() {
                // SAFETY: rows `rows` of `Normed` (written) and of the norm's input (read),
                // and their quantised blocks, are this thread's.
                let x = unsafe {
                    if let Some((src, w)) = norm {
                        for t in rows.clone() {
                            let x = self.buf(src).get(t * cols..(t + 1) * cols);
                            let y = self.buf(input).get_mut(t * cols..(t + 1) * cols);
                            rms_norm(x, model.vector(w), hp.norm_eps, y);
                        }
                    }
                    self.buf(input).get(rows.start * cols..rows.end * cols)
                };
                if q8 {
                    let per = cols / QK;
                    let out = unsafe { self.q8.get_mut(rows.start * per..rows.end * per) };
                    kernels::quantize_q8(model.isa, x, cols, 0..rows.len(), cols, out);
                }
                if q8k {
                    let per = cols / QK_K;
                    let out = unsafe { self.q8k.get_mut(rows.start * per..rows.end * per) };
                    kernels::quantize_q8k(x, cols, 0..rows.len(), cols, out);
                }
            }
            ctx.barrier();
            // SAFETY: read-only after the barrier.
            unsafe {
                (
                    self.buf(input).get(range.start * cols..range.end * cols),
                    if q8 {
                        self.q8
                            .get(range.start * (cols / QK)..range.end * (cols / QK))
                    } else {
                        &[]
                    },
                    if q8k {
                        self.q8k
                            .get(range.start * (cols / QK_K)..range.end * (cols / QK_K))
                    } else {
                        &[]
                    },
                )
            }
        };
        // Chunks of the projections' rows (concatenated) from the step's counter.
        let total: usize = projs
            .iter()
            .flatten()
            .map(|p| model.matrix(p.weight).rows)
            .sum();
        let chunk = if n_tok == 1 {
            (total / (8 * ctx.n_threads))
                .clamp(16, 256)
                .next_multiple_of(16)
        } else {
            64
        };
        let counter = self.counter(step);
        loop {
            let c = counter.fetch_add(1, Ordering::Relaxed);
            let mine = c * chunk..((c + 1) * chunk).min(total);
            if mine.start >= total {
                break;
            }
            let mut first = 0;
            for p in projs.iter().flatten() {
                let w = model.matrix(p.weight);
                let rows = mine.start.max(first).saturating_sub(first)
                    ..mine.end.min(first + w.rows).saturating_sub(first);
                first += w.rows;
                if rows.is_empty() {
                    continue;
                }
                let acts = match w.ty.act_format() {
                    ActFormat::F32 => Acts::F32 {
                        data: x_f32,
                        per_row: cols,
                    },
                    ActFormat::Q8 => Acts::Q8 {
                        data: q8_acts,
                        per_row: cols / QK,
                    },
                    ActFormat::Q8K => Acts::Q8K {
                        data: q8k_acts,
                        per_row: cols / QK_K,
                    },
                };
                let out_rows = w.rows;
                let out_first_token = if p.out == Buf::Logits {
                    self.logit_row
                } else {
                    range.start
                };
                let ob = self.buf(p.out);
                assert!((out_first_token + n_tok) * out_rows <= ob.len);
                let bias = p.bias.map(|b| model.vector(b));
                // SAFETY: in bounds (asserted); the counter hands each chunk of rows to one
                // thread, and no reference to the output buffer is live in this step.
                let om = unsafe {
                    OutMatrix::from_raw(
                        ob.ptr.add(out_first_token * out_rows),
                        n_tok,
                        out_rows,
                        out_rows,
                    )
                }
                .with_epilogue(bias, p.accumulate);
                kernels::matmul(model.isa, w, rows, &acts, 0..n_tok, &om);
            }
        }
    }
}

/// Rotate-half RoPE of one head with the angles' `[cos; half] ++ [sin; half]`: lane `i` and
/// lane `i + half` as a pair. `fused` is llama.cpp's arithmetic ([`kernels::rope_fused`]);
/// otherwise separate products, as transformers' `apply_rotary_pos_emb`.
fn rope(isa: Isa, x: &mut [f32], angles: &[f32], fused: bool) {
    if fused {
        kernels::rope_fused(isa, x, angles);
        return;
    }
    let half = x.len() / 2;
    let (x0, x1) = x.split_at_mut(half);
    let (cos, sin) = angles.split_at(half);
    for ((a, b), (&c, &s)) in x0.iter_mut().zip(x1.iter_mut()).zip(cos.iter().zip(sin)) {
        let (u, v) = (*a, *b);
        *a = u * c - v * s;
        *b = v * c + u * s;
    }
}

/// Copies a head in Hugging Face lane order (pairs `i`, `i + half`) into llama.cpp's order
/// for `interleaved` heads (pair `i` at `2i`, `2i + 1`), unchanged otherwise.
fn to_lane_order(src: &[f32], dst: &mut [f32], interleaved: bool) {
    if interleaved {
        let half = src.len() / 2;
        for i in 0..half {
            dst[2 * i] = src[i];
            dst[2 * i + 1] = src[half + i];
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// `y = x / sqrt(mean(x^2) + eps) * w` as ggml's `rms_norm` (`ggml-cpu/ops.cpp`) and `mul`
/// compute it: each square in f32, their sum in f64, the mean rounded to f32, then
/// `(x * (1 / sqrt(mean + eps))) * w` in f32.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let scale = rms_scale(x, eps);
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = x * scale * w;
    }
}

fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (x, &w) in x.iter_mut().zip(w) {
        *x = *x * scale * w;
    }
}

/// `1 / sqrt(mean(x^2) + eps)`, the sum of the f32 squares in f64 ([`rms_norm`]).
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (ss / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// f32 values of one thread's attention scratch: the scores of `context` positions, the
/// rounded query and the accumulators of [`kernels::weighted_sum_f16`].
fn attention_scratch(context: usize, head_dim: usize) -> usize {
    context + head_dim + kernels::weighted_sum_scratch(head_dim)
}

/// A weight matrix view of a canonical tensor (`ne = [cols, rows]`).
fn matrix_of<'w>(t: &crate::tensor::TensorRef<'w>) -> Matrix<'w> {
    Matrix {
        ty: t.ty,
        rows: t.rows(),
        cols: t.row_len(),
        data: t.data,
    }
}

/// A norm weight or bias (f32, f16 or bf16) as f32 values.
fn vector_of(t: &crate::tensor::TensorRef<'_>) -> Result<Vec<f32>, ForwardError> {
    let mut v = vec![0.0f32; t.elems()];
    crate::quant::dequantize_row(t.ty, t.data, &mut v).map_err(|e| ForwardError::Weight {
        name: t.name.to_owned(),
        detail: e.to_string(),
    })?;
    Ok(v)
}

impl Hparams {
    /// The forward pass's view of a checkpoint's hyper-parameters; `rope_freqs` is the
    /// `rope_freqs.weight` tensor when the configuration scales frequencies with it.
    ///
    /// # Errors
    /// [`ForwardError::Hparam`] when the RoPE frequencies cannot be formed
    /// ([`crate::config::LlmConfig::rope_inv_freq`]).
    pub fn from_config(
        cfg: &crate::config::LlmConfig,
        rope_freqs: Option<&[f32]>,
    ) -> Result<Hparams, ForwardError> {
        let rope_inv_freq = cfg
            .rope_inv_freq(rope_freqs)
            .map_err(|e| ForwardError::Hparam {
                field: "rope",
                detail: e.to_string(),
            })?;
        Ok(Hparams {
            n_layer: cfg.n_layer as usize,
            n_embd: cfg.n_embd as usize,
            n_head: cfg.n_head as usize,
            n_head_kv: cfg.n_head_kv as usize,
            head_dim: cfg.head_dim as usize,
            n_ff: cfg.n_ff as usize,
            n_vocab: cfg.n_vocab as usize,
            norm_eps: cfg.norm_eps,
            rope_inv_freq,
        })
    }
}

impl<'w> ModelParts<'w> {
    /// The parts of a checkpoint's canonical tensors ([`crate::tensor::Weights::model`]):
    /// matrices borrowed, norms and biases converted to f32.
    ///
    /// # Errors
    /// [`ForwardError::Weight`] when a vector's bytes do not match its dimensions.
    pub fn from_tensors(
        t: &crate::tensor::ModelTensors<'w>,
    ) -> Result<ModelParts<'w>, ForwardError> {
        let opt = |v: &Option<crate::tensor::TensorRef<'w>>| v.as_ref().map(vector_of).transpose();
        let mut layers = Vec::with_capacity(t.layers.len());
        for l in &t.layers {
            layers.push(LayerParts {
                attn_norm: vector_of(&l.attn_norm)?,
                wq: matrix_of(&l.attn_q),
                wk: matrix_of(&l.attn_k),
                wv: matrix_of(&l.attn_v),
                bq: opt(&l.attn_q_bias)?,
                bk: opt(&l.attn_k_bias)?,
                bv: opt(&l.attn_v_bias)?,
                q_norm: opt(&l.attn_q_norm)?,
                k_norm: opt(&l.attn_k_norm)?,
                wo: matrix_of(&l.attn_output),
                ffn_norm: vector_of(&l.ffn_norm)?,
                w_gate: matrix_of(&l.ffn_gate),
                w_up: matrix_of(&l.ffn_up),
                w_down: matrix_of(&l.ffn_down),
            });
        }
        Ok(ModelParts {
            token_embd: matrix_of(&t.token_embd),
            output: t.output.as_ref().map(matrix_of),
            output_norm: vector_of(&t.output_norm)?,
            layers,
        })
    }
}

/// Element types a [`Model`] accepts for matrices (every [`TensorType`]).
pub const MATRIX_TYPES: [TensorType; 8] = TensorType::ALL;
