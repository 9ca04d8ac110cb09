//! tether text-generation family: decoder-only transformers (Llama, Qwen2, Qwen3) built from
//! GGUF v3 files or Hugging Face directories into one bundle, generating text token by token.
//!
//! Work in progress (issue 25): the module list below is the plan; each module documents
//! what it owns.
//!
//! - [`quant`]: tensor element types (F32, F16, BF16 and ggml's block quantisations Q8_0,
//!   Q4_0, Q4_1, Q4_K, Q6_K): block geometry, scalar dequantisation (the reference), and the
//!   SIMD dot products the forward pass uses.
//! - [`config`]: the hyper-parameters ([`LlmConfig`]) read from a checkpoint by definition.
//! - [`tensor`]: read-only tensors with canonical (GGUF) names ([`TensorRef`], [`Weights`],
//!   [`ModelTensors`]), the only way the forward pass sees weights.
//! - [`gguf`], [`safetensors`]: the checkpoint file readers.
//! - [`tokenizer`]: byte-level BPE with llama.cpp's special-token semantics, streaming
//!   UTF-8-safe detokenisation ([`Tokenizer`], [`StreamDecoder`]).
//! - [`template`]: the checkpoint's chat template through `minijinja`, Hugging Face
//!   conventions ([`ChatTemplate`]).
//! - [`checkpoint`]: a GGUF file or Hugging Face directory in canonical form
//!   ([`Checkpoint`]).
//! - [`bundle`]: the `llm` bundle's sections, reading them back, `describe` for `inspect`;
//!   `recipe` (feature `build`): checkpoint -> bundle.
//! - [`error`]: the front end's errors ([`LlmError`]).
//! - [`selftest`]: the bundle's self-test (llama.cpp's greedy tokens for a short chat).
//! - [`gpu`]: the forward pass lowered to CUDA kernels, the decode step one CUDA graph
//!   captured at load (feature `cuda` for the device part; issue 26).
//! - `cli` (feature `cli`): the family as the `tether` CLI sees it.
#![warn(missing_docs)]

pub mod bench;
pub mod bundle;
pub mod cache;
pub mod checkpoint;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod error;
pub mod forward;
pub mod generate;
pub mod gguf;
pub mod gpu;
pub mod kernels;
pub mod quant;
#[cfg(feature = "build")]
pub mod recipe;
pub mod safetensors;
pub mod sample;
pub mod selftest;
pub mod template;
pub mod tensor;
#[doc(hidden)]
pub mod testing;
pub mod tokenizer;

pub use checkpoint::Checkpoint;
pub use config::LlmConfig;
pub use error::LlmError;
pub use template::{ChatMessage, ChatTemplate};
pub use tensor::{ModelTensors, TensorRef, Weights};
pub use tokenizer::{StreamDecoder, Tokenizer};

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "llm";
