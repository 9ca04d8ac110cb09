//! The fused decode step (`lower_fused`: 5 launches per Llama-style layer) against the
//! unfused one (`lower`: 11, the kernels and launch list of the first GPU version) on the
//! GPU: the same logits bit for bit, teacher-forced, and the same greedy and sampled tokens,
//! on synthetic models of SmolLM2-135M's shape (width 576, 9 query heads and 3 KV heads of
//! 64, FFN 1536, vocabulary 49,152; every weight type the kernels read, Q/K/V biases) and,
//! with head norms, Qwen3's; then the speeds of both (fused with and without dependent
//! launches) on the 30-layer shape, reported (a benchmark's number, not asserted). With
//! `TETHER_FUSE_REAL=1` and the SmolLM2-135M-Instruct Q4_1 GGUF among the test assets, also
//! the real model's teacher-forced logits over the golden chats. Every decoder that runs the
//! layer kernel runs `layers_grid` instead (the default: all its layers in one launch; the
//! launch counts asserted accordingly), so the layer kernel's tests check that kernel
//! against the fused step; with `TETHER_LLM_GRID=0` they check the layer kernel's launches
//! one a layer. `TETHER_FUSE_AT` (positions) and `TETHER_FUSE_VARIANTS`
//! (indices of the fused variants) narrow the speed test. Reported ignored where there is no
//! GPU (`tether_testkit::GpuTests`).

use tether_llm::config::LlmConfig;
use tether_llm::forward::{Hparams, Model, ModelParts};
use tether_llm::gpu::{GpuDecoder, GpuOptions};
use tether_llm::kernels::Isa;
use tether_llm::quant::TensorType;
use tether_llm::sample::SamplerParams;
use tether_llm::tensor::Weights;
use tether_runtime::cuda::{SyncPolicy, skip_reason};
use tether_testkit::GpuTests;

const REAL_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// SmolLM2-135M's shape with `n_layer` blocks.
fn smollm2_shape(n_layer: u32, qkv_bias: bool) -> LlmConfig {
    LlmConfig {
        qkv_bias,
        ..tether_llm::testing::smollm2_config(n_layer)
    }
}

/// Layer `l`'s matrices cycle through the types (down, whose 1536 columns allow the
/// 256-value K-quants, through its own list): every kernel path of the products.
fn mixed_types(name: &str, cols: usize) -> TensorType {
    let layer: usize = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if name == "token_embd.weight" {
        TensorType::Q8_0
    } else if cols.is_multiple_of(256) && name.contains("ffn_down") {
        [
            TensorType::Q4_1,
            TensorType::Q4K,
            TensorType::Q6K,
            TensorType::F16,
        ][layer % 4]
    } else {
        [
            TensorType::Q4_1,
            TensorType::Q4_0,
            TensorType::Q8_0,
            TensorType::Bf16,
        ][layer % 4]
    }
}

fn model<'w>(cfg: &LlmConfig, weights: &'w Weights) -> Model<'w> {
    let tensors = weights.model(cfg).expect("tensors");
    let hp = Hparams::from_config(cfg, None).expect("hparams");
    let parts = ModelParts::from_tensors(&tensors).expect("parts");
    Model::new(hp, parts, Isa::Scalar).expect("model")
}

/// The decoder of `model`: unfused, or fused with or without dependent launches.
fn decoder_with(
    model: &Model<'_>,
    context: usize,
    fused: bool,
    dependent_launch: bool,
) -> GpuDecoder {
    decoder_opts(model, context, fused, dependent_launch, NEVER, false)
}

/// `GpuOptions::layer_kernel_below`: never, always.
const NEVER: usize = 0;
const ALWAYS: usize = usize::MAX;

