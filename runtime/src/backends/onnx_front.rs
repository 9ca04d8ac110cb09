//! What every tract-based backend does in front of tract: the load-time graph rewrites the
//! tract CPU backend, tract-cuda and the native GPU engine share.
//!
//! - [`substitute_fixed_inputs`]: inputs given a value at prepare time
//!   ([`crate::backend::FixedInput`]) become constants (initializers) of the parsed ONNX
//!   graph before tract builds its model, exactly as if the network had been exported that
//!   way. tract then folds what depends on them once: Silero VAD's `If (sr == 16000)`
//!   resolves to its 16 kHz branch at optimisation instead of being re-planned by
//!   `IfThenElse::eval` on every run (tract-core 0.23.9 `ops/logic/ite.rs`).
//! - [`fold_constants`]: every node whose inputs are all constants is evaluated once and
//!   replaced by its value. tract's own constant propagation (`optim/prop_const.rs`)
//!   refuses a fold whose output outgrows its inputs by more than 4 MiB, so int8 weights
//!   dequantised in the graph (`Mul(Cast(int8), scale)`, `DequantizeLinear`) would be
//!   dequantised again on every run (MiniLM: 51 ms instead of 11.6 ms per text). The values
//!   are the ones the graph computes (tract's own kernels evaluate each node).
//! - [`softmax_axes_last`] (tract CPU only): a softmax over a non-trailing axis runs over
//!   rows moved last, where tract has its fast path (YOLOv8's DFL head: 63 ms -> under 1 ms
//!   on an Intel Xeon).
//! - [`scans_reset_every_run`]: recurrent loops (ONNX `LSTM`, `GRU`, `RNN`, `Scan`) start
//!   from their state inputs on every run, as ONNX defines, instead of from tract's state of
//!   the previous run.
//! - [`eval_constant`]: the evaluation of one all-constant node, also used by the native
//!   engine's lowering (`native/lower.rs`) for the constants it materialises as weights.

use std::sync::Arc;

use tract_onnx::pb;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::source::TypedSource;

use crate::backend::{FixedInput, PrepareError};
use crate::tensor::DType;

/// The ONNX `TensorProto.DataType` code of an element type (onnx.proto).
fn onnx_code(dtype: DType) -> Option<i32> {
    Some(match dtype {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        _ => return None,
    })
}

/// Replace every input named in `fixed` by an initializer holding its value, in the parsed
/// ONNX graph (before tract builds its model from it).
///
/// Each fixed input is checked against the graph's declaration: it must be a graph input
/// (not only an initializer), be named once, have the declared element type, the declared
/// rank and every declared fixed dimension, and hold exactly its shape's bytes.
///
/// # Errors
/// [`PrepareError::Io`] naming the input and what does not fit (with the graph's inputs
/// for an unknown name).
pub(crate) fn substitute_fixed_inputs(
    network: &str,
    graph: &mut pb::GraphProto,
    fixed: &[FixedInput],
) -> Result<(), PrepareError> {
    for (i, f) in fixed.iter().enumerate() {
        let refuse = |detail: String| PrepareError::Io {
            network: network.to_string(),
            tensor: f.name.clone(),
            detail: format!("cannot fix input {f}: {detail}"),
        };
        if fixed[..i].iter().any(|g| g.name == f.name) {
            return Err(refuse("the input is fixed twice".into()));
        }
        let Some(pos) = graph.input.iter().position(|v| v.name == f.name) else {
            let inits: std::collections::HashSet<&str> =
                graph.initializer.iter().map(|t| t.name.as_str()).collect();
            let names: Vec<&str> = graph
                .input
                .iter()
                .map(|v| v.name.as_str())
                .filter(|n| !inits.contains(n))
                .collect();
            return Err(refuse(format!(
                "the network has no such input (its inputs: {})",
                names.join(", ")
            )));
        };
        let code = onnx_code(f.dtype)
            .ok_or_else(|| refuse(format!("element type {} has no ONNX code", f.dtype)))?;
        let count = f
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| refuse("the shape overflows".into()))?;
        let size = f.dtype.size_bytes().unwrap_or(0);
        if count.checked_mul(size) != Some(f.bytes.len()) {
            return Err(refuse(format!(
                "{} bytes given, the shape needs {count} elements of {size} bytes",
                f.bytes.len()
            )));
        }
        if let Some(pb::type_proto::Value::TensorType(t)) = graph.input[pos]
            .r#type
            .as_ref()
            .and_then(|t| t.value.as_ref())
        {
            if t.elem_type != code {
                return Err(refuse(format!(
                    "the network declares ONNX element type {} (the value's is {code})",
                    t.elem_type
                )));
            }
            if let Some(shape) = &t.shape {
                let declared: Vec<Option<i64>> = shape
                    .dim
                    .iter()
                    .map(|d| match d.value {
                        Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) if v > 0 => {
                            Some(v)
                        }
                        _ => None,
                    })
                    .collect();
                let fits = declared.len() == f.shape.len()
                    && declared
                        .iter()
                        .zip(&f.shape)
                        .all(|(d, &s)| d.is_none_or(|d| d == s as i64));
                if !fits {
                    return Err(refuse(format!(
                        "the network declares shape {:?} (None: any size)",
                        declared
                    )));
                }
            }
        }
        graph.input.remove(pos);
        graph.initializer.retain(|t| t.name != f.name);
        // ONNX raw data is little-endian.
        let mut raw = f.bytes.clone();
        if cfg!(target_endian = "big") && size > 1 {
            for e in raw.chunks_exact_mut(size) {
                e.reverse();
            }
        }
        graph.initializer.push(pb::TensorProto {
            name: f.name.clone(),
            data_type: code,
            dims: f.shape.iter().map(|&d| d as i64).collect(),
            raw_data: raw,
            ..pb::TensorProto::default()
        });
    }
    Ok(())
}

