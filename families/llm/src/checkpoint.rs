//! A checkpoint in canonical form: hyper-parameters, tensors (canonical names and layout),
//! tokenizer, chat template and generation defaults, read from a GGUF file or a Hugging Face
//! directory (the bundle gives the same through [`crate::bundle`]).
//!
//! **Architectures, by definition.** Accepted: the decoder definitions of Llama
//! (`general.architecture`/`model_type` `llama`), Qwen2 (`qwen2`) and Qwen3 (`qwen3`); every
//! difference between them is then read from the checkpoint: q/k/v biases and q/k norms from
//! the tensors present, tied embeddings from the absence of an output projection (or
//! `tie_word_embeddings`), RoPE base and scaling from the metadata, head dimension apart from
//! the width. Anything else a checkpoint declares that the forward pass would ignore (a
//! partial rotary dimension, YaRN scaling, sliding-window attention, experts, an activation
//! other than SiLU, an MLP bias) is refused with [`LlmError::Config`] naming it.
//!
//! **Q/K layout.** GGUF files of the `llama` architecture store Q/K rows permuted for
//! llama.cpp's interleaved RoPE (`convert_hf_to_gguf.py`, `LlamaModel.permute`: within each
//! head, Hugging Face row `s * head_dim/2 + i` is stored at `2i + s`). They are un-permuted
//! here, row by row (quantised blocks unchanged), into the Hugging Face order every source
//! presents ([`crate::config`]). `qwen2`/`qwen3` GGUFs are not permuted (llama.cpp runs them
//! with NeoX RoPE).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{
    Llama3Rope, LlmConfig, MAX_EOG, RopeScaling, SpecialTokens, llama3_freq_factors,
};
use crate::error::LlmError;
use crate::gguf::{GgufFile, GgufHeader};
use crate::quant::TensorType;
use crate::safetensors::open_checkpoint;
use crate::template::ChatTemplate;
use crate::tensor::{AlignedBuf, Backing, Weights};
use crate::tokenizer::{Tokenizer, pre_tokenizer};

/// Architecture names whose definition this family implements.
pub const ARCHITECTURES: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// Token texts llama.cpp treats as end of generation, whatever their type
/// (`llama-vocab.cpp`, the `special_eog_ids` text list of llama.cpp as vendored by
/// llama-cpp-python 0.3.36).
pub const EOG_TEXTS: [&str; 22] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts llama.cpp takes for the end-of-turn token when `tokenizer.ggml.eot_token_id` is
/// absent (first found).
pub const EOT_TEXTS: [&str; 11] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Fill-in-the-middle padding, repository and file-separator texts: llama.cpp makes these
/// tokens end generation too (`special_fim_pad_id`, `special_fim_rep_id`,
/// `special_fim_sep_id`, found by these texts when the GGUF keys are absent).
pub const FIM_EOG_TEXTS: [&[&str]; 3] = [
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];

/// Fill-in-the-middle prefix/suffix/middle texts: llama.cpp forces these tokens to control
/// type (they do not end generation).
pub const FIM_CONTROL_TEXTS: [&str; 24] = [
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

/// Whether llama.cpp forces a token with this text to control type when loading a GGUF
/// ("control-looking token ... its type will be overridden"): the end-of-turn,
/// end-of-message, fill-in-the-middle and end-of-generation texts.
pub fn llama_cpp_control_text(text: &str) -> bool {
    EOG_TEXTS.contains(&text)
        || EOT_TEXTS.contains(&text)
        || FIM_EOG_TEXTS.iter().any(|l| l.contains(&text))
        || FIM_CONTROL_TEXTS.contains(&text)
}

/// Ids given by the checkpoint's own keys (GGUF `tokenizer.ggml.*_token_id`).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedIds {
    /// EOS.
    pub eos: Option<u32>,
    /// End of turn.
    pub eot: Option<u32>,
    /// End of message.
    pub eom: Option<u32>,
    /// FIM pad, repository, file separator.
    pub fim: [Option<u32>; 3],
}

