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
//! - [`into_typed_bounded`]: tract's typing (analysis, then translation to a typed model)
//!   with every tensor bounded by [`crate::backend::PrepareOptions::max_tensor_bytes`].
//!   tract evaluates a node as soon as its inputs are known constants, during analysis
//!   (`tract-hir` `InferenceOp::infer`) and again while it wires the typed model
//!   (`tract-core` `TypedModel::wire_node`), and only weighs the output's size after it has
//!   allocated it. The inputs are small there, so what grows is the output of an operator
//!   whose size comes from its input *values*: a mutated `Range` bound (`Range(2^31, 2, 1)`,
//!   whose length tract takes as `|limit - start|`: 16 GiB of i64), a `ConstantOfShape`,
//!   `Expand` or `Tile` given a huge shape. Each node's output facts (shape, element type)
//!   are checked against the limit before tract may evaluate it, and the typed model's
//!   facts once more after typing (every tensor then has a concrete size, activations
//!   included), so the refusal names the tensor, its node, shape and size.

use std::sync::Arc;

use tract_onnx::pb;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::source::TypedSource;

use tract_onnx::tract_core::ops::dummy::Dummy;
use tract_onnx::tract_hir::internal::{
    EvalContext, EvalOp, Factoid, HashMap, InferenceModelPatch, InferenceNode, InferenceOp,
    OpState, SessionId, StaticName, Validation,
};

use crate::backend::{Excess, FixedInput, PrepareError, TensorTooLarge};
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

/// An attribute of an ONNX recurrent node that tract's importer would silently ignore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IgnoredAttribute {
    /// The node's name.
    pub node: String,
    /// `LSTM`, `GRU` or `RNN`.
    pub op: String,
    /// The attribute and its value, and what tract does instead.
    pub detail: String,
}

/// The first attribute of an ONNX `LSTM`, `GRU` or `RNN` node in `graph` (and its subgraphs)
/// that tract's importer does not apply: it builds the cell with the default activations, no
/// clipping, no coupled input and forget gates, and runs a single direction forwards
/// (`tract-onnx` 0.23 `ops/rec`). A network using one would run as a plain cell and give a
/// wrong answer with no error, on every tract-based engine; each refuses it instead (the
/// typed graph no longer shows the attribute, so it is checked on the ONNX node itself).
/// Semantics of the attributes: onnx/docs/Operators.md, `LSTM`, `GRU`, `RNN`.
pub(crate) fn ignored_recurrent_attribute(graph: &pb::GraphProto) -> Option<IgnoredAttribute> {
    for n in &graph.node {
        for a in &n.attribute {
            for sub in a.g.iter().chain(&a.graphs) {
                if let Some(r) = ignored_recurrent_attribute(sub) {
                    return Some(r);
                }
            }
        }
        let defaults: &[&str] = match n.op_type.as_str() {
            "LSTM" => &["sigmoid", "tanh", "tanh"],
            "GRU" => &["sigmoid", "tanh"],
            "RNN" => &["tanh"],
            _ => continue,
        };
        let refuse = |detail: String| IgnoredAttribute {
            node: n.name.clone(),
            op: n.op_type.clone(),
            detail,
        };
        for a in &n.attribute {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            match a.name.as_str() {
                "clip" => {
                    return Some(refuse(format!(
                        "attribute clip = {} (tract's importer does not clip the cell)",
                        a.f
                    )));
                }
                "direction" if a.s == b"reverse" => {
                    return Some(refuse(
                        "attribute direction = reverse (tract's importer runs a single direction forwards)"
                            .into(),
                    ));
                }
                "input_forget" if a.i != 0 => {
                    return Some(refuse(format!("attribute input_forget = {}", a.i)));
                }
                "activations" => {
                    let given: Vec<String> = a.strings.iter().map(|b| text(b)).collect();
                    let default = given.chunks(defaults.len()).all(|c| {
                        c.len() == defaults.len()
                            && c.iter()
                                .zip(defaults)
                                .all(|(g, d)| g.eq_ignore_ascii_case(d))
                    });
                    if !default {
                        return Some(refuse(format!(
                            "attribute activations = {given:?} (tract's importer applies the defaults {defaults:?})"
                        )));
                    }
                }
                "activation_alpha" | "activation_beta" if !a.floats.is_empty() => {
                    return Some(refuse(format!("attribute {} = {:?}", a.name, a.floats)));
                }
                _ => {}
            }
        }
    }
    None
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

/// Why a shape of known dimensions is refused under `limit`; `Ok` when it fits or is not
/// fully known (an unknown dimension may be 0).
fn over_limit(dims: &[Option<i64>], elem_bytes: u64, limit: u64) -> Result<(), Excess> {
    if dims.iter().any(|d| d.is_some_and(|d| d < 0)) {
        return Err(Excess::NegativeDimension);
    }
    let mut bytes = elem_bytes;
    for d in dims {
        let Some(d) = d else { return Ok(()) };
        bytes = bytes.checked_mul(*d as u64).ok_or(Excess::Unbounded)?;
    }
    if bytes > limit {
        return Err(Excess::Bytes(bytes));
    }
    Ok(())
}

/// Operators whose output size tract takes from the value of one input (its index): a
/// shape (`ConstantOfShape`, `Expand` as `MultiBroadcastTo`), repeat counts (`Tile`), pads
/// (`Pad`), output sizes (`Resize`), a depth (`OneHot`). tract's shape inference reads
/// those values through a cast to `i32` (tract-data 0.23.9 `Tensor::cast_to_dt` to `TDim`),
/// so a value outside that range is seen truncated by the facts checked here while the
/// evaluation may use the real one: such a value is refused (it asks for a dimension of
/// 2^31 or more, or a negative one, either way no tensor tether can hold).
const SIZE_INPUTS: [(&str, usize); 6] = [
    ("ConstantOfShape", 0),
    ("MultiBroadcastTo", 1),
    ("Tile", 1),
    ("Pad", 1),
    ("Resize", 3),
    ("OneHot", 1),
];

/// A node's name, operator and output labels, for [`TensorTooLarge`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeLabel {
    node: String,
    op: String,
    tensors: Vec<String>,
}

