//! Hyper-parameters of a decoder-only transformer, read from the checkpoint by definition
//! (never keyed off a model name), and their bundle record.
//!
//! One [`LlmConfig`] describes every architecture this family runs: a pre-norm decoder
//! (RMSNorm -> attention with rotary positions and grouped KV heads -> residual -> RMSNorm ->
//! SwiGLU feed-forward -> residual), final RMSNorm, output projection (or the token
//! embedding, tied). The differences between Llama, Qwen2 and Qwen3 are fields:
//! [`LlmConfig::qkv_bias`] (Qwen2), [`LlmConfig::qk_norm`] (Qwen3),
//! [`LlmConfig::rope_scaling`] (Llama 3.1+), [`LlmConfig::tied_embeddings`].
//!
//! **Rotary layout (canonical).** Every tensor source of this crate (GGUF file, Hugging Face
//! directory, bundle) presents Q and K projections in the Hugging Face row order, so one
//! RoPE form serves every architecture: "rotate half" (GPT-NeoX style, llama.cpp's
//! `LLAMA_ROPE_TYPE_NEOX`): within each head of `head_dim` lanes, lane `i` and lane
//! `i + head_dim/2` (for `i < head_dim/2`) are rotated together by the angle
//! `pos * inv_freq[i]` ([`LlmConfig::rope_inv_freq`]). GGUF files of the `llama` architecture
//! store Q/K rows permuted for the interleaved form (lanes `2i`, `2i+1`; llama.cpp's
//! `convert_hf_to_gguf.py`, `LlamaModel.permute`): the GGUF reader un-permutes them (whole
//! rows move, so quantised blocks are moved unchanged; lossless). The contiguous halves
//! vectorise without lane shuffles, and match the PyTorch reference directly.

use zerocopy::little_endian::{F32, I32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::LlmError;

/// Largest head dimension the kernels handle.
pub const MAX_HEAD_DIM: u32 = 256;
/// Largest number of layers accepted (bounds allocations made from a hostile header).
pub const MAX_LAYERS: u32 = 1024;
/// Largest width, FFN width, vocabulary or context accepted (2^24; bounds allocations).
pub const MAX_DIM: u32 = 1 << 24;
/// Most end-of-generation ids recorded.
pub const MAX_EOG: usize = 16;

/// How the rotary frequencies are scaled beyond the base `theta^(-2i/d)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling.
    None,
    /// Position interpolation: every inverse frequency divided by `factor`
    /// (Hugging Face `rope_scaling.rope_type = "linear"`, GGUF `rope.scaling.type = linear`).
    Linear {
        /// Divisor, > 0.
        factor: f32,
    },
    /// Per-frequency divisors stored as the tensor `rope_freqs.weight` (f32, `head_dim / 2`
    /// values): Llama 3.1+ "llama3" scaling as llama.cpp's converter precomputes it. A
    /// Hugging Face `rope_scaling` of type `llama3` is turned into this tensor at load with
    /// [`llama3_freq_factors`] (the parameters are kept for `describe`).
    FreqFactors {
        /// Llama 3 parameters when the checkpoint gave them (Hugging Face); `None` for a GGUF,
        /// which stores only the factors.
        llama3: Option<Llama3Rope>,
    },
}

/// Llama 3.1's rotary scaling parameters (`rope_scaling` with `rope_type = "llama3"` in
/// `config.json`; transformers' `_compute_llama3_parameters`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    /// Overall factor (8 for Llama 3.1, 32 for Llama 3.2).
    pub factor: f32,
    /// Wavelengths longer than `original_context / low_freq_factor` are divided by `factor`.
    pub low_freq_factor: f32,
    /// Wavelengths shorter than `original_context / high_freq_factor` are kept.
    pub high_freq_factor: f32,
    /// Context the model was pre-trained at (8192).
    pub original_context: u32,
}

