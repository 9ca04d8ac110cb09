//! What a user feeds the embedder (issue 28): a tokenizer whose ids exceed the network's
//! embedding table is refused at build (and a bundle whose tokenizer was replaced since, at
//! open) naming the id and the table's size; a text over the maximum length says where it
//! is cut; the field case `embed_cr_only_lines.txt` (lone CR line ends) is three texts.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tether_bundle::{Bundle, Verify};
use tether_embed::cli::universal_lines;
use tether_embed::config::TOKENIZER_SECTION;
use tether_embed::recipe::{BuildOptions, build};
use tether_embed::{EmbedError, Embedder, EmbedderOptions, cosine};
use tether_testkit::with_section_payload;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn asset(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("TETHER_ASSETS")
        .map_or_else(|| repo_root().join(".assets"), PathBuf::from);
    std::fs::read(dir.join(name)).unwrap_or_else(|e| {
        panic!("missing test asset {name} ({e}): run `tests/fetch-assets` first")
    })
}

/// The pinned tokenizer with one added token at id 30522: one past the 30,522 rows of
/// all-MiniLM-L6-v2's word embeddings.
fn tokenizer_with_extra_token() -> Vec<u8> {
    let mut t: Value = serde_json::from_slice(&asset("all-minilm-l6-v2-tokenizer.json")).unwrap();
    t["added_tokens"]
        .as_array_mut()
        .expect("added_tokens")
        .push(serde_json::json!({
            "id": 30522, "content": "[ROBOT]", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        }));
    serde_json::to_vec(&t).unwrap()
}

fn options(name: &str) -> BuildOptions {
    BuildOptions {
        common: tether_embed::recipe::BuildCommon::named(name),
        ..BuildOptions::default()
    }
}

#[test]
fn a_tokenizer_past_the_embedding_table_is_refused_naming_the_id_and_the_size() {
    let onnx = asset("all-minilm-l6-v2-int8.onnx");
    let bad = tokenizer_with_extra_token();
    let Err(e) = build(&onnx, &bad, &options("bad"), &mut |_| {}) else {
        panic!("built with a tokenizer past the embedding table");
    };
    let m = e.to_string();
    assert!(
        matches!(
            e,
            EmbedError::Vocabulary {
                id: 30522,
                rows: 30522,
                ..
            }
        ),
        "{m}"
    );
    assert!(m.contains("30522") && m.contains("[ROBOT]"), "{m}");

    // A bundle built with the right tokenizer, then given the bad one (the writer seals it
    // again, checksums valid): refused at open, not by the engine at the first run.
    let tok = asset("all-minilm-l6-v2-tokenizer.json");
    let (writer, _) = build(&onnx, &tok, &options("good"), &mut |_| {}).expect("build");
    let good = Bundle::from_vec(writer.to_bytes().unwrap(), Verify::Eager).unwrap();
    let tokenizer = good
        .sections()
        .find(|s| s.name == TOKENIZER_SECTION)
        .expect("the tokenizer section");
    let swapped = with_section_payload(&good, tokenizer.index, &bad);
    let b = Arc::new(Bundle::from_vec(swapped, Verify::Eager).unwrap());
    match Embedder::from_bundle(b, &EmbedderOptions::default()) {
        Err(EmbedError::Vocabulary {
            id: 30522,
            rows: 30522,
            ..
        }) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn lone_cr_lines_are_three_texts_and_long_texts_say_where_they_are_cut() {
    let tok = asset("all-minilm-l6-v2-tokenizer.json");
    let onnx = asset("all-minilm-l6-v2-int8.onnx");
    let (writer, _) = build(&onnx, &tok, &options("minilm"), &mut |_| {}).expect("build");
    let b = Arc::new(Bundle::from_vec(writer.to_bytes().unwrap(), Verify::Eager).unwrap());
    let mut e = Embedder::from_bundle(b, &EmbedderOptions::default()).expect("open");

    // The field case: three sentences separated by a lone CR. The reference (universal
    // newlines): three texts of 8, 11 and 7 tokens, cosine(1, 2) = 0.7535.
    let file = std::fs::read_to_string(repo_root().join("tests/field/embed_cr_only_lines.txt"))
        .expect("field case");
    let lines = universal_lines(&file);
    let numbers: Vec<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(numbers, [1, 2, 3]);
    let texts: Vec<&str> = lines.iter().map(|l| l.1).collect();
    let tokens: Vec<usize> = texts
        .iter()
        .map(|t| e.token_ids(t).unwrap().len())
        .collect();
    assert_eq!(tokens, [8, 11, 7]);
    let mut out = vec![[0f32; tether_embed::EMBEDDING_DIM]; 3];
    e.embed_batch(&texts, &mut out).expect("embed");
    let c = cosine(&out[0], &out[1]);
    assert!((c - 0.7535).abs() < 5e-4, "cosine(1, 2) = {c}");

    // Cut after 256 tokens: says how many the text has and where the embedded part ends.
    let long = "robot ".repeat(300) + "door";
    let cut = e.truncation(&long).expect("tokenize").expect("cut");
    assert_eq!((cut.tokens, cut.kept_tokens), (303, 256));
    // 254 words of the text are kept ([CLS] and [SEP] take two of the 256): they end at
    // character 254 * 6 - 1.
    assert_eq!(cut.kept_chars, 254 * 6 - 1);
    assert_eq!(e.truncation("a short text").expect("tokenize"), None);
}
