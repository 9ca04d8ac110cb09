//! tether text-generation family: decoder-only transformers (Llama, Qwen2, Qwen3) built from
//! GGUF v3 files or Hugging Face directories into one bundle, generating text token by token.
//!
//! Work in progress (issue 25): the module list below is the plan; each module documents
//! what it owns.
//!
//! - [`quant`]: tensor element types (F32, F16, BF16 and ggml's block quantisations Q8_0,
//!   Q4_0, Q4_1, Q4_K, Q6_K): block geometry, scalar dequantisation (the reference), and the
//!   SIMD dot products the forward pass uses.
#![warn(missing_docs)]

pub mod cache;
pub mod forward;
pub mod kernels;
pub mod quant;

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "llm";