/// Per-frequency divisors of Llama 3 scaling, one per rotated pair (`head_dim / 2` values):
/// 1 for short wavelengths, `factor` for long ones, and a smooth blend between
/// (transformers `_compute_llama3_parameters`; llama.cpp `convert_hf_to_gguf.py` writes the
/// same divisors as `rope_freqs.weight`). `inv_freq_base[i] = theta^(-2i/head_dim)`.
pub fn llama3_freq_factors(theta: f32, head_dim: u32, p: &Llama3Rope) -> Vec<f32> {
    let half = head_dim as usize / 2;
    let old = p.original_context as f64;
    let low_wavelen = old / p.low_freq_factor as f64;
    let high_wavelen = old / p.high_freq_factor as f64;
    (0..half)
        .map(|i| {
            let freq = (theta as f64).powf(-(2.0 * i as f64) / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = p.factor as f64;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                f as f32
            } else {
                let smooth = (old / wavelen - p.low_freq_factor as f64)
                    / (p.high_freq_factor as f64 - p.low_freq_factor as f64);
                (1.0 / ((1.0 - smooth) / f + smooth)) as f32
            }
        })
        .collect()
}

/// Special token ids and the tokenizer's BOS/EOS policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn (Llama 3 `<|eot_id|>`), when the checkpoint names one.
    pub eot: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Prepend BOS when tokenising a prompt (GGUF `tokenizer.ggml.add_bos_token`, Hugging
    /// Face `add_bos_token`).
    pub add_bos: bool,
    /// Append EOS when tokenising a prompt (rare; `add_eos_token`).
    pub add_eos: bool,
    /// Ids that end generation (at most [`MAX_EOG`]): EOS, EOT, the generation config's
    /// `eos_token_id` list, and control tokens llama.cpp treats as end of generation
    /// (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<|end|>`, `<end_of_turn>`, ...).
    pub eog: Vec<u32>,
}

/// Hyper-parameters of one decoder-only transformer.
///
/// Shapes below use ggml's `ne` order (innermost, contiguous dimension first): see
/// [`crate::tensor::TensorRef`].
#[derive(Clone, Debug, PartialEq)]
pub struct LlmConfig {
    /// The checkpoint's architecture name (`llama`, `qwen2`, `qwen3`), for display only: the
    /// forward pass reads the fields below.
    pub architecture: String,
    /// Transformer blocks.
    pub n_layer: u32,
    /// Width of the residual stream (`hidden_size`, GGUF `embedding_length`).
    pub n_embd: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (grouped-query attention: `n_head % n_head_kv == 0`).
    pub n_head_kv: u32,
    /// Lanes per head (`head_dim`, GGUF `attention.key_length`; Qwen3 sets it apart from
    /// `n_embd / n_head`). Even, at most [`MAX_HEAD_DIM`].
    pub head_dim: u32,
    /// Feed-forward width (`intermediate_size`).
    pub n_ff: u32,
    /// Rows of the token embedding (and of the output projection).
    pub n_vocab: u32,
    /// Context the model was trained for (`max_position_embeddings`, GGUF
    /// `context_length`); a generator's context is at most this.
    pub n_ctx_train: u32,
    /// RoPE base `theta` (10000, 100000 for SmolLM2, 500000 for Llama 3, 1e6 for Qwen).
    pub rope_theta: f32,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// RMSNorm epsilon (inside the square root: `x / sqrt(mean(x^2) + eps) * w`).
    pub norm_eps: f32,
    /// No `output.weight`: the logits use `token_embd.weight`.
    pub tied_embeddings: bool,
    /// `blk.N.attn_{q,k,v}.bias` present (Qwen2).
    pub qkv_bias: bool,
    /// `blk.N.attn_{q,k}_norm.weight` present (Qwen3): RMSNorm over each head's `head_dim`
    /// lanes of Q and K, before RoPE.
    pub qk_norm: bool,
    /// Special ids and the BOS/EOS policy.
    pub special: SpecialTokens,
}

