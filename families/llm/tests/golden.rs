//! Tokenisation and chat template against llama.cpp (llama-cpp-python 0.3.36) on the handed
//! model: `golden/tokens.json` and `golden/chat.json`, written by `golden/reference.py llama`.
//! Token ids must be equal, not close (field.md item 9).

use tether_llm::{ChatMessage, Checkpoint, Tokenizer};

#[path = "common/mod.rs"]
mod common;
use common::{GGUF, asset, golden};

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The GGUF's tokenizer, and the same after a trip through `tokenizer.json` (as a bundle
/// stores it).
fn tokenizers() -> (Checkpoint, Tokenizer) {
    let c = Checkpoint::from_gguf(asset(GGUF)).expect("open");
    let json = c.tokenizer.to_json().expect("json");
    let t = Tokenizer::from_json(json.as_bytes(), &c.config.special).expect("from json");
    (c, t)
}

#[test]
fn token_ids_equal_llama_cpp() {
    let g = golden("tokens.json");
    let (c, json_tok) = tokenizers();
    assert_eq!(g["tokenizer_pre"], "smollm");
    let cases = g["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().expect("text");
        for tok in [&c.tokenizer, &json_tok] {
            for (key, add, parse) in [
                ("parse_special", false, true),
                ("plain", false, false),
                ("add_special", true, true),
            ] {
                let want = ids(&case[key]);
                let got = tok.encode(text, add, parse).expect("encode");
                if got != want {
                    failures.push(format!("{text:?} {key}: got {got:?}, llama.cpp {want:?}"));
                }
            }
            let detok = tok.decode(&ids(&case["plain"]), false);
            if detok != case["detok"].as_str().expect("detok") {
                failures.push(format!("{text:?} detok: got {detok:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Single-token pieces (control tokens rendered), byte for byte.
    for (id, bytes) in g["pieces_special"].as_object().expect("pieces") {
        let id: u32 = id.parse().unwrap();
        let want: Vec<u8> = bytes
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(
            c.tokenizer.piece(id).unwrap(),
            want.as_slice(),
            "piece {id}"
        );
    }
}

#[test]
fn chat_prompts_render_and_tokenise_as_llama_cpp() {
    let g = golden("chat.json");
    let (c, json_tok) = tokenizers();
    let t = c
        .compiled_chat_template()
        .expect("compiles")
        .expect("present");
    let chats = g["chats"].as_array().expect("chats");
    assert!(chats.len() >= 3);
    for chat in chats {
        let messages: Vec<ChatMessage> =
            serde_json::from_value(chat["messages"].clone()).expect("messages");
        let prompt = t.render(&messages, true).expect("render");
        assert_eq!(prompt, chat["prompt"].as_str().unwrap());
        let want = ids(&chat["prompt_ids"]);
        // llama-cpp-python's chat handler: no BOS added by the tokenizer (the template owns
        // it), special tokens parsed.
        assert_eq!(c.tokenizer.encode(&prompt, false, true).unwrap(), want);
        assert_eq!(json_tok.encode(&prompt, false, true).unwrap(), want);
        // The reference's greedy answer detokenises to its text.
        let generated: Vec<u32> = ids(&chat["generated_ids"])
            .into_iter()
            .filter(|i| !c.config.special.eog.contains(i))
            .collect();
        assert_eq!(
            c.tokenizer.decode(&generated, false),
            chat["text"].as_str().unwrap()
        );
    }
    // llama.cpp's end-of-generation set for this vocabulary is ours.
    let mut eog = ids(&g["eog_ids"]);
    let mut ours = c.config.special.eog.clone();
    eog.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, eog);
}
