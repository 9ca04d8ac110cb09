//! Read-only tensors with canonical names, from a GGUF file, a Hugging Face directory or a
//! bundle alike: the only way the forward pass sees weights.
//!
//! **Names** are llama.cpp's GGUF names (`llama-arch.cpp`, `LLM_TENSOR_NAMES`):
//!
//! | name | `ne` (innermost first) | |
//! |---|---|---|
//! | `token_embd.weight` | `[n_embd, n_vocab]` | row `t` is token `t`'s embedding |
//! | `output_norm.weight` | `[n_embd]` | final RMSNorm |
//! | `output.weight` | `[n_embd, n_vocab]` | absent when tied ([`LlmConfig::tied_embeddings`]) |
//! | `rope_freqs.weight` | `[head_dim / 2]` | f32, only with [`RopeScaling::FreqFactors`] |
//! | `blk.N.attn_norm.weight` | `[n_embd]` | |
//! | `blk.N.attn_q.weight` | `[n_embd, n_head * head_dim]` | Hugging Face row order (rotate-half RoPE) |
//! | `blk.N.attn_k.weight` | `[n_embd, n_head_kv * head_dim]` | same |
//! | `blk.N.attn_v.weight` | `[n_embd, n_head_kv * head_dim]` | |
//! | `blk.N.attn_{q,k,v}.bias` | `[q_dim]`, `[kv_dim]`, `[kv_dim]` | only with [`LlmConfig::qkv_bias`] |
//! | `blk.N.attn_{q,k}_norm.weight` | `[head_dim]` | only with [`LlmConfig::qk_norm`] |
//! | `blk.N.attn_output.weight` | `[n_head * head_dim, n_embd]` | |
//! | `blk.N.ffn_norm.weight` | `[n_embd]` | |
//! | `blk.N.ffn_gate.weight` | `[n_embd, n_ff]` | SwiGLU: `down(silu(gate x) * up x)` |
//! | `blk.N.ffn_up.weight` | `[n_embd, n_ff]` | |
//! | `blk.N.ffn_down.weight` | `[n_ff, n_embd]` | |
//!
//! **Row/column convention (ggml's).** `dims[0]` (`ne[0]`) is the contiguous dimension. A
//! weight with `ne = [n_in, n_out]` is `n_out` rows of `n_in` elements, row-major (PyTorch's
//! `[out_features, in_features]` `nn.Linear.weight`, same bytes); output `o` of `y = W x` is
//! the dot product of row `o` with `x`. Quantised rows are whole blocks
//! ([`TensorType::row_bytes`]): a row of `n_in` elements is `n_in / block_elems` blocks.
//!
//! [`LlmConfig::tied_embeddings`]: crate::config::LlmConfig::tied_embeddings
//! [`RopeScaling::FreqFactors`]: crate::config::RopeScaling::FreqFactors
//! [`LlmConfig::qkv_bias`]: crate::config::LlmConfig::qkv_bias
//! [`LlmConfig::qk_norm`]: crate::config::LlmConfig::qk_norm

use std::collections::HashMap;
use std::sync::Arc;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::config::{LlmConfig, RopeScaling};
use crate::error::LlmError;
use crate::quant::TensorType;

/// One tensor, borrowed from its source (a memory map, a bundle section, or a buffer the
/// source converted at load).
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// Canonical (GGUF) name.
    pub name: &'a str,
    /// Element type.
    pub ty: TensorType,
    /// `ne`: dimensions, innermost (contiguous) first; 1 to 4 entries.
    pub dims: &'a [u64],
    /// The stored bytes: `rows() * row_bytes()` bytes. Aligned to at least 32 bytes
    /// (GGUF's default alignment; bundle sections and converted buffers are 4096- and
    /// 64-byte aligned).
    pub data: &'a [u8],
}

