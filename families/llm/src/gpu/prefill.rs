//! Prefill in chunks (issue 26): the forward pass's [`Program`] lowered to the chunk kernels
//! of `kernels/llm.cu` (section PREFILL), the split of a prompt into chunks and the device
//! memory of the chunk buffers. No CUDA here, so all of it is tested on any host; the
//! captured graphs are `prefill_graph.rs` (feature `cuda`).
//!
//! A chunk is up to `chunk` prompt tokens; one graph, captured at load, serves every chunk
//! of every prompt: its kernels read the chunk's first position and token count from the
//! request state on the device (`start = pos`, `n = min(chunk, prompt_len - pos)`), as the
//! decode step reads its position. A prompt of `L` tokens is `ceil(L / chunk)` replays
//! ([`chunk_lengths`]); the last, shorter chunk needs no graph of its own.
//!
//! Rules (each [`Op`] of the program, in order), beside [`lower`](super::lower)'s:
//! - ops over every token ([`Tokens::All`]) -> the same kernel over the chunk's rows;
//! - ops over the logits' tokens ([`Tokens::Logits`], the final norm and the head, a suffix
//!   of the program) -> the same kernel over the chunk's last row only, and only in the
//!   chunk that ends the prompt (the head writes the decode step's logits buffer);
//! - then [`ChunkStep::Advance`] (position = the chunk's last) and [`ChunkStep::Sample`]
//!   (the decode step's `sample_advance`: position + 1, and after the last chunk the first
//!   token, exactly as after a token-by-token prefill).

use super::lower::{BLOCK_Q8_BYTES, BLOCK_Q8K_BYTES, formats_for};
use crate::forward::{Buf, Hparams, MatId, Op, Program, Proj, Tokens, VecId};
use crate::quant::TensorType;

/// Prompt tokens per chunk of the prefill graph [`GpuOptions`](super::GpuOptions) uses by
/// default: a 128-token prompt is one replay.
pub const PREFILL_CHUNK: usize = 128;

/// Tokens per warp of `matmul_chunk` (`MM_TOK`): each weight block is read once for this
/// many tokens.
pub const MM_TOK: usize = 8;

/// One kernel launch of the prefill graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkStep {
    /// `Residual[t] =` the table row of `prompt[start + t]` (`embed_chunk`).
    Embed {
        /// `[n_vocab, n_embd]` table.
        table: MatId,
    },
    /// `prep` of each row (`prep_chunk`).
    Prep {
        /// Input buffer (`Gate` for SwiGLU).
        input: Buf,
        /// `silu(input) * Up` instead of `input`.
        swiglu: bool,
        /// RMSNorm weight.
        norm: Option<VecId>,
        /// Output buffer.
        out: Buf,
        /// Also write Q8 blocks.
        q8: bool,
        /// Also write Q8_K blocks.
        q8k: bool,
        /// Only the chunk's last row, only in the prompt's last chunk.
        last: bool,
    },
    /// Up to three projections of the prepared rows (`matmul_chunk`).
    MatMul {
        /// Input buffer.
        input: Buf,
        /// The projections.
        projs: [Option<Proj>; 3],
        /// Only the chunk's last row (into the decode step's logits), only in the last chunk.
        last: bool,
    },
    /// Per-head RMSNorm of each row (`head_norm_chunk`).
    HeadNorm {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads.
        heads: usize,
        /// Weight.
        weight: VecId,
    },
    /// RoPE of row `t` at position `start + t`; with `store`, K and V into that layer's cache
    /// (`rope_chunk`).
    Rope {
        /// `Q` or `K`.
        buf: Buf,
        /// Heads.
        heads: usize,
        /// The layer whose cache receives the rows.
        store: Option<usize>,
    },
    /// Causal attention of each row over the cache (`attention_chunk`: one block per query
    /// head and row, the CPU engine's order).
    Attention {
        /// Block index.
        layer: usize,
    },
    /// Position = the chunk's last (`chunk_advance`).
    Advance,
    /// The decode step's `sample_advance`.
    Sample,
}