/// llama.cpp's end-of-turn id and end-of-generation set: the keyed EOS/EOT/EOM, the FIM
/// pad/repository/separator tokens (keyed, else found by [`FIM_EOG_TEXTS`]), the EOT found by
/// [`EOT_TEXTS`] when not keyed, and every token whose text is in [`EOG_TEXTS`]. `find` maps a
/// text to its id. Where llama.cpp takes "the first found" in hash order, the first text of
/// the list that is present is taken here. Sorted ascending.
pub fn llama_cpp_eog(
    find: &dyn Fn(&str) -> Option<u32>,
    keyed: KeyedIds,
) -> (Option<u32>, Vec<u32>) {
    let first = |list: &[&str]| list.iter().find_map(|t| find(t));
    let eot = keyed.eot.or_else(|| first(&EOT_TEXTS));
    let eom = keyed.eom.or_else(|| find("<|eom_id|>"));
    let mut eog = Vec::new();
    for (k, list) in keyed.fim.iter().zip(FIM_EOG_TEXTS) {
        if let Some(id) = k.or_else(|| first(list)) {
            push_unique(&mut eog, id);
        }
    }
    for t in EOG_TEXTS {
        if let Some(id) = find(t) {
            push_unique(&mut eog, id);
        }
    }
    for id in [keyed.eos, eot, eom].into_iter().flatten() {
        push_unique(&mut eog, id);
    }
    eog.sort_unstable();
    (eot, eog)
}

/// Sampling defaults the checkpoint recommends (Hugging Face `generation_config.json`);
/// `None` where it says nothing. A GGUF carries none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerationDefaults {
    /// Softmax temperature.
    pub temperature: Option<f32>,
    /// Top-k.
    pub top_k: Option<u32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Min-p.
    pub min_p: Option<f32>,
    /// Repetition penalty (1 = none).
    pub repetition_penalty: Option<f32>,
    /// `do_sample: false` (greedy) when `Some(false)`.
    pub do_sample: Option<bool>,
    /// Maximum new tokens.
    pub max_new_tokens: Option<u32>,
}

/// Where a checkpoint came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A GGUF file.
    Gguf(PathBuf),
    /// A Hugging Face directory.
    HfDir(PathBuf),
    /// An `llm` bundle.
    Bundle(PathBuf),
    /// Built in memory.
    Memory,
}

/// A checkpoint in canonical form.
#[derive(Debug)]
pub struct Checkpoint {
    /// Hyper-parameters (validated).
    pub config: LlmConfig,
    /// Tensors, canonical names and layout (not yet checked against `config`: see
    /// [`Weights::model`], which [`Checkpoint::check`] runs).
    pub weights: Weights,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The checkpoint's own chat template (Jinja), if it has one.
    pub chat_template: Option<String>,
    /// Sampling defaults.
    pub generation: GenerationDefaults,
    /// Where it came from.
    pub source: Source,
}

impl Checkpoint {
    /// Check everything against everything: hyper-parameters, every tensor's presence,
    /// shape and type, and that every token id the tokenizer can produce has an embedding
    /// row.
    ///
    /// # Errors
    /// [`LlmError::Config`], the tensor errors of [`Weights::model`],
    /// [`LlmError::VocabMismatch`].
    pub fn check(&self) -> Result<(), LlmError> {
        self.config.validate()?;
        self.weights.model(&self.config)?;
        check_vocab(&self.tokenizer, self.config.n_vocab)
    }

