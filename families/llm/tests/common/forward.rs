//! The front end's canonical tensors handed to the CPU forward pass (`forward::Model`), for
//! the tests that compare logits and greedy tokens with llama.cpp.

use tether_llm::Checkpoint;
use tether_llm::forward::{
    Hparams, LayerParts, LlamaCppRope, Model, ModelParts, RopeRule, State, StateOptions,
};
use tether_llm::kernels::{Isa, Matrix};
use tether_llm::quant::dequantize_row;
use tether_llm::tensor::TensorRef;

fn mat<'a>(t: &TensorRef<'a>) -> Matrix<'a> {
    Matrix {
        ty: t.ty,
        rows: t.rows(),
        cols: t.row_len(),
        data: t.data,
    }
}

fn vecf(t: &TensorRef<'_>) -> Vec<f32> {
    let mut v = vec![0.0; t.elems()];
    dequantize_row(t.ty, t.data, &mut v).expect("vector");
    v
}

/// The CPU model of a checkpoint.
pub fn model(c: &Checkpoint) -> Model<'_> {
    let cfg = &c.config;
    let m = c.weights.model(cfg).expect("tensors");
    let freqs = m.rope_freqs.map(|t| vecf(&t));
    let hp = Hparams {
        n_layer: cfg.n_layer as usize,
        n_embd: cfg.n_embd as usize,
        n_head: cfg.n_head as usize,
        n_head_kv: cfg.n_head_kv as usize,
        head_dim: cfg.head_dim as usize,
        n_ff: cfg.n_ff as usize,
        n_vocab: cfg.n_vocab as usize,
        norm_eps: cfg.norm_eps,
        rope_inv_freq: cfg.rope_inv_freq(freqs.as_deref()).expect("rope"),
    };
    let parts = ModelParts {
        token_embd: mat(&m.token_embd),
        output: m.output.as_ref().map(mat),
        output_norm: vecf(&m.output_norm),
        layers: m
            .layers
            .iter()
            .map(|l| LayerParts {
                attn_norm: vecf(&l.attn_norm),
                wq: mat(&l.attn_q),
                wk: mat(&l.attn_k),
                wv: mat(&l.attn_v),
                bq: l.attn_q_bias.as_ref().map(vecf),
                bk: l.attn_k_bias.as_ref().map(vecf),
                bv: l.attn_v_bias.as_ref().map(vecf),
                q_norm: l.attn_q_norm.as_ref().map(vecf),
                k_norm: l.attn_k_norm.as_ref().map(vecf),
                wo: mat(&l.attn_output),
                ffn_norm: vecf(&l.ffn_norm),
                w_gate: mat(&l.ffn_gate),
                w_up: mat(&l.ffn_up),
                w_down: mat(&l.ffn_down),
            })
            .collect(),
    };
    Model::new(hp, parts, Isa::detect())
        .expect("model")
        .with_rope(RopeRule::LlamaCpp(LlamaCppRope::from_config(
            cfg,
            freqs.as_deref(),
        )))
        .expect("rope")
}

/// A state for `context` positions, logits for up to `logit_rows` tokens, 2 threads.
pub fn state(m: &Model<'_>, context: usize, logit_rows: usize) -> State {
    State::new(
        m,
        StateOptions {
            context,
            max_batch: 64,
            logit_rows,
            threads: 2,
        },
    )
    .expect("state")
}

/// Index of the largest value (the first on ties, as numpy's argmax).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}
