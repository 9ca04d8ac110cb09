//! The GPU decoder computes the CPU engine's operations in the CPU engine's order (issue 26,
//! "Correct"): its logits equal the CPU engine's **bit for bit**. On synthetic models (every
//! matrix type of `MATRIX_TYPES`, SmolLM2-135M's shape in Q4_1 with a Q8_0 embedding,
//! Qwen2-style Q/K/V biases, Qwen3-style head norms; llama.cpp's RoPE rule as the generator
//! uses it, interleaved lanes for `llama`, halves for `qwen2`/`qwen3`):
//! - teacher forcing, one token per step: the unfused step, the fused step with dependent
//!   launches (as the product runs) and the CPU engine's one-token forward, every logit at
//!   every position;
//! - a prompt through the prefill graph (chunks of 16, the CPU engine's prompt chunking of
//!   `PROMPT_BATCH` tokens, a last chunk of one token and of several) against the CPU
//!   engine's prompt processing: the last token's logits;
//! - 64 greedy tokens after the prompt, GPU (prefill graph + decode steps) against the CPU
//!   engine (lowest id on a tie).
//!
//! Reported ignored where there is no GPU (`tether_testkit::GpuTests`).

use tether_llm::config::LlmConfig;
use tether_llm::forward::{
    Hparams, LlamaCppRope, LogitsFor, Model, ModelParts, RopeRule, State, StateOptions,
};
use tether_llm::gpu::{GpuDecoder, GpuOptions};
use tether_llm::kernels::Isa;
use tether_llm::quant::TensorType;
use tether_llm::sample::SamplerParams;
use tether_llm::tensor::Weights;
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

/// The CPU engine's prompt tokens per forward chunk in these tests.
const PROMPT_BATCH: usize = 8;

/// A small model whose every matrix is `ty`-able: widths multiples of 256 (K-quants).
fn small(arch: &str) -> LlmConfig {
    LlmConfig {
        architecture: arch.into(),
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 512,
        n_vocab: 1000,
        n_ctx_train: 1024,
        ..tether_llm::testing::tiny_config()
    }
}

/// SmolLM2-135M's shape with `n_layer` blocks.
fn smollm2_shape(n_layer: u32) -> LlmConfig {
    tether_llm::testing::smollm2_config(n_layer)
}

/// The CPU model as the generator makes it (llama.cpp's RoPE rule).
fn model<'w>(cfg: &LlmConfig, weights: &'w Weights) -> Model<'w> {
    let tensors = weights.model(cfg).expect("tensors");
    let hp = Hparams::from_config(cfg, None).expect("hparams");
    let parts = ModelParts::from_tensors(&tensors).expect("parts");
    Model::new(hp, parts, Isa::detect())
        .expect("model")
        .with_rope(RopeRule::LlamaCpp(LlamaCppRope::from_config(cfg, None)))
        .expect("rope")
}

fn state(m: &Model<'_>, context: usize) -> State {
    State::new(
        m,
        StateOptions {
            context,
            max_batch: PROMPT_BATCH,
            logit_rows: 1,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
    )
    .expect("state")
}

fn decoder(m: &Model<'_>, context: usize, fused: bool, prefill_chunk: usize) -> GpuDecoder {
    GpuDecoder::new(
        m,
        GpuOptions {
            ordinal: 0,
            context,
            sync: SyncPolicy::Spin,
            fused,
            prefill_chunk,
            dependent_launch: fused,
            layer_kernel_below: 0,
            grid_layers: false,
            layer_tail: false,
            prompt_batch: PROMPT_BATCH,
        },
    )
    .expect("gpu decoder")
}

/// Pseudo-random token ids below `n_vocab`.
fn tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    tether_llm::testing::values(n, seed)
        .into_iter()
        .map(|v| (((v + 1.0) * 0.5 * n_vocab as f32) as usize).min(n_vocab - 1) as u32)
        .collect()
}

/// The CPU engine's logits of `seq`, one token per forward call (the decode step's order).
fn cpu_teacher_forced(m: &Model<'_>, seq: &[u32], context: usize) -> Vec<f32> {
    let mut s = state(m, context);
    let mut out = Vec::with_capacity(seq.len() * m.hparams().n_vocab);
    for &t in seq {
        m.forward(&mut s, &[t], LogitsFor::Last)
            .expect("cpu forward");
        out.extend_from_slice(s.logits());
    }
    out
}

/// Index of the first bit-wise difference, with a message.
fn compare(what: &str, cpu: &[f32], gpu: &[f32], n_vocab: usize) -> Result<(), String> {
    assert_eq!(cpu.len(), gpu.len());
    let differ = cpu
        .iter()
        .zip(gpu)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let max = cpu
        .iter()
        .zip(gpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!(
        "  {what}: {} positions x {n_vocab} logits, {differ} differ bit-wise (max |diff| {max})",
        cpu.len() / n_vocab
    );
    match cpu
        .iter()
        .zip(gpu)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        None if cpu.iter().all(|v| v.is_finite()) => Ok(()),
        None => Err(format!("{what}: non-finite logits")),
        Some(i) => Err(format!(
            "{what}: position {}, id {}: CPU {} GPU {}",
            i / n_vocab,
            i % n_vocab,
            cpu[i],
            gpu[i]
        )),
    }
}

/// Greedy: the largest logit, the lowest id on a tie.
fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best as u32
}