    /// Open whatever `path` is: a Hugging Face directory, a GGUF file (magic `GGUF`) or an
    /// `llm` bundle (memory-mapped, sections CRC-checked on first access).
    ///
    /// # Errors
    /// [`LlmError::Io`] when the file cannot be read; [`LlmError::Section`] for a file that
    /// is neither; the errors of the reader it is.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint, LlmError> {
        use std::io::Read as _;
        let path = path.as_ref();
        if path.is_dir() {
            return Self::from_hf_dir(path);
        }
        let mut magic = [0u8; 8];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut magic))
            .map_err(|source| LlmError::Io {
                path: path.to_path_buf(),
                op: "reading",
                source,
            })?;
        if n >= 4 && magic[..4] == crate::gguf::MAGIC {
            Self::from_gguf(path)
        } else if n == 8 && magic == tether_bundle::MAGIC {
            let b = tether_bundle::Bundle::open(path, tether_bundle::Verify::Lazy)?;
            Self::from_bundle(std::sync::Arc::new(b))
        } else {
            Err(LlmError::section(
                path.display().to_string(),
                format!(
                    "neither a GGUF file nor a bundle nor a directory (starts with {:02x?})",
                    &magic[..n]
                ),
            ))
        }
    }

    /// The checkpoint's chat template compiled, with its BOS and EOS texts as `bos_token` and
    /// `eos_token` (empty when the model has none); `None` when it has no template.
    ///
    /// # Errors
    /// [`LlmError::Template`] for a template that does not compile.
    pub fn compiled_chat_template(&self) -> Result<Option<ChatTemplate>, LlmError> {
        let text = |id: Option<u32>| {
            id.and_then(|i| self.tokenizer.piece(i))
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        self.chat_template
            .as_deref()
            .map(|t| {
                ChatTemplate::new(
                    t,
                    &text(self.config.special.bos),
                    &text(self.config.special.eos),
                )
            })
            .transpose()
    }

    /// Open a GGUF file (memory-mapped; tensors zero-copy but for un-permuted Q/K).
    ///
    /// # Errors
    /// [`LlmError::Gguf`] for a malformed file; [`LlmError::UnsupportedArchitecture`];
    /// [`LlmError::Config`] for a missing or unsupported hyper-parameter; the tensor and
    /// tokenizer errors of [`check`](Self::check) and [`Tokenizer::from_gguf`].
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Checkpoint, LlmError> {
        let path = path.as_ref();
        let f = GgufFile::open(path)?;
        let mut c = Self::from_gguf_file(f)?;
        c.source = Source::Gguf(path.to_path_buf());
        Ok(c)
    }

    /// [`from_gguf`](Self::from_gguf) for a parsed file (in memory or mapped).
    ///
    /// # Errors
    /// As [`from_gguf`](Self::from_gguf).
    pub fn from_gguf_file(f: GgufFile) -> Result<Checkpoint, LlmError> {
        let (h, backing) = f.into_backing();
        let config = config_from_gguf(&h)?;
        let tokenizer = Tokenizer::from_gguf(&h, &config.special)?;
        let chat_template = h.opt_str("tokenizer.chat_template")?.map(str::to_owned);
        let mut weights = Weights::default();
        let b = weights.add_backing(backing);
        let permuted = config.architecture == "llama";
        for t in &h.tensors {
            weights.insert(
                t.name.clone(),
                t.ty,
                t.dims.clone(),
                b,
                t.offset as usize,
                t.size as usize,
            );
        }
        if permuted {
            for i in 0..config.n_layer {
                for (name, heads) in [
                    (format!("blk.{i}.attn_q.weight"), config.n_head),
                    (format!("blk.{i}.attn_k.weight"), config.n_head_kv),
                    (format!("blk.{i}.attn_q.bias"), config.n_head),
                    (format!("blk.{i}.attn_k.bias"), config.n_head_kv),
                ] {
                    let Some(t) = weights.get(&name)? else {
                        continue;
                    };
                    let rows = if name.ends_with(".bias") {
                        t.elems()
                    } else {
                        t.rows()
                    };
                    let row_bytes = t.data.len() / rows.max(1);
                    if rows != (heads * config.head_dim) as usize {
                        return Err(LlmError::TensorShape {
                            name,
                            expected: vec![config.n_embd as u64, (heads * config.head_dim) as u64],
                            found: t.dims.to_vec(),
                        });
                    }
                    let (ty, dims) = (t.ty, t.dims.to_vec());
                    let buf =
                        unpermute_rows(t.data, heads as usize, config.head_dim as usize, row_bytes);
                    weights.insert_owned(name, ty, dims, buf);
                }
            }
        }
        let c = Checkpoint {
            config,
            weights,
            tokenizer,
            chat_template,
            generation: GenerationDefaults::default(),
            source: Source::Memory,
        };
        c.check()?;
        Ok(c)
    }

    /// Open a Hugging Face directory: `config.json`, `model.safetensors` or the shards of
    /// `model.safetensors.index.json` (memory-mapped, zero-copy; F32/F16/BF16 kept as
    /// stored), `tokenizer.json`, `tokenizer_config.json` (chat template, BOS/EOS policy,
    /// special tokens), `chat_template.jinja` if present, `generation_config.json` if present.
    ///
    /// # Errors
    /// [`LlmError::Io`]/[`LlmError::Json`] for a missing or malformed file (named);
    /// [`LlmError::Safetensors`]; [`LlmError::UnsupportedArchitecture`];
    /// [`LlmError::Config`]; [`LlmError::UnexpectedTensor`] for a tensor with no canonical
    /// name; the errors of [`check`](Self::check).
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Checkpoint, LlmError> {
        let dir = dir.as_ref();
        let cfg_json = read_json(dir, "config.json")?.ok_or_else(|| LlmError::Io {
            path: dir.join("config.json"),
            op: "reading",
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file (a Hugging Face model directory holds config.json, the \
                 model.safetensors weights and tokenizer.json)",
            ),
        })?;
        let tok_cfg = read_json(dir, "tokenizer_config.json")?.unwrap_or_default();
        let gen_cfg = read_json(dir, "generation_config.json")?.unwrap_or_default();
        let tok_path = dir.join("tokenizer.json");
        let tok_bytes = tether_bundle::files::read_regular(&tok_path)
            .map_err(|e| LlmError::Tokenizer(format!("reading `{}`: {e}", tok_path.display())))?;

        let files = open_checkpoint(dir)?;
        let mut weights = Weights::default();
        let mut lm_head = false;
        let mut staged = Vec::new();
        for f in files {
            let infos: Vec<_> = f.tensors.clone();
            let Some(map) = f.into_map() else { continue };
            let b = weights.add_backing(Backing::Mmap(map));
            for t in infos {
                if t.name.ends_with("rotary_emb.inv_freq") {
                    continue; // a buffer older transformers saved; recomputed from theta
                }
                let Some(name) = canonical_name(&t.name) else {
                    return Err(LlmError::UnexpectedTensor { name: t.name });
                };
                lm_head |= name == "output.weight";
                staged.push((
                    name,
                    t.ty,
                    t.ne(),
                    b,
                    t.begin as usize,
                    (t.end - t.begin) as usize,
                ));
            }
        }
        let mut config = config_from_hf(&cfg_json, lm_head)?;
        for (name, ty, ne, b, off, len) in staged {
            if name == "output.weight" && config.tied_embeddings {
                continue; // transformers ties it to the embedding: the stored copy is unused
            }
            weights.insert(name, ty, ne, b, off, len);
        }
        config.qkv_bias = weights.get("blk.0.attn_q.bias")?.is_some();
        config.qk_norm = weights.get("blk.0.attn_q_norm.weight")?.is_some();
        if let RopeScaling::FreqFactors { llama3: Some(p) } = config.rope_scaling {
            let f = llama3_freq_factors(config.rope_theta, config.head_dim, &p);
            let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
            weights.insert_owned(
                "rope_freqs.weight".into(),
                TensorType::F32,
                vec![f.len() as u64],
                AlignedBuf::from_bytes(&bytes),
            );
        }

        // Tokenizer and special tokens.
        let add_bos_default = hf_post_processor_adds_bos(&tok_bytes);
        let probe = Tokenizer::from_json(&tok_bytes, &SpecialTokens::default())?;
        let tok_id = |key: &str| -> Option<u32> {
            let v = tok_cfg.get(key)?;
            let s = v.as_str().or_else(|| v.get("content")?.as_str())?;
            probe.token_to_id(s)
        };
        let gen_id = |key: &str| -> Vec<u32> {
            match gen_cfg.get(key).or_else(|| cfg_json.get(key)) {
                Some(serde_json::Value::Number(n)) => {
                    n.as_u64().map(|v| vec![v as u32]).unwrap_or_default()
                }
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .filter_map(|v| v.as_u64().map(|v| v as u32))
                    .collect(),
                _ => vec![],
            }
        };
        let bos = tok_id("bos_token").or_else(|| gen_id("bos_token_id").first().copied());
        let eos_list = gen_id("eos_token_id");
        let eos = tok_id("eos_token").or_else(|| eos_list.first().copied());
        let pad = tok_id("pad_token").or_else(|| gen_id("pad_token_id").first().copied());
        let add_bos = tok_cfg
            .get("add_bos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(add_bos_default);
        let add_eos = tok_cfg
            .get("add_eos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        // End of generation: the generation config's EOS list, and llama.cpp's rules over
        // the special (added) tokens, so a model gives the same set from either source.
        let added: HashMap<String, u32> = probe.special_tokens().collect();
        let (eot, mut eog) = llama_cpp_eog(
            &|t| added.get(t).copied(),
            KeyedIds {
                eos,
                ..KeyedIds::default()
            },
        );
        for id in eos_list {
            push_unique(&mut eog, id);
        }
        eog.sort_unstable();
        if eog.len() > MAX_EOG {
            return Err(LlmError::config(
                "eog",
                format!(
                    "{} end-of-generation ids {eog:?} (at most {MAX_EOG})",
                    eog.len()
                ),
            ));
        }
        config.special = SpecialTokens {
            bos,
            eos,
            eot,
            pad,
            add_bos,
            add_eos,
            eog,
        };
        config.validate()?;
        let tokenizer = Tokenizer::from_json(&tok_bytes, &config.special)?;

        let chat_template = match std::fs::read(dir.join("chat_template.jinja")) {
            Ok(b) => Some(String::from_utf8(b).map_err(|e| {
                LlmError::Template(format!("chat_template.jinja is not UTF-8: {e}"))
            })?),
            Err(_) => match tok_cfg.get("chat_template") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
                _ => None,
            },
        };
        let f = |k: &str| gen_cfg.get(k).and_then(|v| v.as_f64()).map(|v| v as f32);
        let generation = GenerationDefaults {
            temperature: f("temperature"),
            top_k: gen_cfg
                .get("top_k")
                .and_then(|v| v.as_u64())
                .map(|v| v as u32),
            top_p: f("top_p"),
            min_p: f("min_p"),
            repetition_penalty: f("repetition_penalty"),
            do_sample: gen_cfg.get("do_sample").and_then(|v| v.as_bool()),
            max_new_tokens: gen_cfg
                .get("max_new_tokens")
                .and_then(|v| v.as_u64())
                .map(|v| v as u32),
        };
        let c = Checkpoint {
            config,
            weights,
            tokenizer,
            chat_template,
            generation,
            source: Source::HfDir(dir.to_path_buf()),
        };
        c.check()?;
        Ok(c)
    }
}