/// Evaluate `node` when every one of its inputs has a constant value (`konst` answers for
/// each input outlet); `None` when one does not, or when the operator cannot be evaluated
/// outside a plan (a stateful op) or fails to (left for the engine to run).
pub(crate) fn eval_constant(
    node: &TypedNode,
    konst: impl Fn(OutletId) -> Option<Arc<Tensor>>,
) -> Option<TVec<TValue>> {
    if node.inputs.is_empty() || node.op_is::<Const>() || node.op_is::<TypedSource>() {
        return None;
    }
    let inputs = node
        .inputs
        .iter()
        .map(|&o| konst(o).map(|t| t.into_tvalue()))
        .collect::<Option<TVec<TValue>>>()?;
    match node.op.eval_out_of_plan(inputs) {
        Ok(Some(outputs)) => Some(outputs),
        Ok(None) | Err(_) => None,
    }
}

/// Replace every live node of `model` whose inputs are all constants by constants holding
/// its outputs, whatever their size; returns how many nodes were folded. Nodes left dead
/// are removed by tract's next optimisation pass.
///
/// # Errors
/// tract's, when a patch cannot be applied (an internal inconsistency of the model).
pub(crate) fn fold_constants(model: &mut TypedModel) -> TractResult<usize> {
    let mut folded = 0;
    let mut cursor = 0;
    let mut from_start = true;
    loop {
        let outputs: Vec<OutletId> = model.output_outlets()?.to_vec();
        let mut patch = None;
        for id in cursor..model.nodes.len() {
            let node = &model.nodes[id];
            let live = node.outputs.iter().any(|o| !o.successors.is_empty())
                || outputs.iter().any(|o| o.node == id);
            if !live {
                continue;
            }
            let Some(values) = eval_constant(node, |o| {
                model.outlet_fact(o).ok().and_then(|f| f.konst.clone())
            }) else {
                continue;
            };
            let mut p = TypedModelPatch::default();
            for (slot, v) in values.into_iter().enumerate() {
                let name = if slot == 0 {
                    node.name.clone()
                } else {
                    format!("{}.{slot}", node.name)
                };
                let wire = p.add_const(name, v.into_arc_tensor())?;
                p.shunt_outside(model, OutletId::new(id, slot), wire)?;
            }
            patch = Some((id, p));
            break;
        }
        match patch {
            Some((id, p)) => {
                p.apply(model)?;
                folded += 1;
                cursor = id + 1;
                from_start = false;
            }
            // Node ids are not always in evaluation order: scan again from the start until
            // a whole scan folds nothing.
            None if !from_start => {
                cursor = 0;
                from_start = true;
            }
            None => break,
        }
    }
    Ok(folded)
}

