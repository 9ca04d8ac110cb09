//! The one place this family touches an inference engine.
//!
//! Today it wraps the tract CPU engine (`tether_runtime::cpu::TractCpuEngine`);
//! its `run` has the shape of the runtime's host-executor contract
//! (`tether_runtime::backend::HostExecutor::run`: the caller owns every input
//! and output buffer), so moving to the module API changes this file only.
//!
//! [`fold_int8_dequantization`] runs before preparation: the int8 network
//! stores its weights as `Mul(Cast(int8 initializer), f32 scale initializer)`,
//! which tract does not constant-fold (tract-core 0.23.9 `optim/prop_const.rs`
//! refuses folds whose output outgrows their input, and a cast to f32
//! quadruples it), so every run would dequantise all 22.5 M weights again
//! (about 45 ms per call on the development host, whatever the text length).
//! Folding once at load gives the very same f32 weights (same f32 products)
//! at the cost of keeping them (about 90 MB per prepared bucket).
//!
//! The tract engine keeps its own input tensors: `run` copies each input into
//! them and each output out of tract's results (the inputs are small, the
//! output `[batch, seq, 384]` f32 is at most 3 MiB at batch 8 x 256, a copy
//! far cheaper than the network). tract allocates its intermediate tensors
//! inside each run; nothing else here allocates after `load`.

use std::collections::HashMap;

use prost::Message;
use tether_runtime::cpu::TractCpuEngine;
use tether_runtime::{Engine, RunError, StreamHandle, TensorSpec};
use tract_onnx::pb;
use tract_onnx::prelude::Framework;

use crate::EmbedError;

/// ONNX `TensorProto.DataType` codes (onnx.proto).
const ONNX_FLOAT: i32 = 1;
const ONNX_INT8: i32 = 3;

fn int8_values(t: &pb::TensorProto) -> Option<Vec<i8>> {
    if t.data_type != ONNX_INT8 || t.data_location.unwrap_or(0) != 0 {
        return None;
    }
    if !t.raw_data.is_empty() {
        return Some(t.raw_data.iter().map(|&b| b as i8).collect());
    }
    // int8 values may also sit in int32_data, one per element.
    t.int32_data.iter().map(|&v| i8::try_from(v).ok()).collect()
}

fn f32_values(t: &pb::TensorProto) -> Option<Vec<f32>> {
    if t.data_type != ONNX_FLOAT || t.data_location.unwrap_or(0) != 0 {
        return None;
    }
    if !t.raw_data.is_empty() {
        if !t.raw_data.len().is_multiple_of(4) {
            return None;
        }
        return Some(
            t.raw_data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        );
    }
    Some(t.float_data.clone())
}

