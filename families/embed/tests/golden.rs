//! Golden tests: the embedding family against sentence-transformers (fp32
//! weights, the accuracy target) and onnxruntime (the same int8 network).
//!
//! `golden/embeddings.json` was written by `golden/reference.py`; it is
//! committed so CI needs no Python. The network and the tokenizer come from
//! `tests/fetch-assets` (`$TETHER_ASSETS`, default `<repo>/.assets`).
//!
//! Tolerances:
//! - token ids: equal to sentence-transformers' (same tokenizer.json);
//! - against onnxruntime on the same int8 network: cosine >= 0.99999 and
//!   every component within 1e-5 (tract vs onnxruntime kernels, measured 4e-7);
//! - against sentence-transformers on the fp32 weights: cosine >= 0.999 (the
//!   issue's bar) on at least 20 of the 27 sentences, and on every sentence no
//!   more than 1e-4 below what the int8 network reaches under onnxruntime
//!   (the int8 weights themselves fall short of 0.999 on the shortest texts:
//!   "" 0.9963, "hello world" 0.99896; see README.md);
//! - the known pair scores within 0.01 of sentence-transformers' 0.7553.

use std::path::PathBuf;

use serde_json::Value;
use tether_embed::config::EmbedConfig;
use tether_embed::recipe::{BuildCommon, BuildOptions, build};
use tether_embed::selftest::EMBEDDING;
use tether_embed::{EMBEDDING_DIM, EmbedError, Embedder, EmbedderOptions, Prepare, cosine};
use tether_family::selftest::{Role, Values};
use tether_testkit::asset;

fn golden() -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/embeddings.json");
    serde_json::from_slice(&std::fs::read(p).expect("golden file")).expect("golden JSON")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn parts() -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(asset("all-minilm-l6-v2-int8.onnx")).expect("onnx"),
        std::fs::read(asset("all-minilm-l6-v2-tokenizer.json")).expect("tokenizer"),
    )
}

fn embedder(prepare: Prepare) -> Embedder {
    let (onnx, tok) = parts();
    Embedder::from_parts(onnx, &tok, EmbedConfig::default(), prepare).expect("embedder")
}

#[test]
fn matches_sentence_transformers_and_onnxruntime() {
    let g = golden();
    let cases = g["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20);
    let mut e = embedder(Prepare::Lazy);
    let mut at_bar = 0;
    let mut worst_vs_ort = (1f32, 0f32);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want_ids: Vec<u32> = case["token_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(
            e.token_ids(text).expect("ids"),
            want_ids,
            "token ids of {text:?}"
        );
        let got = e.embed(text).expect("embed");
        let norm: f32 = got.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{text:?}: norm {norm}");
        let st = floats(&case["sentence_transformers"]);
        let ort = floats(&case["onnxruntime_int8"]);
        let c_ort = cosine(&got, &ort);
        let d_ort = got
            .iter()
            .zip(&ort)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let c_st = cosine(&got, &st);
        let int8_own = case["cosine_int8_vs_fp32"].as_f64().expect("cos") as f32;
        println!(
            "{:4} tokens  cos vs sentence-transformers {c_st:.6} (int8 on onnxruntime {int8_own:.6})  vs onnxruntime {c_ort:.7} max |diff| {d_ort:.1e}  {:?}",
            want_ids.len(),
            text.chars().take(40).collect::<String>()
        );
        assert!(
            c_ort >= 0.99999 && d_ort <= 1e-5,
            "{text:?}: vs onnxruntime cos {c_ort}, max diff {d_ort}"
        );
        assert!(
            c_st >= int8_own - 1e-4,
            "{text:?}: cos {c_st} vs the int8 network's own {int8_own}"
        );
        worst_vs_ort = (worst_vs_ort.0.min(c_ort), worst_vs_ort.1.max(d_ort));
        if c_st >= 0.999 {
            at_bar += 1;
        }
    }
    println!(
        "{at_bar} of {} sentences at cosine >= 0.999 vs sentence-transformers; vs onnxruntime worst cos {:.7}, worst |diff| {:.1e}",
        cases.len(),
        worst_vs_ort.0,
        worst_vs_ort.1
    );
    assert!(at_bar >= 20, "{at_bar} sentences reach 0.999");
    // The known pair.
    let a = e.embed("A man is eating food.").expect("a");
    let b = e.embed("A man is eating a piece of bread.").expect("b");
    let c = cosine(&a, &b);
    let st = g["known_pair"]["cosine_sentence_transformers"]
        .as_f64()
        .expect("st") as f32;
    println!("known pair cosine {c:.4} (sentence-transformers {st:.4})");
    assert!((c - st).abs() < 0.01, "known pair {c} vs {st}");
    // Buckets used: the 256-token text needs 256; short texts 16.
    let prepared = e.prepared();
    for shape in [(1, 16), (1, 32), (1, 64), (1, 128), (1, 256)] {
        assert!(prepared.contains(&shape), "{prepared:?} lacks {shape:?}");
    }
}