impl NodeLabel {
    fn refuse(
        &self,
        output: usize,
        shape: Vec<Option<i64>>,
        dtype: Option<DatumType>,
        excess: Excess,
        limit: u64,
    ) -> Box<TensorTooLarge> {
        Box::new(TensorTooLarge {
            tensor: self
                .tensors
                .get(output)
                .cloned()
                .unwrap_or_else(|| format!("{}.{output}", self.node)),
            node: self.node.clone(),
            op: self.op.clone(),
            output,
            shape,
            dtype: dtype.map_or_else(|| "?".to_string(), |dt| format!("{dt:?}")),
            excess,
            limit,
        })
    }

    /// Check one output fact (`dims` as far as known, element type) against `limit`.
    fn check(
        &self,
        output: usize,
        dims: Vec<Option<i64>>,
        dtype: Option<DatumType>,
        limit: u64,
    ) -> Result<(), Box<TensorTooLarge>> {
        let elem_bytes = dtype.map_or(1, |dt| dt.size_of() as u64);
        over_limit(&dims, elem_bytes, limit)
            .map_err(|excess| self.refuse(output, dims, dtype, excess, limit))
    }

    /// Check the output facts tract's rules found for a node about to be typed or evaluated
    /// (open shapes pass: their size is not known).
    fn check_facts(
        &self,
        outputs: &[InferenceFact],
        limit: u64,
    ) -> Result<(), Box<TensorTooLarge>> {
        for (output, fact) in outputs.iter().enumerate() {
            if fact.shape.is_open() {
                continue;
            }
            let dims = fact
                .shape
                .dims()
                .map(|d| d.concretize().and_then(|d| d.to_i64().ok()))
                .collect();
            self.check(output, dims, fact.datum_type.concretize(), limit)?;
        }
        Ok(())
    }