/// A program the prefill lowering cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefillError {
    /// An op over every token after one over the logits' tokens (they must be a suffix).
    #[error("op {index}: {op} runs over every token after an op over the logits' tokens only")]
    LogitsNotLast {
        /// Index of the op.
        index: usize,
        /// The op.
        op: String,
    },
    /// An op the chunk kernels cannot express (as [`super::LowerError`]).
    #[error(transparent)]
    Lower(#[from] super::LowerError),
    /// A chunk of zero tokens.
    #[error("prefill chunk of 0 tokens (use at least 1)")]
    EmptyChunk,
    /// A product over every token writing the logits (the chunk keeps the last row's only).
    #[error("op {index}: the logits of every token of a chunk (only the last row's are kept)")]
    LogitsOfEveryToken {
        /// Index of the op.
        index: usize,
    },
    /// A `Prep` whose input and output rows differ in width.
    #[error("prep of {input:?} ({input_width} wide) into {out:?} ({out_width} wide)")]
    PrepWidth {
        /// Input buffer.
        input: Buf,
        /// Its width.
        input_width: usize,
        /// Output buffer.
        out: Buf,
        /// Its width.
        out_width: usize,
    },
}

/// Lowers `program` to the prefill graph's launches; `ty` gives each matrix's element type.
///
/// # Errors
/// [`PrefillError`] for an op sequence the chunk kernels cannot express.
pub fn lower_chunk(
    program: &Program,
    ty: &dyn Fn(MatId) -> TensorType,
) -> Result<Vec<ChunkStep>, PrefillError> {
    let ops = &program.ops;
    let mut steps: Vec<ChunkStep> = Vec::with_capacity(ops.len() + 32);
    let mut in_logits = false;
    let mut i = 0;
    while i < ops.len() {
        let last = match ops[i] {
            Op::RmsNorm { tokens, .. } | Op::Linear { tokens, .. } => tokens == Tokens::Logits,
            _ => false,
        };
        if in_logits && !last {
            return Err(PrefillError::LogitsNotLast {
                index: i,
                op: format!("{:?}", ops[i]),
            });
        }
        in_logits |= last;
        match ops[i] {
            Op::Embed { table } => steps.push(ChunkStep::Embed { table }),
            Op::RmsNorm {
                input, weight, out, ..
            } => {
                let (q8, q8k) = formats_for(program, i + 1, out, ty);
                steps.push(ChunkStep::Prep {
                    input,
                    swiglu: false,
                    norm: Some(weight),
                    out,
                    q8,
                    q8k,
                    last,
                });
            }
            Op::SwiGlu => {
                let (q8, q8k) = formats_for(program, i + 1, Buf::Gate, ty);
                steps.push(ChunkStep::Prep {
                    input: Buf::Gate,
                    swiglu: true,
                    norm: None,
                    out: Buf::Gate,
                    q8,
                    q8k,
                    last: false,
                });
            }
            Op::Linear { input, projs, .. } => {
                if !last && projs.iter().flatten().any(|p| p.out == Buf::Logits) {
                    return Err(PrefillError::LogitsOfEveryToken { index: i });
                }
                let prepared = matches!(steps.last(), Some(ChunkStep::Prep { out, last: l, .. }) if *out == input && *l == last);
                if !prepared {
                    let (q8, q8k) = formats_for(program, i, input, ty);
                    steps.push(ChunkStep::Prep {
                        input,
                        swiglu: false,
                        norm: None,
                        out: input,
                        q8,
                        q8k,
                        last,
                    });
                }
                steps.push(ChunkStep::MatMul { input, projs, last });
            }
            Op::HeadNorm { buf, heads, weight } => {
                steps.push(ChunkStep::HeadNorm { buf, heads, weight })
            }
            Op::Rope { buf, heads } => match buf {
                Buf::Q => steps.push(ChunkStep::Rope {
                    buf,
                    heads,
                    store: None,
                }),
                Buf::K => {
                    let store = match ops.get(i + 1) {
                        Some(Op::StoreKv { layer }) => {
                            i += 1;
                            Some(*layer)
                        }
                        _ => None,
                    };
                    steps.push(ChunkStep::Rope { buf, heads, store });
                }
                _ => return Err(super::LowerError::RopeBuffer { index: i, buf }.into()),
            },
            Op::StoreKv { layer } => {
                return Err(super::LowerError::UnfusedStore {
                    index: i,
                    layer,
                    before: if i == 0 {
                        "nothing".into()
                    } else {
                        format!("{:?}", ops[i - 1])
                    },
                }
                .into());
            }
            Op::Attention { layer } => steps.push(ChunkStep::Attention { layer }),
        }
        i += 1;
    }
    steps.push(ChunkStep::Advance);
    steps.push(ChunkStep::Sample);
    Ok(steps)
}