fn push_unique(v: &mut Vec<u32>, id: u32) {
    if !v.contains(&id) {
        v.push(id);
    }
}

/// Every id the tokenizer can produce must have an embedding row.
///
/// # Errors
/// [`LlmError::VocabMismatch`] naming the largest id and its text.
pub fn check_vocab(tok: &Tokenizer, n_vocab: u32) -> Result<(), LlmError> {
    if tok.len() > n_vocab as usize {
        let id = tok.len() as u32 - 1;
        let token = String::from_utf8_lossy(tok.piece(id).unwrap_or_default()).into_owned();
        return Err(LlmError::VocabMismatch { id, token, n_vocab });
    }
    Ok(())
}

/// Un-permute GGUF `llama` Q/K rows into Hugging Face order: for each of `heads` heads of
/// `head_dim` rows, output row `s * head_dim/2 + i` is input row `2i + s`. Each row is
/// `row_bytes` bytes (whole quantised blocks, or one element for a bias).
pub(crate) fn unpermute_rows(
    data: &[u8],
    heads: usize,
    head_dim: usize,
    row_bytes: usize,
) -> AlignedBuf {
    let mut out = AlignedBuf::zeroed(data.len());
    let o = out.bytes_mut();
    let half = head_dim / 2;
    for h in 0..heads {
        for s in 0..2 {
            for i in 0..half {
                let src = (h * head_dim + 2 * i + s) * row_bytes;
                let dst = (h * head_dim + s * half + i) * row_bytes;
                o[dst..dst + row_bytes].copy_from_slice(&data[src..src + row_bytes]);
            }
        }
    }
    out
}

