//! The `llm` bundle's sections, reading them back into a [`Checkpoint`], and `describe`
//! (what `tether inspect` shows).
//!
//! | section | kind | content |
//! |---|---|---|
//! | `llm/config` | `FamilyConfig` | [`LlmConfigRecord`](crate::config::LlmConfigRecord) (192 bytes) |
//! | `llm/generation` | `FamilyConfig` | [`GenerationRecord`] (32 bytes) |
//! | `llm/tokenizer` | `Tokenizer` | `tokenizer.json` (Hugging Face format; for a GGUF, the tokenizer built from its vocabulary, merges and pre-tokenizer) |
//! | `llm/chat_template` | `Tokenizer` | the chat template, UTF-8 (absent when the checkpoint has none) |
//! | `llm/tensors` | `FamilyConfig` | [`TensorIndexHeader`] then one [`TensorIndexRecord`] per tensor |
//! | `llm/<tensor name>` | `Blob` | the tensor's bytes as the kernels read them (ggml blocks kept as stored; F32/F16/BF16 as stored) in canonical layout ([`crate::tensor`]) |
//!
//! Each tensor is its own section, so each starts 4096-aligned in the file and a mapped
//! bundle hands the kernels page-aligned weights without a copy; each has its own CRC,
//! checked on first access in lazy mode. Tensor names never contain `/`, so
//! `llm/<tensor name>` keeps the family-asset form `<family>/<asset>` (`FORMAT.md` 4.8).

use std::sync::Arc;

use tether_bundle::{Bundle, SectionKind};
use zerocopy::little_endian::{F32, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::checkpoint::{Checkpoint, GenerationDefaults, Source, check_vocab};
use crate::config::{LlmConfig, RopeScaling};
use crate::error::LlmError;
use crate::quant::TensorType;
use crate::tensor::{Backing, Weights, tensor_bytes};
use crate::tokenizer::Tokenizer;

/// Section holding the [`LlmConfigRecord`](crate::config::LlmConfigRecord).
pub const CONFIG_SECTION: &str = "llm/config";
/// Section holding the [`GenerationRecord`].
pub const GENERATION_SECTION: &str = "llm/generation";
/// Section holding `tokenizer.json`.
pub const TOKENIZER_SECTION: &str = "llm/tokenizer";
/// Section holding the chat template.
pub const CHAT_TEMPLATE_SECTION: &str = "llm/chat_template";
/// Section holding the tensor index.
pub const TENSORS_SECTION: &str = "llm/tensors";
/// Prefix of every tensor section's name.
pub const TENSOR_PREFIX: &str = "llm/";
/// [`TensorIndexHeader::version`] and [`GenerationRecord::version`] this crate writes.
pub const INDEX_VERSION: u32 = 1;

/// Header of the `llm/tensors` section (8 bytes).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct TensorIndexHeader {
    /// [`INDEX_VERSION`].
    pub version: U32,
    /// Records that follow.
    pub count: U32,
}

/// One tensor of the `llm/tensors` index (48 bytes, little-endian, alignment 1).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct TensorIndexRecord {
    /// Index of the tensor's section (named `llm/<tensor name>`).
    pub section: U32,
    /// `ggml_type` code ([`TensorType::ggml_id`]).
    pub ggml_type: U32,
    /// Dimensions in use (1 to 4).
    pub n_dims: U32,
    /// Reserved, zero.
    pub reserved: U32,
    /// `ne`, innermost first; unused entries 1.
    pub ne: [U64; 4],
}

/// The `llm/generation` record (32 bytes): sampling defaults from the checkpoint. Bit `i` of
/// `present` says field `i` (in declaration order after `present`) holds a value.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct GenerationRecord {
    /// [`INDEX_VERSION`].
    pub version: U16,
    /// Presence bits: 0 temperature, 1 top_k, 2 top_p, 3 min_p, 4 repetition_penalty,
    /// 5 do_sample, 6 max_new_tokens.
    pub present: U16,
    /// Temperature.
    pub temperature: F32,
    /// Top-k.
    pub top_k: U32,
    /// Top-p.
    pub top_p: F32,
    /// Min-p.
    pub min_p: F32,
    /// Repetition penalty.
    pub repetition_penalty: F32,
    /// 1: sample; 0: greedy.
    pub do_sample: U32,
    /// Maximum new tokens.
    pub max_new_tokens: U32,
}