    /// Check what the known input values of a node say of its output size that tract's
    /// facts may not ([`SIZE_INPUTS`], `Range`); `out_dt`: the output's element type, when
    /// known. Done before tract solves the node's rules (which may themselves divide by a
    /// `Range` step of 0).
    fn check_values(
        &self,
        inputs: &[&InferenceFact],
        out_dt: Option<DatumType>,
        limit: u64,
    ) -> Result<(), Box<TensorTooLarge>> {
        let value = |ix: usize| inputs.get(ix).and_then(|f| f.value.concretize());
        // The first value outside i32 among the integer inputs `ixs`.
        let outside_i32 = |ixs: &[usize]| -> Option<i64> {
            ixs.iter().find_map(|&ix| {
                let v = value(ix)?;
                if !(v.datum_type().is_integer() || v.datum_type().is_unsigned()) {
                    return None;
                }
                let v = v.cast_to::<i64>().ok()?;
                let v = v.try_as_plain_ram().ok()?;
                let v = v.as_slice::<i64>().ok()?;
                v.iter().copied().find(|&x| i32::try_from(x).is_err())
            })
        };
        if let Some(&(_, ix)) = SIZE_INPUTS.iter().find(|(op, _)| *op == self.op) {
            if let Some(bad) = outside_i32(&[ix]) {
                return Err(self.refuse(0, vec![], out_dt, Excess::SizeValue(bad), limit));
            }
        } else if self.op == "Range" {
            // start, limit and delta are read as shape values too (through an i32) when one
            // of them is (a `Shape` output): refused outside that range, as above.
            if let Some(bad) = outside_i32(&[0, 1, 2]) {
                return Err(self.refuse(0, vec![None], out_dt, Excess::SizeValue(bad), limit));
            }
            // Then tract allocates up to ceil(|limit - start| / |delta|) elements (the
            // absolute span: tract-core 0.23.9 `Range::make`), whatever its shape inference
            // said.
            let scalar = |ix: usize| -> Option<f64> {
                let t = value(ix)?;
                let t = t.cast_to::<f64>().ok()?;
                t.try_as_plain_ram()
                    .ok()?
                    .as_slice::<f64>()
                    .ok()?
                    .first()
                    .copied()
            };
            let (Some(start), Some(end), Some(delta)) = (scalar(0), scalar(1), scalar(2)) else {
                return Ok(());
            };
            let len = ((end - start).abs() / delta.abs()).ceil();
            // The output's type is the inputs' (i64 for shape values, `TDim` in tract).
            let out_dt = out_dt.or_else(|| {
                value(0).map(|t| match t.datum_type() {
                    DatumType::TDim => DatumType::I64,
                    dt => dt,
                })
            });
            let elem = out_dt.map_or(8, |dt| dt.size_of() as u64);
            let excess = if !len.is_finite() || len >= 2f64.powi(63) {
                Some(Excess::Unbounded)
            } else {
                let bytes = (len as u64).checked_mul(elem);
                match bytes {
                    None => Some(Excess::Unbounded),
                    Some(b) if b > limit => Some(Excess::Bytes(b)),
                    Some(_) => None,
                }
            };
            if let Some(excess) = excess {
                let len = (len.is_finite() && len < 2f64.powi(63)).then_some(len as i64);
                return Err(self.refuse(0, vec![len], out_dt, excess, limit));
            }
        }
        Ok(())
    }
}

/// An inference operator whose output facts are checked against a size limit before the
/// operator may be evaluated ([`into_typed_bounded`]); everything else is the wrapped
/// operator's (and `as_op` answers the wrapped operator, so downcasts see through it).
#[derive(Clone, Debug)]
struct Bounded {
    inner: Box<dyn InferenceOp>,
    label: NodeLabel,
    limit: u64,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.inner.as_op() == other.inner.as_op()
            && self.label == other.label
            && self.limit == other.limit
    }
}

impl Eq for Bounded {}

