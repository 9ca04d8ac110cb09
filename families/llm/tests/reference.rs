//! The handed model through the front end and the CPU forward pass, against llama.cpp
//! (`golden/logits.json`, `golden/chat.json` from `golden/reference.py llama`):
//! teacher-forced logits (top-1 agreement >= 99 %, max and mean absolute difference reported
//! and bounded, positions whose logits equal llama.cpp's bit for bit >= 99 %) and greedy
//! generation of up to 32 tokens on the chat prompts (ids equal). The
//! bundle built from the GGUF gives bit-identical logits (same bytes, same program).

use std::sync::Arc;

use tether_llm::Checkpoint;
use tether_llm::forward::LogitsFor;

#[path = "common/mod.rs"]
mod common;
#[path = "common/forward.rs"]
mod fwd;
use common::{GGUF, asset, golden};

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().expect("f") as f32)
        .collect()
}

/// Logits of every position of `tokens`, `[n, n_vocab]`.
fn teacher_forced(c: &Checkpoint, tokens: &[u32]) -> Vec<f32> {
    let m = fwd::model(c);
    let mut s = fwd::state(&m, tokens.len(), tokens.len());
    m.forward(&mut s, tokens, LogitsFor::All).expect("forward");
    s.logits()[..tokens.len() * c.config.n_vocab as usize].to_vec()
}

#[test]
fn teacher_forced_logits_match_llama_cpp() {
    let g = golden("logits.json");
    let c = Checkpoint::from_gguf(asset(GGUF)).expect("open");
    let tokens = ids(&g["ids"]);
    assert!(tokens.len() >= 256);
    // The text tokenises to the reference's ids.
    let text = g["text"].as_str().unwrap();
    assert_eq!(c.tokenizer.encode(text, true, false).unwrap(), tokens);
    let nv = c.config.n_vocab as usize;
    let logits = teacher_forced(&c, &tokens);
    let sample = ids(&g["sample_ids"]);
    let positions = g["positions"].as_array().unwrap();
    let (mut agree, mut max_diff, mut sum_diff, mut n_diff) = (0usize, 0f32, 0f64, 0usize);
    // Positions whose 84 stored logits all equal llama.cpp's bit for bit, and the first
    // that does not.
    let (mut exact, mut first_inexact) = (0usize, None);
    for (p, pos) in positions.iter().enumerate() {
        let row = &logits[p * nv..(p + 1) * nv];
        if fwd::argmax(row) == pos["top1"].as_u64().unwrap() as u32 {
            agree += 1;
        }
        let pairs = ids(&pos["top_ids"])
            .into_iter()
            .zip(floats(&pos["top_logits"]))
            .chain(sample.iter().copied().zip(floats(&pos["sample_logits"])));
        let mut equal = true;
        for (id, want) in pairs {
            let d = (row[id as usize] - want).abs();
            equal &= row[id as usize].to_bits() == want.to_bits();
            max_diff = max_diff.max(d);
            sum_diff += f64::from(d);
            n_diff += 1;
        }
        if equal {
            exact += 1;
        } else if first_inexact.is_none() {
            first_inexact = Some(p);
        }
    }
    println!(
        "bit-equal positions {exact}/{} (first that is not: {first_inexact:?})",
        positions.len()
    );
    let n = positions.len();
    let mean = sum_diff / n_diff as f64;
    println!(
        "top-1 agreement {agree}/{n} ({:.2} %), |logit difference| max {max_diff:.4}, mean {mean:.5} over {n_diff} logits",
        100.0 * agree as f64 / n as f64
    );
    assert!(agree * 100 >= 99 * n, "top-1 agreement {agree}/{n}");
    assert!(max_diff < 0.5 && mean < 0.05, "max {max_diff}, mean {mean}");
    // The CPU engine follows llama.cpp's arithmetic (RopeRule::LlamaCpp, the f16 attention
    // products, ggml's exp): equal bits, not only close values (296/296 when written).
    assert!(
        exact * 100 >= 99 * n,
        "bit-equal positions {exact}/{n}, first other {first_inexact:?}"
    );
}

#[test]
fn greedy_generation_equals_llama_cpp() {
    let g = golden("chat.json");
    let c = Checkpoint::from_gguf(asset(GGUF)).expect("open");
    let m = fwd::model(&c);
    for chat in g["chats"].as_array().unwrap() {
        let prompt = ids(&chat["prompt_ids"]);
        let want = ids(&chat["generated_ids"]);
        let mut s = fwd::state(&m, prompt.len() + 64, 1);
        m.forward(&mut s, &prompt, LogitsFor::Last).expect("prompt");
        let mut out = Vec::new();
        for _ in 0..g["max_tokens"].as_u64().unwrap() {
            let t = fwd::argmax(&s.logits()[..c.config.n_vocab as usize]);
            out.push(t);
            if c.config.special.eog.contains(&t) {
                break;
            }
            m.forward(&mut s, &[t], LogitsFor::Last).expect("step");
        }
        assert_eq!(out, want, "prompt {:?}", chat["messages"]);
        let text: Vec<u32> = out
            .into_iter()
            .filter(|t| !c.config.special.eog.contains(t))
            .collect();
        assert_eq!(
            c.tokenizer.decode(&text, false),
            chat["text"].as_str().unwrap()
        );
    }
}

#[test]
fn the_bundle_gives_the_same_logits_as_the_gguf() {
    use tether_llm::recipe::{BuildOptions, Input, build};
    let gguf = asset(GGUF);
    let (w, _) = build(
        &Input::Gguf(gguf.clone()),
        &BuildOptions {
            name: "s".into(),
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    let b = Checkpoint::from_bundle(Arc::new(
        tether_bundle::Bundle::from_vec(w.to_bytes().unwrap(), tether_bundle::Verify::Eager)
            .unwrap(),
    ))
    .unwrap();
    let c = Checkpoint::from_gguf(&gguf).unwrap();
    let tokens = c
        .tokenizer
        .encode("The capital of France is", true, false)
        .unwrap();
    let (a, z) = (teacher_forced(&c, &tokens), teacher_forced(&b, &tokens));
    assert!(a == z, "bundle and GGUF logits differ");
    // models.md: the greedy answer is "Paris".
    let nv = c.config.n_vocab as usize;
    let next = fwd::argmax(&a[(tokens.len() - 1) * nv..]);
    assert_eq!(c.tokenizer.decode(&[next], false).trim(), "Paris");
}