/// The inverse of `unpermute_rows` (Hugging Face order to GGUF `llama` order), as
/// llama.cpp's converter applies it; for tests and writers.
pub fn permute_rows(data: &[u8], heads: usize, head_dim: usize, row_bytes: usize) -> Vec<u8> {
    let mut o = vec![0u8; data.len()];
    let half = head_dim / 2;
    for h in 0..heads {
        for s in 0..2 {
            for i in 0..half {
                let dst = (h * head_dim + 2 * i + s) * row_bytes;
                let src = (h * head_dim + s * half + i) * row_bytes;
                o[dst..dst + row_bytes].copy_from_slice(&data[src..src + row_bytes]);
            }
        }
    }
    o
}

fn arch_of(name: &str) -> Result<&'static str, LlmError> {
    ARCHITECTURES
        .into_iter()
        .find(|a| *a == name)
        .ok_or_else(|| LlmError::UnsupportedArchitecture {
            arch: name.to_owned(),
        })
}

fn u32_of(field: &'static str, v: u64) -> Result<u32, LlmError> {
    u32::try_from(v).map_err(|_| LlmError::config(field, format!("{v} does not fit 32 bits")))
}

/// Hyper-parameters from GGUF metadata (keys `<arch>.*` and `tokenizer.ggml.*`, llama.cpp's
/// `llama-arch.cpp` `LLM_KV_NAMES`).
///
/// # Errors
/// [`LlmError::UnsupportedArchitecture`], [`LlmError::Config`] (missing or unsupported
/// hyper-parameter, named), [`LlmError::Gguf`] for a key of the wrong type.
pub fn config_from_gguf(h: &GgufHeader) -> Result<LlmConfig, LlmError> {
    let arch_name = h
        .opt_str("general.architecture")?
        .ok_or_else(|| LlmError::config("general.architecture", "missing"))?;
    let arch = arch_of(arch_name)?;
    let k = |s: &str| format!("{arch}.{s}");
    let req = |field: &'static str| -> Result<u32, LlmError> {
        let v = h.opt_u64(&k(field))?.ok_or_else(|| {
            LlmError::config(field, format!("metadata `{}` is missing", k(field)))
        })?;
        u32_of(field, v)
    };
    let opt = |field: &'static str| -> Result<Option<u32>, LlmError> {
        h.opt_u64(&k(field))?.map(|v| u32_of(field, v)).transpose()
    };
    for unsupported in ["expert_count", "attention.sliding_window"] {
        if let Some(v) = h.opt_u64(&k(unsupported)).ok().flatten()
            && v > 0
        {
            return Err(LlmError::config(
                "architecture feature",
                format!("`{}` = {v} is not supported", k(unsupported)),
            ));
        }
    }
    let n_layer = req("block_count")?;
    let n_embd = req("embedding_length")?;
    let n_ff = req("feed_forward_length")?;
    let n_head = req("attention.head_count")?;
    let n_head_kv = opt("attention.head_count_kv")?.unwrap_or(n_head);
    let head_dim = match opt("attention.key_length")? {
        Some(d) => d,
        // Without a key length the heads split the embedding evenly.
        None if n_head > 0 && n_embd.is_multiple_of(n_head) => n_embd / n_head,
        None if n_head > 0 => {
            return Err(LlmError::config(
                "n_head (attention.head_count)",
                format!(
                    "{n_head} does not divide embedding_length {n_embd} (and no attention.key_length gives the head size)"
                ),
            ));
        }
        None => {
            return Err(LlmError::config(
                "n_head (attention.head_count)",
                "0 (accepted 1 or more)",
            ));
        }
    };
    if let Some(v) = opt("attention.value_length")?
        && v != head_dim
    {
        return Err(LlmError::config(
            "attention.value_length",
            format!("{v} differs from the key length {head_dim} (not supported)"),
        ));
    }
    if let Some(r) = opt("rope.dimension_count")?
        && r != head_dim
    {
        return Err(LlmError::config(
            "rope.dimension_count",
            format!("{r}: partial rotary embedding (head_dim {head_dim}) is not supported"),
        ));
    }
    let n_ctx_train = req("context_length")?;
    let rope_theta = h.opt_f64(&k("rope.freq_base"))?.unwrap_or(10000.0) as f32;
    let norm_eps = h
        .opt_f64(&k("attention.layer_norm_rms_epsilon"))?
        .ok_or_else(|| {
            LlmError::config(
                "norm_eps",
                format!(
                    "metadata `{}` is missing",
                    k("attention.layer_norm_rms_epsilon")
                ),
            )
        })? as f32;
    let has = |n: &str| h.tensor(n).is_some();
    let rope_scaling = match h.opt_str(&k("rope.scaling.type"))? {
        None | Some("none") => {
            if has("rope_freqs.weight") {
                RopeScaling::FreqFactors { llama3: None }
            } else {
                RopeScaling::None
            }
        }
        Some("linear") => {
            let factor = h.opt_f64(&k("rope.scaling.factor"))?.unwrap_or(1.0) as f32;
            if has("rope_freqs.weight") {
                return Err(LlmError::config(
                    "rope.scaling",
                    "linear scaling together with rope_freqs.weight is not supported",
                ));
            }
            if factor == 1.0 {
                RopeScaling::None
            } else {
                RopeScaling::Linear { factor }
            }
        }
        Some(other) => {
            return Err(LlmError::config(
                "rope.scaling.type",
                format!(
                    "`{other}` is not supported (none, linear, and Llama 3 frequency factors are)"
                ),
            ));
        }
    };
    let n_vocab = match h.tensor("token_embd.weight") {
        Some(t) if t.dims.len() == 2 => u32_of("n_vocab", t.dims[1])?,
        Some(t) => {
            return Err(LlmError::TensorShape {
                name: "token_embd.weight".into(),
                expected: vec![n_embd as u64, 0],
                found: t.dims.clone(),
            });
        }
        None => {
            return Err(LlmError::MissingTensor {
                name: "token_embd.weight".into(),
            });
        }
    };
    if let Some(v) = opt("vocab_size")?
        && v != n_vocab
    {
        return Err(LlmError::config(
            "vocab_size",
            format!("metadata says {v}, token_embd.weight has {n_vocab} rows"),
        ));
    }
    let tid = |key: &str| -> Result<Option<u32>, LlmError> {
        h.opt_u64(key)?
            .map(|v| u32_of("special token id", v))
            .transpose()
    };
    let bos = tid("tokenizer.ggml.bos_token_id")?;
    let eos = tid("tokenizer.ggml.eos_token_id")?;
    let pad = tid("tokenizer.ggml.padding_token_id")?;
    let keyed = KeyedIds {
        eos,
        eot: tid("tokenizer.ggml.eot_token_id")?,
        eom: tid("tokenizer.ggml.eom_token_id")?,
        fim: [
            tid("tokenizer.ggml.fim_pad_token_id")?,
            tid("tokenizer.ggml.fim_rep_token_id")?,
            tid("tokenizer.ggml.fim_sep_token_id")?,
        ],
    };
    // llama.cpp: add_bos defaults to true for the Llama 3 pre-tokenizer, false for other
    // byte-level BPE; `tokenizer.ggml.add_bos_token` overrides.
    let pre_default = h
        .opt_str("tokenizer.ggml.pre")?
        .and_then(pre_tokenizer)
        .is_some_and(|p| p.name == "llama3");
    let add_bos = h
        .opt_bool("tokenizer.ggml.add_bos_token")?
        .unwrap_or(pre_default);
    let add_eos = h.opt_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let mut by_text: HashMap<&str, u32> = HashMap::new();
    if let Some(tokens) = h.opt_array("tokenizer.ggml.tokens")? {
        for (i, t) in tokens.iter().enumerate() {
            if let Some(s) = t.as_str() {
                by_text.insert(s, i as u32); // a later duplicate wins, as in llama.cpp
            }
        }
    }
    let (eot, eog) = llama_cpp_eog(&|t| by_text.get(t).copied(), keyed);
    if eog.len() > MAX_EOG {
        return Err(LlmError::config(
            "eog",
            format!(
                "{} end-of-generation ids {eog:?} (at most {MAX_EOG})",
                eog.len()
            ),
        ));
    }
    let all = eog;
    let c = LlmConfig {
        architecture: arch.to_owned(),
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        n_ctx_train,
        rope_theta,
        rope_scaling,
        norm_eps,
        tied_embeddings: !has("output.weight"),
        qkv_bias: has("blk.0.attn_q.bias"),
        qk_norm: has("blk.0.attn_q_norm.weight"),
        special: SpecialTokens {
            bos,
            eos,
            eot,
            pad,
            add_bos,
            add_eos,
            eog: all,
        },
    };
    c.validate()?;
    Ok(c)
}