impl Op for Bounded {
    fn name(&self) -> StaticName {
        self.inner.name()
    }
    fn validation(&self) -> Validation {
        self.inner.validation()
    }
    fn info(&self) -> TractResult<Vec<String>> {
        self.inner.info()
    }
    fn mints_runtime_symbols(&self) -> bool {
        self.inner.mints_runtime_symbols()
    }
    fn required_bound_symbols(&self, inputs: &[&TypedFact]) -> TVec<Symbol> {
        self.inner.required_bound_symbols(inputs)
    }
    fn as_typed(&self) -> Option<&dyn TypedOp> {
        self.inner.as_typed()
    }
}

impl EvalOp for Bounded {
    fn eval(&self, ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        self.inner.eval(ctx, inputs)
    }
    fn forwards_input(&self) -> Option<usize> {
        self.inner.forwards_input()
    }
    fn eval_out_of_plan(&self, inputs: TVec<TValue>) -> TractResult<Option<TVec<TValue>>> {
        self.inner.eval_out_of_plan(inputs)
    }
    fn state(&self, ctx: &EvalContext) -> TractResult<Option<Box<dyn OpState>>> {
        self.inner.state(ctx)
    }
    fn drop_session(&self, session: SessionId, node_id: usize) {
        self.inner.drop_session(session, node_id)
    }
}

impl InferenceOp for Bounded {
    /// tract's `infer` solves the operator's rules, then evaluates it when every input is
    /// a known constant: the rules are solved first here, and the outputs they determine
    /// checked, before tract's `infer` (rules again, then evaluation) runs.
    fn infer(
        &mut self,
        inputs: TVec<&InferenceFact>,
        outputs: TVec<&InferenceFact>,
        observed: TVec<&InferenceFact>,
    ) -> TractResult<(
        TVec<InferenceFact>,
        TVec<InferenceFact>,
        TVec<InferenceFact>,
    )> {
        let out_dt = outputs.first().and_then(|f| f.datum_type.concretize());
        self.label.check_values(&inputs, out_dt, self.limit)?;
        let (_, facts, _) =
            self.inner
                .infer_facts(inputs.clone(), outputs.clone(), observed.clone())?;
        self.label.check_facts(&facts, self.limit)?;
        self.inner.infer(inputs, outputs, observed)
    }
    fn infer_facts(
        &mut self,
        inputs: TVec<&InferenceFact>,
        outputs: TVec<&InferenceFact>,
        observed: TVec<&InferenceFact>,
    ) -> TractResult<(
        TVec<InferenceFact>,
        TVec<InferenceFact>,
        TVec<InferenceFact>,
    )> {
        self.inner.infer_facts(inputs, outputs, observed)
    }
    fn observe_outlets(
        &self,
        model: &InferenceModel,
        node: &InferenceNode,
    ) -> TractResult<Vec<OutletId>> {
        self.inner.observe_outlets(model, node)
    }
    fn incorporate(
        &self,
        model: &InferenceModel,
        node: &InferenceNode,
    ) -> TractResult<Option<InferenceModelPatch>> {
        self.inner.incorporate(model, node)
    }
    fn nboutputs(&self) -> TractResult<usize> {
        self.inner.nboutputs()
    }
    fn as_op(&self) -> &dyn Op {
        self.inner.as_op()
    }
    fn as_op_mut(&mut self) -> &mut dyn Op {
        self.inner.as_op_mut()
    }
    /// Translation wires the typed operator, and tract evaluates it there when its inputs
    /// are small constants: the analysed output facts are checked first.
    fn to_typed(
        &self,
        source: &InferenceModel,
        node: &InferenceNode,
        target: &mut TypedModel,
        mapping: &HashMap<OutletId, OutletId>,
    ) -> TractResult<TVec<OutletId>> {
        let inputs = node
            .inputs
            .iter()
            .map(|&o| source.outlet_fact(o))
            .collect::<TractResult<Vec<_>>>()?;
        let outputs: Vec<InferenceFact> = node.outputs.iter().map(|o| o.fact.clone()).collect();
        let out_dt = outputs.first().and_then(|f| f.datum_type.concretize());
        self.label.check_values(&inputs, out_dt, self.limit)?;
        self.label.check_facts(&outputs, self.limit)?;
        self.inner.to_typed(source, node, target, mapping)
    }
}

