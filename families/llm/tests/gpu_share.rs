//! Two generators on one model share one upload of the weights (issue 26): the second
//! generator's decoder (`Generator::use_gpu_sharing`, `GpuDecoder::new_sharing`) reads the
//! first one's weights and adds only its own cache, activations and graphs; both give the
//! tokens a generator alone gives, interleaved request by request, and the second keeps
//! working after the first is dropped. Sharing is refused, with the reason, for another
//! model's weights, a longer context than the upload's RoPE table, the same weights under
//! another RoPE rule, and a generator without a GPU decoder. Synthetic models (`src/testing.rs`); reported ignored where there is no GPU
//! (`tether_testkit::GpuTests`).

use tether_llm::config::LlmConfig;
use tether_llm::generate::{GenerateError, GenerateParams, Generator, GeneratorOptions, Prompt};
use tether_llm::gpu::GpuError;
use tether_llm::quant::TensorType;
use tether_llm::sample::SamplerParams;
use tether_llm::testing::{generator_of, tiny_config, typed_gguf};
use tether_runtime::cuda::{Context, SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

const CONTEXT: usize = 96;

fn generator(cfg: &LlmConfig, ty: TensorType, context: usize) -> Generator {
    generator_of(
        &typed_gguf(cfg, ty),
        &GeneratorOptions {
            context: Some(context),
            threads: Some(1),
            ..GeneratorOptions::default()
        },
    )
}

fn config() -> LlmConfig {
    LlmConfig {
        n_embd: 256,
        n_ff: 512,
        n_vocab: 4096,
        ..tiny_config()
    }
}

/// Weights of about 50 MB: far above the driver's allocation granularity, so that the device
/// memory each generator takes tells whether the weights were uploaded twice.
fn wide_config() -> LlmConfig {
    LlmConfig {
        n_layer: 4,
        n_embd: 1024,
        n_ff: 4096,
        n_vocab: 32000,
        ..tiny_config()
    }
}

fn prompt(len: usize, n_vocab: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(salt).wrapping_mul(2_654_435_761u32)) % n_vocab as u32)
        .collect()
}

fn params(temperature: f32) -> GenerateParams {
    GenerateParams {
        sampler: SamplerParams {
            temperature,
            top_k: 40,
            top_p: 0.95,
            seed: 11,
            ..SamplerParams::greedy()
        },
        max_tokens: 24,
        stop: Vec::new(),
        ignore_eos: true,
    }
}

fn run(g: &mut Generator, p: &[u32], temperature: f32) -> Vec<u32> {
    let (_, f) = g
        .generate_text(Prompt::Tokens(p), &params(temperature))
        .expect("generate");
    f.tokens
}

fn free_memory(ctx: &Context) -> usize {
    ctx.mem_info().expect("cuMemGetInfo").0
}

fn two_generators_share_the_weights_and_give_the_tokens_of_one_alone() {
    let cfg = wide_config();
    let n_vocab = cfg.n_vocab as usize;
    let (p1, p2) = (prompt(33, n_vocab, 0), prompt(21, n_vocab, 7));
    // Alone: the tokens to expect.
    let mut solo = generator(&cfg, TensorType::Q4_1, CONTEXT);
    solo.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let (want1, want2) = (run(&mut solo, &p1, 0.0), run(&mut solo, &p2, 0.8));
    drop(solo);

    let ctx = Context::new(0, SyncPolicy::Spin).expect("context");
    let free0 = free_memory(&ctx);
    let mut a = generator(&cfg, TensorType::Q4_1, CONTEXT);
    a.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let free1 = free_memory(&ctx);
    let mut b = generator(&cfg, TensorType::Q4_1, CONTEXT);
    b.use_gpu_sharing(&a, SyncPolicy::Spin)
        .expect("sharing decoder");
    let free2 = free_memory(&ctx);
    let (ma, mb) = (a.gpu().expect("a").memory(), b.gpu().expect("b").memory());
    assert!(!ma.shared_weights && mb.shared_weights);
    assert_eq!(ma.weights, mb.weights);
    let (added_a, added_b) = (free0 - free1, free1 - free2);
    println!(
        "weights {} B (uploaded once); device memory taken by the first generator {added_a} B, by the second {added_b} B",
        ma.weights
    );
    // The second took its cache and activations, not a second copy of the weights (the
    // driver rounds each allocation, hence half the weights as the margin).
    assert!(
        added_b + ma.weights / 2 <= added_a,
        "second generator took {added_b} B, the first {added_a} B, weights {} B",
        ma.weights
    );
    // Requests interleaved on the two generators: the tokens of one alone.
    for _ in 0..2 {
        assert_eq!(run(&mut a, &p1, 0.0), want1);
        assert_eq!(run(&mut b, &p2, 0.8), want2);
        assert_eq!(run(&mut b, &p1, 0.0), want1);
        assert_eq!(run(&mut a, &p2, 0.8), want2);
    }
    // The upload outlives the generator that made it.
    drop(a);
    assert_eq!(run(&mut b, &p1, 0.0), want1);
    println!(
        "interleaved greedy and sampled requests on both: the tokens of one generator alone; the second ran on after the first was dropped"
    );
}

fn shared_weights_error(r: Result<(), GenerateError>) -> String {
    match r {
        Err(GenerateError::Gpu(e @ GpuError::SharedWeights { .. })) => e.to_string(),
        other => panic!("expected GpuError::SharedWeights, got {other:?}"),
    }
}

fn sharing_is_refused_with_the_reason() {
    let cfg = config();
    // Half the model's training context, so that a longer one exists.
    let short = cfg.n_ctx_train as usize / 2;
    let mut a = generator(&cfg, TensorType::Q4_1, short);
    let mut other = generator(&cfg, TensorType::Q8_0, short);
    // No decoder to share yet.
    let e = shared_weights_error(other.use_gpu_sharing(&a, SyncPolicy::Spin));
    assert!(e.contains("no GPU decoder"), "{e}");
    a.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    // Another model of the same shape: its weights' CRC-32 differs.
    let e = shared_weights_error(other.use_gpu_sharing(&a, SyncPolicy::Spin));
    assert!(e.contains("CRC-32"), "{e}");
    // The same model with a longer context than the upload's RoPE table.
    let mut longer = generator(&cfg, TensorType::Q4_1, 2 * short);
    let e = shared_weights_error(longer.use_gpu_sharing(&a, SyncPolicy::Spin));
    assert!(e.contains("longer"), "{e}");
    println!("refused: {e}");
    // The same weights under another RoPE rule (twice the base frequency): same CRC-32, but
    // the uploaded table read back differs from the one this model needs.
    let rope = LlmConfig {
        rope_theta: 2.0 * cfg.rope_theta,
        ..cfg.clone()
    };
    let mut other_rope = generator(&rope, TensorType::Q4_1, short);
    let e = shared_weights_error(other_rope.use_gpu_sharing(&a, SyncPolicy::Spin));
    assert!(e.contains("angles differ"), "{e}");
    println!("refused: {e}");
    assert!(other.gpu().is_none() && longer.gpu().is_none() && other_rope.gpu().is_none());
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "two_generators_share_the_weights_and_give_the_tokens_of_one_alone",
            two_generators_share_the_weights_and_give_the_tokens_of_one_alone,
        )
        .test(
            "sharing_is_refused_with_the_reason",
            sharing_is_refused_with_the_reason,
        )
        .run()
}