fn read_json(dir: &Path, name: &str) -> Result<Option<serde_json::Value>, LlmError> {
    let p = dir.join(name);
    if !p.exists() {
        return Ok(None);
    }
    let bytes = tether_bundle::files::read_regular(&p).map_err(|e| LlmError::Io {
        path: p.clone(),
        op: "reading",
        source: std::io::Error::other(e.to_string()),
    })?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| LlmError::json(name, format!("not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(LlmError::json(name, "not a JSON object"));
    }
    Ok(Some(v))
}

/// Whether a `tokenizer.json`'s post-processor puts a special token first in single
/// sequences (Llama 3's `TemplateProcessing`: `<|begin_of_text|> $A`): transformers then
/// adds BOS; used when `tokenizer_config.json` has no `add_bos_token`.
fn hf_post_processor_adds_bos(json: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else {
        return false;
    };
    fn template_first_special(p: &serde_json::Value) -> bool {
        match p.get("type").and_then(|t| t.as_str()) {
            Some("TemplateProcessing") => p
                .get("single")
                .and_then(|s| s.as_array())
                .and_then(|s| s.first())
                .is_some_and(|f| f.get("SpecialToken").is_some()),
            Some("Sequence") => p
                .get("processors")
                .and_then(|s| s.as_array())
                .is_some_and(|a| a.iter().any(template_first_special)),
            _ => false,
        }
    }
    v.get("post_processor").is_some_and(template_first_special)
}

/// Hyper-parameters from a Hugging Face `config.json` (transformers' `LlamaConfig`,
/// `Qwen2Config`, `Qwen3Config` fields and defaults). `has_lm_head`: the checkpoint stores
/// `lm_head.weight`. Special tokens are filled in by the caller.
///
/// # Errors
/// [`LlmError::UnsupportedArchitecture`], [`LlmError::Json`] for a missing field,
/// [`LlmError::Config`] for an unsupported one.
pub fn config_from_hf(v: &serde_json::Value, has_lm_head: bool) -> Result<LlmConfig, LlmError> {
    let model_type = v
        .get("model_type")
        .and_then(|m| m.as_str())
        .ok_or_else(|| LlmError::json("config.json", "no string `model_type`"))?;
    let arch = arch_of(model_type)?;
    let u = |key: &str| -> Option<u64> { v.get(key).and_then(|x| x.as_u64()) };
    let req = |key: &'static str| -> Result<u32, LlmError> {
        let x =
            u(key).ok_or_else(|| LlmError::json("config.json", format!("no integer `{key}`")))?;
        u32_of(key, x)
    };
    let n_embd = req("hidden_size")?;
    let n_head = req("num_attention_heads")?;
    let n_head_kv = match u("num_key_value_heads") {
        Some(x) => u32_of("num_key_value_heads", x)?,
        None => n_head,
    };
    let head_dim = match u("head_dim") {
        Some(x) => u32_of("head_dim", x)?,
        None if n_head > 0 => n_embd / n_head,
        None => 0,
    };
    if let Some(act) = v.get("hidden_act").and_then(|a| a.as_str())
        && act != "silu"
    {
        return Err(LlmError::config(
            "hidden_act",
            format!("`{act}` is not supported (SwiGLU with silu is)"),
        ));
    }
    for flag in ["mlp_bias", "use_sliding_window"] {
        if v.get(flag).and_then(|b| b.as_bool()) == Some(true) {
            return Err(LlmError::config(
                "architecture feature",
                format!("`{flag}: true` is not supported"),
            ));
        }
    }
    if let Some(p) = v.get("partial_rotary_factor").and_then(|p| p.as_f64())
        && p != 1.0
    {
        return Err(LlmError::config(
            "partial_rotary_factor",
            format!("{p}: partial rotary embedding is not supported"),
        ));
    }
    // transformers 5 writes `rope_parameters` (`rope_theta`, `rope_type` and the scaling
    // fields in one map); transformers 4 writes `rope_theta` and `rope_scaling` apart.
    let params = v.get("rope_parameters").filter(|p| p.is_object());
    let rope_theta = params
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| v.get("rope_theta"))
        .and_then(|t| t.as_f64())
        .unwrap_or(10000.0) as f32;
    let scaling = match params {
        Some(p) => Some(p),
        None => v.get("rope_scaling").filter(|s| !s.is_null()),
    };
    let rope_scaling = match scaling {
        None => RopeScaling::None,
        Some(s) => {
            let ty = s
                .get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or("default");
            let fl = |k: &str| s.get(k).and_then(|x| x.as_f64()).map(|x| x as f32);
            match ty {
                "default" => RopeScaling::None,
                "linear" => RopeScaling::Linear {
                    factor: fl("factor").unwrap_or(1.0),
                },
                "llama3" => RopeScaling::FreqFactors {
                    llama3: Some(Llama3Rope {
                        factor: fl("factor").unwrap_or(1.0),
                        low_freq_factor: fl("low_freq_factor").unwrap_or(1.0),
                        high_freq_factor: fl("high_freq_factor").unwrap_or(4.0),
                        original_context: s
                            .get("original_max_position_embeddings")
                            .and_then(|x| x.as_u64())
                            .unwrap_or(8192) as u32,
                    }),
                },
                other => {
                    return Err(LlmError::config(
                        "rope_scaling",
                        format!("type `{other}` is not supported (default, linear, llama3 are)"),
                    ));
                }
            }
        }
    };
    let tie = v
        .get("tie_word_embeddings")
        .and_then(|t| t.as_bool())
        .unwrap_or(false);
    let c = LlmConfig {
        architecture: arch.to_owned(),
        n_layer: req("num_hidden_layers")?,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_ff: req("intermediate_size")?,
        n_vocab: req("vocab_size")?,
        n_ctx_train: req("max_position_embeddings")?,
        rope_theta,
        rope_scaling,
        norm_eps: v
            .get("rms_norm_eps")
            .and_then(|e| e.as_f64())
            .ok_or_else(|| LlmError::json("config.json", "no number `rms_norm_eps`"))?
            as f32,
        tied_embeddings: tie || !has_lm_head,
        qkv_bias: false,
        qk_norm: false,
        special: SpecialTokens::default(),
    };
    Ok(c)
}