/// Every check of the module docs on one model. Returns the failures (all are reported
/// before the test fails).
fn check_model(name: &str, cfg: &LlmConfig, w: &Weights, positions: usize) -> Vec<String> {
    let m = model(cfg, w);
    let n_vocab = cfg.n_vocab as usize;
    let context = 256;
    let mut fails = Vec::new();
    eprintln!("{name}:");
    // Teacher forcing, one token per step.
    let seq = tokens(positions, n_vocab, 11);
    let cpu = cpu_teacher_forced(&m, &seq, context);
    for fused in [false, true] {
        let mut d = decoder(&m, context, fused, 0);
        let mut gpu = vec![f32::NAN; seq.len() * n_vocab];
        d.teacher_forced(&seq, &mut gpu)
            .expect("gpu teacher forcing");
        let what = if fused {
            "fused + dependent launches"
        } else {
            "unfused"
        };
        if let Err(e) = compare(what, &cpu, &gpu, n_vocab) {
            fails.push(format!("{name}: {e}"));
        }
    }
    // Prompts through the prefill graph (chunks of 16): the last CPU chunk of one token
    // (41 = 5 * 8 + 1, Gemv) and of several (45, Gemm); then greedy tokens.
    for len in [41usize, 45] {
        let prompt = tokens(len, n_vocab, 100 + len as u64);
        let mut s = state(&m, context);
        m.forward(&mut s, &prompt, LogitsFor::Last)
            .expect("cpu prompt");
        let cpu_last = s.logits().to_vec();
        let mut d = decoder(&m, context, true, 16);
        let first = d
            .prefill(&prompt, &SamplerParams::greedy())
            .expect("gpu prefill");
        let mut gpu_last = vec![f32::NAN; n_vocab];
        d.logits(&mut gpu_last).expect("logits");
        if let Err(e) = compare(
            &format!("prompt of {len} (prefill graph)"),
            &cpu_last,
            &gpu_last,
            n_vocab,
        ) {
            fails.push(format!("{name}: {e}"));
        }
        // 64 greedy tokens.
        let mut cpu_tokens = vec![argmax(&cpu_last)];
        for _ in 1..64 {
            let t = *cpu_tokens.last().expect("token");
            m.forward(&mut s, &[t], LogitsFor::Last).expect("cpu step");
            cpu_tokens.push(argmax(s.logits()));
        }
        let mut gpu_tokens = vec![first];
        for _ in 1..64 {
            gpu_tokens.push(d.step().expect("gpu step"));
        }
        let same = cpu_tokens
            .iter()
            .zip(&gpu_tokens)
            .take_while(|(a, b)| a == b)
            .count();
        eprintln!("  prompt of {len}: greedy tokens equal for {same} of 64");
        if same < 64 {
            fails.push(format!(
                "{name}: prompt of {len}: greedy token {same}: CPU {} GPU {}",
                cpu_tokens[same], gpu_tokens[same]
            ));
        }
    }
    fails
}

fn finish(fails: Vec<String>) {
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

/// Every matrix type, every matrix of the model in it (the embedding and the tied head too).
fn every_type_equals_the_cpu_engine_bit_for_bit() {
    let mut fails = Vec::new();
    for ty in TensorType::ALL {
        let cfg = small("llama");
        let w = tether_llm::testing::random_weights(&cfg, &|_, _| ty);
        fails.extend(check_model(&format!("{ty:?}"), &cfg, &w, 24));
    }
    finish(fails);
}

/// SmolLM2-135M's shape (4 layers), Q4_1 products and a Q8_0 embedding (the tied head).
fn smollm2_shape_q4_1_equals_the_cpu_engine_bit_for_bit() {
    let cfg = smollm2_shape(4);
    let w = tether_llm::testing::random_weights(&cfg, &|name, _| {
        if name == "token_embd.weight" {
            TensorType::Q8_0
        } else {
            TensorType::Q4_1
        }
    });
    finish(check_model("SmolLM2 shape Q4_1", &cfg, &w, 48));
}

/// Qwen2-style Q/K/V biases and Qwen3-style head norms (rotate-half lanes).
fn qwen_styles_equal_the_cpu_engine_bit_for_bit() {
    let mut fails = Vec::new();
    let mut q2 = small("qwen2");
    q2.qkv_bias = true;
    q2.tied_embeddings = false;
    let w = tether_llm::testing::random_weights(&q2, &|_, _| TensorType::Q8_0);
    fails.extend(check_model("qwen2 biases, Q8_0", &q2, &w, 24));
    let mut q3 = small("qwen3");
    q3.qk_norm = true;
    q3.head_dim = 128;
    let w = tether_llm::testing::random_weights(&q3, &|_, _| TensorType::Q4K);
    fails.extend(check_model(
        "qwen3 head norms, Q4_K, head_dim 128",
        &q3,
        &w,
        24,
    ));
    finish(fails);
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "every_type_equals_the_cpu_engine_bit_for_bit",
            every_type_equals_the_cpu_engine_bit_for_bit,
        )
        .test(
            "smollm2_shape_q4_1_equals_the_cpu_engine_bit_for_bit",
            smollm2_shape_q4_1_equals_the_cpu_engine_bit_for_bit,
        )
        .test(
            "qwen_styles_equal_the_cpu_engine_bit_for_bit",
            qwen_styles_equal_the_cpu_engine_bit_for_bit,
        )
        .run()
}
