//! Steps launched ahead (issue 26, "streaming without stalls"): `GpuDecoder::step_ahead`
//! launches step n + 1 before the host takes token n, so the GPU runs it while the host
//! detokenises and streams. The tokens must be those of one step at a time, greedy and
//! sampled, with a request abandoned while a step is in flight, and at the end of the
//! context; the generator (which steps ahead on the GPU) must stream the same tokens and
//! report the host time between steps. Synthetic models (`src/testing.rs`); reported ignored
//! where there is no GPU (`tether_testkit::GpuTests`).

use tether_llm::cache::ContextFull;
use tether_llm::config::LlmConfig;
use tether_llm::generate::{GenerateParams, Generator, GeneratorOptions, Prompt};
use tether_llm::gpu::{GpuDecoder, GpuError};
use tether_llm::quant::TensorType;
use tether_llm::sample::SamplerParams;
use tether_llm::testing::{generator_of, tiny_config, typed_gguf};
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

const CONTEXT: usize = 96;

fn generator(cfg: &LlmConfig, sync: SyncPolicy) -> Generator {
    let mut g = generator_of(
        &typed_gguf(cfg, TensorType::Q4_1),
        &GeneratorOptions {
            context: Some(CONTEXT),
            threads: Some(1),
            ..GeneratorOptions::default()
        },
    );
    g.use_gpu_chunked(0, sync, 16).expect("gpu decoder");
    g
}

fn config() -> LlmConfig {
    LlmConfig {
        n_embd: 256,
        n_ff: 512,
        n_vocab: 4096,
        ..tiny_config()
    }
}

fn sampled() -> SamplerParams {
    SamplerParams {
        temperature: 0.9,
        top_k: 50,
        top_p: 0.95,
        min_p: 0.02,
        repeat_penalty: 1.1,
        repeat_last_n: 32,
        seed: 7,
        request: 0,
    }
}

fn prompt(len: usize, n_vocab: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 2_654_435_761u32) % n_vocab as u32)
        .collect()
}

/// `n` tokens after `p`: one step at a time, or each next step launched ahead.
fn tokens(
    d: &mut GpuDecoder,
    p: &[u32],
    params: &SamplerParams,
    n: usize,
    ahead: bool,
) -> Vec<u32> {
    let mut out = vec![d.prefill(p, params).expect("prefill")];
    if ahead {
        d.launch_ahead().expect("launch ahead");
    }
    for i in 1..n {
        let t = d.step_ahead(ahead && i + 1 < n).expect("step");
        out.push(t);
        assert_eq!(d.position(), p.len() + i, "position after token {i}");
    }
    out
}

fn stepping_ahead_gives_the_tokens_of_one_step_at_a_time() {
    for sync in [SyncPolicy::Spin, SyncPolicy::Blocking] {
        let mut g = generator(&config(), sync);
        let n_vocab = g.config().n_vocab as usize;
        let d = g.gpu_mut().expect("attached");
        let p = prompt(21, n_vocab);
        for params in [SamplerParams::greedy(), sampled()] {
            let one = tokens(d, &p, &params, 48, false);
            let ahead = tokens(d, &p, &params, 48, true);
            assert_eq!(ahead, one, "{sync:?}, {params:?}");
            // A request abandoned with a step in flight, then the same request again.
            d.prefill(&p, &params).expect("prefill");
            d.launch_ahead().expect("launch ahead");
            d.step_ahead(true).expect("step");
            assert_eq!(
                tokens(d, &p, &params, 48, true),
                one,
                "after an abandoned request"
            );
            println!(
                "{sync:?}, temperature {}: 48 tokens equal",
                params.temperature
            );
        }
    }
}

fn stepping_ahead_stops_at_the_end_of_the_context() {
    let mut g = generator(&config(), SyncPolicy::Spin);
    let n_vocab = g.config().n_vocab as usize;
    let d = g.gpu_mut().expect("attached");
    let p = prompt(CONTEXT - 6, n_vocab);
    let params = SamplerParams::greedy();
    let one = tokens(d, &p, &params, 7, false);
    let mut ahead = vec![d.prefill(&p, &params).expect("prefill")];
    d.launch_ahead().expect("launch ahead");
    while d.position() < d.context() {
        ahead.push(d.step_ahead(true).expect("step"));
    }
    assert_eq!(ahead, one);
    match d.step_ahead(true) {
        Err(GpuError::ContextFull(ContextFull {
            needed, context, ..
        })) => {
            assert_eq!((needed, context), (CONTEXT + 1, CONTEXT));
        }
        other => panic!("a step past the context: {other:?}"),
    }
}

fn the_generator_streams_the_same_tokens_and_reports_host_time() {
    let mut g = generator(&config(), SyncPolicy::Spin);
    let n_vocab = g.config().n_vocab as usize;
    let p = prompt(33, n_vocab);
    for sampler in [SamplerParams::greedy(), sampled()] {
        let expected = {
            let d = g.gpu_mut().expect("attached");
            tokens(d, &p, &sampler, 40, false)
        };
        for max_tokens in [1, 2, 40] {
            let params = GenerateParams {
                sampler,
                max_tokens,
                stop: Vec::new(),
                ignore_eos: true,
            };
            let (_, f) = g
                .generate_text(Prompt::Tokens(&p), &params)
                .expect("generate");
            assert_eq!(f.tokens, expected[..max_tokens], "max_tokens {max_tokens}");
            let t = &f.timings;
            assert_eq!(t.host_between_steps, max_tokens.saturating_sub(2));
            if max_tokens == 40 {
                let us = t.host_us_per_token().expect("host time on the GPU");
                println!(
                    "temperature {}: 40 tokens equal; host time between steps {us:.2} us per token",
                    sampler.temperature
                );
            }
        }
    }
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "stepping_ahead_gives_the_tokens_of_one_step_at_a_time",
            stepping_ahead_gives_the_tokens_of_one_step_at_a_time,
        )
        .test(
            "stepping_ahead_stops_at_the_end_of_the_context",
            stepping_ahead_stops_at_the_end_of_the_context,
        )
        .test(
            "the_generator_streams_the_same_tokens_and_reports_host_time",
            the_generator_streams_the_same_tokens_and_reports_host_time,
        )
        .run()
}