impl TensorRef<'_> {
    /// Elements per row (`ne[0]`).
    pub fn row_len(&self) -> usize {
        self.dims.first().copied().unwrap_or(1) as usize
    }

    /// Rows: the product of `ne[1..]` (1 for a vector).
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }

    /// Total elements.
    pub fn elems(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.row_len()).unwrap_or(0)
    }

    /// Row `r`'s bytes, or `None` beyond the last row.
    pub fn row(&self, r: usize) -> Option<&[u8]> {
        let rb = self.row_bytes();
        self.data.get(r.checked_mul(rb)?..(r + 1).checked_mul(rb)?)
    }

    /// The data as f32 values, when the tensor is F32 (`None` otherwise; the data is 4-byte
    /// aligned by every source).
    pub fn as_f32(&self) -> Option<&[f32]> {
        if self.ty != TensorType::F32 {
            return None;
        }
        <[f32]>::ref_from_bytes(self.data).ok()
    }
}

/// Bytes of a tensor of type `ty` and dimensions `dims`, or `None` when the row length is
/// not a whole number of blocks or the size overflows.
pub fn tensor_bytes(ty: TensorType, dims: &[u64]) -> Option<u64> {
    let row_len = *dims.first()?;
    let be = ty.block_elems() as u64;
    if row_len % be != 0 {
        return None;
    }
    let row = (row_len / be).checked_mul(ty.block_bytes() as u64)?;
    dims.iter()
        .skip(1)
        .try_fold(row, |acc, &d| acc.checked_mul(d))
}

/// A 64-byte aligned chunk: converted tensors live in `Vec<Chunk>` so their data is aligned
/// for SIMD loads.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C, align(64))]
pub(crate) struct Chunk([u8; 64]);