/// [`decoder_with`], with the layer kernel (each layer of 8-bit block weights one cluster
/// launch, on compute capability 9.0 and later) at the positions below `layer_kernel_below`,
/// and with `layer_tail` the same layers' output projection and FFN as one cluster launch
/// where the fused step runs (`GpuOptions::layer_tail`).
fn decoder_opts(
    model: &Model<'_>,
    context: usize,
    fused: bool,
    dependent_launch: bool,
    layer_kernel_below: usize,
    layer_tail: bool,
) -> GpuDecoder {
    GpuDecoder::new(
        model,
        GpuOptions {
            ordinal: 0,
            context,
            sync: SyncPolicy::Spin,
            fused,
            // Decode only: teacher forcing runs the decode step per position.
            prefill_chunk: 0,
            dependent_launch,
            layer_kernel_below,
            // The layer kernel's step as one `layers_grid` launch (TETHER_LLM_GRID=0: not).
            grid_layers: tether_llm::gpu::grid_layers(),
            layer_tail,
            prompt_batch: 512,
        },
    )
    .expect("gpu decoder")
}

/// The decoder of `model` as `Generator::use_gpu` makes it (dependent launches when fused).
fn decoder(model: &Model<'_>, context: usize, fused: bool) -> GpuDecoder {
    decoder_with(model, context, fused, fused)
}

/// Pseudo-random token ids below `n_vocab`.
fn tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    tether_llm::testing::values(n, seed)
        .into_iter()
        .map(|v| (((v + 1.0) * 0.5 * n_vocab as f32) as usize).min(n_vocab - 1) as u32)
        .collect()
}

/// Teacher-forced logits of both decoders over `seq`: equal bit for bit.
fn same_logits(unfused: &mut GpuDecoder, fused: &mut GpuDecoder, seq: &[u32], n_vocab: usize) {
    let mut a = vec![0f32; seq.len() * n_vocab];
    let mut b = vec![f32::NAN; seq.len() * n_vocab];
    unfused.teacher_forced(seq, &mut a).expect("unfused");
    fused.teacher_forced(seq, &mut b).expect("fused");
    let differ = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    let first = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x.to_bits() != y.to_bits());
    let finite = a.iter().all(|x| x.is_finite());
    eprintln!(
        "teacher forcing {} positions x {n_vocab} logits: {differ} differ bit-wise (first at {first:?}); unfused {} launches, fused {}; logits finite: {finite}",
        seq.len(),
        unfused.launches(),
        fused.launches()
    );
    if let Some(i) = first {
        panic!(
            "position {}, id {}: unfused {} fused {}",
            i / n_vocab,
            i % n_vocab,
            a[i],
            b[i]
        );
    }
    assert!(finite, "non-finite logits");
}

/// Greedy and sampled requests: the same tokens from both decoders.
fn same_tokens(unfused: &mut GpuDecoder, fused: &mut GpuDecoder, prompt: &[u32], steps: usize) {
    let sampled = SamplerParams {
        repeat_penalty: 1.1,
        seed: 7,
        ..SamplerParams::default()
    };
    for params in [SamplerParams::greedy(), sampled] {
        let run = |d: &mut GpuDecoder| {
            let mut out = vec![d.prefill(prompt, &params).expect("prefill")];
            for _ in 0..steps {
                out.push(d.step().expect("step"));
            }
            out
        };
        let (a, b) = (run(unfused), run(fused));
        eprintln!(
            "temperature {}: {} tokens, equal: {}; fused {:?}...",
            params.temperature,
            a.len(),
            a == b,
            &b[..8]
        );
        assert_eq!(a, b, "temperature {}", params.temperature);
    }
}

fn fused_step_equals_the_unfused_step_bit_for_bit() {
    let cfg = smollm2_shape(4, true);
    let w = tether_llm::testing::random_weights(&cfg, &mixed_types);
    let m = model(&cfg, &w);
    let (mut u, mut f) = (decoder(&m, 512, false), decoder(&m, 512, true));
    assert_eq!(u.launches(), 1 + 11 * 4 + 3);
    assert_eq!(f.launches(), 1 + 5 * 4 + 2);
    eprintln!("fused: {}", f.check_summary());
    let n_vocab = cfg.n_vocab as usize;
    same_logits(&mut u, &mut f, &tokens(300, n_vocab, 11), n_vocab);
    same_tokens(&mut u, &mut f, &tokens(9, n_vocab, 12), 120);
}

