//! Synthetic checkpoints for tests (this crate's and the compute side's): a tiny Llama-style
//! configuration, its weights, and the same as a GGUF file. Not part of the stable API.

use crate::config::{LlmConfig, RopeScaling, SpecialTokens};
use crate::quant::TensorType;
use crate::tensor::{AlignedBuf, Weights};

/// A tiny Llama-style configuration: 2 layers, width 64, 4 heads of 16 lanes, 2 KV heads,
/// FFN 128, vocabulary 96, context 128.
pub fn tiny_config() -> LlmConfig {
    LlmConfig {
        architecture: "llama".into(),
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_ff: 128,
        n_vocab: 96,
        n_ctx_train: 128,
        rope_theta: 10000.0,
        rope_scaling: RopeScaling::None,
        norm_eps: 1e-5,
        tied_embeddings: true,
        qkv_bias: false,
        qk_norm: false,
        special: SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            eog: vec![2],
            ..SpecialTokens::default()
        },
    }
}

/// Deterministic pseudo-random f32 values in [-1, 1) (xorshift64, seeded).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The canonical tensors (name, `ne`) `cfg` needs, every one f32.
pub fn tensor_shapes(cfg: &LlmConfig) -> Vec<(String, Vec<u64>)> {
    let (e, ff, q, kv, hd, v) = (
        cfg.n_embd as u64,
        cfg.n_ff as u64,
        cfg.q_dim() as u64,
        cfg.kv_dim() as u64,
        cfg.head_dim as u64,
        cfg.n_vocab as u64,
    );
    let mut out = vec![
        ("token_embd.weight".to_owned(), vec![e, v]),
        ("output_norm.weight".to_owned(), vec![e]),
    ];
    if !cfg.tied_embeddings {
        out.push(("output.weight".into(), vec![e, v]));
    }
    if matches!(cfg.rope_scaling, RopeScaling::FreqFactors { .. }) {
        out.push(("rope_freqs.weight".into(), vec![hd / 2]));
    }
    for i in 0..cfg.n_layer {
        let mut l = vec![
            ("attn_norm.weight", vec![e]),
            ("attn_q.weight", vec![e, q]),
            ("attn_k.weight", vec![e, kv]),
            ("attn_v.weight", vec![e, kv]),
            ("attn_output.weight", vec![q, e]),
            ("ffn_norm.weight", vec![e]),
            ("ffn_gate.weight", vec![e, ff]),
            ("ffn_up.weight", vec![e, ff]),
            ("ffn_down.weight", vec![ff, e]),
        ];
        if cfg.qkv_bias {
            l.push(("attn_q.bias", vec![q]));
            l.push(("attn_k.bias", vec![kv]));
            l.push(("attn_v.bias", vec![kv]));
        }
        if cfg.qk_norm {
            l.push(("attn_q_norm.weight", vec![hd]));
            l.push(("attn_k_norm.weight", vec![hd]));
        }
        out.extend(l.into_iter().map(|(n, d)| (format!("blk.{i}.{n}"), d)));
    }
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Deterministic f32 data for tensor number `i` of [`tensor_shapes`] (norm weights near 1,
/// RoPE factors 1..4, everything else in [-0.5, 0.5)).
pub fn tensor_data(name: &str, dims: &[u64], i: usize) -> Vec<f32> {
    let n = dims.iter().product::<u64>() as usize;
    let v = values(n, i as u64 + 1);
    if name.ends_with("norm.weight") {
        v.iter().map(|x| 1.0 + 0.1 * x).collect()
    } else if name == "rope_freqs.weight" {
        v.iter().map(|x| 2.5 + 1.5 * x).collect()
    } else {
        v.iter().map(|x| 0.5 * x).collect()
    }
}

/// Weights for `cfg` (every tensor f32, deterministic values) in canonical layout.
pub fn tiny_weights(cfg: &LlmConfig) -> Weights {
    let mut w = Weights::default();
    for (i, (name, dims)) in tensor_shapes(cfg).into_iter().enumerate() {
        let data = f32_bytes(&tensor_data(&name, &dims, i));
        w.insert_owned(name, TensorType::F32, dims, AlignedBuf::from_bytes(&data));
    }
    w
}