/// An owned, 64-byte aligned byte buffer.
#[derive(Clone, Default)]
pub(crate) struct AlignedBuf {
    chunks: Vec<Chunk>,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub(crate) fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf {
            chunks: vec![Chunk([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    /// A copy of `bytes`.
    pub(crate) fn from_bytes(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.chunks.as_bytes()[..self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.chunks.as_mut_bytes()[..len]
    }
}

/// Where a source's bytes live.
pub(crate) enum Backing {
    /// A read-only memory map of a checkpoint file.
    Mmap(memmap2::Mmap),
    /// A buffer converted at load (un-permuted Q/K rows, computed RoPE factors, ...).
    Owned(AlignedBuf),
    /// Bundle sections, by index (each tensor its own section).
    Bundle(Arc<tether_bundle::Bundle>),
}

struct Entry {
    name: String,
    ty: TensorType,
    dims: Vec<u64>,
    backing: usize,
    /// Byte range in the backing (for a bundle backing: the section index in `offset`).
    offset: usize,
    len: usize,
}

/// A set of named tensors and the storage they borrow from. Built by the checkpoint readers;
/// read by the forward pass through [`Weights::get`] or [`Weights::model`].
#[derive(Default)]
pub struct Weights {
    backings: Vec<Backing>,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("tensors", &self.entries.len())
            .finish()
    }
}

impl Weights {
    /// Adds a backing and returns its index.
    pub(crate) fn add_backing(&mut self, b: Backing) -> usize {
        self.backings.push(b);
        self.backings.len() - 1
    }

    /// Adds a tensor whose bytes are `[offset, offset + len)` of backing `backing` (for a
    /// bundle backing, `offset` is the section index and `len` its length). The caller has
    /// checked the range and that `len` matches `ty` and `dims`.
    pub(crate) fn insert(
        &mut self,
        name: String,
        ty: TensorType,
        dims: Vec<u64>,
        backing: usize,
        offset: usize,
        len: usize,
    ) {
        let i = self.entries.len();
        if let Some(old) = self.by_name.insert(name.clone(), i) {
            // Replacing a tensor (a converted copy of a mapped one): the old entry stays,
            // unreachable by name.
            log::trace!("tensor `{name}` replaced (entry {old})");
        }
        self.entries.push(Entry {
            name,
            ty,
            dims,
            backing,
            offset,
            len,
        });
    }

    /// Adds a tensor held in its own aligned buffer.
    pub(crate) fn insert_owned(
        &mut self,
        name: String,
        ty: TensorType,
        dims: Vec<u64>,
        buf: AlignedBuf,
    ) {
        let len = buf.bytes().len();
        let b = self.add_backing(Backing::Owned(buf));
        self.insert(name, ty, dims, b, 0, len);
    }

    /// `Ok` unless a bundle these tensors borrow from changed on disk since it was opened
    /// (rewritten in place or truncated: [`tether_bundle::Bundle::ensure_unchanged`], one
    /// `fstat` and an atomic load per bundle). Memory-mapped GGUF files are not checked.
    ///
    /// # Errors
    /// [`LlmError::Bundle`] with [`tether_bundle::BundleError::ChangedWhileOpen`] naming the
    /// file.
    pub fn ensure_unchanged(&self) -> Result<(), LlmError> {
        for b in &self.backings {
            if let Backing::Bundle(bundle) = b {
                bundle.ensure_unchanged()?;
            }
        }
        Ok(())
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    fn entry_ref<'s>(&'s self, e: &'s Entry) -> Result<TensorRef<'s>, LlmError> {
        let data = match &self.backings[e.backing] {
            Backing::Mmap(m) => &m[e.offset..e.offset + e.len],
            Backing::Owned(b) => &b.bytes()[e.offset..e.offset + e.len],
            Backing::Bundle(bundle) => {
                let s = bundle.section_at(e.offset as u32)?;
                bundle.section_bytes(&s)?
            }
        };
        Ok(TensorRef {
            name: &e.name,
            ty: e.ty,
            dims: &e.dims,
            data,
        })
    }

    /// The tensor called `name`, or `Ok(None)` when there is none.
    ///
    /// # Errors
    /// For a bundle source, [`LlmError::Bundle`] when the tensor's section fails its CRC
    /// on first access (lazy verification) or the file changed under the mapping.
    pub fn get(&self, name: &str) -> Result<Option<TensorRef<'_>>, LlmError> {
        match self.by_name.get(name) {
            Some(&i) => self.entry_ref(&self.entries[i]).map(Some),
            None => Ok(None),
        }
    }

    /// The tensor called `name`.
    ///
    /// # Errors
    /// [`LlmError::MissingTensor`]; as [`get`](Self::get).
    pub fn require(&self, name: &str) -> Result<TensorRef<'_>, LlmError> {
        self.get(name)?.ok_or_else(|| LlmError::MissingTensor {
            name: name.to_owned(),
        })
    }

    /// Names, types and dimensions of every tensor (no data access), in insertion order.
    pub fn infos(&self) -> impl Iterator<Item = (&str, TensorType, &[u64])> {
        let mut v: Vec<usize> = self.by_name.values().copied().collect();
        v.sort_unstable();
        v.into_iter().map(|i| {
            let e = &self.entries[i];
            (e.name.as_str(), e.ty, e.dims.as_slice())
        })
    }

    /// Every tensor, in insertion order.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn all(&self) -> Result<Vec<TensorRef<'_>>, LlmError> {
        let mut v: Vec<usize> = self.by_name.values().copied().collect();
        v.sort_unstable();
        v.into_iter()
            .map(|i| self.entry_ref(&self.entries[i]))
            .collect()
    }

    /// Total parameters (elements) over every tensor.
    pub fn parameter_count(&self) -> u64 {
        self.infos()
            .map(|(_, _, d)| d.iter().product::<u64>())
            .sum()
    }

    /// Every tensor the architecture uses, resolved and checked against `cfg`: present,
    /// dimensions as the table in the [module docs](self) gives, norms/biases/RoPE factors
    /// f32 (f16/bf16 accepted for norms and biases from safetensors), matrices any
    /// [`TensorType`]. A tensor no architecture defines is refused (its meaning would be
    /// silently lost).
    ///
    /// # Errors
    /// [`LlmError::MissingTensor`], [`LlmError::TensorShape`] (name, expected, found),
    /// [`LlmError::TensorType`], [`LlmError::UnexpectedTensor`]; as [`get`](Self::get).
    pub fn model(&self, cfg: &LlmConfig) -> Result<ModelTensors<'_>, LlmError> {
        let e = cfg.n_embd as u64;
        let ff = cfg.n_ff as u64;
        let q = cfg.q_dim() as u64;
        let kv = cfg.kv_dim() as u64;
        let hd = cfg.head_dim as u64;
        let v = cfg.n_vocab as u64;
        let mut t = Taker { w: self, used: 0 };
        let token_embd = t.take("token_embd.weight", &[e, v], Kind::Matrix)?;
        let output_norm = t.take("output_norm.weight", &[e], Kind::Vector)?;
        let output = t.opt(!cfg.tied_embeddings, "output.weight", &[e, v], Kind::Matrix)?;
        let scaled = matches!(cfg.rope_scaling, RopeScaling::FreqFactors { .. });
        let rope_freqs = t.opt(scaled, "rope_freqs.weight", &[hd / 2], Kind::F32)?;
        let mut layers = Vec::with_capacity(cfg.n_layer as usize);
        for i in 0..cfg.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let (b, qn) = (cfg.qkv_bias, cfg.qk_norm);
            layers.push(LayerTensors {
                attn_norm: t.take(&n("attn_norm.weight"), &[e], Kind::Vector)?,
                attn_q: t.take(&n("attn_q.weight"), &[e, q], Kind::Matrix)?,
                attn_k: t.take(&n("attn_k.weight"), &[e, kv], Kind::Matrix)?,
                attn_v: t.take(&n("attn_v.weight"), &[e, kv], Kind::Matrix)?,
                attn_q_bias: t.opt(b, &n("attn_q.bias"), &[q], Kind::Vector)?,
                attn_k_bias: t.opt(b, &n("attn_k.bias"), &[kv], Kind::Vector)?,
                attn_v_bias: t.opt(b, &n("attn_v.bias"), &[kv], Kind::Vector)?,
                attn_q_norm: t.opt(qn, &n("attn_q_norm.weight"), &[hd], Kind::Vector)?,
                attn_k_norm: t.opt(qn, &n("attn_k_norm.weight"), &[hd], Kind::Vector)?,
                attn_output: t.take(&n("attn_output.weight"), &[q, e], Kind::Matrix)?,
                ffn_norm: t.take(&n("ffn_norm.weight"), &[e], Kind::Vector)?,
                ffn_gate: t.take(&n("ffn_gate.weight"), &[e, ff], Kind::Matrix)?,
                ffn_up: t.take(&n("ffn_up.weight"), &[e, ff], Kind::Matrix)?,
                ffn_down: t.take(&n("ffn_down.weight"), &[ff, e], Kind::Matrix)?,
            });
        }
        if t.used != self.len() {
            // Something is stored that this configuration does not read: an unknown tensor,
            // or one of a feature the configuration lacks (a bias without `qkv_bias`).
            let mut wanted = std::collections::HashSet::new();
            wanted.insert("token_embd.weight".to_owned());
            wanted.insert("output_norm.weight".to_owned());
            if let Some(o) = &output {
                wanted.insert(o.name.to_owned());
            }
            if let Some(r) = &rope_freqs {
                wanted.insert(r.name.to_owned());
            }
            for l in &layers {
                for x in l.all().into_iter().flatten() {
                    wanted.insert(x.name.to_owned());
                }
            }
            if let Some((name, _, _)) = self.infos().find(|(n, _, _)| !wanted.contains(*n)) {
                // A layer the configuration does not have: its layer count is wrong.
                if let Some(l) = name
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|i| i.parse::<usize>().ok())
                    .filter(|&l| l >= layers.len())
                {
                    return Err(LlmError::config(
                        "n_layer (block_count)",
                        format!(
                            "{}, but tensor `{name}` is of layer {l}: the file holds more layers",
                            layers.len()
                        ),
                    ));
                }
                return Err(LlmError::UnexpectedTensor {
                    name: name.to_owned(),
                });
            }
        }
        Ok(ModelTensors {
            token_embd,
            output_norm,
            output,
            rope_freqs,
            layers,
        })
    }
}