fn fused_step_with_head_norms_equals_the_unfused_step() {
    let mut cfg = smollm2_shape(3, false);
    cfg.qk_norm = true;
    cfg.n_vocab = 4096;
    let w = tether_llm::testing::random_weights(&cfg, &mixed_types);
    let m = model(&cfg, &w);
    let (mut u, mut f) = (decoder(&m, 256, false), decoder(&m, 256, true));
    assert_eq!(u.launches(), 1 + 13 * 3 + 3);
    assert_eq!(f.launches(), 1 + 9 * 3 + 2);
    same_logits(&mut u, &mut f, &tokens(200, 4096, 21), 4096);
}

/// Layers 0-2 of 8-bit block weights (Q4_1; Q4_0; Q8_0 Q/K/V with Q4_0 output and FFN, as
/// a slice of all-Q8_0 rows would not fit a block's shared memory at this shape), layer 3
/// BF16 with an F16 down.
fn block_types(name: &str, _cols: usize) -> TensorType {
    let layer: usize = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if name == "token_embd.weight" {
        TensorType::Q8_0
    } else {
        match (layer % 4, name.contains("ffn_down")) {
            (0, _) => TensorType::Q4_1,
            (1, _) => TensorType::Q4_0,
            (2, _)
                if ["attn_q", "attn_k", "attn_v"]
                    .iter()
                    .any(|m| name.contains(m)) =>
            {
                TensorType::Q8_0
            }
            (2, _) => TensorType::Q4_0,
            (_, false) => TensorType::Bf16,
            (_, true) => TensorType::F16,
        }
    }
}

/// Launches of `n` merged layers: one for all (`GpuOptions::grid_layers`, the default: one
/// `layers_grid` launch), or one each with `TETHER_LLM_GRID=0`.
fn merged(n: usize) -> usize {
    if tether_llm::gpu::grid_layers() { 1 } else { n }
}

/// Launches of `n` merged layers of one type as tails: the first layer's `qkv_rope`, then
/// each layer's attention and paired tail (`1 + 2 n`), or, the tails not paired
/// (`tether_llm::gpu::tail_pair`: `TETHER_LLM_TAIL_PAIR=0`), three each.
fn tails(n: usize) -> usize {
    if tether_llm::gpu::tail_pair() {
        1 + 2 * n
    } else {
        3 * n
    }
}

/// Whether this GPU runs the layer kernel (a 16-block cluster: compute capability 9.0 and
/// later); judged by name for the data-center parts the evidence runs on.
fn has_layer_clusters(d: &GpuDecoder) -> bool {
    ["H100", "H200", "GH200", "B200", "B100", "GB200"]
        .iter()
        .any(|n| d.device_name().contains(n))
}

