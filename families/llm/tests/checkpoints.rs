//! Synthetic checkpoints (no asset needed): the same tiny model as a GGUF (Q/K permuted as
//! llama.cpp stores them) and as a Hugging Face directory read to the same canonical
//! tensors and the same q/k projections; Qwen2/Qwen3 features read from the tensors; every
//! kind of bad input a typed error.

use tether_llm::checkpoint::Checkpoint;
use tether_llm::config::RopeScaling;
use tether_llm::gguf::{GgufFile, GgufWriter, Value};
use tether_llm::quant::TensorType;
use tether_llm::testing::{tiny_config, tiny_gguf, tiny_hf_dir, values};
use tether_llm::{LlmConfig, LlmError, TensorRef};

fn tmp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tether-llm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn open(w: &GgufWriter) -> Result<Checkpoint, LlmError> {
    Checkpoint::from_gguf_file(GgufFile::from_vec(w.to_bytes())?)
}

fn f32s(t: &TensorRef<'_>) -> Vec<f32> {
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `W x` for an f32 weight `[n_in, n_out]`.
fn project(t: &TensorRef<'_>, x: &[f32]) -> Vec<f32> {
    let w = f32s(t);
    let n_in = t.dims[0] as usize;
    w.chunks_exact(n_in)
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

#[test]
fn gguf_and_hf_directory_give_the_same_canonical_model() {
    for arch in ["llama", "qwen2", "qwen3"] {
        let mut cfg = tiny_config();
        cfg.architecture = arch.into();
        cfg.qkv_bias = arch == "qwen2";
        cfg.qk_norm = arch == "qwen3";
        let g = open(&tiny_gguf(&cfg)).unwrap_or_else(|e| panic!("{arch} gguf: {e}"));
        let dir = tmp(&format!("hf-{arch}"));
        tiny_hf_dir(&cfg, &dir).unwrap();
        let h = Checkpoint::from_hf_dir(&dir).unwrap_or_else(|e| panic!("{arch} hf: {e}"));
        assert_eq!(g.config, h.config, "{arch}");
        assert_eq!(g.config.qkv_bias, arch == "qwen2");
        assert_eq!(g.config.qk_norm, arch == "qwen3");
        assert_eq!(g.chat_template, h.chat_template);
        assert_eq!(h.generation.temperature, Some(0.2));
        assert_eq!(g.weights.len(), h.weights.len());
        for (name, ty, dims) in g.weights.infos() {
            let (a, b) = (
                g.weights.require(name).unwrap(),
                h.weights.require(name).unwrap(),
            );
            assert_eq!((b.ty, b.dims), (ty, dims), "{arch} {name}");
            assert!(a.data == b.data, "{arch} {name}: canonical bytes differ");
        }
        // The q/k projections of one input agree (the permutation undone).
        let x = values(cfg.n_embd as usize, 7);
        let (mg, mh) = (
            g.weights.model(&g.config).unwrap(),
            h.weights.model(&h.config).unwrap(),
        );
        for l in 0..cfg.n_layer as usize {
            assert_eq!(
                project(&mg.layers[l].attn_q, &x),
                project(&mh.layers[l].attn_q, &x)
            );
            assert_eq!(
                project(&mg.layers[l].attn_k, &x),
                project(&mh.layers[l].attn_k, &x)
            );
        }
        for text in ["Hello!", "<|im_start|>user\nx<|im_end|>"] {
            assert_eq!(
                g.tokenizer.encode(text, true, true).unwrap(),
                h.tokenizer.encode(text, true, true).unwrap()
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn llama_gguf_q_rows_are_unpermuted() {
    // The GGUF stores row 2i+s of each head at HF row s*hd/2+i: reading it back gives the HF
    // (unpermuted) values the writer started from.
    let cfg = tiny_config();
    let g = open(&tiny_gguf(&cfg)).unwrap();
    let dir = tmp("perm");
    tiny_hf_dir(&cfg, &dir).unwrap();
    let raw = GgufFile::from_vec(tiny_gguf(&cfg).to_bytes()).unwrap();
    let t = raw.header.tensor("blk.0.attn_q.weight").unwrap();
    let stored = raw.data(t);
    let canon = g.weights.require("blk.0.attn_q.weight").unwrap();
    assert_ne!(stored, canon.data, "the stored rows are permuted");
    let row = cfg.n_embd as usize * 4;
    // Head 0: canonical row 1 (s=0, i=1) is stored row 2; canonical row hd/2 is stored row 1.
    assert_eq!(&canon.data[row..2 * row], &stored[2 * row..3 * row]);
    let half = cfg.head_dim as usize / 2;
    assert_eq!(
        &canon.data[half * row..(half + 1) * row],
        &stored[row..2 * row]
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn with_kv(key: &str, v: Value) -> GgufWriter {
    let mut w = tiny_gguf(&tiny_config());
    match w.metadata.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = v,
        None => {
            w.kv(key, v);
        }
    }
    w
}

fn err(w: &GgufWriter) -> String {
    open(w).map(|_| ()).unwrap_err().to_string()
}

#[test]
fn bad_hyper_parameters_and_architectures_are_named() {
    let e = err(&with_kv("llama.context_length", Value::U32(0)));
    assert!(e.contains("n_ctx_train (context length)`: 0"), "{e}");
    let e = err(&with_kv(
        "general.architecture",
        Value::String("gemma2".into()),
    ));
    assert!(e.contains("architecture `gemma2` is not supported"), "{e}");
    let e = err(&with_kv("llama.rope.dimension_count", Value::U32(8)));
    assert!(e.contains("partial rotary"), "{e}");
    let e = err(&with_kv(
        "llama.rope.scaling.type",
        Value::String("yarn".into()),
    ));
    assert!(e.contains("`yarn` is not supported"), "{e}");
    let e = err(&with_kv("llama.attention.head_count_kv", Value::U32(3)));
    assert!(e.contains("3 does not divide n_head 4"), "{e}");
    // A rotary base at or below 1: the frequencies would grow (NaN angles for a tiny one).
    let e = err(&with_kv("llama.rope.freq_base", Value::F32(1e-45)));
    assert!(
        e.contains("rope_theta`: 1e-45 (accepted: finite and > 1)"),
        "{e}"
    );
    // Heads that do not split the embedding, none given a key length: named as such.
    let mut w = with_kv("llama.attention.head_count", Value::U32(7));
    w.metadata
        .retain(|(k, _)| k != "llama.attention.key_length");
    w.metadata
        .retain(|(k, _)| k != "llama.attention.head_count_kv");
    let e = err(&w);
    assert!(e.contains("7 does not divide embedding_length"), "{e}");
    let mut w = with_kv("llama.attention.head_count", Value::U32(0));
    w.metadata
        .retain(|(k, _)| k != "llama.attention.key_length");
    assert!(
        err(&w).contains("head_count)`: 0 (accepted 1 or more)"),
        "{}",
        err(&w)
    );
    // One layer fewer than the tensors hold: the layer count is named, not the tensor.
    let n = tiny_config().n_layer;
    let e = err(&with_kv("llama.block_count", Value::U32(n - 1)));
    assert!(
        e.contains(&format!(
            "block_count)`: {}, but tensor `blk.{}.",
            n - 1,
            n - 1
        )),
        "{e}"
    );
    let e = err(&with_kv("llama.expert_count", Value::U32(8)));
    assert!(e.contains("expert_count` = 8 is not supported"), "{e}");
    let e = err(&with_kv("llama.block_count", Value::String("two".into())));
    assert!(e.contains("`llama.block_count` is string"), "{e}");
    let mut w = tiny_gguf(&tiny_config());
    w.metadata
        .retain(|(k, _)| k != "llama.attention.layer_norm_rms_epsilon");
    assert!(err(&w).contains("layer_norm_rms_epsilon` is missing"));
}

#[test]
fn tensor_shape_type_and_vocabulary_mismatches_are_named() {
    let cfg = tiny_config();
    // A shape that disagrees with the hyper-parameters.
    let mut w = tiny_gguf(&cfg);
    let t = w
        .tensors
        .iter_mut()
        .find(|t| t.0 == "blk.1.ffn_down.weight")
        .unwrap();
    t.2 = vec![64, 128];
    let e = err(&w);
    assert!(
        e.contains("blk.1.ffn_down.weight") && e.contains("[64, 128], expected [128, 64]"),
        "{e}"
    );
    // A quantisation this build does not read: patch the type code to q5_1 (7).
    let mut bytes = tiny_gguf(&cfg).to_bytes();
    let name = b"blk.0.attn_norm.weight";
    let at = bytes.windows(name.len()).position(|x| x == name).unwrap() + name.len();
    let ty = at + 4 + 8; // n_dims, one dimension
    assert_eq!(bytes[ty..ty + 4], 0u32.to_le_bytes());
    bytes[ty..ty + 4].copy_from_slice(&7u32.to_le_bytes());
    let e = open_bytes(bytes).map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains("`blk.0.attn_norm.weight`: ggml type 7 (q5_1) is not supported"),
        "{e}"
    );
    // A norm weight stored quantised.
    let mut w = tiny_gguf(&cfg);
    let t = w
        .tensors
        .iter_mut()
        .find(|t| t.0 == "output_norm.weight")
        .unwrap();
    t.1 = TensorType::Q8_0;
    t.3 = vec![0; 2 * 34];
    assert!(err(&w).contains("`output_norm.weight` is Q8_0"));
    // A missing tensor; an unknown one.
    let mut w = tiny_gguf(&cfg);
    w.tensors.retain(|t| t.0 != "blk.1.attn_v.weight");
    assert!(err(&w).contains("`blk.1.attn_v.weight` is missing"));
    let mut w = tiny_gguf(&cfg);
    w.tensor(
        "blk.0.ffn_gate_exps.weight",
        TensorType::F32,
        &[4],
        vec![0; 16],
    );
    assert!(err(&w).contains("`blk.0.ffn_gate_exps.weight` is not part"));
    // A tokenizer with more ids than embedding rows.
    let mut w = tiny_gguf(&cfg);
    for (k, v) in w.metadata.iter_mut() {
        match (k.as_str(), v) {
            ("tokenizer.ggml.tokens", Value::Array(a)) => a.push(Value::String("~~".into())),
            ("tokenizer.ggml.token_type", Value::Array(a)) => a.push(Value::I32(1)),
            _ => {}
        }
    }
    let e = err(&w);
    assert!(
        e.contains("tokenizer id 96 (`~~`) is beyond the embedding's 96 rows"),
        "{e}"
    );
}

#[test]
fn bad_tokenizers_and_templates_are_named() {
    let e = err(&with_kv(
        "tokenizer.ggml.pre",
        Value::String("chameleon".into()),
    ));
    assert!(
        e.contains("tokenizer.ggml.pre `chameleon` is not supported"),
        "{e}"
    );
    let e = err(&with_kv(
        "tokenizer.ggml.model",
        Value::String("llama".into()),
    ));
    assert!(
        e.contains("tokenizer.ggml.model `llama` is not supported"),
        "{e}"
    );
    let e = err(&with_kv(
        "tokenizer.ggml.merges",
        Value::Array(vec![Value::String("ab".into())]),
    ));
    assert!(e.contains("merges[0] `ab` is not two tokens"), "{e}");
    // Invalid UTF-8 in the template string: the GGUF reader names the key.
    let mut bytes = tiny_gguf(&tiny_config()).to_bytes();
    let at = bytes.windows(11).position(|x| x == b"<|im_start|").unwrap();
    let at = at
        + bytes[at..]
            .windows(12)
            .skip(1)
            .position(|x| x == b"{% for m in ")
            .unwrap_or(0);
    bytes[at + 1] = 0xff;
    let e = GgufFile::from_vec(bytes).unwrap_err().to_string();
    assert!(e.contains("is not valid UTF-8"), "{e}");
    // HF directory: invalid UTF-8 in chat_template.jinja and in tokenizer.json.
    let cfg = tiny_config();
    let dir = tmp("badtok");
    tiny_hf_dir(&cfg, &dir).unwrap();
    std::fs::write(dir.join("chat_template.jinja"), b"{{ bos_token }}\xff").unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("chat_template.jinja is not UTF-8"), "{e}");
    std::fs::remove_file(dir.join("chat_template.jinja")).unwrap();
    let mut t = std::fs::read(dir.join("tokenizer.json")).unwrap();
    t[10] = 0xff;
    std::fs::write(dir.join("tokenizer.json"), t).unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.starts_with("tokenizer:"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_hf_directories_are_named() {
    let cfg = tiny_config();
    let dir = tmp("badhf");
    tiny_hf_dir(&cfg, &dir).unwrap();
    let st = std::fs::read(dir.join("model.safetensors")).unwrap();
    // Truncated safetensors.
    std::fs::write(dir.join("model.safetensors"), &st[..st.len() - 10]).unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("run past the data"), "{e}");
    // Corrupt header length.
    let mut x = st.clone();
    x[0] ^= 0x40;
    std::fs::write(dir.join("model.safetensors"), &x).unwrap();
    assert!(Checkpoint::from_hf_dir(&dir).is_err());
    std::fs::write(dir.join("model.safetensors"), &st).unwrap();
    // config.json: another architecture, a missing field, an unsupported activation, bad JSON.
    let base: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let check = |patch: &dyn Fn(&mut serde_json::Value), want: &str| {
        let mut v = base.clone();
        patch(&mut v);
        std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
        let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
        assert!(e.contains(want), "{e} lacks {want}");
    };
    check(
        &|v| v["model_type"] = "mamba".into(),
        "architecture `mamba`",
    );
    check(
        &|v| {
            v.as_object_mut().unwrap().remove("hidden_size");
        },
        "no integer `hidden_size`",
    );
    check(
        &|v| v["hidden_act"] = "gelu".into(),
        "`gelu` is not supported",
    );
    check(
        &|v| v["max_position_embeddings"] = 0.into(),
        "context length",
    );
    check(
        &|v| v["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
        "type `yarn`",
    );
    check(&|v| v["intermediate_size"] = 96.into(), "ffn_gate.weight");
    std::fs::write(dir.join("config.json"), b"{ not json").unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("`config.json`: not valid JSON"), "{e}");
    // Llama 3 scaling from config.json becomes rope_freqs.weight.
    let mut v = base.clone();
    v["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let c = Checkpoint::from_hf_dir(&dir).unwrap();
    assert!(matches!(
        c.config.rope_scaling,
        RopeScaling::FreqFactors { llama3: Some(_) }
    ));
    let f = c.weights.require("rope_freqs.weight").unwrap();
    assert_eq!(f.dims, [8]);
    let inv = c.config.rope_inv_freq(f.as_f32()).unwrap();
    assert_eq!(inv.len(), 8);
    // transformers 5's `rope_parameters` (theta and scaling in one map).
    let mut v = base.clone();
    v.as_object_mut().unwrap().remove("rope_theta");
    v["rope_parameters"] = serde_json::json!({"rope_theta": 500000.0, "rope_type": "default"});
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let c = Checkpoint::from_hf_dir(&dir).unwrap();
    assert_eq!(
        (c.config.rope_theta, c.config.rope_scaling),
        (500000.0, RopeScaling::None)
    );
    v["rope_parameters"] = serde_json::json!({"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let c = Checkpoint::from_hf_dir(&dir).unwrap();
    assert!(
        matches!(c.config.rope_scaling, RopeScaling::FreqFactors { llama3: Some(p) } if p.factor == 32.0)
    );
    assert!(c.weights.get("rope_freqs.weight").unwrap().is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sharded_safetensors_are_read_and_checked() {
    let cfg: LlmConfig = tiny_config();
    let dir = tmp("shards");
    tiny_hf_dir(&cfg, &dir).unwrap();
    let one = Checkpoint::from_hf_dir(&dir).unwrap();
    // Split model.safetensors into two shards with an index.
    let st = tether_llm::safetensors::SafetensorsFile::open(dir.join("model.safetensors")).unwrap();
    type Shard = Vec<(String, Vec<u64>, Vec<u8>)>;
    let mut shards: [Shard; 2] = [vec![], vec![]];
    for (i, t) in st.tensors.iter().enumerate() {
        shards[i % 2].push((t.name.clone(), t.shape.clone(), st.data(t).to_vec()));
    }
    drop(st);
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let mut map = serde_json::Map::new();
    for (k, s) in shards.iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", k + 1);
        let refs: Vec<(&str, TensorType, &[u64], &[u8])> = s
            .iter()
            .map(|(n, sh, d)| (n.as_str(), TensorType::F32, sh.as_slice(), d.as_slice()))
            .collect();
        std::fs::write(dir.join(&file), tether_llm::safetensors::write(&refs)).unwrap();
        for (n, _, _) in s {
            map.insert(n.clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let two = Checkpoint::from_hf_dir(&dir).unwrap();
    for (name, _, _) in one.weights.infos() {
        assert!(one.weights.require(name).unwrap().data == two.weights.require(name).unwrap().data);
    }
    // The index names a shard that is missing, then a tensor in the wrong shard.
    let mut bad = index.clone();
    bad["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors".into();
    std::fs::write(dir.join("model.safetensors.index.json"), bad.to_string()).unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    let mut bad = index.clone();
    let other = if map["model.norm.weight"] == "model-00001-of-00002.safetensors" {
        "model-00002-of-00002.safetensors"
    } else {
        "model-00001-of-00002.safetensors"
    };
    bad["weight_map"]["model.norm.weight"] = other.into();
    std::fs::write(dir.join("model.safetensors.index.json"), bad.to_string()).unwrap();
    let e = Checkpoint::from_hf_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("`model.norm.weight` is mapped to"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn truncated_real_and_synthetic_ggufs_never_panic() {
    let bytes = tiny_gguf(&tiny_config()).to_bytes();
    for n in (0..bytes.len()).step_by(7) {
        assert!(open_bytes(bytes[..n].to_vec()).is_err(), "cut at {n}");
    }
    // Byte mutations anywhere before the data: errors or (for a harmless change) a model,
    // never a panic.
    let data_start = GgufFile::from_vec(bytes.clone())
        .unwrap()
        .header
        .data_offset as usize;
    for i in (0..data_start).step_by(3) {
        let mut x = bytes.clone();
        x[i] = x[i].wrapping_add(0x5b);
        let _ = open_bytes(x);
    }
}

fn open_bytes(b: Vec<u8>) -> Result<Checkpoint, LlmError> {
    Checkpoint::from_gguf_file(GgufFile::from_vec(b)?)
}
