//! The handed model, SmolLM2-135M-Instruct Q4_1 (`tests/fetch-assets`), through the front
//! end: hyper-parameters as models.md lists them, tensors resolved and shape-checked, the
//! tokenizer and chat template against llama.cpp's goldens (`golden/tokens.json`, written
//! by `golden/reference.py` with llama-cpp-python 0.3.36).

use tether_llm::Checkpoint;
use tether_llm::quant::TensorType;

#[path = "common/mod.rs"]
mod common;
use common::{GGUF, asset};

#[test]
fn hyper_parameters_and_tensors_by_definition() {
    let c = Checkpoint::from_gguf(asset(GGUF)).expect("open");
    let k = &c.config;
    assert_eq!(k.architecture, "llama");
    assert_eq!(
        (
            k.n_layer,
            k.n_embd,
            k.n_ff,
            k.n_head,
            k.n_head_kv,
            k.head_dim
        ),
        (30, 576, 1536, 9, 3, 64)
    );
    assert_eq!((k.n_vocab, k.n_ctx_train), (49152, 8192));
    assert_eq!(k.rope_theta, 100000.0);
    assert!((k.norm_eps - 1e-5).abs() < 1e-9);
    assert!(k.tied_embeddings && !k.qkv_bias && !k.qk_norm);
    assert_eq!((k.special.bos, k.special.eos), (Some(1), Some(2)));
    assert!(!k.special.add_bos);
    // <|im_end|> (2) and <|endoftext|> (0) end generation, as llama.cpp marks them.
    assert!(
        k.special.eog.contains(&2) && k.special.eog.contains(&0),
        "{:?}",
        k.special.eog
    );
    let m = c.weights.model(k).expect("tensors");
    assert_eq!(m.layers.len(), 30);
    assert_eq!(m.token_embd.ty, TensorType::Q8_0);
    assert_eq!(m.lm_head().name, "token_embd.weight");
    assert_eq!(m.layers[0].attn_q.ty, TensorType::Q4_1);
    assert_eq!(m.layers[0].attn_k.dims, [576, 192]);
    let mut counts = std::collections::BTreeMap::new();
    for (_, ty, _) in c.weights.infos() {
        *counts.entry(ty.name()).or_insert(0) += 1;
    }
    assert_eq!(counts.get("q4_1"), Some(&210));
    assert_eq!(counts.get("q8_0"), Some(&1));
    assert_eq!(counts.get("f32"), Some(&61));
    assert!(c.chat_template.as_deref().unwrap().contains("<|im_start|>"));
    assert_eq!(c.tokenizer.len(), 49152);
    println!("parameters {}", c.weights.parameter_count());
}

#[test]
fn streaming_detokenisation_emits_split_characters_once_whole() {
    let c = Checkpoint::from_gguf(asset(GGUF)).expect("open");
    let tok = &c.tokenizer;
    let text = "emoji: 😀 👍🏽 👨‍👩‍👧 日本語のテキスト café — done";
    let ids = tok.encode(text, false, false).unwrap();
    let mut s = tok.stream(false);
    let mut out = String::new();
    let mut held = 0;
    for &id in &ids {
        let piece = s.push(id);
        // Every chunk is whole characters: no replacement character, ever.
        assert!(!piece.contains('\u{fffd}'), "id {id} gave {piece:?}");
        if piece.is_empty() {
            held += 1;
        }
        out.push_str(piece);
    }
    out.push_str(s.finish());
    assert_eq!(out, text);
    // Some character of this text spans several byte-level tokens.
    assert!(held > 0, "no token held back a partial character: {ids:?}");
    assert_eq!(tok.decode(&ids, false), text);
    // A stream cut inside a character ends with one U+FFFD, not a panic or a lost byte.
    let emoji = tok.encode("😀", false, false).unwrap();
    assert!(emoji.len() > 1, "{emoji:?}");
    let mut s = tok.stream(false);
    assert_eq!(s.push(emoji[0]), "");
    assert_eq!(s.finish(), "\u{fffd}");
    // Control tokens render as nothing unless asked; ids beyond the vocabulary as U+FFFD.
    let mut s = tok.stream(false);
    assert_eq!(s.push(2), "");
    let mut s = tok.stream(true);
    assert_eq!(s.push(2), "<|im_end|>");
    assert_eq!(s.push(1_000_000), "\u{fffd}");
}

#[test]
fn truncated_and_corrupt_copies_of_the_real_file_are_typed_errors() {
    use tether_llm::gguf::GgufFile;
    let bytes = std::fs::read(asset(GGUF)).unwrap();
    let header_end = GgufFile::from_vec(bytes.clone())
        .unwrap()
        .header
        .data_offset as usize;
    for cut in [
        0,
        3,
        10,
        24,
        1000,
        100_000,
        header_end - 1,
        header_end + 5,
        bytes.len() - 1,
    ] {
        let e = Checkpoint::from_gguf_file(match GgufFile::from_vec(bytes[..cut].to_vec()) {
            Ok(f) => f,
            Err(e) => {
                let s = e.to_string();
                assert!(
                    s.contains("truncated") || s.contains("magic") || s.contains("past the end"),
                    "cut {cut}: {s}"
                );
                continue;
            }
        });
        panic!(
            "cut at {cut} of {} parsed: {:?}",
            bytes.len(),
            e.map(|_| ())
        );
    }
    // The tensor count made huge: refused before anything is allocated for it.
    let mut x = bytes[..header_end].to_vec();
    x[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = GgufFile::from_vec(x).unwrap_err().to_string();
    assert!(e.contains("truncated GGUF"), "{e}");
}
