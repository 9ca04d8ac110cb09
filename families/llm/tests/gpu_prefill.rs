//! The prefill graph (issue 26, `src/gpu/prefill.rs`): after a prefill through the chunk
//! graph, the f16 cache of every layer, the first token's logits, the first token and the
//! tokens decoded after it equal those of the token-by-token prefill (the decode graph
//! replayed once per prompt token) **bit for bit**: the chunk kernels do each token's
//! arithmetic exactly as the decode kernels (no tolerance). The generators here cut prompts
//! into forward chunks of one token (`max_batch: 1`), so the prefill graph computes the
//! attention in the one-token order as the decode step does (with the default 512 it follows
//! the CPU engine's multi-token order instead: `tests/gpu_numerics.rs` checks that against
//! the CPU engine). Each side runs on poisoned device memory (0xFF everywhere), so a position
//! the chunk graph failed to write cannot pass.
//!
//! Models (all synthetic, `src/testing.rs`): the tiny Llama (f32, chunks of 16 and 128);
//! width-256 models with every matrix in each weight type the kernels read (Q8_0, Q4_0,
//! Q4_1, Q4_K, Q6_K, F16, BF16), Qwen2-style biases and Qwen3-style head norms; and one of
//! SmolLM2-135M's shape (30 layers, 576 wide, 9 heads / 3 KV heads of 64, FFN 1536,
//! vocabulary 49,152) in its Q4_1 blocks, chunks of 128 and the product's default prompt
//! chunking, where the time to first token is measured (pp128, pp512, pp2048 against the
//! token-by-token prefill). Prompt lengths
//! 1, C - 1, C, C + 1 and 3C + 5 for chunk size C. Reported ignored where there is no GPU
//! (`tether_testkit::GpuTests`).

use std::time::Instant;

use tether_llm::config::LlmConfig;
use tether_llm::generate::{Generator, GeneratorOptions};
use tether_llm::quant::TensorType;
use tether_llm::sample::SamplerParams;
use tether_llm::testing::{generator_of, tiny_config, tiny_gguf, typed_gguf};
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

/// A generator with a prefill graph of `chunk` tokens; `one_token_batches`: the CPU engine's
/// prompt chunks of one token (`max_batch: 1`), else the default.
fn generator(
    cfg: &LlmConfig,
    ty: Option<TensorType>,
    context: usize,
    chunk: usize,
    one_token_batches: bool,
) -> Generator {
    let gguf = match ty {
        None => tiny_gguf(cfg),
        Some(t) => typed_gguf(cfg, t),
    };
    let mut g = generator_of(
        &gguf,
        &GeneratorOptions {
            context: Some(context),
            threads: Some(2),
            max_batch: if one_token_batches {
                1
            } else {
                GeneratorOptions::default().max_batch
            },
            ..GeneratorOptions::default()
        },
    );
    g.use_gpu_chunked(0, SyncPolicy::Spin, chunk)
        .expect("gpu decoder with a prefill graph");
    g
}

fn prompt(len: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

/// Tokens (first + 3 decoded), logits after the prefill, and the cache of every layer.
type Run = (Vec<u32>, Vec<f32>, Vec<Vec<u16>>);

fn run(g: &mut Generator, p: &[u32], chunked: bool) -> Run {
    let cfg = g.config().clone();
    let (n_vocab, n_layer, kv_dim) = (
        cfg.n_vocab as usize,
        cfg.n_layer as usize,
        cfg.kv_dim() as usize,
    );
    let d = g.gpu_mut().expect("attached");
    d.poison().expect("poison");
    let greedy = SamplerParams::greedy();
    let first = if chunked {
        d.prefill(p, &greedy)
    } else {
        d.prefill_token_by_token(p, &greedy)
    }
    .expect("prefill");
    let mut logits = vec![0f32; n_vocab];
    d.logits(&mut logits).expect("logits");
    let mut cache = Vec::new();
    for l in 0..n_layer {
        let mut k = vec![0u16; p.len() * kv_dim];
        let mut v = vec![0u16; p.len() * kv_dim];
        d.cache_rows(l, p.len(), &mut k, &mut v).expect("cache");
        k.extend_from_slice(&v);
        cache.push(k);
    }
    let mut tokens = vec![first];
    for _ in 0..3 {
        if d.position() < d.context() {
            tokens.push(d.step().expect("step"));
        }
    }
    (tokens, logits, cache)
}

fn check_lengths(g: &mut Generator, what: &str, lengths: &[usize]) {
    let n_vocab = g.config().n_vocab as usize;
    for &len in lengths {
        let p = prompt(len, n_vocab, len as u64 + 11);
        let (t_ref, l_ref, c_ref) = run(g, &p, false);
        let (t, l, c) = run(g, &p, true);
        let bad = (0..n_vocab)
            .filter(|&i| l[i].to_bits() != l_ref[i].to_bits())
            .count();
        let max = (0..n_vocab)
            .map(|i| (l[i] - l_ref[i]).abs())
            .fold(0f32, f32::max);
        assert_eq!(
            bad, 0,
            "{what}, prompt of {len}: {bad} of {n_vocab} logits differ from the token-by-token prefill (largest difference {max})"
        );
        for (layer, (a, b)) in c.iter().zip(&c_ref).enumerate() {
            if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
                let kv = a.len() / 2 / len;
                panic!(
                    "{what}, prompt of {len}: layer {layer} cache ({}) differs at position {}, lane {}: {:#06x}, token by token {:#06x}",
                    if i < a.len() / 2 { "K" } else { "V" },
                    (i % (a.len() / 2)) / kv,
                    i % kv,
                    a[i],
                    b[i]
                );
            }
        }
        assert_eq!(
            t, t_ref,
            "{what}, prompt of {len}: first and decoded tokens"
        );
        assert!(
            l.iter().all(|v| v.is_finite()),
            "{what}, prompt of {len}: non-finite logits"
        );
    }
    eprintln!("{what}: prompts of {lengths:?} tokens: cache, logits and tokens bit-identical");
}