impl GenerationRecord {
    /// The record of `g`.
    pub fn of(g: &GenerationDefaults) -> GenerationRecord {
        let mut present = 0u16;
        let mut bit = |i: u16, on: bool| {
            if on {
                present |= 1 << i;
            }
        };
        bit(0, g.temperature.is_some());
        bit(1, g.top_k.is_some());
        bit(2, g.top_p.is_some());
        bit(3, g.min_p.is_some());
        bit(4, g.repetition_penalty.is_some());
        bit(5, g.do_sample.is_some());
        bit(6, g.max_new_tokens.is_some());
        GenerationRecord {
            version: U16::new(INDEX_VERSION as u16),
            present: U16::new(present),
            temperature: F32::new(g.temperature.unwrap_or(0.0)),
            top_k: U32::new(g.top_k.unwrap_or(0)),
            top_p: F32::new(g.top_p.unwrap_or(0.0)),
            min_p: F32::new(g.min_p.unwrap_or(0.0)),
            repetition_penalty: F32::new(g.repetition_penalty.unwrap_or(0.0)),
            do_sample: U32::new(u32::from(g.do_sample.unwrap_or(false))),
            max_new_tokens: U32::new(g.max_new_tokens.unwrap_or(0)),
        }
    }

    /// The defaults this record holds.
    pub fn defaults(&self) -> GenerationDefaults {
        let p = self.present.get();
        let has = |i: u16| p & (1 << i) != 0;
        GenerationDefaults {
            temperature: has(0).then(|| self.temperature.get()),
            top_k: has(1).then(|| self.top_k.get()),
            top_p: has(2).then(|| self.top_p.get()),
            min_p: has(3).then(|| self.min_p.get()),
            repetition_penalty: has(4).then(|| self.repetition_penalty.get()),
            do_sample: has(5).then(|| self.do_sample.get() != 0),
            max_new_tokens: has(6).then(|| self.max_new_tokens.get()),
        }
    }
}