/// Move the axis of every single-axis softmax that is not the last axis to the end and back
/// (`Softmax(x, axis)` -> `Move(axis, last)`, `Softmax(last)`, `Move(last, axis)`); returns how
/// many were rewritten. For the tract CPU engine, after its optimisation: tract 0.23's softmax
/// has a fast contiguous-rows path only for trailing axes and otherwise iterates one strided
/// view per distribution (`tract-core` `ops/nn/softmax`). YOLOv8's DFL head (a softmax over 16
/// bins on axis 1 of `[1, 16, 4, anchors]`) spent 18 ms of a 60 ms network there on an AMD EPYC
/// and 63 ms of 98 ms on an Intel Xeon (`docs/evidence/bench-cpu.md`); the two copies cost
/// well under a millisecond. Applied after optimisation because tract's axis-change pass would
/// fold the moves back into the softmax.
///
/// # Errors
/// tract's, when a patch cannot be applied.
pub(crate) fn softmax_axes_last(model: &mut TypedModel) -> TractResult<usize> {
    use tract_onnx::tract_core::ops::change_axes::AxisOp;
    use tract_onnx::tract_core::ops::nn::Softmax;
    let mut rewritten = 0;
    for id in model.eval_order()? {
        let node = &model.nodes[id];
        let Some(op) = node.op_as::<Softmax>() else {
            continue;
        };
        let rank = model.outlet_fact(node.inputs[0])?.rank();
        let [axis] = op.axes[..] else { continue };
        if axis + 1 >= rank {
            continue;
        }
        let last = rank - 1;
        let mut p = TypedModelPatch::default();
        let x = p.tap_model(model, node.inputs[0])?;
        let moved = p.wire_node(
            format!("{}.axis_last", node.name),
            AxisOp::Move(axis, last),
            &[x],
        )?;
        let sm = p.wire_node(
            format!("{}.rows", node.name),
            Softmax {
                axes: tvec![last],
                ..op.clone()
            },
            &moved,
        )?;
        let back = p.wire_node(
            format!("{}.axis_back", node.name),
            AxisOp::Move(last, axis),
            &sm,
        )?;
        p.shunt_outside(model, OutletId::new(id, 0), back[0])?;
        p.apply(model)?;
        rewritten += 1;
    }
    Ok(rewritten)
}