struct Taker<'w> {
    w: &'w Weights,
    used: usize,
}

impl<'w> Taker<'w> {
    fn take(&mut self, name: &str, dims: &[u64], kind: Kind) -> Result<TensorRef<'w>, LlmError> {
        let t = self.w.require(name)?;
        self.used += 1;
        check(&t, dims, kind)?;
        Ok(t)
    }

    fn opt(
        &mut self,
        wanted: bool,
        name: &str,
        dims: &[u64],
        kind: Kind,
    ) -> Result<Option<TensorRef<'w>>, LlmError> {
        if wanted {
            self.take(name, dims, kind).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Every per-layer tensor name any supported architecture defines (without `blk.N.`).
pub const LAYER_TENSORS: [&str; 14] = [
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_q.bias",
    "attn_k.bias",
    "attn_v.bias",
    "attn_q_norm.weight",
    "attn_k_norm.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
];

#[derive(Clone, Copy)]
enum Kind {
    /// A weight matrix: any type.
    Matrix,
    /// A norm weight or bias: f32, f16 or bf16.
    Vector,
    /// f32 only.
    F32,
}

fn check(t: &TensorRef<'_>, dims: &[u64], kind: Kind) -> Result<(), LlmError> {
    if t.dims != dims {
        return Err(LlmError::TensorShape {
            name: t.name.to_owned(),
            expected: dims.to_vec(),
            found: t.dims.to_vec(),
        });
    }
    let (ok, allowed) = match kind {
        Kind::Matrix => (true, ""),
        Kind::Vector => (
            matches!(t.ty, TensorType::F32 | TensorType::F16 | TensorType::Bf16),
            "f32, f16, bf16",
        ),
        Kind::F32 => (t.ty == TensorType::F32, "f32"),
    };
    if !ok {
        return Err(LlmError::TensorType {
            name: t.name.to_owned(),
            ty: t.ty,
            allowed,
        });
    }
    Ok(())
}

/// The tensors of one transformer block.
#[derive(Clone, Copy, Debug)]
pub struct LayerTensors<'a> {
    /// RMSNorm before attention, `[n_embd]`.
    pub attn_norm: TensorRef<'a>,
    /// Query projection, `[n_embd, q_dim]`.
    pub attn_q: TensorRef<'a>,
    /// Key projection, `[n_embd, kv_dim]`.
    pub attn_k: TensorRef<'a>,
    /// Value projection, `[n_embd, kv_dim]`.
    pub attn_v: TensorRef<'a>,
    /// Query bias `[q_dim]` (Qwen2).
    pub attn_q_bias: Option<TensorRef<'a>>,
    /// Key bias `[kv_dim]` (Qwen2).
    pub attn_k_bias: Option<TensorRef<'a>>,
    /// Value bias `[kv_dim]` (Qwen2).
    pub attn_v_bias: Option<TensorRef<'a>>,
    /// Per-head query RMSNorm `[head_dim]` (Qwen3).
    pub attn_q_norm: Option<TensorRef<'a>>,
    /// Per-head key RMSNorm `[head_dim]` (Qwen3).
    pub attn_k_norm: Option<TensorRef<'a>>,
    /// Output projection, `[q_dim, n_embd]`.
    pub attn_output: TensorRef<'a>,
    /// RMSNorm before the feed-forward, `[n_embd]`.
    pub ffn_norm: TensorRef<'a>,
    /// Gate projection, `[n_embd, n_ff]`.
    pub ffn_gate: TensorRef<'a>,
    /// Up projection, `[n_embd, n_ff]`.
    pub ffn_up: TensorRef<'a>,
    /// Down projection, `[n_ff, n_embd]`.
    pub ffn_down: TensorRef<'a>,
}

