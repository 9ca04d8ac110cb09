//! The GPU decoder on the real model (SmolLM2-135M-Instruct Q4_1): greedy tokens equal to
//! llama.cpp's (the golden of `golden/chat.json`, from llama-cpp-python) and to the CPU
//! engine's, teacher-forced logits against the CPU engine's, sampled requests repeating with
//! their seed, the context limit. Reported ignored where there
//! is no GPU (`tether_testkit::GpuTests`). The load-time check (graph replay bit-identical
//! to the eager run on poisoned buffers) runs inside every `use_gpu`.

use tether_llm::generate::{GenerateParams, Generator, GeneratorOptions, Prompt};
use tether_llm::sample::SamplerParams;
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

#[global_allocator]
static GLOBAL: tether_testkit::ThreadAllocCounter = tether_testkit::ThreadAllocCounter;

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

/// Index of the first difference of two token lists (their common length when one is a
/// prefix of the other).
fn first_difference(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn greedy_tokens_equal_llama_cpp_and_the_cpu_engine() {
    let chats = golden_chats();
    assert_eq!(chats.len(), 4);
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
        "{} ({}): a step graph of {}; {}; memory {:?}",
        d.device_name(),
        d.kernel_image(),
        d.launches_summary(),
        d.check_summary(),
        d.memory()
    );
    let mut failures = Vec::new();
    for (k, (prompt, golden)) in chats.iter().enumerate() {
        let gpu = g
            .generate_text(Prompt::Tokens(prompt), &p)
            .expect("gpu")
            .1
            .tokens;
        let (vs_ref, vs_cpu, cpu_ref) = (
            first_difference(&gpu, golden),
            first_difference(&gpu, &cpu[k]),
            first_difference(&cpu[k], golden),
        );
        eprintln!(
            "chat {k}: GPU = llama.cpp for {vs_ref} of {} tokens, GPU = CPU engine for {vs_cpu} of {}, CPU engine = llama.cpp for {cpu_ref}\n  gpu {gpu:?}\n  cpu {:?}\n  ref {golden:?}",
            golden.len(),
            cpu[k].len(),
            cpu[k]
        );
        if gpu != *golden {
            failures.push(format!(
                "chat {k}: GPU differs from llama.cpp at token {vs_ref}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Stated tolerance of the GPU against the CPU engine and llama.cpp, teacher-forced: the
/// engines sum in different orders and each 8-bit activation block can round a value the
/// other way, so they disagree where the model is near a tie. Measured on the H200
/// (docs/evidence/llm-gpu.md): GPU vs llama.cpp top-1 286/296 (96.6 %), mean |diff| 0.174;
/// GPU vs CPU engine 244/249 (98.0 %), mean 0.220; the CPU engine itself is at 291/296,
/// mean 0.16 against llama.cpp (known gap of issue 25). Held here: the bar, top-1 of
/// at least 99 %, and mean below 0.3; both tests are known gaps (ignored unless asked for)
/// until the GPU meets it. The bar is not lowered to what was measured.
const MIN_TOP1_PERCENT: usize = 99;
const MAX_MEAN_DIFF: f64 = 0.3;

/// Teacher-forced logits of the GPU against the CPU engine's over each golden chat (prompt
/// then llama.cpp's answer), within the stated tolerance.
fn teacher_forced_logits_agree_with_the_cpu_engine() {
    use tether_llm::forward::{LogitsFor, State, StateOptions};
    let mut g = open(512);
    let n_vocab = g.config().n_vocab as usize;
    let seqs: Vec<Vec<u32>> = golden_chats()
        .into_iter()
        .map(|(mut p, a)| {
            p.extend(a);
            p
        })
        .collect();
    let cpu: Vec<Vec<f32>> = {
        let (model, _) = g.model_and_state();
        seqs.iter()
            .map(|s| {
                // One token per forward pass, as the GPU's teacher forcing runs them (each
                // token alone: the attention's f16 products in their one-token order).
                let mut st = State::new(
                    model,
                    StateOptions {
                        context: 512,
                        max_batch: 1,
                        logit_rows: 1,
                        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
                    },
                )
                .expect("state");
                let mut rows = Vec::with_capacity(s.len() * n_vocab);
                for &t in s {
                    model
                        .forward(&mut st, &[t], LogitsFor::Last)
                        .expect("forward");
                    rows.extend_from_slice(&st.logits()[..n_vocab]);
                }
                rows
            })
            .collect()
    };
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let d = g.gpu_mut().expect("attached");
    let (mut rows, mut agree, mut max_diff, mut sum_diff) = (0usize, 0usize, 0f32, 0f64);
    let mut differ = 0usize;
    for (s, c) in seqs.iter().zip(&cpu) {
        let mut out = vec![0f32; s.len() * n_vocab];
        d.teacher_forced(s, &mut out).expect("teacher forcing");
        for (a, b) in out.chunks_exact(n_vocab).zip(c.chunks_exact(n_vocab)) {
            let am = |v: &[f32]| {
                v.iter()
                    .enumerate()
                    .fold(
                        (0, f32::NEG_INFINITY),
                        |m, (i, &x)| if x > m.1 { (i, x) } else { m },
                    )
                    .0
            };
            rows += 1;
            agree += usize::from(am(a) == am(b));
            for (x, y) in a.iter().zip(b) {
                let e = (x - y).abs();
                max_diff = max_diff.max(e);
                sum_diff += f64::from(e);
                differ += usize::from(x.to_bits() != y.to_bits());
            }
        }
    }
    let mean = sum_diff / (rows * n_vocab) as f64;
    eprintln!(
        "teacher forcing over {rows} positions, one token per step on both: top-1 agreement {agree}/{rows} ({:.2} %), {differ} of {} logits differ bit-wise, max |GPU - CPU| logit {max_diff}, mean {mean:.5}",
        100.0 * agree as f64 / rows as f64,
        rows * n_vocab
    );
    // The GPU computes the CPU engine's operations in its order (tests/gpu_numerics.rs).
    assert_eq!(
        differ, 0,
        "{differ} logits differ bit-wise from the CPU engine's"
    );
    assert!(
        agree * 100 >= rows * MIN_TOP1_PERCENT,
        "top-1 agreement {agree}/{rows}"
    );
    assert!(
        mean < MAX_MEAN_DIFF && max_diff.is_finite(),
        "mean {mean}, max {max_diff}"
    );
}

/// Teacher-forced logits of the GPU against llama.cpp's (`golden/logits.json`: 296
/// positions of a text, top-10 and 64 sampled logits each, computed as one batch), within
/// the stated tolerance; each position through a prefill of its prefix.
fn teacher_forced_logits_agree_with_llama_cpp() {
    let g: serde_json::Value =
        serde_json::from_str(include_str!("../golden/logits.json")).expect("json");
    let ids = |x: &serde_json::Value| -> Vec<u32> {
        x.as_array()
            .expect("array")
            .iter()
            .map(|i| i.as_u64().expect("id") as u32)
            .collect()
    };
    let floats = |x: &serde_json::Value| -> Vec<f32> {
        x.as_array()
            .expect("array")
            .iter()
            .map(|v| v.as_f64().expect("f") as f32)
            .collect()
    };
    let tokens = ids(&g["ids"]);
    let sample = ids(&g["sample_ids"]);
    let mut generator = open(512);
    let nv = generator.config().n_vocab as usize;
    generator.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let d = generator.gpu_mut().expect("attached");
    // The goldens ran the 296 tokens as one batch, so each position's logits come from a
    // prefill of the prefix ending there (the prefill graph computes a prompt in the CPU
    // engine's batched order, the last token's logits), not from one decode step per token.
    let mut logits = vec![0f32; tokens.len() * nv];
    for (t, row) in logits.chunks_exact_mut(nv).enumerate() {
        d.prefill(&tokens[..=t], &SamplerParams::greedy())
            .expect("prefill of a prefix");
        d.logits(row).expect("logits");
    }
    let positions = g["positions"].as_array().expect("positions");
    let (mut agree, mut max_diff, mut sum_diff, mut n_diff) = (0usize, 0f32, 0f64, 0usize);
    for (p, pos) in positions.iter().enumerate() {
        let row = &logits[p * nv..(p + 1) * nv];
        let top = row
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |m, (i, &x)| if x > m.1 { (i, x) } else { m },
            )
            .0;
        agree += usize::from(top as u64 == pos["top1"].as_u64().expect("top1"));
        let pairs = ids(&pos["top_ids"])
            .into_iter()
            .zip(floats(&pos["top_logits"]))
            .chain(sample.iter().copied().zip(floats(&pos["sample_logits"])));
        for (id, want) in pairs {
            let e = (row[id as usize] - want).abs();
            max_diff = max_diff.max(e);
            sum_diff += f64::from(e);
            n_diff += 1;
        }
    }
    let n = positions.len();
    let mean = sum_diff / n_diff as f64;
    eprintln!(
        "GPU vs llama.cpp, teacher forcing over {n} positions: top-1 agreement {agree}/{n} ({:.2} %), |logit difference| max {max_diff:.4}, mean {mean:.5} over {n_diff} logits",
        100.0 * agree as f64 / n as f64
    );
    assert!(
        agree * 100 >= n * MIN_TOP1_PERCENT,
        "top-1 agreement {agree}/{n}"
    );
    assert!(mean < MAX_MEAN_DIFF, "mean {mean}, max {max_diff}");
}

/// A sampled request (llama.cpp's defaults and a repetition penalty) runs on the device:
/// the same seed gives the same tokens twice, another seed other tokens.
fn sampled_requests_run_on_the_gpu_and_repeat_with_the_seed() {
    let (prompt, _) = golden_chats().swap_remove(0);
    let mut g = open(512);
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let mut p = GenerateParams::greedy(48);
    p.sampler = SamplerParams {
        repeat_penalty: 1.1,
        seed: 42,
        ..SamplerParams::default()
    };
    p.ignore_eos = true;
    let mut run = |seed: u64| {
        p.sampler.seed = seed;
        let (text, f) = g
            .generate_text(Prompt::Tokens(&prompt), &p)
            .expect("sampled");
        eprintln!("seed {seed}: {text:?}");
        f.tokens
    };
    let (a, b, c) = (run(42), run(42), run(43));
    assert_eq!(a.len(), 48);
    assert_eq!(a, b, "same seed");
    assert_ne!(a, c, "seeds 42 and 43");
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

/// 100,000 generated tokens in 25 requests of 4,000 (the cache reset between them, positions
/// up to 4,034): 0 heap allocations per token on this thread (counted from each request's
/// fifth piece to its end: `generate` itself allocates per request), and the device's free
/// memory the same after the last request as after the load.
fn decode_is_allocation_free_and_device_memory_flat() {
    const REQUESTS: usize = 25;
    const TOKENS: usize = 4000;
    let (prompt, _) = golden_chats().swap_remove(0);
    let mut g = open(TOKENS + prompt.len() + 1);
    g.use_gpu(0, SyncPolicy::Spin).expect("gpu decoder");
    let ctx = tether_runtime::cuda::Context::new(0, SyncPolicy::Spin).expect("context");
    let (free_before, total) = ctx.mem_info().expect("mem_info");
    let mut p = GenerateParams::greedy(TOKENS);
    p.ignore_eos = true;
    let (mut allocs, mut counted, mut generated) = (0u64, 0usize, 0usize);
    let t0 = std::time::Instant::now();
    for _ in 0..REQUESTS {
        let mut run = g.generate(Prompt::Tokens(&prompt), &p).expect("start");
        for _ in 0..4 {
            run.next_piece().expect("step").expect("piece");
        }
        let (n, a) = tether_testkit::count_allocs(|| {
            let mut n = 0usize;
            while let Some(piece) = run.next_piece().expect("step") {
                std::hint::black_box(piece.text);
                n += 1;
            }
            n
        });
        allocs += a;
        counted += n;
        generated += run.finish().tokens.len();
    }
    let secs = t0.elapsed().as_secs_f64();
    let (free_after, _) = ctx.mem_info().expect("mem_info");
    eprintln!(
        "{generated} tokens in {REQUESTS} requests, {secs:.1} s ({:.0} tok/s incl. prefill): {allocs} allocations over {counted} counted pieces; device free memory {free_before} -> {free_after} of {total} bytes",
        generated as f64 / secs
    );
    assert_eq!(generated, REQUESTS * TOKENS);
    assert_eq!(allocs, 0, "{allocs} allocations over {counted} pieces");
    assert_eq!(free_before, free_after, "device memory changed");
}

fn main() {
    GpuTests::new(skip_reason())
        .test(
            "greedy_tokens_equal_llama_cpp_and_the_cpu_engine",
            greedy_tokens_equal_llama_cpp_and_the_cpu_engine,
        )
        .test(
            "teacher_forced_logits_agree_with_llama_cpp",
            teacher_forced_logits_agree_with_llama_cpp,
        )
        .test(
            "teacher_forced_logits_agree_with_the_cpu_engine",
            teacher_forced_logits_agree_with_the_cpu_engine,
        )
        .test(
            "decode_is_allocation_free_and_device_memory_flat",
            decode_is_allocation_free_and_device_memory_flat,
        )
        .test(
            "sampled_requests_run_on_the_gpu_and_repeat_with_the_seed",
            sampled_requests_run_on_the_gpu_and_repeat_with_the_seed,
        )
        .test(
            "a_full_context_ends_the_request_with_length",
            a_full_context_ends_the_request_with_length,
        )
        .run()
}