fn section<'b>(bundle: &'b Bundle, name: &str) -> Result<Option<&'b [u8]>, LlmError> {
    match bundle.section(name) {
        Ok(s) => Ok(Some(bundle.section_bytes(&s)?)),
        Err(tether_bundle::BundleError::MissingSection { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn required<'b>(bundle: &'b Bundle, name: &str) -> Result<&'b [u8], LlmError> {
    section(bundle, name)?.ok_or_else(|| LlmError::section(name, "missing"))
}

impl Checkpoint {
    /// Read an `llm` bundle: configuration, tokenizer, chat template, generation defaults,
    /// and every tensor as a zero-copy view of its section (CRC-checked on first access in
    /// lazy mode, at open in eager mode). Everything is checked as at build.
    ///
    /// # Errors
    /// [`LlmError::Section`] for a missing or malformed section (named, with the value
    /// seen); [`LlmError::Bundle`]; [`LlmError::Config`]; the tensor and tokenizer errors of
    /// [`Checkpoint::check`].
    pub fn from_bundle(bundle: Arc<Bundle>) -> Result<Checkpoint, LlmError> {
        let family = bundle.identity().family;
        if family != crate::FAMILY {
            return Err(LlmError::section(
                "identity",
                format!("the bundle's family is `{family}`, not `{}`", crate::FAMILY),
            ));
        }
        let config = LlmConfig::from_record(required(&bundle, CONFIG_SECTION)?)?;
        let generation = match section(&bundle, GENERATION_SECTION)? {
            None => GenerationDefaults::default(),
            Some(b) => GenerationRecord::ref_from_prefix(b)
                .map_err(|_| {
                    LlmError::section(
                        GENERATION_SECTION,
                        format!("{} bytes, need {}", b.len(), size_of::<GenerationRecord>()),
                    )
                })?
                .0
                .defaults(),
        };
        let tokenizer =
            Tokenizer::from_json(required(&bundle, TOKENIZER_SECTION)?, &config.special)?;
        let chat_template = section(&bundle, CHAT_TEMPLATE_SECTION)?
            .map(|b| {
                std::str::from_utf8(b).map(str::to_owned).map_err(|e| {
                    LlmError::section(CHAT_TEMPLATE_SECTION, format!("not UTF-8: {e}"))
                })
            })
            .transpose()?;
        let index = required(&bundle, TENSORS_SECTION)?;
        let bad = |m: String| LlmError::section(TENSORS_SECTION, m);
        let (h, rest) = TensorIndexHeader::ref_from_prefix(index)
            .map_err(|_| bad(format!("{} bytes, need at least 8", index.len())))?;
        if h.version.get() != INDEX_VERSION {
            return Err(bad(format!(
                "version {} (this build reads {INDEX_VERSION})",
                h.version.get()
            )));
        }
        let count = h.count.get() as usize;
        let records = <[TensorIndexRecord]>::ref_from_bytes(rest)
            .ok()
            .filter(|r| r.len() == count)
            .ok_or_else(|| {
                bad(format!(
                    "{} bytes of records for {count} tensors of {} bytes",
                    rest.len(),
                    size_of::<TensorIndexRecord>()
                ))
            })?;
        let mut weights = Weights::default();
        let b = weights.add_backing(Backing::Bundle(bundle.clone()));
        for r in records {
            let s = bundle.section_at(r.section.get())?;
            let name = s
                .name
                .strip_prefix(TENSOR_PREFIX)
                .filter(|n| !n.is_empty() && s.kind == SectionKind::Blob)
                .ok_or_else(|| {
                    bad(format!(
                        "record points at section `{}` ({:?}), not a tensor section",
                        s.name, s.kind
                    ))
                })?;
            let ty = TensorType::from_ggml_id(r.ggml_type.get()).ok_or_else(|| {
                LlmError::section(
                    s.name,
                    format!(
                        "ggml type {} ({}) is not supported",
                        r.ggml_type.get(),
                        crate::gguf::ggml_type_name(r.ggml_type.get())
                    ),
                )
            })?;
            let n = r.n_dims.get() as usize;
            if !(1..=4).contains(&n) {
                return Err(LlmError::section(
                    s.name,
                    format!("{n} dimensions (1 to 4)"),
                ));
            }
            let dims: Vec<u64> = r.ne[..n].iter().map(|d| d.get()).collect();
            let need = tensor_bytes(ty, &dims).filter(|_| !dims.contains(&0));
            if need != Some(s.length) {
                return Err(LlmError::section(
                    s.name,
                    format!(
                        "{} bytes; {} {:?} needs {}",
                        s.length,
                        ty.name(),
                        dims,
                        need.map_or("an impossible size".to_owned(), |n| n.to_string())
                    ),
                ));
            }
            weights.insert(
                name.to_owned(),
                ty,
                dims,
                b,
                s.index as usize,
                s.length as usize,
            );
        }
        let c = Checkpoint {
            config,
            weights,
            tokenizer,
            chat_template,
            generation,
            source: Source::Bundle(bundle.path().map(|p| p.to_path_buf()).unwrap_or_default()),
        };
        c.config.validate()?;
        c.weights.model(&c.config)?;
        check_vocab(&c.tokenizer, c.config.n_vocab)?;
        Ok(c)
    }

    /// What `inspect` shows.
    pub fn describe(&self) -> Description {
        let mut types: Vec<(TensorType, usize, u64)> = Vec::new();
        for (_, ty, dims) in self.weights.infos() {
            let elems = dims.iter().product::<u64>();
            match types.iter_mut().find(|(t, _, _)| *t == ty) {
                Some(e) => {
                    e.1 += 1;
                    e.2 += elems;
                }
                None => types.push((ty, 1, elems)),
            }
        }
        types.sort_by_key(|t| std::cmp::Reverse(t.2));
        let special = |id: Option<u32>| {
            id.map(|i| {
                let text = self
                    .tokenizer
                    .piece(i)
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .unwrap_or_default();
                (i, text)
            })
        };
        let s = &self.config.special;
        Description {
            architecture: self.config.architecture.clone(),
            parameters: self.weights.parameter_count(),
            weight_bytes: self
                .weights
                .infos()
                .filter_map(|(_, ty, d)| tensor_bytes(ty, d))
                .sum(),
            quantization: types,
            context_length: self.config.n_ctx_train,
            vocabulary: self.config.n_vocab,
            tokenizer_tokens: self.tokenizer.len() as u32,
            layers: self.config.n_layer,
            width: self.config.n_embd,
            heads: (
                self.config.n_head,
                self.config.n_head_kv,
                self.config.head_dim,
            ),
            ffn: self.config.n_ff,
            rope_theta: self.config.rope_theta,
            rope_scaling: self.config.rope_scaling,
            features: [
                (self.config.tied_embeddings, "tied embeddings"),
                (self.config.qkv_bias, "q/k/v biases"),
                (self.config.qk_norm, "q/k RMSNorm"),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| n)
            .collect(),
            bos: special(s.bos),
            eos: special(s.eos),
            eot: special(s.eot),
            eog: s.eog.iter().filter_map(|&i| special(Some(i))).collect(),
            add_bos: s.add_bos,
            chat_template: self.chat_template.is_some(),
            generation: self.generation,
        }
    }
}

/// A model's summary, as `tether inspect` prints it ([`std::fmt::Display`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    /// Architecture name.
    pub architecture: String,
    /// Total parameters (elements of every tensor).
    pub parameters: u64,
    /// Bytes of every tensor as stored.
    pub weight_bytes: u64,
    /// (type, tensors, parameters), most parameters first.
    pub quantization: Vec<(TensorType, usize, u64)>,
    /// Context length the model was trained for.
    pub context_length: u32,
    /// Embedding rows.
    pub vocabulary: u32,
    /// Token ids the tokenizer defines.
    pub tokenizer_tokens: u32,
    /// Blocks.
    pub layers: u32,
    /// Residual width.
    pub width: u32,
    /// (query heads, KV heads, head dimension).
    pub heads: (u32, u32, u32),
    /// FFN width.
    pub ffn: u32,
    /// RoPE base.
    pub rope_theta: f32,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Architecture features present.
    pub features: Vec<&'static str>,
    /// BOS (id, text).
    pub bos: Option<(u32, String)>,
    /// EOS (id, text).
    pub eos: Option<(u32, String)>,
    /// EOT (id, text).
    pub eot: Option<(u32, String)>,
    /// End-of-generation ids and texts.
    pub eog: Vec<(u32, String)>,
    /// BOS prepended to prompts.
    pub add_bos: bool,
    /// A chat template is present.
    pub chat_template: bool,
    /// Sampling defaults.
    pub generation: GenerationDefaults,
}

