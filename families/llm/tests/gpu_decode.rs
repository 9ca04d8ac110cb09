//! The GPU decoder on the real model (SmolLM2-135M-Instruct Q4_1): greedy tokens equal to
//! llama.cpp's (the golden of `golden/chat.json`, from llama-cpp-python) and to the CPU
//! engine's, the sampled-request refusal, the context limit. Reported ignored where there
//! is no GPU (`tether_testkit::GpuTests`). The load-time check (graph replay bit-identical
//! to the eager run on poisoned buffers) runs inside every `use_gpu`.

use tether_llm::generate::{GenerateError, GenerateParams, Generator, GeneratorOptions, Prompt};
use tether_llm::gpu::GpuError;
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn open(context: usize) -> Generator {
    Generator::open(
        tether_testkit::asset(MODEL),
        &GeneratorOptions {
            context: Some(context),
            ..GeneratorOptions::default()
        },
    )
    .expect("open the model")
}

fn golden_chats() -> Vec<(Vec<u32>, Vec<u32>)> {
    // Embedded: the test binary runs on the GPU host without the source tree.
    let text = include_str!("../golden/chat.json");
    let v: serde_json::Value = serde_json::from_str(text).expect("json");
    let ids = |x: &serde_json::Value| -> Vec<u32> {
        x.as_array()
            .expect("array")
            .iter()
            .map(|i| i.as_u64().expect("id") as u32)
            .collect()
    };
    v["chats"]
        .as_array()
        .expect("chats")
        .iter()
        .map(|c| (ids(&c["prompt_ids"]), ids(&c["generated_ids"])))
        .collect()
}

fn greedy_tokens_equal_llama_cpp_and_the_cpu_engine() {
    let chats = golden_chats();
    assert_eq!(chats.len(), 3);
    let mut g = open(512);
    let p = GenerateParams::greedy(32);
    let cpu: Vec<Vec<u32>> = chats
        .iter()
        .map(|(prompt, _)| {
            g.generate_text(Prompt::Tokens(prompt), &p)
                .expect("cpu")
                .1
                .tokens
        })
        .collect();
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let d = g.gpu().expect("attached");
    eprintln!(
        "{} ({}): {} launches per step; {}; memory {:?}",
        d.device_name(),
        d.kernel_image(),
        d.launches(),
        d.check_summary(),
        d.memory()
    );
    for (k, (prompt, golden)) in chats.iter().enumerate() {
        let gpu = g
            .generate_text(Prompt::Tokens(prompt), &p)
            .expect("gpu")
            .1
            .tokens;
        eprintln!("chat {k}: gpu {gpu:?}");
        assert_eq!(gpu, cpu[k], "chat {k}: GPU vs CPU engine");
        assert_eq!(
            &gpu[..golden.len()],
            &golden[..],
            "chat {k}: GPU vs llama.cpp"
        );
    }
}

fn sampled_requests_are_refused_on_the_gpu() {
    let mut g = open(64);
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let mut p = GenerateParams::greedy(4);
    p.sampler.temperature = 0.8;
    match g.generate(Prompt::Tokens(&[1, 2, 3]), &p) {
        Err(GenerateError::Gpu(GpuError::Sampling { what })) => {
            assert!(what.contains("0.8"), "{what}")
        }
        other => panic!("expected a sampling refusal, got {other:?}"),
    }
}

fn a_full_context_ends_the_request_with_length() {
    let mut g = open(16);
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let (_, f) = g
        .generate_text(Prompt::Tokens(&[1, 9690, 198, 2683]), &{
            let mut p = GenerateParams::greedy(100);
            p.ignore_eos = true;
            p
        })
        .expect("runs");
    // 4 prompt positions + 12 fed back = 16; the 13th token is produced by the last step.
    assert_eq!(f.tokens.len(), 13, "{:?}", f.finish_reason);
    assert_eq!(f.finish_reason.as_str(), "length");
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "greedy_tokens_equal_llama_cpp_and_the_cpu_engine",
            greedy_tokens_equal_llama_cpp_and_the_cpu_engine,
        )
        .test(
            "sampled_requests_are_refused_on_the_gpu",
            sampled_requests_are_refused_on_the_gpu,
        )
        .test(
            "a_full_context_ends_the_request_with_length",
            a_full_context_ends_the_request_with_length,
        )
        .run()
}