impl<'a> LayerTensors<'a> {
    /// Every tensor of the block, absent optional ones as `None`, in the field order.
    pub fn all(&self) -> [Option<TensorRef<'a>>; 14] {
        [
            Some(self.attn_norm),
            Some(self.attn_q),
            Some(self.attn_k),
            Some(self.attn_v),
            self.attn_q_bias,
            self.attn_k_bias,
            self.attn_v_bias,
            self.attn_q_norm,
            self.attn_k_norm,
            Some(self.attn_output),
            Some(self.ffn_norm),
            Some(self.ffn_gate),
            Some(self.ffn_up),
            Some(self.ffn_down),
        ]
    }
}

/// Every tensor of a model, checked against its [`LlmConfig`] ([`Weights::model`]).
#[derive(Clone, Debug)]
pub struct ModelTensors<'a> {
    /// Token embedding `[n_embd, n_vocab]`.
    pub token_embd: TensorRef<'a>,
    /// Final RMSNorm `[n_embd]`.
    pub output_norm: TensorRef<'a>,
    /// Output projection `[n_embd, n_vocab]`; `None` when tied (use `token_embd`).
    pub output: Option<TensorRef<'a>>,
    /// RoPE frequency divisors `[head_dim / 2]` (f32), with frequency scaling only.
    pub rope_freqs: Option<TensorRef<'a>>,
    /// The blocks, in order.
    pub layers: Vec<LayerTensors<'a>>,
}