/// The layer kernel (each layer of 8-bit block weights one launch of a 16-block cluster) and
/// the fused step with those layers' tails (output projection and FFN in one cluster launch
/// after the fused QKV and attention launches) against the fused step: the same logits bit
/// for bit, teacher forced over 300 positions and over 2,100 (the attention's longer spans),
/// and the same greedy and sampled tokens; layers 0-2 merged (Q4_1, Q4_0, Q8_0: tails of
/// three launches each, not paired, as their Q/K/V types differ), layer 3 (BF16) keeping its
/// five launches. The models of one type: the tails paired (each with the next layer's
/// Q/K/V), 2 launches a layer.
fn layer_kernel_equals_the_fused_step_bit_for_bit() {
    let cfg = smollm2_shape(4, false);
    let w = tether_llm::testing::random_weights(&cfg, &block_types);
    let m = model(&cfg, &w);
    let (mut f, mut l, mut t) = (
        decoder_opts(&m, 2176, true, true, NEVER, false),
        decoder_opts(&m, 2176, true, true, ALWAYS, false),
        decoder_opts(&m, 2176, true, true, NEVER, true),
    );
    eprintln!(
        "fused {} launches, layer kernel {}: {}; with the layers' tails {}: {}",
        f.launches(),
        l.launches(),
        l.check_summary(),
        t.launches(),
        t.check_summary()
    );
    assert_eq!(f.launches(), 1 + 5 * 4 + 2);
    if has_layer_clusters(&l) {
        assert_eq!(l.launches(), 1 + merged(3) + 5 + 2);
        assert_eq!(t.launches(), 1 + 3 * 3 + 5 + 2);
    }
    let n_vocab = cfg.n_vocab as usize;
    same_logits(&mut f, &mut l, &tokens(300, n_vocab, 51), n_vocab);
    same_tokens(&mut f, &mut l, &tokens(9, n_vocab, 52), 120);
    same_logits(&mut f, &mut t, &tokens(300, n_vocab, 51), n_vocab);
    same_tokens(&mut f, &mut t, &tokens(9, n_vocab, 52), 120);
    let mut long = smollm2_shape(2, false);
    long.n_vocab = 4096;
    let w = tether_llm::testing::random_weights(&long, &|_, _| TensorType::Q4_1);
    let m = model(&long, &w);
    let (mut f, mut l, mut t) = (
        decoder_opts(&m, 2176, true, true, NEVER, false),
        decoder_opts(&m, 2176, true, true, ALWAYS, false),
        decoder_opts(&m, 2176, true, true, NEVER, true),
    );
    if has_layer_clusters(&l) {
        assert_eq!(l.launches(), 1 + merged(2) + 2);
        assert_eq!(t.launches(), 1 + tails(2) + 2);
    }
    same_logits(&mut f, &mut l, &tokens(2100, 4096, 53), 4096);
    same_logits(&mut f, &mut t, &tokens(2100, 4096, 53), 4096);
    // Other shapes: 20 query heads (blocks 0-3 attend over two heads each, `attend`'s shared
    // memory reused), and a head_dim of 40 (200 Q/K/V items: blocks of 13, the last of 5)
    // with gate and up of different types (two one-row chains instead of one two-row).
    let heads20 = LlmConfig {
        n_layer: 2,
        n_embd: 640,
        n_head: 20,
        n_head_kv: 4,
        head_dim: 32,
        n_ff: 1024,
        n_vocab: 4096,
        n_ctx_train: 512,
        ..tether_llm::testing::tiny_config()
    };
    let hd40 = LlmConfig {
        n_layer: 2,
        n_embd: 320,
        n_head: 8,
        n_head_kv: 1,
        head_dim: 40,
        n_ff: 1024,
        n_vocab: 4096,
        n_ctx_train: 512,
        ..tether_llm::testing::tiny_config()
    };
    let gate_up_apart = |name: &str, _cols: usize| {
        if name.contains("ffn_up") {
            TensorType::Q4_0
        } else if name == "token_embd.weight" {
            TensorType::Q8_0
        } else {
            TensorType::Q4_1
        }
    };
    for cfg in [heads20, hd40] {
        let w = tether_llm::testing::random_weights(&cfg, &gate_up_apart);
        let m = model(&cfg, &w);
        let (mut f, mut l, mut t) = (
            decoder_opts(&m, 512, true, true, NEVER, false),
            decoder_opts(&m, 512, true, true, ALWAYS, false),
            decoder_opts(&m, 512, true, true, NEVER, true),
        );
        if has_layer_clusters(&l) {
            assert_eq!(
                l.launches(),
                1 + merged(2) + 2,
                "{} heads of {}",
                cfg.n_head,
                cfg.head_dim
            );
            assert_eq!(t.launches(), 1 + tails(2) + 2);
        }
        same_logits(&mut f, &mut l, &tokens(300, 4096, 54), 4096);
        same_logits(&mut f, &mut t, &tokens(300, 4096, 54), 4096);
    }
}