impl LlmConfig {
    /// Query width `n_head * head_dim`.
    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim
    }

    /// Key/value width `n_head_kv * head_dim`.
    pub fn kv_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim
    }

    /// Query heads per KV head.
    pub fn gqa_group(&self) -> u32 {
        self.n_head / self.n_head_kv.max(1)
    }

    /// Check every field against what the kernels handle; the error names the field and the
    /// value seen.
    ///
    /// # Errors
    /// [`LlmError::Config`].
    pub fn validate(&self) -> Result<(), LlmError> {
        let range = |field: &'static str, v: u32, lo: u32, hi: u32| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(LlmError::config(
                    field,
                    format!("{v} (accepted {lo} to {hi})"),
                ))
            }
        };
        range("n_layer", self.n_layer, 1, MAX_LAYERS)?;
        range("n_embd", self.n_embd, 1, MAX_DIM)?;
        range("n_head", self.n_head, 1, MAX_DIM)?;
        range("n_head_kv", self.n_head_kv, 1, self.n_head)?;
        range("head_dim", self.head_dim, 2, MAX_HEAD_DIM)?;
        range("n_ff", self.n_ff, 1, MAX_DIM)?;
        range("n_vocab", self.n_vocab, 1, MAX_DIM)?;
        range("n_ctx_train (context length)", self.n_ctx_train, 1, MAX_DIM)?;
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return Err(LlmError::config(
                "n_head_kv",
                format!(
                    "{} does not divide n_head {} (grouped-query attention)",
                    self.n_head_kv, self.n_head
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(LlmError::config(
                "head_dim",
                format!("{} is odd (RoPE rotates lane pairs)", self.head_dim),
            ));
        }
        // The rotary frequencies theta^(-2i/head_dim) fall with i only for theta > 1; below,
        // they grow (to infinity for a tiny theta: NaN angles), which no model uses.
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(LlmError::config(
                "rope_theta",
                format!("{:?} (accepted: finite and > 1)", self.rope_theta),
            ));
        }
        if let RopeScaling::Linear { factor } = self.rope_scaling
            && !(factor.is_finite() && factor > 0.0)
        {
            return Err(LlmError::config(
                "rope_scaling.factor",
                format!("{factor} (must be finite and > 0)"),
            ));
        }
        if let RopeScaling::FreqFactors { llama3: Some(p) } = self.rope_scaling {
            let ok = p.factor.is_finite()
                && p.factor > 0.0
                && p.low_freq_factor.is_finite()
                && p.high_freq_factor.is_finite()
                && p.low_freq_factor > 0.0
                && p.high_freq_factor > p.low_freq_factor
                && p.original_context > 0;
            if !ok {
                return Err(LlmError::config("rope_scaling (llama3)", format!("{p:?}")));
            }
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps < 1.0) {
            return Err(LlmError::config(
                "norm_eps",
                format!("{} (accepted 0 < eps < 1)", self.norm_eps),
            ));
        }
        let s = &self.special;
        for (name, id) in [
            ("bos", s.bos),
            ("eos", s.eos),
            ("eot", s.eot),
            ("pad", s.pad),
        ] {
            if let Some(id) = id
                && id >= self.n_vocab
            {
                return Err(LlmError::config(
                    "special token id",
                    format!("{name} = {id} is beyond the vocabulary ({})", self.n_vocab),
                ));
            }
        }
        if s.eog.len() > MAX_EOG {
            return Err(LlmError::config(
                "eog",
                format!("{} end-of-generation ids (at most {MAX_EOG})", s.eog.len()),
            ));
        }
        if let Some(&id) = s.eog.iter().find(|&&id| id >= self.n_vocab) {
            return Err(LlmError::config(
                "eog",
                format!("id {id} is beyond the vocabulary ({})", self.n_vocab),
            ));
        }
        if s.add_bos && s.bos.is_none() {
            return Err(LlmError::config("add_bos", "true, but no BOS token id"));
        }
        if s.add_eos && s.eos.is_none() {
            return Err(LlmError::config("add_eos", "true, but no EOS token id"));
        }
        Ok(())
    }

    /// Inverse rotary frequencies, one per rotated lane pair (`head_dim / 2` values):
    /// `theta^(-2i/head_dim)`, divided by the linear factor, or by `freq_factors[i]`
    /// (the tensor `rope_freqs.weight`, required for [`RopeScaling::FreqFactors`]).
    /// The angle of pair `i` at position `p` (0-based) is `p * inv_freq[i]`.
    ///
    /// # Errors
    /// [`LlmError::Config`] when `freq_factors` is needed and absent, or does not hold
    /// `head_dim / 2` positive values.
    pub fn rope_inv_freq(&self, freq_factors: Option<&[f32]>) -> Result<Vec<f32>, LlmError> {
        let half = self.head_dim as usize / 2;
        let mut inv: Vec<f32> = (0..half)
            .map(|i| (self.rope_theta as f64).powf(-(2.0 * i as f64) / self.head_dim as f64) as f32)
            .collect();
        match self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => inv.iter_mut().for_each(|f| *f /= factor),
            RopeScaling::FreqFactors { .. } => {
                let ff = freq_factors.ok_or_else(|| {
                    LlmError::config("rope_freqs", "frequency scaling without rope_freqs.weight")
                })?;
                if ff.len() != half || ff.iter().any(|&v| !(v.is_finite() && v > 0.0)) {
                    return Err(LlmError::config(
                        "rope_freqs",
                        format!(
                            "{} values (need {half} finite values > 0): {:?}",
                            ff.len(),
                            &ff[..ff.len().min(8)]
                        ),
                    ));
                }
                inv.iter_mut().zip(ff).for_each(|(f, d)| *f /= d);
            }
        }
        Ok(inv)
    }

    /// The on-disk record.
    pub fn to_record(&self) -> LlmConfigRecord {
        let opt = |v: Option<u32>| I32::new(v.map_or(-1, |v| v as i32));
        let mut flags = 0u16;
        for (bit, on) in [
            (FLAG_TIED, self.tied_embeddings),
            (FLAG_QKV_BIAS, self.qkv_bias),
            (FLAG_QK_NORM, self.qk_norm),
            (FLAG_ADD_BOS, self.special.add_bos),
            (FLAG_ADD_EOS, self.special.add_eos),
        ] {
            if on {
                flags |= bit;
            }
        }
        let (kind, factor, low, high, orig) = match self.rope_scaling {
            RopeScaling::None => (ROPE_NONE, 1.0, 0.0, 0.0, 0),
            RopeScaling::Linear { factor } => (ROPE_LINEAR, factor, 0.0, 0.0, 0),
            RopeScaling::FreqFactors { llama3: None } => (ROPE_FREQ_FACTORS, 1.0, 0.0, 0.0, 0),
            RopeScaling::FreqFactors { llama3: Some(p) } => (
                ROPE_LLAMA3,
                p.factor,
                p.low_freq_factor,
                p.high_freq_factor,
                p.original_context,
            ),
        };
        let mut eog = [U32::ZERO; MAX_EOG];
        for (d, &s) in eog.iter_mut().zip(&self.special.eog) {
            *d = U32::new(s);
        }
        let mut arch = [0u8; 32];
        let a = self.architecture.as_bytes();
        let n = a.len().min(32);
        arch[..n].copy_from_slice(&a[..n]);
        LlmConfigRecord {
            version: U16::new(CONFIG_VERSION),
            flags: U16::new(flags),
            n_layer: self.n_layer.into(),
            n_embd: self.n_embd.into(),
            n_head: self.n_head.into(),
            n_head_kv: self.n_head_kv.into(),
            head_dim: self.head_dim.into(),
            n_ff: self.n_ff.into(),
            n_vocab: self.n_vocab.into(),
            n_ctx_train: self.n_ctx_train.into(),
            rope_theta: F32::new(self.rope_theta),
            norm_eps: F32::new(self.norm_eps),
            rope_scaling: U32::new(kind),
            rope_factor: F32::new(factor),
            rope_low_freq_factor: F32::new(low),
            rope_high_freq_factor: F32::new(high),
            rope_original_context: U32::new(orig),
            bos: opt(self.special.bos),
            eos: opt(self.special.eos),
            eot: opt(self.special.eot),
            pad: opt(self.special.pad),
            n_eog: U32::new(self.special.eog.len().min(MAX_EOG) as u32),
            eog,
            architecture: arch,
            reserved: [0; 12],
        }
    }

    /// Read and validate the record at the start of `bytes`.
    ///
    /// # Errors
    /// [`LlmError::Config`] for a short record, another version, an unknown RoPE scaling
    /// code, or any field [`validate`](Self::validate) refuses.
    pub fn from_record(bytes: &[u8]) -> Result<LlmConfig, LlmError> {
        let (r, _) = LlmConfigRecord::ref_from_prefix(bytes).map_err(|_| {
            LlmError::config(
                "record",
                format!(
                    "{} bytes, need {}",
                    bytes.len(),
                    size_of::<LlmConfigRecord>()
                ),
            )
        })?;
        if r.version.get() != CONFIG_VERSION {
            return Err(LlmError::config(
                "version",
                format!("{} (this build reads {CONFIG_VERSION})", r.version.get()),
            ));
        }
        let opt = |v: I32| u32::try_from(v.get()).ok();
        let flags = r.flags.get();
        let rope_scaling = match r.rope_scaling.get() {
            ROPE_NONE => RopeScaling::None,
            ROPE_LINEAR => RopeScaling::Linear {
                factor: r.rope_factor.get(),
            },
            ROPE_FREQ_FACTORS => RopeScaling::FreqFactors { llama3: None },
            ROPE_LLAMA3 => RopeScaling::FreqFactors {
                llama3: Some(Llama3Rope {
                    factor: r.rope_factor.get(),
                    low_freq_factor: r.rope_low_freq_factor.get(),
                    high_freq_factor: r.rope_high_freq_factor.get(),
                    original_context: r.rope_original_context.get(),
                }),
            },
            other => {
                return Err(LlmError::config(
                    "rope_scaling",
                    format!("unknown code {other}"),
                ));
            }
        };
        let n_eog = r.n_eog.get() as usize;
        if n_eog > MAX_EOG {
            return Err(LlmError::config(
                "eog",
                format!("{n_eog} ids (at most {MAX_EOG})"),
            ));
        }
        let end = r.architecture.iter().position(|&b| b == 0).unwrap_or(32);
        let architecture = std::str::from_utf8(&r.architecture[..end])
            .map_err(|_| LlmError::config("architecture", "not UTF-8"))?
            .to_owned();
        let c = LlmConfig {
            architecture,
            n_layer: r.n_layer.get(),
            n_embd: r.n_embd.get(),
            n_head: r.n_head.get(),
            n_head_kv: r.n_head_kv.get(),
            head_dim: r.head_dim.get(),
            n_ff: r.n_ff.get(),
            n_vocab: r.n_vocab.get(),
            n_ctx_train: r.n_ctx_train.get(),
            rope_theta: r.rope_theta.get(),
            rope_scaling,
            norm_eps: r.norm_eps.get(),
            tied_embeddings: flags & FLAG_TIED != 0,
            qkv_bias: flags & FLAG_QKV_BIAS != 0,
            qk_norm: flags & FLAG_QK_NORM != 0,
            special: SpecialTokens {
                bos: opt(r.bos),
                eos: opt(r.eos),
                eot: opt(r.eot),
                pad: opt(r.pad),
                add_bos: flags & FLAG_ADD_BOS != 0,
                add_eos: flags & FLAG_ADD_EOS != 0,
                eog: r.eog[..n_eog].iter().map(|v| v.get()).collect(),
            },
        };
        c.validate()?;
        Ok(c)
    }
}