/// tract's `into_typed` (analysis, then translation) with every tensor of `model` bounded
/// by `limit` bytes: each node with inputs has its output facts checked before tract may
/// evaluate it (see the module documentation), and every fact of the typed model after.
/// Tensors whose shape is not known before evaluation (an unknown rank or dimension) pass
/// the first check; the typed model's, all concrete, are checked by the second. The bodies
/// of `If`, `Loop` and `Scan` are typed by their operator and are not checked inside.
///
/// # Errors
/// tract's; a tensor over the limit or with a negative dimension is a [`TensorTooLarge`]
/// in the error's chain ([`too_large`] finds it).
pub(crate) fn into_typed_bounded(mut model: InferenceModel, limit: u64) -> TractResult<TypedModel> {
    // The graph's declared output names, in order: typing may rewrite the node that
    // produces an output (an ONNX LSTM's `Y_h` becomes the squeeze of a scan's output) and
    // its label with it; the names are set back on the typed outputs below.
    let declared: Vec<Option<String>> = model
        .output_outlets()?
        .iter()
        .map(|o| model.outlet_label(*o).map(str::to_owned))
        .collect();
    for id in 0..model.nodes.len() {
        if model.nodes[id].inputs.is_empty() {
            // Sources and constants: nothing to evaluate.
            continue;
        }
        let tensors = (0..model.nodes[id].outputs.len())
            .map(|slot| {
                model
                    .outlet_label(OutletId::new(id, slot))
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{}.{slot}", model.nodes[id].name))
            })
            .collect();
        let node = &mut model.nodes[id];
        let label = NodeLabel {
            node: node.name.clone(),
            op: node.op.name().to_string(),
            tensors,
        };
        let inner = std::mem::replace(&mut node.op, Box::new(Dummy::new()));
        node.op = Box::new(Bounded {
            inner,
            label,
            limit,
        });
    }
    let mut typed = model.into_typed()?;
    relabel_outputs(&mut typed, &declared)?;
    check_typed(&typed, limit)?;
    Ok(typed)
}

/// Put the declared output names back on a typed model's outputs (`declared[i]` for output
/// `i`), where a rewrite replaced them; an outlet that is two outputs at once keeps its
/// label (one outlet has one label). Call after every rewrite of a typed model (typing,
/// optimisation).
///
/// # Errors
/// tract's, for a model whose outputs cannot be listed.
pub(crate) fn relabel_outputs(
    model: &mut TypedModel,
    declared: &[Option<String>],
) -> TractResult<()> {
    let outlets = model.output_outlets()?.to_vec();
    for (i, (outlet, name)) in outlets.iter().zip(declared).enumerate() {
        let Some(name) = name else { continue };
        let shared = outlets
            .iter()
            .enumerate()
            .any(|(j, o)| j != i && o == outlet);
        if !shared && model.outlet_label(*outlet) != Some(name.as_str()) {
            model.set_outlet_label(*outlet, name.clone())?;
        }
    }
    Ok(())
}

/// The output names of a typed model, in order (for [`relabel_outputs`] after a rewrite).
///
/// # Errors
/// tract's, for a model whose outputs cannot be listed.
pub(crate) fn output_labels(model: &TypedModel) -> TractResult<Vec<Option<String>>> {
    Ok(model
        .output_outlets()?
        .iter()
        .map(|o| model.outlet_label(*o).map(str::to_owned))
        .collect())
}