/// Make every recurrent loop of `model` start from the state its inputs give on every run
/// (`reset_every_turn` on tract's `Scan`, kept by its optimised form); returns how many were
/// changed. Call before tract's optimisation. tract imports ONNX `LSTM`, `GRU`, `RNN` and
/// `Scan` as scans that keep their hidden state inside the run state between runs (for
/// streaming), so a reused run state would silently ignore the `initial_h`/`initial_c`/state
/// inputs from the second run on. ONNX defines every inference as independent; a family that
/// streams (VAD) carries its state through the network's inputs and outputs. Loops nested
/// inside a scan body are not visited.
pub(crate) fn scans_reset_every_run(model: &mut TypedModel) -> usize {
    use tract_onnx::tract_core::ops::scan::Scan;
    let mut changed = 0;
    for node in &mut model.nodes {
        if let Some(op) = node.op_as_mut::<Scan>()
            && !op.reset_every_turn
        {
            op.reset_every_turn = true;
            changed += 1;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::tract_core::ops::cast::cast;
    use tract_onnx::tract_core::ops::math;

    /// int8 weights dequantised in the graph (`Mul(Cast(q), scale)`), 8 MiB of f32 once
    /// cast: tract's own propagation keeps the cast (it grows by more than 4 MiB), the fold
    /// replaces the chain by one f32 constant with the same values.
    #[test]
    fn folds_a_dequantisation_tract_keeps() -> TractResult<()> {
        let n = 2048;
        let q: Vec<i8> = (0..n * n).map(|i| (i % 251) as i8).collect();
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([1, n]))?;
        let w = model.add_const("q", tensor1(&q).into_shape(&[n, n])?)?;
        let scale = model.add_const("scale", tensor2(&[[0.5f32]]))?;
        let wf = model.wire_node("cast", cast(f32::datum_type()), &[w])?[0];
        let wf = model.wire_node("dequant", math::mul(), &[wf, scale])?[0];
        let y = model.wire_node("y", math::add(), &[x, wf])?;
        model.select_output_outlets(&y)?;
        // tract alone keeps the cast.
        let kept = model.clone().into_decluttered()?;
        assert!(kept.nodes.iter().any(|n| n.name == "cast"));
        let folded = fold_constants(&mut model)?;
        assert_eq!(folded, 2);
        let model = model.into_decluttered()?;
        assert!(!model.nodes.iter().any(|n| n.name == "cast"));
        let out = model
            .into_runnable()?
            .run(tvec!(Tensor::zero::<f32>(&[1, n])?.into_tvalue()))?;
        let out = out[0].clone().into_tensor();
        let out = out.to_plain_array_view::<f32>()?;
        assert_eq!(out[[0, 1]], 0.5);
        assert_eq!(out[[0, n - 1]], f32::from(((n - 1) % 251) as i8) * 0.5);
        Ok(())
    }

    /// A softmax over a middle axis, rewritten to run over rows moved last, gives the
    /// softmax's definition (exp(x - max) / sum over the axis, computed here in f64) at every
    /// position, and the rewrite leaves trailing-axis softmaxes alone.
    #[test]
    fn softmax_over_a_middle_axis_runs_over_rows() -> TractResult<()> {
        use tract_onnx::tract_core::ops::nn::Softmax;
        let (a, b, c) = (2, 16, 7);
        let x: Vec<f32> = (0..a * b * c)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut model = TypedModel::default();
        let src = model.add_source("x", f32::fact([a, b, c]))?;
        let mid = model.wire_node(
            "mid",
            Softmax::new(tvec![1], None, Default::default()),
            &[src],
        )?;
        let last = model.wire_node(
            "last",
            Softmax::new(tvec![2], None, Default::default()),
            &mid,
        )?;
        model.select_output_outlets(&[mid[0], last[0]])?;
        let mut model = model.into_optimized()?;
        assert_eq!(
            softmax_axes_last(&mut model)?,
            1,
            "only the middle-axis softmax"
        );
        let out = model
            .into_runnable()?
            .run(tvec!(tensor1(&x).into_shape(&[a, b, c])?.into_tvalue()))?;
        let mid = out[0].to_plain_array_view::<f32>()?.into_owned();
        let last = out[1].to_plain_array_view::<f32>()?.into_owned();
        let softmax = |v: &[f64]| -> Vec<f64> {
            let m = v.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        let mut want_mid = vec![0f64; a * b * c];
        for i in 0..a {
            for k in 0..c {
                let col: Vec<f64> = (0..b).map(|j| f64::from(x[(i * b + j) * c + k])).collect();
                for (j, v) in softmax(&col).into_iter().enumerate() {
                    want_mid[(i * b + j) * c + k] = v;
                }
            }
        }
        for (got, want) in mid.iter().zip(&want_mid) {
            assert!((f64::from(*got) - want).abs() < 1e-6, "{got} vs {want}");
        }
        for row in 0..a * b {
            let r: Vec<f64> = (0..c).map(|k| want_mid[row * c + k]).collect();
            for (k, want) in softmax(&r).into_iter().enumerate() {
                let got = f64::from(last.as_slice().unwrap()[row * c + k]);
                assert!((got - want).abs() < 1e-6, "{got} vs {want}");
            }
        }
        Ok(())
    }

    fn graph_with_input(name: &str, elem_type: i32, dims: &[i64]) -> pb::GraphProto {
        use pb::tensor_shape_proto::{Dimension, dimension};
        pb::GraphProto {
            input: vec![pb::ValueInfoProto {
                name: name.into(),
                r#type: Some(pb::TypeProto {
                    value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                        elem_type,
                        shape: Some(pb::TensorShapeProto {
                            dim: dims
                                .iter()
                                .map(|&d| Dimension {
                                    value: Some(if d > 0 {
                                        dimension::Value::DimValue(d)
                                    } else {
                                        dimension::Value::DimParam("n".into())
                                    }),
                                    ..Dimension::default()
                                })
                                .collect(),
                        }),
                    })),
                    ..pb::TypeProto::default()
                }),
                ..pb::ValueInfoProto::default()
            }],
            ..pb::GraphProto::default()
        }
    }

    #[test]
    fn fixed_input_becomes_an_initializer() {
        let mut g = graph_with_input("sr", 7, &[]);
        substitute_fixed_inputs("vad", &mut g, &[FixedInput::scalar_i64("sr", 16000)])
            .expect("substituted");
        assert!(g.input.is_empty());
        let t = &g.initializer[0];
        assert_eq!((t.name.as_str(), t.data_type), ("sr", 7));
        assert!(t.dims.is_empty());
        assert_eq!(t.raw_data, 16000i64.to_le_bytes());
    }

    #[test]
    fn fixed_inputs_that_do_not_fit_are_refused_by_name() {
        let msg = |g: &mut pb::GraphProto, f: FixedInput| {
            substitute_fixed_inputs("net", g, &[f])
                .unwrap_err()
                .to_string()
        };
        let mut g = graph_with_input("sr", 7, &[]);
        let e = msg(&mut g, FixedInput::scalar_i64("rate", 1));
        assert!(e.contains("`rate`") || e.contains("rate"), "{e}");
        assert!(e.contains("its inputs: sr"), "{e}");
        let e = msg(&mut g, FixedInput::new("sr", vec![], &[1.0f32]));
        assert!(e.contains("ONNX element type 7"), "{e}");
        let e = msg(&mut g, FixedInput::new("sr", vec![2], &[1i64, 2]));
        assert!(e.contains("declares shape []"), "{e}");
        let mut bad = FixedInput::scalar_i64("sr", 1);
        bad.bytes.pop();
        let e = msg(&mut g, bad);
        assert!(e.contains("7 bytes given"), "{e}");
        let mut g = graph_with_input("x", 1, &[-1, 4]);
        substitute_fixed_inputs(
            "net",
            &mut g,
            &[FixedInput::new("x", vec![3, 4], &[0f32; 12])],
        )
        .expect("a dynamic dimension takes any size");
        let mut g = graph_with_input("x", 1, &[-1, 4]);
        let e = msg(&mut g, FixedInput::new("x", vec![3, 5], &[0f32; 15]));
        assert!(e.contains("declares shape [None, Some(4)]"), "{e}");
        let mut g = graph_with_input("sr", 7, &[]);
        let twice = [
            FixedInput::scalar_i64("sr", 1),
            FixedInput::scalar_i64("sr", 2),
        ];
        let e = substitute_fixed_inputs("net", &mut g, &twice)
            .unwrap_err()
            .to_string();
        assert!(e.contains("fixed twice"), "{e}");
    }

    /// `y = x * k` with `k` an f32 scalar input fixed to 3 at prepare: the tract CPU plan
    /// has `x` as its only input and computes `3 x`; a value of the wrong type is refused
    /// by the backend, naming the input.
    #[cfg(feature = "tract-cpu")]
    #[test]
    fn a_fixed_input_is_folded_into_the_host_plan() {
        use crate::backend::{Backend, NetworkSource, Plan, PrepareOptions, SourceFormat};
        use prost::Message;
        let mut graph = graph_with_input("x", 1, &[1, 4]);
        graph
            .input
            .push(graph_with_input("k", 1, &[]).input.remove(0));
        graph
            .output
            .push(graph_with_input("y", 1, &[1, 4]).input.remove(0));
        graph.node.push(pb::NodeProto {
            input: vec!["x".into(), "k".into()],
            output: vec!["y".into()],
            op_type: "Mul".into(),
            ..pb::NodeProto::default()
        });
        let model = pb::ModelProto {
            ir_version: 8,
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(graph),
            ..pb::ModelProto::default()
        };
        let bytes = model.encode_to_vec();
        let source = NetworkSource {
            network: "scale",
            format: SourceFormat::Onnx,
            bytes: &bytes,
            target: None,
        };
        let options = |f: FixedInput| PrepareOptions {
            input_shapes: vec![vec![1, 4]],
            fixed_inputs: vec![f],
            ..PrepareOptions::default()
        };
        let backend = crate::backends::tract_cpu::TractCpu;
        let plan = backend
            .prepare(&source, &options(FixedInput::new("k", vec![], &[3.0f32])))
            .expect("prepared");
        let io = plan.io();
        assert_eq!(io.inputs.len(), 1, "{io:?}");
        assert_eq!(io.inputs[0].name, "x");
        let Plan::Host(host) = plan else {
            panic!("a host plan")
        };
        let mut exec = host.executor().expect("executor");
        let x: Vec<u8> = [1.0f32, 2.0, -1.0, 0.5]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut y = [0u8; 16];
        exec.run(&[&x], &mut [&mut y]).expect("run");
        let y: Vec<f32> = y
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(y, [3.0, 6.0, -3.0, 1.5]);
        let Err(e) = backend.prepare(&source, &options(FixedInput::scalar_i64("k", 3))) else {
            panic!("an i64 value for an f32 input is refused")
        };
        let e = e.to_string();
        assert!(e.contains("k") && e.contains("element type 1"), "{e}");
    }
}