/// `q` (shape `dims`) times `scale` broadcast to it (a scalar, or the same
/// rank with each dimension 1 or equal), in f32 as the graph computes it.
fn dequantize(q: &[i8], dims: &[i64], scale: &[f32], scale_dims: &[i64]) -> Option<Vec<f32>> {
    let count: i64 = dims.iter().product();
    if count < 0 || q.len() != count as usize {
        return None;
    }
    if scale.len() == 1 {
        return Some(q.iter().map(|&v| f32::from(v) * scale[0]).collect());
    }
    if scale_dims.len() != dims.len()
        || scale_dims.iter().zip(dims).any(|(&s, &d)| s != 1 && s != d)
        || scale.len() as i64 != scale_dims.iter().product::<i64>()
    {
        return None;
    }
    let rank = dims.len();
    let mut out = Vec::with_capacity(q.len());
    let mut index = vec![0i64; rank];
    for &v in q {
        let mut s = 0i64;
        for axis in 0..rank {
            let i = if scale_dims[axis] == 1 {
                0
            } else {
                index[axis]
            };
            s = s * scale_dims[axis] + i;
        }
        out.push(f32::from(v) * scale[s as usize]);
        for axis in (0..rank).rev() {
            index[axis] += 1;
            if index[axis] < dims[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Some(out)
}

/// Re-encode `onnx` with every `Mul(Cast<to=FLOAT>(int8 initializer), f32
/// initializer)` replaced by one f32 initializer holding the product, when
/// the cast and the product have no other consumer. Returns the new bytes and
/// how many weights were folded.
pub(crate) fn fold_int8_dequantization(onnx: &[u8]) -> Result<(Vec<u8>, usize), EmbedError> {
    let mut model = tract_onnx::onnx()
        .proto_model_for_read(&mut &onnx[..])
        .map_err(|e| EmbedError::Network(format!("cannot parse the ONNX model: {e:#}")))?;
    let Some(graph) = model.graph.as_mut() else {
        return Err(EmbedError::Network("the ONNX model has no graph".into()));
    };
    let mut consumers: HashMap<String, usize> = HashMap::new();
    for n in &graph.node {
        for i in &n.input {
            *consumers.entry(i.clone()).or_default() += 1;
        }
    }
    for o in &graph.output {
        *consumers.entry(o.name.clone()).or_default() += 1;
    }
    let inits: HashMap<String, usize> = graph
        .initializer
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    let producer: HashMap<String, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i)))
        .collect();
    let mut drop_nodes = vec![false; graph.node.len()];
    let mut drop_inits = vec![false; graph.initializer.len()];
    let mut folded = Vec::new();
    for (mi, mul) in graph.node.iter().enumerate() {
        if mul.op_type != "Mul" || mul.input.len() != 2 || mul.output.len() != 1 {
            continue;
        }
        let (Some(&ci), Some(&si)) = (producer.get(&mul.input[0]), inits.get(&mul.input[1])) else {
            continue;
        };
        let cast = &graph.node[ci];
        let to_float = cast
            .attribute
            .iter()
            .any(|a| a.name == "to" && a.i == i64::from(ONNX_FLOAT));
        if cast.op_type != "Cast" || !to_float || cast.input.len() != 1 {
            continue;
        }
        let Some(&qi) = inits.get(&cast.input[0]) else {
            continue;
        };
        let single = |name: &str| consumers.get(name).copied() == Some(1);
        if !single(&mul.input[0]) || !single(&cast.input[0]) || !single(&mul.input[1]) {
            continue;
        }
        let (q, scale) = (&graph.initializer[qi], &graph.initializer[si]);
        let (Some(qv), Some(sv)) = (int8_values(q), f32_values(scale)) else {
            continue;
        };
        let Some(w) = dequantize(&qv, &q.dims, &sv, &scale.dims) else {
            continue;
        };
        let mut raw = Vec::with_capacity(w.len() * 4);
        for v in &w {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        folded.push(pb::TensorProto {
            name: mul.output[0].clone(),
            data_type: ONNX_FLOAT,
            dims: q.dims.clone(),
            raw_data: raw,
            ..pb::TensorProto::default()
        });
        drop_nodes[mi] = true;
        drop_nodes[ci] = true;
        drop_inits[qi] = true;
        drop_inits[si] = true;
    }
    let count = folded.len();
    let mut i = 0;
    graph.node.retain(|_| {
        i += 1;
        !drop_nodes[i - 1]
    });
    let mut i = 0;
    graph.initializer.retain(|_| {
        i += 1;
        !drop_inits[i - 1]
    });
    graph.initializer.extend(folded);
    Ok((model.encode_to_vec(), count))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dequantize_broadcasts_rows_columns_and_scalars() {
        let q = [1i8, -2, 3, -4, 5, -6];
        let dims = [2i64, 3];
        assert_eq!(
            dequantize(&q, &dims, &[0.5, 2.0], &[2, 1]),
            Some(vec![0.5, -1.0, 1.5, -8.0, 10.0, -12.0])
        );
        assert_eq!(
            dequantize(&q, &dims, &[1.0, 10.0, 100.0], &[1, 3]),
            Some(vec![1.0, -20.0, 300.0, -4.0, 50.0, -600.0])
        );
        assert_eq!(
            dequantize(&q, &dims, &[2.0], &[]),
            Some(vec![2.0, -4.0, 6.0, -8.0, 10.0, -12.0])
        );
        assert_eq!(dequantize(&q, &dims, &[1.0, 2.0], &[1, 2]), None);
        assert_eq!(dequantize(&q[..5], &dims, &[2.0], &[]), None);
    }
}
