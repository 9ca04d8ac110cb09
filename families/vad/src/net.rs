//! The one place this family touches an inference engine.
//!
//! Today it wraps the tract CPU engine (`tether_runtime::cpu::TractCpuEngine`);
//! its `run` has the shape of the runtime's host-executor contract
//! (`tether_runtime::backend::HostExecutor::run`: the caller owns every input
//! and output buffer), so moving to the module API changes this file only.
//!
//! [`freeze_i64_input`] turns a scalar input into a constant of the graph
//! before preparation (Silero's `sr`): tract then folds the model's
//! `If (sr == 16000)` to its 16 kHz branch once, at optimisation. Left as an
//! input, tract's `IfThenElse::eval` clones and plans the branch on every run
//! (tract-core 0.23.9 `ops/logic/ite.rs`): about ten times slower and
//! allocating the whole branch per chunk.
//!
//! The tract engine keeps its own input tensors: `run` copies each input into
//! them and each output out of tract's results (for this network 2.3 KiB in,
//! 1 KiB out per chunk). tract allocates its intermediate tensors inside each
//! run; nothing else here allocates after `load`.

use prost::Message;
use tether_runtime::cpu::TractCpuEngine;
use tether_runtime::{Engine, RunError, StreamHandle, TensorSpec};
use tract_onnx::pb;
use tract_onnx::prelude::Framework;

use crate::VadError;

/// ONNX `TensorProto.DataType` INT64 (onnx.proto).
const ONNX_INT64: i32 = 7;

/// Re-encode `onnx` with graph input `name` (a scalar) replaced by a constant
/// initializer holding `value`.
pub(crate) fn freeze_i64_input(onnx: &[u8], name: &str, value: i64) -> Result<Vec<u8>, VadError> {
    let mut model = tract_onnx::onnx()
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| VadError::Network(format!("cannot parse the ONNX model: {e:#}")))?;
    let graph = model
        .graph
        .as_mut()
        .ok_or_else(|| VadError::Network("the ONNX model has no graph".into()))?;
    let pos = graph
        .input
        .iter()
        .position(|v| v.name == name)
        .ok_or_else(|| VadError::Network(format!("no graph input `{name}` to fix")))?;
    graph.input.remove(pos);
    graph.initializer.retain(|t| t.name != name);
    graph.initializer.push(pb::TensorProto {
        name: name.to_string(),
        data_type: ONNX_INT64,
        dims: Vec::new(),
        int64_data: vec![value],
        ..pb::TensorProto::default()
    });
    Ok(model.encode_to_vec())
}

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
    pub(crate) fn load(onnx: &[u8], input_shapes: &[Vec<usize>]) -> Result<Self, VadError> {
        let engine = TractCpuEngine::load(onnx, input_shapes)
            .map_err(|e| VadError::Network(e.to_string()))?;
        Ok(Self { engine })
    }

    /// Input tensors, in the network's order, with concrete shapes.
    pub(crate) fn inputs(&self) -> &[TensorSpec] {
        self.engine.inputs()
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
    ) -> Result<(), VadError> {
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
                return Err(VadError::Output {
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
