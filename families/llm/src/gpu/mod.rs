//! Text generation on an NVIDIA GPU (issue 26; feature `cuda` for the device part): the
//! forward pass's [`Program`](crate::forward::Program) lowered to the decode kernels of
//! `kernels/llm.cu` ([`lower`]), every buffer placed at load, the decode step captured as ONE
//! CUDA graph at load and checked against an eager run on poisoned buffers before the
//! decoder is handed out (on sm_90 and later two: one cluster launch per layer for the steps
//! below `GpuOptions::layer_kernel_below`, the fused step with its layers' tails
//! (`GpuOptions::layer_tail`, [`lower_tails`]) from there, checked against each other bit
//! for bit; each step launches one of them; with `GpuOptions::grid_layers`, the default, the
//! first graph's layers are one cooperative launch of one block per SM where the device
//! holds one on every SM). By default the launches are merged ([`lower_fused`]: a product
//! with its input's preparation, RoPE and the cache write in one launch, each attention with
//! its combine; 5 launches per Llama-style layer instead of 12), the same logits bit for bit
//! as the unfused list ([`lower()`], `GpuOptions::fused = false`).
//!
//! **Per token** the host launches the graph and reads back 4 bytes (the greedy token id);
//! the position, the token and the prompt live in the request state on the device
//! (`DecodeState`), so the same graph serves every position up to the context (or, with two,
//! every position on its side of the switch). Nothing is
//! allocated per token, on the host or on the device.
//!
//! **Prefill** ([`prefill`]): the prompt ids are copied to the device once, then a second
//! graph captured at load processes a chunk of up to [`PREFILL_CHUNK`] prompt tokens per
//! replay (each weight block read once for several tokens, causal attention of the chunk
//! over the cache, the f16 cache write), one replay per chunk, the chunk's position and
//! length read from the request state; the cache and the first token's logits equal the
//! token-by-token prefill's bit for bit (the same per-token arithmetic). With
//! `prefill_chunk: 0` the decode graph is replayed once per prompt token instead.
//!
//! **Sampling** on the device (`sample_advance`, the graph's last node): `src/sample.rs`'s
//! chain (repetition penalty, greedy, top-k, top-p, min-p, temperature, a Philox4x32-10 draw
//! keyed by the seed) with the request's [`SampleConfig`] and token sequence in device
//! memory, written once per request, so the same graph serves greedy and sampled requests and
//! the host still reads one token id per step. Same seed, same tokens on every run (integer
//! atomics only, every float sum in a fixed order). Against the CPU sampler on identical
//! logits: the same token but where CUDA's `expf` (or, for more than 1,024 survivors, the
//! fixed-point top-p mass and the chunked draw sums) moves a boundary by a few ulp
//! (`tests/gpu_sample.rs`). Refused ([`GpuError::Sampling`]): a repetition penalty over a
//! vocabulary beyond [`SAMPLE_MAX_VOCAB`](lower::SAMPLE_MAX_VOCAB).

pub mod lower;
pub mod prefill;

#[cfg(feature = "cuda")]
mod decoder;
#[cfg(feature = "cuda")]
pub mod kernels;
#[cfg(feature = "cuda")]
mod prefill_graph;
#[cfg(feature = "cuda")]
mod sampler;
#[cfg(feature = "cuda")]
mod weights;

#[cfg(feature = "cuda")]
pub use decoder::{
    GRID_STAGE_ROWS, GpuDecoder, GpuError, GpuOptions, LAYER_KERNEL_BELOW, check_sampling,
    grid_layers, layer_kernel_below, layer_tail, tail_pair,
};
pub use lower::{
    LowerError, MemoryPlan, Prologue, SampleConfig, Step, UnsupportedSampling, lower, lower_fused,
    lower_layers, lower_tails,
};
pub use prefill::{ChunkStep, PREFILL_CHUNK, PrefillError, chunk_lengths, lower_chunk};
#[cfg(feature = "cuda")]
pub use sampler::DeviceSampler;
#[cfg(feature = "cuda")]
pub use weights::DeviceWeights;