/// `134.5 M`, `35.1 K`, `12`.
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} G", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

impl std::fmt::Display for Description {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tok = |t: &Option<(u32, String)>| {
            t.as_ref()
                .map_or("-".to_owned(), |(i, s)| format!("{i} {s:?}"))
        };
        writeln!(f, "architecture    {}", self.architecture)?;
        writeln!(
            f,
            "parameters      {} ({}), {} bytes of weights",
            self.parameters,
            count(self.parameters),
            self.weight_bytes
        )?;
        let q: Vec<String> = self
            .quantization
            .iter()
            .map(|(t, n, p)| format!("{} x{n} ({})", t.name(), count(*p)))
            .collect();
        writeln!(f, "quantization    {}", q.join(", "))?;
        writeln!(
            f,
            "shape           {} layers, width {}, {} heads / {} KV heads of {}, FFN {}",
            self.layers, self.width, self.heads.0, self.heads.1, self.heads.2, self.ffn
        )?;
        let scaling = match self.rope_scaling {
            RopeScaling::None => String::new(),
            RopeScaling::Linear { factor } => format!(", linear scaling x{factor}"),
            RopeScaling::FreqFactors { llama3: Some(p) } => format!(
                ", Llama 3 scaling x{} (low {}, high {}, original context {})",
                p.factor, p.low_freq_factor, p.high_freq_factor, p.original_context
            ),
            RopeScaling::FreqFactors { llama3: None } => ", frequency factors".into(),
        };
        writeln!(f, "rope            theta {}{scaling}", self.rope_theta)?;
        if !self.features.is_empty() {
            writeln!(f, "features        {}", self.features.join(", "))?;
        }
        writeln!(f, "context length  {}", self.context_length)?;
        writeln!(
            f,
            "vocabulary      {} (tokenizer {} ids)",
            self.vocabulary, self.tokenizer_tokens
        )?;
        writeln!(
            f,
            "special tokens  bos {}, eos {}, eot {}; add_bos {}",
            tok(&self.bos),
            tok(&self.eos),
            tok(&self.eot),
            self.add_bos
        )?;
        let eog: Vec<String> = self.eog.iter().map(|(i, s)| format!("{i} {s:?}")).collect();
        writeln!(f, "end of gen.     {}", eog.join(", "))?;
        write!(
            f,
            "chat template   {}",
            if self.chat_template {
                "present"
            } else {
                "none"
            }
        )
    }
}