fn lengths(c: usize) -> Vec<usize> {
    vec![1, c - 1, c, c + 1, 3 * c + 5]
}

fn big_context(mut cfg: LlmConfig) -> LlmConfig {
    cfg.n_ctx_train = 4096;
    cfg
}

fn prefill_graph_equals_token_by_token_on_the_tiny_model() {
    let cfg = big_context(tiny_config());
    for c in [16, 128] {
        let mut g = generator(&cfg, None, 3 * c + 16, c, true);
        let d = g.gpu().expect("attached");
        assert_eq!(d.prefill_chunk(), c);
        eprintln!("{}", d.check_summary());
        check_lengths(&mut g, &format!("tiny f32, chunks of {c}"), &lengths(c));
    }
}

fn width_256(arch: &str) -> LlmConfig {
    let mut cfg = big_context(tiny_config());
    cfg.architecture = arch.into();
    cfg.n_embd = 256;
    cfg.n_head = 4;
    cfg.n_head_kv = 2;
    cfg.head_dim = 64;
    cfg.n_ff = 512;
    cfg.n_vocab = 300;
    cfg
}

fn prefill_graph_equals_token_by_token_on_every_weight_type() {
    let cfg = width_256("llama");
    for ty in [
        TensorType::Q8_0,
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q4K,
        TensorType::Q6K,
        TensorType::F16,
        TensorType::Bf16,
    ] {
        let mut g = generator(&cfg, Some(ty), 64, 16, true);
        check_lengths(&mut g, &format!("width 256, {ty:?}"), &lengths(16));
    }
    let mut qwen2 = width_256("qwen2");
    qwen2.qkv_bias = true;
    qwen2.tied_embeddings = false;
    let mut g = generator(&qwen2, Some(TensorType::Q8_0), 64, 16, true);
    check_lengths(&mut g, "width 256, Q8_0, Q/K/V biases", &lengths(16));
    let mut qwen3 = width_256("qwen3");
    qwen3.qk_norm = true;
    let mut g = generator(&qwen3, Some(TensorType::Q4K), 64, 16, true);
    check_lengths(&mut g, "width 256, Q4_K, Q/K head norms", &lengths(16));
}

fn smollm2_shape() -> LlmConfig {
    big_context(tether_llm::testing::smollm2_config(30))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn prefill_graph_on_a_model_of_smollm2_shape() {
    let cfg = smollm2_shape();
    // Chunk size: 128 (the default), or another for a measurement.
    let c: usize = std::env::var("TETHER_LLM_PREFILL_TEST_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut g = generator(&cfg, Some(TensorType::Q4_1), 2048 + 64, c, false);
    if std::env::var_os("TETHER_LLM_PREFILL_LOAD_ONLY").is_some() {
        // For a profiler: the load-time check's eager chunk run alone.
        return;
    }
    {
        let d = g.gpu().expect("attached");
        eprintln!(
            "{} on {} ({}); decode step {} launches, prefill chunk {} launches, chunk buffers {:.1} MiB",
            d.check_summary(),
            d.device_name(),
            d.kernel_image(),
            d.launches(),
            d.prefill_launches(),
            d.prefill_memory() as f64 / (1 << 20) as f64
        );
    }
    let d = g.gpu_mut().expect("attached");
    let greedy = SamplerParams::greedy();
    for len in [128usize, 512, 2048] {
        let p = prompt(len, 49152, 5);
        let mut graph_ms = Vec::new();
        for _ in 0..7 {
            let t0 = Instant::now();
            d.prefill(&p, &greedy).expect("prefill");
            graph_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let by_token = if len <= 512 {
            let t0 = Instant::now();
            d.prefill_token_by_token(&p, &greedy).expect("prefill");
            format!("{:.1} ms", t0.elapsed().as_secs_f64() * 1e3)
        } else {
            "not timed".into()
        };
        let m = median(graph_ms.clone());
        eprintln!(
            "pp{len}: time to first token {m:.2} ms through the prefill graph (median of 7, min {:.2}; {:.0} tok/s), token by token {by_token}",
            graph_ms.iter().copied().fold(f64::INFINITY, f64::min),
            len as f64 / m * 1e3
        );
    }
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "prefill_graph_equals_token_by_token_on_the_tiny_model",
            prefill_graph_equals_token_by_token_on_the_tiny_model,
        )
        .test(
            "prefill_graph_equals_token_by_token_on_every_weight_type",
            prefill_graph_equals_token_by_token_on_every_weight_type,
        )
        .test(
            "prefill_graph_on_a_model_of_smollm2_shape",
            prefill_graph_on_a_model_of_smollm2_shape,
        )
        .run()
}
