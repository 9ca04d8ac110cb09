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
    /// Activations (f32 buffers but the logits, their 8-bit blocks), the request's token
    /// sequence (`context + 1` ids: the prompt, then each chosen token, read by the embedding
    /// and the penalty window), the request state and the sampler configuration.
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
            + CONFIG_BYTES
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
                + 257 * 4
                + STATE_BYTES
                + CONFIG_BYTES
                + 4 * 16 * (2 + 16) * 4
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