/// Check every output fact of a typed model against `limit` bytes.
///
/// # Errors
/// The first tensor over the limit or with a negative dimension.
pub(crate) fn check_typed(model: &TypedModel, limit: u64) -> Result<(), Box<TensorTooLarge>> {
    for node in &model.nodes {
        let label = NodeLabel {
            node: node.name.clone(),
            op: node.op.name().to_string(),
            tensors: (0..node.outputs.len())
                .map(|slot| {
                    model
                        .outlet_label(OutletId::new(node.id, slot))
                        .map_or_else(|| format!("{}.{slot}", node.name), str::to_owned)
                })
                .collect(),
        };
        for (output, o) in node.outputs.iter().enumerate() {
            let dims = o.fact.shape.iter().map(|d| d.to_i64().ok()).collect();
            label.check(output, dims, Some(o.fact.datum_type), limit)?;
        }
    }
    Ok(())
}

/// The [`TensorTooLarge`] in `e`'s chain, if any.
pub(crate) fn too_large(e: &TractError) -> Option<Box<TensorTooLarge>> {
    e.chain()
        .find_map(|c| c.downcast_ref::<Box<TensorTooLarge>>())
        .cloned()
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
        // A device plan exists only with the `cuda` feature.
        #[allow(irrefutable_let_patterns)]
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

    /// `bytes` encoded as a model of `graph` (opset 17).
    #[cfg(feature = "tract-cpu")]
    fn model_bytes(graph: pb::GraphProto) -> Vec<u8> {
        use prost::Message;
        pb::ModelProto {
            ir_version: 8,
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(graph),
            ..pb::ModelProto::default()
        }
        .encode_to_vec()
    }

    #[cfg(feature = "tract-cpu")]
    fn i64_init(name: &str, values: &[i64]) -> pb::TensorProto {
        pb::TensorProto {
            name: name.into(),
            data_type: 7,
            dims: vec![values.len() as i64],
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..pb::TensorProto::default()
        }
    }

    #[cfg(feature = "tract-cpu")]
    fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> pb::NodeProto {
        pb::NodeProto {
            name: name.into(),
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..pb::NodeProto::default()
        }
    }

    /// Prepare `onnx` on the tract CPU engine at `shapes`, with `limit`.
    #[cfg(feature = "tract-cpu")]
    fn prepare_cpu(
        onnx: &[u8],
        shapes: Vec<Vec<usize>>,
        limit: Option<u64>,
    ) -> Result<crate::backend::Plan, PrepareError> {
        use crate::backend::{Backend, NetworkSource, PrepareOptions, SourceFormat};
        crate::backends::tract_cpu::TractCpu.prepare(
            &NetworkSource {
                network: "hostile",
                format: SourceFormat::Onnx,
                bytes: onnx,
                target: None,
            },
            &PrepareOptions {
                input_shapes: shapes,
                max_tensor_bytes: limit,
                ..PrepareOptions::default()
            },
        )
    }

    #[cfg(feature = "tract-cpu")]
    fn refusal(r: Result<crate::backend::Plan, PrepareError>) -> TensorTooLarge {
        match r {
            Err(PrepareError::TooLarge {
                network, tensor, ..
            }) => {
                assert_eq!(network, "hostile");
                *tensor
            }
            Err(e) => panic!("expected a size refusal, got: {e}"),
            Ok(_) => panic!("expected a size refusal, the network was prepared"),
        }
    }

    /// The case that OOM-killed the 200,000-case mutation run (`families/detect/tests/
    /// onnx_mutation.rs`, seed 7, case 1997; `docs/evidence/soak.md`): one bit of the field
    /// case `dyn.onnx` flipped, its `Range` start `z64` becomes 2^31. tract types the range
    /// `ys_i = Range(z64, H, 1)` as 2^31 + 2 elements (it reads 2^31 through an i32) and,
    /// its inputs being constants, evaluated it during typing: 16 GiB of i64 filled before
    /// tether saw the typed graph.
    /// Refused now, naming the tensor, before anything is allocated (no address-space limit
    /// needed: the test would be OOM-killed, or fail to allocate, otherwise).
    #[cfg(feature = "tract-cpu")]
    #[test]
    fn a_mutated_range_bound_is_refused_before_tract_allocates() {
        use prost::Message;
        let field =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/field/dyn.onnx");
        let mut model = pb::ModelProto::decode(&std::fs::read(field).unwrap()[..]).unwrap();
        let graph = model.graph.as_mut().unwrap();
        let z64 = graph
            .initializer
            .iter_mut()
            .find(|t| t.name == "z64")
            .expect("dyn.onnx has the Range start `z64`");
        assert_eq!(z64.raw_data, 0i64.to_le_bytes(), "the unmutated start");
        z64.raw_data = (1i64 << 31).to_le_bytes().to_vec();
        let onnx = model.encode_to_vec();
        let t = refusal(prepare_cpu(&onnx, vec![vec![1, 3, 64, 64]], None));
        assert_eq!(
            (t.tensor.as_str(), t.node.as_str()),
            ("ys_i", "ys_i"),
            "{t}"
        );
        assert!(t.op.contains("Range"), "{t}");
        // tract would read 2^31 through an i32 as -2^31 and fill 2^31 + 2 i64: the
        // `Layout` of 17179869200 bytes it failed to allocate under `ulimit -v`.
        assert_eq!(t.excess, Excess::SizeValue(1 << 31), "{t}");
        assert_eq!(t.limit, crate::backend::DEFAULT_MAX_TENSOR_BYTES);
        let msg = PrepareError::TooLarge {
            engine: crate::backend::EngineKind::TractCpu,
            network: "hostile".into(),
            tensor: Box::new(t),
        }
        .to_string();
        assert!(msg.contains("`hostile`") && msg.contains("`ys_i`"), "{msg}");
        assert!(msg.contains("size value 2147483648"), "{msg}");
        // The unmutated network prepares.
        let original = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/field/dyn.onnx"),
        )
        .unwrap();
        prepare_cpu(&original, vec![vec![1, 3, 64, 64]], None).expect("dyn.onnx prepares");
    }

    /// A graph `y = Identity(x)` plus the constant-driven `node`, whose output `z` is an
    /// output too.
    #[cfg(feature = "tract-cpu")]
    fn with_constant_output(inits: Vec<pb::TensorProto>, n: pb::NodeProto) -> Vec<u8> {
        let mut graph = graph_with_input("x", 1, &[1, 4]);
        graph
            .output
            .push(graph_with_input("y", 1, &[1, 4]).input.remove(0));
        let mut z = graph_with_input("z", 1, &[]).input.remove(0);
        z.r#type = None;
        graph.output.push(z);
        graph.node.push(node("Identity", "copy", &["x"], &["y"]));
        graph.node.push(n);
        graph.initializer = inits;
        model_bytes(graph)
    }

    /// The kind, beyond the case found: operators whose output size comes from the *value*
    /// of a small constant input. Each would be evaluated by tract during typing.
    #[cfg(feature = "tract-cpu")]
    #[test]
    fn constant_driven_sizes_are_refused_by_name() {
        // ConstantOfShape([65536, 65536]) of an f32 zero: 16 GiB.
        let mut zeros = node("ConstantOfShape", "zeros", &["shape"], &["z"]);
        let mut zero = i64_init("value", &[]);
        zero.data_type = 1;
        zero.dims = vec![1];
        zero.raw_data = 0f32.to_le_bytes().to_vec();
        zeros.attribute.push(pb::AttributeProto {
            name: "value".into(),
            r#type: pb::attribute_proto::AttributeType::Tensor as i32,
            t: Some(zero),
            ..pb::AttributeProto::default()
        });
        let onnx = with_constant_output(vec![i64_init("shape", &[65536, 65536])], zeros);
        let t = refusal(prepare_cpu(&onnx, vec![vec![1, 4]], None));
        assert_eq!((t.tensor.as_str(), t.node.as_str()), ("z", "zeros"), "{t}");
        assert_eq!(t.shape, [Some(65536), Some(65536)]);
        assert_eq!(t.excess, Excess::Bytes(1 << 34), "{t}");

        // Expand(one f32, [2^20, 2^20]): 4 TiB.
        let mut one = i64_init("one", &[]);
        one.data_type = 1;
        one.dims = vec![1];
        one.raw_data = 1f32.to_le_bytes().to_vec();
        let onnx = with_constant_output(
            vec![one, i64_init("shape", &[1 << 20, 1 << 20])],
            node("Expand", "broadcast", &["one", "shape"], &["z"]),
        );
        let t = refusal(prepare_cpu(&onnx, vec![vec![1, 4]], None));
        assert_eq!(t.node, "broadcast", "{t}");
        assert_eq!(t.excess, Excess::Bytes(1 << 42), "{t}");

        // ConstantOfShape([2^32 + 1]): tract's shape inference reads the value through an
        // i32 (it would see 1).
        let onnx = with_constant_output(
            vec![i64_init("shape", &[(1 << 32) + 1])],
            node("ConstantOfShape", "zeros", &["shape"], &["z"]),
        );
        let t = refusal(prepare_cpu(&onnx, vec![vec![1, 4]], None));
        assert_eq!(t.excess, Excess::SizeValue((1 << 32) + 1), "{t}");

        // Range(0, 2^30, 1): 8 GiB of i64; Range(0, 2^40, 1), which tract's shape
        // inference types as 0 elements (2^40 read through an i32) and its evaluation
        // allocates (8 TiB); Range(0, 1, 0): no end; Range(5, 3, 1), which tract types with
        // a negative length (and would fill |3 - 5| elements); Range(0, 1000, 1) prepares.
        for (start, limit, delta, excess) in [
            (0i64, 1i64 << 30, 1, Some(Excess::Bytes(8 << 30))),
            (0, 1 << 40, 1, Some(Excess::SizeValue(1 << 40))),
            (0, 1, 0, Some(Excess::Unbounded)),
            (5, 3, 1, Some(Excess::NegativeDimension)),
            (0, 1000, 1, None),
        ] {
            let mut inits = vec![
                i64_init("start", &[start]),
                i64_init("limit", &[limit]),
                i64_init("delta", &[delta]),
            ];
            for t in &mut inits {
                t.dims.clear();
            }
            let onnx = with_constant_output(
                inits,
                node("Range", "steps", &["start", "limit", "delta"], &["z"]),
            );
            let r = prepare_cpu(&onnx, vec![vec![1, 4]], None);
            match excess {
                Some(excess) => {
                    let t = refusal(r);
                    assert_eq!((t.node.as_str(), t.excess), ("steps", excess), "{t}");
                }
                None => {
                    let plan = r.expect("Range(0, 1000, 1) prepares");
                    assert_eq!(plan.io().outputs[1].shape, [1000]);
                }
            }
        }
    }

    /// The limit is [`PrepareOptions::max_tensor_bytes`], and every tensor counts, the
    /// network's activations as much as its constants: `y = x * k` at [1, 4] (16-byte
    /// tensors) prepares with the default and is refused under 15 bytes.
    #[cfg(feature = "tract-cpu")]
    #[test]
    fn the_limit_comes_from_the_prepare_options() {
        let mut graph = graph_with_input("x", 1, &[1, 4]);
        graph
            .output
            .push(graph_with_input("y", 1, &[1, 4]).input.remove(0));
        let mut k = i64_init("k", &[]);
        k.data_type = 1;
        k.dims.clear();
        k.raw_data = 3f32.to_le_bytes().to_vec();
        graph.initializer.push(k);
        graph.node.push(node("Mul", "scale", &["x", "k"], &["y"]));
        let onnx = model_bytes(graph);
        prepare_cpu(&onnx, vec![vec![1, 4]], None).expect("16-byte tensors fit 4 GiB");
        prepare_cpu(&onnx, vec![vec![1, 4]], Some(16)).expect("16 bytes fit 16");
        let t = refusal(prepare_cpu(&onnx, vec![vec![1, 4]], Some(15)));
        assert_eq!((t.excess, t.limit), (Excess::Bytes(16), 15), "{t}");
        assert_eq!(t.shape, [Some(1), Some(4)]);
    }
}
