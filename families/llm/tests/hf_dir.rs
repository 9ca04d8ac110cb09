//! The handed model as a Hugging Face directory (bfloat16 safetensors, made from the GGUF by
//! transformers' GGUF loader: `golden/reference.py hf-dir`), found through
//! `$TETHER_LLM_HF_DIR`. Without it every test here reports itself ignored.
//!
//! - hyper-parameters and special tokens equal the GGUF's;
//! - every canonical tensor equals the GGUF's dequantised values within bfloat16 rounding
//!   (relative 2^-8): with the Q/K rows of both in the same (Hugging Face) order, which a
//!   wrong permutation would break by whole rows; the q/k projections of one input agree;
//! - teacher-forced logits of the safetensors model against the GGUF model: top-1 agreement
//!   and the absolute difference within the bfloat16 tolerance stated below;
//! - the chat prompts tokenise with the directory's `tokenizer.json` to llama.cpp's ids.

use std::path::PathBuf;

use libtest_mimic::{Arguments, Failed, Trial};
use tether_llm::Checkpoint;
use tether_llm::forward::LogitsFor;
use tether_llm::quant::dequantize_row;
use tether_llm::tensor::TensorRef;

#[path = "common/mod.rs"]
mod common;
#[path = "common/forward.rs"]
mod fwd;

fn hf_dir() -> Option<PathBuf> {
    let d = PathBuf::from(std::env::var_os("TETHER_LLM_HF_DIR")?);
    d.join("config.json").is_file().then_some(d)
}

fn f32s(t: &TensorRef<'_>) -> Vec<f32> {
    let mut v = vec![0.0; t.elems()];
    dequantize_row(t.ty, t.data, &mut v).expect("dequantise");
    v
}

fn open() -> (Checkpoint, Checkpoint) {
    let g = Checkpoint::from_gguf(common::asset(common::GGUF)).expect("gguf");
    let h = Checkpoint::from_hf_dir(hf_dir().expect("dir")).expect("hf dir");
    (g, h)
}

fn config_and_tensors() -> Result<(), Failed> {
    let (g, h) = open();
    let (a, b) = (&g.config, &h.config);
    let shape = |c: &tether_llm::LlmConfig| {
        (
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.n_head_kv,
            c.head_dim,
            c.n_ff,
            c.n_vocab,
            c.n_ctx_train,
        )
    };
    assert_eq!(shape(a), shape(b));
    assert_eq!(
        (a.rope_theta, a.rope_scaling),
        (b.rope_theta, b.rope_scaling)
    );
    assert!((a.norm_eps - b.norm_eps).abs() < 1e-9);
    assert_eq!(
        (a.tied_embeddings, a.qkv_bias, a.qk_norm),
        (b.tied_embeddings, b.qkv_bias, b.qk_norm)
    );
    assert_eq!(
        (a.special.bos, a.special.eos),
        (b.special.bos, b.special.eos)
    );
    assert_eq!(g.chat_template, h.chat_template);
    let mut worst = (0f32, String::new());
    for (name, _, dims) in g.weights.infos() {
        let (x, y) = (
            g.weights.require(name).unwrap(),
            h.weights.require(name).unwrap(),
        );
        assert_eq!(y.dims, dims, "{name}");
        let (x, y) = (f32s(&x), f32s(&y));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let tol = p.abs() / 256.0 + 1e-30;
            if (p - q).abs() > tol {
                return Err(format!("{name}[{i}]: GGUF {p}, safetensors {q}").into());
            }
            let rel = (p - q).abs() / p.abs().max(1e-30);
            if rel > worst.0 {
                worst = (rel, name.to_owned());
            }
        }
    }
    println!("largest relative difference {:.2e} in {}", worst.0, worst.1);
    // q/k projections of one input.
    let x = tether_llm::testing::values(576, 3);
    for l in [0usize, 17, 29] {
        for t in ["attn_q", "attn_k"] {
            let n = format!("blk.{l}.{t}.weight");
            let (wa, wb) = (
                f32s(&g.weights.require(&n).unwrap()),
                f32s(&h.weights.require(&n).unwrap()),
            );
            for (ra, rb) in wa.chunks_exact(576).zip(wb.chunks_exact(576)) {
                let pa: f32 = ra.iter().zip(&x).map(|(a, b)| a * b).sum();
                let pb: f32 = rb.iter().zip(&x).map(|(a, b)| a * b).sum();
                let scale: f32 = ra.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
                assert!((pa - pb).abs() <= scale / 128.0, "{n}: {pa} vs {pb}");
            }
        }
    }
    Ok(())
}

