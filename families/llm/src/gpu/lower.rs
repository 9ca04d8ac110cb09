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
//! - then [`Step::Argmax`]: the greedy token into the request state, position + 1.

use crate::forward::{Buf, Hparams, MatId, Op, Program, Proj, VecId};
use crate::quant::{ActFormat, TensorType};

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
    /// Greedy token into the request state; position + 1.
    Argmax,
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
fn formats_for(
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
    steps.push(Step::Argmax);
    Ok(steps)
}

/// Bytes of one ggml Q8 activation block on the device (`BlockQ8` in `kernels/llm.cu`).
pub const BLOCK_Q8_BYTES: usize = 4 + 4 + 32;
/// Bytes of one Q8_K activation block on the device (`BlockQ8K`).
pub const BLOCK_Q8K_BYTES: usize = 4 + 256 + 2 * 16;
/// Bytes of the request state (`DecodeState`).
pub const STATE_BYTES: usize = 16;

/// Bytes of the attention partials: per query head and split, the running maximum, the sum
/// and the unnormalised output (`2 + head_dim` f32).
pub fn attention_partial_bytes(hp: &Hparams, splits: usize) -> usize {
    hp.n_head * splits * (2 + hp.head_dim) * 4
}

/// The device memory a decoder places at load, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Weight matrices as stored (ggml blocks), norm weights and biases (f32), RoPE
    /// frequencies.
    pub weights: usize,
    /// The f16 KV cache: `n_layer * 2 * context * kv_dim * 2`.
    pub cache: usize,
    /// Activations (f32 buffers but the logits, their 8-bit blocks), the prompt ids and the
    /// request state.
    pub activations: usize,
    /// The logits, `n_vocab` f32.
    pub logits: usize,
}

impl MemoryPlan {
    /// Sum of the parts.
    pub fn total(&self) -> usize {
        self.weights + self.cache + self.activations + self.logits
    }

    /// The plan for `context` positions; `weight_bytes` as uploaded; attention split over
    /// `splits` blocks per head.
    pub fn new(hp: &Hparams, context: usize, weight_bytes: usize, splits: usize) -> MemoryPlan {
        let widths: usize = [
            Buf::Residual,
            Buf::Normed,
            Buf::Q,
            Buf::K,
            Buf::V,
            Buf::Attn,
            Buf::Gate,
            Buf::Up,
        ]
        .iter()
        .map(|&b| hp.width(b) * 4)
        .sum();
        let widest = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
        let act = widths
            + widest.div_ceil(32) * BLOCK_Q8_BYTES
            + widest.div_ceil(256) * BLOCK_Q8K_BYTES
            + context * 4
            + STATE_BYTES
            + attention_partial_bytes(hp, splits);
        MemoryPlan {
            weights: weight_bytes,
            cache: hp.n_layer * 2 * context * hp.kv_dim() * 2,
            activations: act,
            logits: hp.n_vocab * 4,
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
        // gate/up, swiglu prep, down) + final prep + head + argmax.
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
        assert_eq!(steps.last(), Some(&Step::Argmax));
        assert_eq!(steps[0], Step::Embed { table: MatId(0) });
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
        let p = MemoryPlan::new(&hp, 256, 1000, 16);
        assert_eq!(p.cache, 2 * 2 * 256 * 32 * 2);
        assert_eq!(p.logits, 400);
        let widths = (64 + 64 + 64 + 32 + 32 + 64 + 128 + 128) * 4;
        assert_eq!(
            p.activations,
            widths
                + 4 * BLOCK_Q8_BYTES
                + BLOCK_Q8K_BYTES
                + 256 * 4
                + STATE_BYTES
                + 4 * 16 * (2 + 16) * 4
        );
        assert_eq!(p.total(), 1000 + p.cache + p.activations + p.logits);
    }
}