/// Long spans: the fused step's attention (on SM 9.0 and later a cluster of blocks per head,
/// each a share of the positions and of the head's dims) against the unfused step's (one
/// block per head), teacher forced: every split of the span over the cluster's blocks, from
/// blocks with no position at all (the first 56 positions) to shares of 1,024 (the whole
/// 8,192-position context), gives the same logits bit for bit; head_dim 64 (SmolLM2's
/// shape, 2,100 positions) and 128 (8 dims per block, then 16; 8,192 positions).
fn fused_attention_equals_the_unfused_over_long_spans() {
    let mut cfg = smollm2_shape(2, false);
    cfg.n_vocab = 4096;
    let w = tether_llm::testing::random_weights(&cfg, &mixed_types);
    let m = model(&cfg, &w);
    let (mut u, mut f) = (decoder(&m, 2176, false), decoder(&m, 2176, true));
    eprintln!("fused: {}", f.check_summary());
    same_logits(&mut u, &mut f, &tokens(2100, 4096, 41), 4096);
    let wide = LlmConfig {
        n_layer: 2,
        n_embd: 1024,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 128,
        n_ff: 1536,
        n_vocab: 1024,
        n_ctx_train: 8192,
        ..tether_llm::testing::tiny_config()
    };
    let w = tether_llm::testing::random_weights(&wide, &mixed_types);
    let m = model(&wide, &w);
    let (mut u, mut f) = (decoder(&m, 8192, false), decoder(&m, 8192, true));
    same_logits(&mut u, &mut f, &tokens(8192, 1024, 43), 1024);
}

/// Median of the per-step milliseconds of `runs` timed requests at position `at`.
fn median_step_ms(d: &mut GpuDecoder, at: usize, n: usize, runs: usize) -> f64 {
    let mut all = Vec::new();
    for r in 0..runs {
        let (_, steps) = d
            .time_decode(at, n, r as u64 + 1, &SamplerParams::greedy())
            .expect("timed");
        all.extend(steps);
    }
    all.sort_by(f64::total_cmp);
    all[all.len() / 2]
}

/// The positions the speed test times: `TETHER_FUSE_AT` (comma-separated, e.g.
/// `128,1024,1536,2048`), else 128 and 2048.
fn speed_positions() -> Vec<usize> {
    let given = std::env::var("TETHER_FUSE_AT").unwrap_or_default();
    let at: Vec<usize> = given
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    if at.is_empty() { vec![128, 2048] } else { at }
}