/// The canonical (GGUF) name of a Hugging Face Llama/Qwen tensor, `None` for a name with
/// no counterpart (llama.cpp `convert_hf_to_gguf.py` / `gguf-py` `tensor_mapping.py`).
pub fn canonical_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_owned());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (n, tail) = rest.split_once('.')?;
    let n: u32 = n.parse().ok()?;
    let t = match tail {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{n}.{t}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_round_trips_and_matches_llama_cpp() {
        // One head of 8 rows of one byte: HF rows 0..8 -> GGUF order 0,4,1,5,2,6,3,7.
        let hf: Vec<u8> = (0..8).collect();
        let g = permute_rows(&hf, 1, 8, 1);
        assert_eq!(g, [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(unpermute_rows(&g, 1, 8, 1).bytes(), hf.as_slice());
        let hf: Vec<u8> = (0..96).collect();
        let g = permute_rows(&hf, 3, 4, 8);
        assert_eq!(unpermute_rows(&g, 3, 4, 8).bytes(), hf.as_slice());
    }

    #[test]
    fn hf_names_map_to_gguf_names() {
        assert_eq!(
            canonical_name("model.layers.12.self_attn.k_norm.weight").as_deref(),
            Some("blk.12.attn_k_norm.weight")
        );
        assert_eq!(
            canonical_name("lm_head.weight").as_deref(),
            Some("output.weight")
        );
        assert_eq!(canonical_name("model.layers.x.mlp.up_proj.weight"), None);
        assert_eq!(canonical_name("model.layers.0.mlp.experts.0.weight"), None);
    }
}