/// The chunks of a prompt of `len` tokens: `len / chunk` full ones, then the rest (none when
/// `len` is a multiple). Each is one replay of the prefill graph.
///
/// # Errors
/// [`PrefillError::EmptyChunk`] for `chunk == 0`.
pub fn chunk_lengths(len: usize, chunk: usize) -> Result<Vec<usize>, PrefillError> {
    if chunk == 0 {
        return Err(PrefillError::EmptyChunk);
    }
    let mut out = vec![chunk; len / chunk];
    if !len.is_multiple_of(chunk) {
        out.push(len % chunk);
    }
    Ok(out)
}

/// The device memory the prefill graph places at load beside the decoder's (the chunk's
/// rows of every activation buffer but the logits and their 8-bit blocks), in bytes; the
/// cache, the weights, the state and the logits are the decoder's.
pub fn chunk_memory(hp: &Hparams, chunk: usize) -> usize {
    let widths: usize = Buf::ALL
        .iter()
        .filter(|&&b| b != Buf::Logits)
        .map(|&b| hp.width(b) * 4)
        .sum();
    let widest = hp.n_embd.max(hp.q_dim()).max(hp.n_ff);
    chunk * (widths + widest.div_ceil(32) * BLOCK_Q8_BYTES + widest.div_ceil(256) * BLOCK_Q8K_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::ActFormat;

    fn tiny_model_program() -> (Program, Hparams) {
        let cfg = crate::testing::tiny_config();
        let weights = crate::testing::tiny_weights(&cfg);
        let tensors = weights.model(&cfg).expect("tensors");
        let hp = Hparams::from_config(&cfg, None).expect("hparams");
        let parts = crate::forward::ModelParts::from_tensors(&tensors).expect("parts");
        let model =
            crate::forward::Model::new(hp, parts, crate::kernels::Isa::Scalar).expect("model");
        (model.program().clone(), model.hparams().clone())
    }

    #[test]
    fn a_layer_lowers_to_the_decode_steps_over_the_chunk_and_the_head_to_its_last_row() {
        let (program, hp) = tiny_model_program();
        let ty = |id: MatId| {
            if id.0.is_multiple_of(2) {
                TensorType::Q4_1
            } else {
                TensorType::Q6K
            }
        };
        let steps = lower_chunk(&program, &ty).expect("lowers");
        let decode = super::super::lower(&program, &ty).expect("decode lowers");
        // The decode step's launches (attention counted once), plus the advance.
        assert_eq!(steps.len(), decode.len() + 1);
        assert_eq!(steps.len(), 1 + 11 * hp.n_layer + 4);
        assert_eq!(steps[0], ChunkStep::Embed { table: MatId(0) });
        let n = steps.len();
        assert_eq!(&steps[n - 2..], &[ChunkStep::Advance, ChunkStep::Sample]);
        // Exactly the final norm and the head run on the last row.
        let lasts: Vec<usize> = (0..n)
            .filter(|&k| {
                matches!(
                    steps[k],
                    ChunkStep::Prep { last: true, .. } | ChunkStep::MatMul { last: true, .. }
                )
            })
            .collect();
        assert_eq!(lasts, vec![n - 4, n - 3]);
        let ChunkStep::MatMul { projs, .. } = steps[n - 3] else {
            panic!("head: {:?}", steps[n - 3]);
        };
        assert_eq!(projs[0].map(|p| p.out), Some(Buf::Logits));
        // Every product follows a Prep of its input over the same rows, with the blocks
        // its weights read; the K RoPE writes the cache of each layer once.
        for (k, s) in steps.iter().enumerate() {
            if let ChunkStep::MatMul { input, projs, last } = s {
                let ChunkStep::Prep {
                    out,
                    q8,
                    q8k,
                    last: l,
                    ..
                } = steps[k - 1]
                else {
                    panic!("step {k}: product not prepared: {:?}", steps[k - 1]);
                };
                assert_eq!((out, l), (*input, *last));
                let needs = |f: ActFormat| {
                    projs
                        .iter()
                        .flatten()
                        .any(|p| ty(p.weight).act_format() == f)
                };
                assert_eq!((q8, q8k), (needs(ActFormat::Q8), needs(ActFormat::Q8K)));
            }
        }
        let stores: Vec<usize> = steps
            .iter()
            .filter_map(|s| match s {
                ChunkStep::Rope { store: Some(l), .. } => Some(*l),
                _ => None,
            })
            .collect();
        assert_eq!(stores, (0..hp.n_layer).collect::<Vec<_>>());
    }

    #[test]
    fn an_op_over_every_token_after_the_head_is_refused_with_the_op_named() {
        let (mut program, _) = tiny_model_program();
        program.ops.push(Op::SwiGlu);
        let index = program.ops.len() - 1;
        let e = lower_chunk(&program, &|_| TensorType::F32).unwrap_err();
        assert_eq!(
            e,
            PrefillError::LogitsNotLast {
                index,
                op: "SwiGlu".into()
            }
        );
        let (mut program, _) = tiny_model_program();
        for op in &mut program.ops {
            if let Op::Linear { tokens, .. } | Op::RmsNorm { tokens, .. } = op {
                *tokens = Tokens::All;
            }
        }
        let head = program.ops.len() - 1;
        assert_eq!(
            lower_chunk(&program, &|_| TensorType::F32),
            Err(PrefillError::LogitsOfEveryToken { index: head })
        );
        let program = Program {
            ops: vec![Op::StoreKv { layer: 1 }],
        };
        assert!(matches!(
            lower_chunk(&program, &|_| TensorType::F32),
            Err(PrefillError::Lower(
                super::super::LowerError::UnfusedStore {
                    index: 0,
                    layer: 1,
                    ..
                }
            ))
        ));
    }

    #[test]
    fn prompts_split_into_full_chunks_and_one_shorter_rest() {
        let c = PREFILL_CHUNK;
        assert_eq!(chunk_lengths(1, c).unwrap(), vec![1]);
        assert_eq!(chunk_lengths(c - 1, c).unwrap(), vec![c - 1]);
        assert_eq!(chunk_lengths(c, c).unwrap(), vec![c]);
        assert_eq!(chunk_lengths(c + 1, c).unwrap(), vec![c, 1]);
        assert_eq!(chunk_lengths(3 * c + 5, c).unwrap(), vec![c, c, c, 5]);
        assert_eq!(chunk_lengths(0, c).unwrap(), Vec::<usize>::new());
        for len in 0..300 {
            let v = chunk_lengths(len, 16).unwrap();
            assert_eq!(v.iter().sum::<usize>(), len);
            assert!(v.iter().all(|&n| (1..=16).contains(&n)));
        }
        assert_eq!(chunk_lengths(5, 0), Err(PrefillError::EmptyChunk));
    }

    #[test]
    fn the_chunk_memory_counts_rows_and_blocks() {
        let hp = Hparams {
            n_layer: 2,
            n_embd: 64,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            n_ff: 128,
            n_vocab: 100,
            norm_eps: 1e-5,
            rope_inv_freq: vec![1.0; 8],
        };
        let widths = (64 + 64 + 64 + 32 + 32 + 64 + 128 + 128) * 4;
        let per_row = widths + 4 * BLOCK_Q8_BYTES + BLOCK_Q8K_BYTES;
        assert_eq!(chunk_memory(&hp, 16), 16 * per_row);
        assert_eq!(chunk_memory(&hp, 0), 0);
    }
}
