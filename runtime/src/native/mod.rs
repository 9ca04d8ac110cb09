//! The native GPU engine: the whole network lowered at load onto cuDNN (convolution,
//! pooling), cuBLAS (matrix products) and a small kernel library (everything else), enqueued
//! on the session's stream with no allocation and no synchronisation, so that a session can
//! capture pre-processing, the network and post-processing into one CUDA graph.
//!
//! # Pipeline (all at load)
//! 1. **Front end** ([`front`]): tract parses the ONNX model, fixes the input shapes, types,
//!    folds and declutters it; the decluttered `TypedModel` is lowered into the engine's IR
//!    ([`ir`], [`graph`]; one operator per file in [`ops`]): steps over tensors that are views (shape, offset, strides) of buffers.
//!    Reshape, squeeze, transpose, slice and broadcast are views, not copies. An operator or
//!    attribute the engine does not lower is a typed refusal naming the node and the op
//!    ([`LowerError::Unsupported`] → `PrepareError::Unsupported`).
//!    Nodes whose inputs are all constant are evaluated by tract at load (int8 weights are
//!    dequantised once, not per run).
//! 2. **Passes** ([`passes::rewrite`]): element-wise chains fuse into one kernel (bias + SiLU after a
//!    convolution), concatenations disappear when their producers can write into the slices
//!    of the output, network outputs are written in place, and a copy into a strided slice
//!    is folded into the element-wise steps that produce its source (write-through).
//! 3. **Precision** ([`passes::precision`]): fp32 by default; fp16 storage opt-in.
//!    **Layout** ([`passes::layout`]): NCHW by default; channels-last (NHWC) activations around the
//!    convolutions, poolings and 1x1-convolution GEMMs, with OHWI filters, the default in
//!    fp16 and TF32; convolutions and poolings read and write slices of channels in place
//!    (views with a pixel pitch), and a GEMM that is exactly a 1x1 convolution becomes one
//!    again.
//! 4. **Streams** ([`plan::schedule`]): independent branches of the network (YOLOv8's head) run on
//!    their own CUDA streams, ordered by events, so that the captured graph has them as
//!    parallel paths. **Memory plan** ([`plan::memory`]): every intermediate buffer gets a fixed
//!    offset in the workspace from a liveness analysis under the schedule's happens-before
//!    (buffers of steps that may run together never share memory); weights are packed into
//!    one blob uploaded once.
//!    At load the engine may run a convolution with its next step's bias, activation and
//!    residual as one cuDNN graph ([`passes::fusion`]), so such a step's output is live from the
//!    convolution on. The engine compiles the candidate cuDNN plans on several threads
//!    (fp16, TF32), measures them, and lays the network out again for the fusions that won.
//! 5. **Execution**: the host reference executor ([`exec::reference`], plain loops, used by the
//!    tests to prove 1-4 against the tract CPU engine without a GPU) or the GPU executor
//!    ([`exec::engine`]: cuDNN, cuBLAS and `runtime/kernels/native.cu`, libraries loaded at run
//!    time by [`libs::load`]). The executor's launch list ([`exec::launch`]) is built without CUDA, so
//!    [`exec::emulate`] can run it on the host with a transcription of every kernel: the tests
//!    prove address resolution, kernel parameters and BLAS arguments without a GPU.
//!
//! Steps 1-4 are [`pipeline::compile`] (no GPU, no library), run once per layout. Options:
//! [`NativeOptions`] (`NativeOptions::from_env` reads the environment).
//!
//! Operator coverage, precision modes and tolerances: `runtime/src/native/README.md`.

pub mod exec;
pub mod front;
pub mod graph;
pub mod ir;
pub mod libs;
pub mod ops;
pub mod passes;
pub mod pipeline;
pub mod plan;

pub use exec::engine::{NativeBackend, NativeExecutor, NativeOptions, NativePlan};
pub use ir::error::LowerError;
pub use libs::load::{LibraryError, LibraryVersions, library_versions};
pub use passes::layout::ActivationLayout;
pub use pipeline::{Compiled, compile, compile_fixed};