impl<'a> ModelTensors<'a> {
    /// The matrix that produces the logits: `output.weight`, or `token_embd.weight` when tied.
    pub fn lm_head(&self) -> TensorRef<'a> {
        self.output.unwrap_or(self.token_embd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_alignment() {
        assert_eq!(
            tensor_bytes(TensorType::Q4_1, &[576, 1536]),
            Some(20 * 18 * 1536)
        );
        assert_eq!(tensor_bytes(TensorType::Q4K, &[576, 2]), None);
        assert_eq!(tensor_bytes(TensorType::F32, &[u64::MAX, 2]), None);
        assert_eq!(tensor_bytes(TensorType::F32, &[1 << 40, 1 << 40]), None);
        let b = AlignedBuf::from_bytes(&[1, 2, 3]);
        assert_eq!(b.bytes(), &[1, 2, 3]);
        assert_eq!(b.bytes().as_ptr() as usize % 64, 0);
    }

    #[test]
    fn model_checks_names_shapes_and_types() {
        let mut cfg = crate::testing::tiny_config();
        let mut w = crate::testing::tiny_weights(&cfg);
        let m = w.model(&cfg).expect("complete");
        assert_eq!(m.layers.len(), cfg.n_layer as usize);
        assert_eq!(m.lm_head().name, "token_embd.weight");
        // A missing tensor, a wrong shape, a wrong type, an unknown tensor.
        cfg.tied_embeddings = false;
        let e = w.model(&cfg).unwrap_err();
        assert!(e.to_string().contains("`output.weight` is missing"), "{e}");
        cfg.tied_embeddings = true;
        cfg.n_ff += 32;
        let e = w.model(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("blk.0.ffn_gate.weight") && e.contains("expected [64, 160]"),
            "{e}"
        );
        cfg.n_ff -= 32;
        w.insert_owned(
            "blk.0.attn_norm.weight".into(),
            TensorType::Q8_0,
            vec![64],
            AlignedBuf::zeroed(68),
        );
        let e = w.model(&cfg).unwrap_err().to_string();
        assert!(e.contains("attn_norm.weight` is Q8_0"), "{e}");
        let mut w = crate::testing::tiny_weights(&cfg);
        w.insert_owned(
            "blk.0.attn_sinks".into(),
            TensorType::F32,
            vec![4],
            AlignedBuf::zeroed(16),
        );
        let e = w.model(&cfg).unwrap_err().to_string();
        assert!(e.contains("`blk.0.attn_sinks` is not part"), "{e}");
    }
}