/// SmolLM2-135M's full shape (30 layers, every matrix Q4_1): the unfused step, the fused
/// step with plain launches and the fused step with dependent launches equal on 64
/// teacher-forced positions, then decode timed at positions 128 and 2048 (or
/// `TETHER_FUSE_AT`'s; 128 steps, 3 runs each, median step) and REPORTED: a speed target is
/// a benchmark's, not a test's (docs/evidence/llm-gpu.md holds the measured numbers).
fn fused_and_unfused_step_speeds_on_the_smollm2_shape() {
    let cfg = smollm2_shape(30, false);
    let w = tether_llm::testing::random_weights(&cfg, &|_, _| TensorType::Q4_1);
    let m = model(&cfg, &w);
    let positions = speed_positions();
    let context = positions.iter().max().copied().unwrap_or(2048) + 128 + 1;
    let n_vocab = cfg.n_vocab as usize;
    let seq = tokens(64, n_vocab, 31);
    let mut u = decoder_with(&m, context, false, false);
    let mu: Vec<f64> = positions
        .iter()
        .map(|&at| median_step_ms(&mut u, at, 128, 3))
        .collect();
    for (i, &at) in positions.iter().enumerate() {
        eprintln!(
            "SmolLM2 shape, 30 layers Q4_1, tg128@{at}: unfused {} launches {:.4} ms/token ({:.0} tok/s)",
            u.launches(),
            mu[i],
            1e3 / mu[i]
        );
    }
    // TETHER_FUSE_VARIANTS: the variants to time (indices into the list below; all by default).
    let only: Option<Vec<usize>> = std::env::var("TETHER_FUSE_VARIANTS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    for (i, (name, dependent, layer, tail)) in [
        ("fused", false, NEVER, false),
        ("fused + dependent launches", true, NEVER, false),
        ("fused + dependent launches + layer kernel", true, ALWAYS, false),
        (
            "fused + dependent launches + layer kernel below the default position",
            true,
            tether_llm::gpu::LAYER_KERNEL_BELOW,
            false,
        ),
        ("fused + dependent launches + layers' tails", true, NEVER, true),
        (
            "fused + dependent launches + layer kernel below the default position, layers' tails from there",
            true,
            tether_llm::gpu::LAYER_KERNEL_BELOW,
            true,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        if only.as_ref().is_some_and(|o| !o.contains(&i)) {
            continue;
        }
        let mut f = decoder_opts(&m, context, true, dependent, layer, tail);
        eprintln!("{name}: {}", f.check_summary());
        same_logits(&mut u, &mut f, &seq, n_vocab);
        for (i, &at) in positions.iter().enumerate() {
            let ms = median_step_ms(&mut f, at, 128, 3);
            eprintln!(
                "SmolLM2 shape, 30 layers Q4_1, tg128@{at}: {name} {} {ms:.4} ms/token ({:.0} tok/s), {:.2}x the unfused step",
                f.launches_summary(),
                1e3 / ms,
                mu[i] / ms
            );
        }
    }
}

/// A decoder taking the layer kernel's graph below position 150 and the fused step's with
/// the layers' tails from there (the default decoder's two graphs): both graphs captured and
/// checked at load, the graph of each position the one its side of the switch names (by
/// their launch counts), the same logits bit for bit as the fused step's alone, teacher
/// forced over 300 positions, and the same greedy and sampled tokens over a request that
/// crosses position 150, token by token and through steps launched ahead. A switch at the
/// context or past it: the layer kernel's graph alone.
fn layer_kernel_below_a_position_switches_graphs() {
    let cfg = smollm2_shape(4, false);
    let w = tether_llm::testing::random_weights(&cfg, &block_types);
    let m = model(&cfg, &w);
    let (mut f, mut s) = (
        decoder_opts(&m, 512, true, true, NEVER, false),
        decoder_opts(&m, 512, true, true, 150, true),
    );
    eprintln!("switching decoder: {:?}; {}", s, s.check_summary());
    assert_eq!(f.layer_kernel_below(), None);
    if has_layer_clusters(&s) {
        let layer = 1 + merged(3) + 5 + 2;
        let tails = 1 + 3 * 3 + 5 + 2;
        assert_eq!(s.launches(), tails);
        assert_eq!(s.layer_kernel_below(), Some((150, layer)));
        assert!(s.check_summary().contains("below position 150"));
        assert_eq!(
            [0, 149, 150, 511].map(|p| s.launches_at(p)),
            [layer, layer, tails, tails]
        );
        for below in [512, 600] {
            let a = decoder_opts(&m, 512, true, true, below, true);
            assert_eq!(a.layer_kernel_below(), None, "below {below}");
            assert_eq!(a.launches_at(511), layer, "below {below}");
        }
    } else {
        eprintln!("no 16-block clusters on {}: one graph", s.device_name());
        assert_eq!(s.launches(), f.launches());
        assert_eq!(s.launches_at(0), f.launches());
    }
    let n_vocab = cfg.n_vocab as usize;
    same_logits(&mut f, &mut s, &tokens(300, n_vocab, 61), n_vocab);
    same_tokens(&mut f, &mut s, &tokens(140, n_vocab, 62), 40);
    // Steps launched ahead cross the switch as well.
    let prompt = tokens(120, n_vocab, 63);
    let run = |d: &mut GpuDecoder| {
        let mut out = vec![
            d.prefill(&prompt, &SamplerParams::greedy())
                .expect("prefill"),
        ];
        d.launch_ahead().expect("launch ahead");
        for i in 0..60 {
            out.push(d.step_ahead(i + 1 < 60).expect("step"));
        }
        out
    };
    assert_eq!(run(&mut f), run(&mut s));
}

/// The real model: the four decoders' (unfused, fused, fused with the layer kernel, fused
/// with the layers' tails) teacher-forced logits over the four golden chats (prompt and
/// llama.cpp's answer) equal bit for bit.
fn real_model_fused_equals_unfused() {
    let mut g = tether_llm::generate::Generator::open(
        tether_testkit::asset(REAL_MODEL),
        &tether_llm::generate::GeneratorOptions {
            context: Some(512),
            ..Default::default()
        },
    )
    .expect("open the model");
    let n_vocab = g.config().n_vocab as usize;
    let (m, _) = g.model_and_state();
    let (mut u, mut f) = (decoder(m, 512, false), decoder(m, 512, true));
    let mut l = decoder_opts(m, 512, true, true, ALWAYS, false);
    let mut t = decoder_opts(m, 512, true, true, NEVER, true);
    if has_layer_clusters(&l) {
        assert_eq!(l.launches(), 1 + merged(30) + 2);
        // Every layer's Q/K/V of one type: the tails paired.
        assert_eq!(t.launches(), 1 + tails(30) + 2);
    }
    eprintln!(
        "real model: {} launches unfused, {} fused, {} with the layer kernel, {} with the layers' tails; {}",
        u.launches(),
        f.launches(),
        l.launches(),
        t.launches(),
        l.check_summary()
    );
    let v: serde_json::Value =
        serde_json::from_str(include_str!("../golden/chat.json")).expect("json");
    for c in v["chats"].as_array().expect("chats") {
        let seq: Vec<u32> = ["prompt_ids", "generated_ids"]
            .iter()
            .flat_map(|k| c[*k].as_array().expect("ids").clone())
            .map(|i| i.as_u64().expect("id") as u32)
            .collect();
        same_logits(&mut u, &mut f, &seq, n_vocab);
        same_logits(&mut u, &mut l, &seq, n_vocab);
        same_logits(&mut u, &mut t, &seq, n_vocab);
    }
}

fn main() {
    let mut tests = GpuTests::new(skip_reason())
        .test(
            "fused_attention_equals_the_unfused_over_long_spans",
            fused_attention_equals_the_unfused_over_long_spans,
        )
        .test(
            "fused_step_equals_the_unfused_step_bit_for_bit",
            fused_step_equals_the_unfused_step_bit_for_bit,
        )
        .test(
            "fused_step_with_head_norms_equals_the_unfused_step",
            fused_step_with_head_norms_equals_the_unfused_step,
        )
        .test(
            "layer_kernel_equals_the_fused_step_bit_for_bit",
            layer_kernel_equals_the_fused_step_bit_for_bit,
        )
        .test(
            "layer_kernel_below_a_position_switches_graphs",
            layer_kernel_below_a_position_switches_graphs,
        )
        .test(
            "fused_and_unfused_step_speeds_on_the_smollm2_shape",
            fused_and_unfused_step_speeds_on_the_smollm2_shape,
        );
    if std::env::var_os("TETHER_FUSE_REAL").is_some() {
        tests = tests.test(
            "real_model_fused_equals_unfused",
            real_model_fused_equals_unfused,
        );
    }
    tests.run()
}