/// Value of [`LlmConfigRecord::version`] this crate writes and reads.
pub const CONFIG_VERSION: u16 = 1;
const FLAG_TIED: u16 = 1;
const FLAG_QKV_BIAS: u16 = 2;
const FLAG_QK_NORM: u16 = 4;
const FLAG_ADD_BOS: u16 = 8;
const FLAG_ADD_EOS: u16 = 16;
const ROPE_NONE: u32 = 0;
const ROPE_LINEAR: u32 = 1;
const ROPE_FREQ_FACTORS: u32 = 2;
const ROPE_LLAMA3: u32 = 3;

/// On-disk record of the `llm/config` section (little-endian, 192 bytes, alignment 1).
/// Optional token ids are -1 when absent; RoPE scaling codes: 0 none, 1 linear, 2 frequency
/// factors (`rope_freqs.weight`), 3 Llama 3 (factors from the recorded parameters, also
/// stored as `rope_freqs.weight`).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct LlmConfigRecord {
    /// [`CONFIG_VERSION`].
    pub version: U16,
    /// Bit 0 tied embeddings, 1 q/k/v biases, 2 q/k RMSNorm, 3 add BOS, 4 add EOS.
    pub flags: U16,
    /// [`LlmConfig::n_layer`].
    pub n_layer: U32,
    /// [`LlmConfig::n_embd`].
    pub n_embd: U32,
    /// [`LlmConfig::n_head`].
    pub n_head: U32,
    /// [`LlmConfig::n_head_kv`].
    pub n_head_kv: U32,
    /// [`LlmConfig::head_dim`].
    pub head_dim: U32,
    /// [`LlmConfig::n_ff`].
    pub n_ff: U32,
    /// [`LlmConfig::n_vocab`].
    pub n_vocab: U32,
    /// [`LlmConfig::n_ctx_train`].
    pub n_ctx_train: U32,
    /// [`LlmConfig::rope_theta`].
    pub rope_theta: F32,
    /// [`LlmConfig::norm_eps`].
    pub norm_eps: F32,
    /// RoPE scaling code.
    pub rope_scaling: U32,
    /// Linear or Llama 3 factor.
    pub rope_factor: F32,
    /// Llama 3 `low_freq_factor`.
    pub rope_low_freq_factor: F32,
    /// Llama 3 `high_freq_factor`.
    pub rope_high_freq_factor: F32,
    /// Llama 3 `original_max_position_embeddings`.
    pub rope_original_context: U32,
    /// BOS id or -1.
    pub bos: I32,
    /// EOS id or -1.
    pub eos: I32,
    /// EOT id or -1.
    pub eot: I32,
    /// PAD id or -1.
    pub pad: I32,
    /// Entries of `eog` in use.
    pub n_eog: U32,
    /// End-of-generation ids.
    pub eog: [U32; MAX_EOG],
    /// Architecture name, UTF-8, zero-padded (display only).
    pub architecture: [u8; 32],
    /// Reserved, zero.
    pub reserved: [u8; 12],
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn smollm2() -> LlmConfig {
        LlmConfig {
            architecture: "llama".into(),
            n_layer: 30,
            n_embd: 576,
            n_head: 9,
            n_head_kv: 3,
            head_dim: 64,
            n_ff: 1536,
            n_vocab: 49152,
            n_ctx_train: 8192,
            rope_theta: 100000.0,
            rope_scaling: RopeScaling::None,
            norm_eps: 1e-5,
            tied_embeddings: true,
            qkv_bias: false,
            qk_norm: false,
            special: SpecialTokens {
                bos: Some(1),
                eos: Some(2),
                eot: None,
                pad: Some(2),
                add_bos: false,
                add_eos: false,
                eog: vec![2, 0],
            },
        }
    }

    #[test]
    fn record_round_trips() {
        assert_eq!(size_of::<LlmConfigRecord>(), 192);
        let mut c = smollm2();
        c.validate().expect("valid");
        assert_eq!(LlmConfig::from_record(c.to_record().as_bytes()).unwrap(), c);
        c.rope_scaling = RopeScaling::FreqFactors {
            llama3: Some(Llama3Rope {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_context: 8192,
            }),
        };
        c.qk_norm = true;
        c.special.add_bos = true;
        assert_eq!(LlmConfig::from_record(c.to_record().as_bytes()).unwrap(), c);
        let e = LlmConfig::from_record(&c.to_record().as_bytes()[..40]).unwrap_err();
        assert!(e.to_string().contains("40 bytes, need 192"), "{e}");
    }

    #[test]
    fn validation_names_field_and_value() {
        let bad = |f: &dyn Fn(&mut LlmConfig), want: &str| {
            let mut c = smollm2();
            f(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        };
        bad(&|c| c.n_ctx_train = 0, "n_ctx_train (context length)`: 0");
        bad(&|c| c.n_head_kv = 4, "4 does not divide n_head 9");
        bad(&|c| c.head_dim = 512, "head_dim`: 512");
        bad(&|c| c.head_dim = 63, "63 is odd");
        bad(&|c| c.norm_eps = f32::NAN, "norm_eps");
        bad(&|c| c.special.bos = Some(49152), "bos = 49152");
        bad(&|c| c.special.eog = vec![1; 17], "17 end-of-generation ids");
        bad(
            &|c| c.rope_scaling = RopeScaling::Linear { factor: 0.0 },
            "rope_scaling.factor",
        );
    }

    #[test]
    fn llama3_factors_match_the_published_formula() {
        // Llama 3.2 1B: theta 500000, head_dim 64, factor 32, low 1, high 4, original 8192.
        let p = Llama3Rope {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        };
        let f = llama3_freq_factors(500000.0, 64, &p);
        assert_eq!(f.len(), 32);
        assert_eq!(f[0], 1.0); // highest frequency: wavelength 2*pi < 2048
        assert_eq!(f[31], 32.0); // lowest frequency: wavelength far beyond 8192
        // Between: monotone, within (1, 32).
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        assert!(f.iter().any(|&v| v > 1.0 && v < 32.0));
        let mut c = smollm2();
        c.rope_scaling = RopeScaling::FreqFactors { llama3: Some(p) };
        assert!(c.rope_inv_freq(None).is_err());
        let inv = c.rope_inv_freq(Some(&f)).unwrap();
        assert!((inv[0] - 1.0).abs() < 1e-7);
        let base = smollm2().rope_inv_freq(None).unwrap();
        assert!((inv[31] * 32.0 - base[31]).abs() < 1e-9);
    }
}