#[test]
fn batches_equal_single_texts_and_truncate_like_the_reference() {
    let g = golden();
    let texts: Vec<&str> = g["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    let mut e = embedder(Prepare::Lazy);
    let mut batched = vec![[0f32; EMBEDDING_DIM]; texts.len()];
    e.embed_batch(&texts, &mut batched).expect("batch");
    let mut worst = 1f32;
    for (text, b) in texts.iter().zip(&batched) {
        let single = e.embed(text).expect("single");
        let c = cosine(&single, b);
        worst = worst.min(c);
        assert!(c >= 0.99999, "{text:?}: batch vs single cosine {c}");
    }
    println!(
        "batch (groups of 8, padded to the group's bucket) vs single: worst cosine {worst:.7}"
    );
    assert!(e.prepared().contains(&(8, 256)));
    // A text past the maximum is truncated to 256 tokens, [SEP] last.
    let long = texts.iter().max_by_key(|t| t.len()).expect("long");
    let ids = e.token_ids(long).expect("ids");
    assert_eq!(ids.len(), 256);
    assert_eq!(ids.last(), Some(&102));
    // Mismatched slots are a typed error.
    let mut two = vec![[0f32; EMBEDDING_DIM]; 2];
    match e.embed_batch(&texts[..3], &mut two) {
        Err(EmbedError::BatchSize { texts: 3, slots: 2 }) => {}
        other => panic!("{other:?}"),
    }
    e.embed_batch::<&str>(&[], &mut []).expect("empty batch");
}

#[test]
fn bundle_round_trip_and_self_test() {
    let (onnx, tok) = parts();
    let (writer, report) = build(
        &onnx,
        &tok,
        &BuildOptions {
            common: BuildCommon::named("all-minilm-l6-v2"),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .expect("build");
    assert!(report.pinned_model);
    assert!(report.selftest.passed, "{}", report.selftest);
    println!("{}", report.selftest);
    assert_eq!(report.seq_buckets, [16, 32, 64, 128, 256]);
    let bundle = tether_family::recipe::in_memory(&writer).expect("open");
    let mut e = Embedder::from_bundle(bundle, &EmbedderOptions::default()).expect("embedder");
    let r = e.self_test().expect("self-test");
    assert!(r.passed && r.checks[0].value >= 0.999, "{r}");
    let mut wrong = e.bundled_self_test().expect("readable").expect("payload");
    let mut reversed = wrong.f32s(Role::Expected, EMBEDDING).unwrap().to_vec();
    reversed.reverse();
    wrong.set(Role::Expected, EMBEDDING, &[384], Values::F32(reversed));
    assert!(!e.run_self_test(&wrong).expect("run").passed);
    // Out-of-range options are refused by name.
    let e = build(
        &onnx,
        &tok,
        &BuildOptions {
            config: Some(EmbedConfig {
                max_seq_len: 1024,
                max_batch: 8,
            }),
            ..BuildOptions::default()
        },
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("max_seq_len: 1024"), "{e}");
    let e = Embedder::from_parts(onnx, b"{}", EmbedConfig::default(), Prepare::Lazy).unwrap_err();
    assert!(matches!(e, EmbedError::Tokenizer(_)), "{e}");
}
