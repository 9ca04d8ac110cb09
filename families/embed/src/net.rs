//! The one place this family touches an inference engine.
//!
//! Today it wraps the tract CPU engine (`tether_runtime::cpu::TractCpuEngine`);
//! its `run` has the shape of the runtime's host-executor contract
//! (`tether_runtime::backend::HostExecutor::run`: the caller owns every input
//! and output buffer), so moving to the module API changes this file only.
//!
//! The tract engine keeps its own input tensors: `run` copies each input into
//! them and each output out of tract's results (the inputs are small, the
//! output `[batch, seq, 384]` f32 is at most 3 MiB at batch 8 x 256, a copy
//! far cheaper than the network). tract allocates its intermediate tensors
//! inside each run; nothing else here allocates after `load`.

use tether_runtime::cpu::TractCpuEngine;
use tether_runtime::{Engine, RunError, StreamHandle, TensorSpec};

use crate::EmbedError;

/// A network prepared once for fixed input shapes.
pub(crate) struct Network {
    engine: TractCpuEngine,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("inputs", &self.engine.inputs())
            .field("outputs", &self.engine.outputs())
            .finish()
    }
}

impl Network {
    /// Parse, type, optimise and plan `onnx` for `input_shapes` (one per
    /// network input, in the network's order).
    pub(crate) fn load(onnx: &[u8], input_shapes: &[Vec<usize>]) -> Result<Self, EmbedError> {
        let engine = TractCpuEngine::load(onnx, input_shapes)
            .map_err(|e| EmbedError::Network(e.to_string()))?;
        Ok(Self { engine })
    }

    /// Output tensors, in the network's order, with concrete shapes.
    pub(crate) fn outputs(&self) -> &[TensorSpec] {
        self.engine.outputs()
    }

    /// Run once: `inputs[i]` holds input `i` (native endianness, exactly its
    /// byte size), `outputs[i]` receives output `i`.
    pub(crate) fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), EmbedError> {
        for (i, src) in inputs.iter().enumerate() {
            let dst = self.engine.input_host_mut(i)?;
            if dst.len() != src.len() {
                return Err(RunError::BadHostBuffer { len: src.len() }.into());
            }
            dst.copy_from_slice(src);
        }
        self.engine.run(StreamHandle::HOST)?;
        for (i, dst) in outputs.iter_mut().enumerate() {
            let src = self.engine.output_host(i)?;
            if dst.len() != src.len() {
                return Err(EmbedError::Output {
                    index: i,
                    expected: dst.len(),
                    actual: src.len(),
                });
            }
            dst.copy_from_slice(src);
        }
        Ok(())
    }
}
