//! Text generation on an NVIDIA GPU (issue 26; feature `cuda` for the device part): the
//! forward pass's [`Program`](crate::forward::Program) lowered to the decode kernels of
//! `kernels/llm.cu` ([`lower`]), every buffer placed at load, the decode step captured as ONE
//! CUDA graph at load and checked against an eager run on poisoned buffers before the
//! decoder is handed out.
//!
//! **Per token** the host launches the graph and reads back 4 bytes (the greedy token id);
//! the position, the token and the prompt live in the request state on the device
//! (`DecodeState`), so the same graph serves every position up to the context. Nothing is
//! allocated per token, on the host or on the device.
//!
//! **Prefill** (first version): the prompt ids are copied to the device once, then the
//! decode graph is replayed once per prompt token (the embedding reads `prompt[pos]` while
//! `pos` is inside the prompt). Bucketed prefill graphs with tensor-core products are the
//! issue's target and not built yet.
//!
//! **Sampling**: greedy only (the `argmax_advance` kernel). A request asking for a sampled
//! draw or a repetition penalty is refused on the GPU with [`GpuError::Sampling`].

pub mod lower;

#[cfg(feature = "cuda")]
mod decoder;
#[cfg(feature = "cuda")]
pub mod kernels;

#[cfg(feature = "cuda")]
pub use decoder::{GpuDecoder, GpuError, GpuOptions, check_sampling};
pub use lower::{LowerError, MemoryPlan, Step, lower};