/// Tolerance of the safetensors (bf16) model against the GGUF (Q4_1) one. Two things differ:
/// the weights (the Q4_1 values rounded to bf16, relative error up to 2^-9) and, above all,
/// the arithmetic: a Q4_1 product quantises its input to 8-bit blocks as llama.cpp does,
/// a bf16 product multiplies f32 inputs. The second alone is what separates PyTorch (f32,
/// same dequantised weights) from llama.cpp on this text: top-1 289/296, max 0.86, mean
/// 0.136 (measured with transformers 5.24). Measured here over 128 positions: top-1
/// 123/128, max 1.34, mean 0.159.
const HF_MIN_TOP1_PERCENT: usize = 95;
const HF_MAX_ABS: f32 = 2.0;
const HF_MEAN_ABS: f32 = 0.25;

fn logits_close_to_gguf() -> Result<(), Failed> {
    let (g, h) = open();
    let text = common::golden("logits.json")["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let tokens = g.tokenizer.encode(&text, true, false).unwrap();
    let tokens = &tokens[..128];
    let nv = g.config.n_vocab as usize;
    let run = |c: &Checkpoint| {
        let m = fwd::model(c);
        let mut s = fwd::state(&m, tokens.len(), tokens.len());
        m.forward(&mut s, tokens, LogitsFor::All).expect("forward");
        s.logits()[..tokens.len() * nv].to_vec()
    };
    let (a, b) = (run(&g), run(&h));
    let (mut agree, mut max, mut sum) = (0, 0f32, 0f64);
    for p in 0..tokens.len() {
        let (ra, rb) = (&a[p * nv..(p + 1) * nv], &b[p * nv..(p + 1) * nv]);
        agree += usize::from(fwd::argmax(ra) == fwd::argmax(rb));
        for (x, y) in ra.iter().zip(rb) {
            max = max.max((x - y).abs());
            sum += f64::from((x - y).abs());
        }
    }
    let mean = (sum / a.len() as f64) as f32;
    println!(
        "safetensors (bf16) vs GGUF (Q4_1): top-1 {agree}/{}, |logit difference| max {max:.4}, mean {mean:.5}",
        tokens.len()
    );
    if agree * 100 < HF_MIN_TOP1_PERCENT * tokens.len() || max > HF_MAX_ABS || mean > HF_MEAN_ABS {
        return Err(format!("top-1 {agree}/{}, max {max}, mean {mean}", tokens.len()).into());
    }
    Ok(())
}

fn tokenizer_matches_llama_cpp() -> Result<(), Failed> {
    let h = Checkpoint::from_hf_dir(hf_dir().expect("dir")).expect("hf dir");
    let g = common::golden("chat.json");
    let t = h.compiled_chat_template().unwrap().unwrap();
    for chat in g["chats"].as_array().unwrap() {
        let messages: Vec<tether_llm::ChatMessage> =
            serde_json::from_value(chat["messages"].clone()).unwrap();
        let prompt = t.render(&messages, true).unwrap();
        assert_eq!(prompt, chat["prompt"].as_str().unwrap());
        let want: Vec<u32> = chat["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = h.tokenizer.encode(&prompt, false, true).unwrap();
        if got != want {
            return Err(format!("{:?}: got {got:?}, llama.cpp {want:?}", chat["messages"]).into());
        }
    }
    Ok(())
}

fn bundle_round_trips() -> Result<(), Failed> {
    use tether_llm::recipe::{BuildOptions, Input, build};
    let dir = hf_dir().expect("dir");
    let h = Checkpoint::from_hf_dir(&dir).expect("hf dir");
    let (w, report) = build(
        &Input::detect(&dir),
        &BuildOptions {
            name: "smollm2-hf".into(),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .map_err(|e| e.to_string())?;
    println!("{}", report.description);
    let b = tether_llm::recipe::verify_bytes(w.to_bytes().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    assert_eq!(b.config, h.config);
    for (name, ty, _) in h.weights.infos() {
        let (x, y) = (
            h.weights.require(name).unwrap(),
            b.weights.require(name).unwrap(),
        );
        assert_eq!(y.ty, ty);
        assert!(x.data == y.data, "{name}");
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let present = hf_dir().is_some();
    if !present {
        println!(
            "SKIPPED (no Hugging Face directory: set TETHER_LLM_HF_DIR to the output of `golden/reference.py hf-dir`)"
        );
    }
    let trial = |name: &'static str, f: fn() -> Result<(), Failed>| {
        Trial::test(name, f).with_ignored_flag(!present)
    };
    libtest_mimic::run(
        &args,
        vec![
            trial(
                "hf_dir_config_and_tensors_equal_the_gguf",
                config_and_tensors,
            ),
            trial("hf_dir_logits_close_to_the_gguf", logits_close_to_gguf),
            trial(
                "hf_dir_tokenizer_matches_llama_cpp",
                tokenizer_matches_llama_cpp,
            ),
            trial("hf_dir_bundle_round_trips", bundle_round_trips),
        ],
    )
    .exit();
}
