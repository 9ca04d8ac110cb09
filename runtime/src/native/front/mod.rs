//! The front end: a network from tract's ONNX loader, typed at the session's input shapes and
//! decluttered by tract (constant folding, shape inference, operator simplification), lowered
//! into the engine's [`Graph`].
//!
//! There is no ONNX parser here: tract parses, folds and simplifies; this module maps the
//! operators of tract's decluttered `TypedModel` onto IR steps. Anything it does not lower —
//! an operator, or an attribute of a lowered operator — is a [`LowerError::Unsupported`]
//! naming the node and the operator, never an approximation. The operators and attributes
//! covered are listed in `runtime/src/native/README.md`.

use std::collections::HashMap;
use std::sync::Arc;

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{MultiBroadcastTo, Pad, PadMode, Slice};
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::downsample::Downsample;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::lstm_cell::LstmEpilogue;
use tract_onnx::tract_core::ops::scan::{InputMapping, Scan};
use tract_onnx::tract_core::ops::source::TypedSource;

use crate::native::graph::{Graph, Io, Step, StepKind};
use crate::native::ir::Tensor as View;
pub use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Program};
use crate::native::ir::{Buffer, BufferId, BufferKind, ElemType, TensorId, Views, packed_strides};
use crate::native::ops::op::{Lower, elem_type, unsupported};
use crate::native::ops::{copy, elementwise, gather};

/// Parse `onnx` with tract, fix every input to `input_shapes` (element type from the model),
/// type and declutter it.
///
/// # Errors
/// [`LowerError::Model`] with tract's message chain.
pub fn load_model(onnx: &[u8], input_shapes: &[Vec<usize>]) -> Result<TypedModel, LowerError> {
    load_model_fixed(
        onnx,
        input_shapes,
        &[],
        crate::backend::DEFAULT_MAX_TENSOR_BYTES,
    )
}

/// [`load_model`] with the `fixed` inputs made constants of the graph first
/// (`backends/onnx_front.rs`, shared with the tract backends): they are not inputs of the
/// typed model, and `input_shapes` leaves them out. Every tensor is bounded by
/// `max_tensor_bytes` while tract types the network
/// ([`crate::backend::PrepareOptions::max_tensor_bytes`]).
///
/// # Errors
/// [`LowerError::Model`] with tract's message chain, or naming a fixed input that does not
/// fit the network; [`LowerError::TooLarge`] naming a tensor over `max_tensor_bytes`.
pub fn load_model_fixed(
    onnx: &[u8],
    input_shapes: &[Vec<usize>],
    fixed: &[crate::backend::FixedInput],
    max_tensor_bytes: u64,
) -> Result<TypedModel, LowerError> {
    let model_err = |e: TractError| LowerError::Model(format!("{e:#}"));
    let framework = tract_onnx::onnx().with_ignore_value_info(true);
    let mut proto = framework
        .proto_model_for_read(&mut &onnx[..])
        .map_err(model_err)?;
    if !fixed.is_empty() {
        let graph = proto
            .graph
            .as_mut()
            .ok_or_else(|| LowerError::Model("the ONNX model has no graph".into()))?;
        crate::backends::onnx_front::substitute_fixed_inputs("", graph, fixed).map_err(|e| {
            LowerError::Model(match e {
                crate::backend::PrepareError::Io { detail, .. } => detail,
                other => other.to_string(),
            })
        })?;
    }
    if let Some(graph) = proto.graph.as_ref()
        && let Some(r) = crate::backends::onnx_front::ignored_recurrent_attribute(graph)
    {
        return Err(LowerError::Unsupported {
            node: r.node,
            op: r.op,
            detail: r.detail,
        });
    }
    // Declared input element types (the inference model may not know them without value_info).
    let mut declared = Vec::new();
    if let Some(graph) = proto.graph.as_ref() {
        let inits: std::collections::HashSet<&str> =
            graph.initializer.iter().map(|t| t.name.as_str()).collect();
        for v in graph
            .input
            .iter()
            .filter(|v| !inits.contains(v.name.as_str()))
        {
            let code = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(tract_onnx::pb::type_proto::Value::TensorType(t)) => t.elem_type,
                _ => 1,
            };
            declared.push(code);
        }
    }
    let mut model = framework.model_for_proto_model(&proto).map_err(model_err)?;
    drop(proto);
    let n_inputs = model.input_outlets().map_err(model_err)?.len();
    if n_inputs != input_shapes.len() {
        return Err(LowerError::Model(format!(
            "the network has {n_inputs} inputs, {} input shapes were given",
            input_shapes.len()
        )));
    }
    for (ix, shape) in input_shapes.iter().enumerate() {
        let dt = match declared.get(ix).copied().unwrap_or(1) {
            1 => DatumType::F32,
            10 => DatumType::F16,
            6 => DatumType::I32,
            7 => DatumType::I64,
            2 => DatumType::U8,
            3 => DatumType::I8,
            9 => DatumType::Bool,
            other => {
                return Err(LowerError::Model(format!(
                    "input {ix} has ONNX element type {other}, which the engine does not bind"
                )));
            }
        };
        model
            .set_input_fact(ix, InferenceFact::dt_shape(dt, shape.as_slice()))
            .map_err(model_err)?;
    }
    let mut typed = crate::backends::onnx_front::into_typed_bounded(model, max_tensor_bytes)
        .map_err(|e| match crate::backends::onnx_front::too_large(&e) {
            Some(tensor) => LowerError::TooLarge(tensor),
            None => model_err(e),
        })?;
    let names = crate::backends::onnx_front::output_labels(&typed).map_err(model_err)?;
    declutter(&mut typed).map_err(model_err)?;
    crate::backends::onnx_front::relabel_outputs(&mut typed, &names).map_err(model_err)?;
    Ok(typed)
}

/// tract's declutter, without the passes that reshape the graph for a CPU at a GPU's
/// expense.
///
/// Kept: constant propagation, each operator's own simplification (1x1 convolutions as
/// matrix products, `x * sigmoid(x)` as SiLU, integer nearest resize as an upsample, ...).
/// Left out: `PushSliceUp` and `PushSplitDown` (they split one convolution into one per
/// consumer slice), `ConcatThenEinsum` (one matrix product per concatenated input, summed),
/// and `ChangeAxes` (drops the batch axis and moves axes around): on a GPU each of those
/// trades one kernel for several, and the engine realises slices and concatenations as
/// views and in-place writes anyway.
pub fn declutter(model: &mut TypedModel) -> TractResult<()> {
    let mut optimizer = tract_onnx::tract_core::optim::Optimizer::declutter();
    optimizer.passes.retain(|p| {
        let name = format!("{p:?}");
        ![
            "PushSliceUp",
            "PushSplitDown",
            "ConcatThenEinsum",
            "ChangeAxes",
        ]
        .iter()
        .any(|n| name.starts_with(n))
    });
    optimizer.optimize(model)
}

/// Lower a typed, decluttered model.
///
/// # Errors
/// [`LowerError::Unsupported`] naming the first node the engine does not lower;
/// [`LowerError::Model`] when the model's facts are not concrete.
pub fn lower(model: &TypedModel) -> Result<Graph, LowerError> {
    let mut l = Lowering {
        model,
        g: Graph::default(),
        map: HashMap::new(),
        packed: HashMap::new(),
        folded: HashMap::new(),
    };
    let order = model
        .eval_order()
        .map_err(|e| LowerError::Model(format!("{e:#}")))?;
    let inputs = model
        .input_outlets()
        .map_err(|e| LowerError::Model(format!("{e:#}")))?
        .to_vec();
    let outputs = model
        .output_outlets()
        .map_err(|e| LowerError::Model(format!("{e:#}")))?
        .to_vec();
    for (i, outlet) in inputs.iter().enumerate() {
        let node = model.node(outlet.node);
        let fact = model
            .outlet_fact(*outlet)
            .map_err(|e| LowerError::Model(format!("{e:#}")))?;
        let shape = l.concrete(node, fact)?;
        let dt = elem_type(fact.datum_type).ok_or_else(|| LowerError::Unsupported {
            node: node.name.clone(),
            op: "Source".into(),
            detail: format!("input element type {:?}", fact.datum_type),
        })?;
        let t = l.g.add_packed(&node.name, dt, &shape, BufferKind::Input(i));
        l.g.inputs.push(Io {
            name: node.name.clone(),
            tensor: t,
        });
        l.map.insert(*outlet, t);
    }
    l.nodes(&order)?;
    for (i, outlet) in outputs.iter().enumerate() {
        let t = l.outlet(*outlet)?;
        let name = model
            .outlet_label(*outlet)
            .map(str::to_owned)
            .unwrap_or_else(|| model.node(outlet.node).name.clone());
        let src = l.g.tensor(t).clone();
        let o =
            l.g.add_packed(&name, src.dtype, &src.shape, BufferKind::Output(i));
        l.g.steps.push(Step {
            node: name.clone(),
            kind: StepKind::Copy(copy::Copy { src: t, dst: o }),
        });
        l.g.outputs.push(Io { name, tensor: o });
    }
    l.g.validate()
        .map_err(|e| LowerError::Model(format!("internal: lowered graph is invalid: {e}")))?;
    Ok(l.g)
}

/// The most iterations of a `Scan` (ONNX `LSTM`, `GRU`, `RNN`, `Scan`) the front end unrolls:
/// every iteration becomes its own steps (a matrix product and one or two element-wise
/// kernels per step of an LSTM), so a longer sequence is refused rather than turned into
/// thousands of launches.
pub const MAX_SCAN_ITERATIONS: usize = 256;

struct Lowering<'m> {
    model: &'m TypedModel,
    g: Graph,
    map: HashMap<OutletId, TensorId>,
    packed: HashMap<TensorId, TensorId>,
    /// Outputs of nodes whose inputs are all constant, evaluated by tract at load (tract's
    /// own constant folding stops at 4 MiB; the engine folds everything: the result is a
    /// weight either way, e.g. int8 weights dequantised once instead of every run).
    folded: HashMap<OutletId, Arc<Tensor>>,
}

impl<'m> Lowering<'m> {
    /// Lower the nodes of `self.model` in `order` (sources are already mapped).
    fn nodes(&mut self, order: &[usize]) -> Result<(), LowerError> {
        for &id in order {
            let node = self.model.node(id);
            if node.op_as::<TypedSource>().is_some() {
                continue;
            }
            // Constants (and anything tract folded to a constant) are materialised on demand.
            if node.op_as::<Const>().is_some()
                || node.outputs.iter().all(|o| o.fact.konst.is_some())
            {
                continue;
            }
            if self.fold(node)? {
                continue;
            }
            self.node(node)?;
        }
        Ok(())
    }

    fn concrete(&self, node: &TypedNode, fact: &TypedFact) -> Result<Vec<usize>, LowerError> {
        fact.shape
            .as_concrete()
            .map(|s| s.to_vec())
            .ok_or_else(|| unsupported(node, format!("symbolic shape {:?}", fact.shape)))
    }

    fn fact(&self, outlet: OutletId) -> &'m TypedFact {
        self.model
            .outlet_fact(outlet)
            .expect("outlets of the model's own nodes have facts")
    }

    /// Evaluate `node` with tract when every input is constant; true when it was folded
    /// (stateful or not evaluable out of a plan: lowered like any node).
    fn fold(&mut self, node: &TypedNode) -> Result<bool, LowerError> {
        let Some(outputs) = crate::backends::onnx_front::eval_constant(node, |o| self.konst(o))
        else {
            return Ok(false);
        };
        for (slot, t) in outputs.into_iter().enumerate() {
            self.folded
                .insert(OutletId::new(node.id, slot), t.into_arc_tensor());
        }
        Ok(true)
    }

    fn weight(&mut self, node: &TypedNode, k: &Tensor) -> Result<TensorId, LowerError> {
        let dt = elem_type(k.datum_type())
            .ok_or_else(|| unsupported(node, format!("constant of type {:?}", k.datum_type())))?;
        let plain = k
            .try_as_plain_ram()
            .map_err(|_| unsupported(node, "constant with an exotic (packed) storage"))?;
        let _ = plain;
        let bytes = k.as_bytes().to_vec();
        Ok(self.g.add_packed(
            format!("{}.const", node.name),
            dt,
            k.shape(),
            BufferKind::Weight(bytes),
        ))
    }

    fn alias(&mut self, node: &TypedNode, t: TensorId) {
        self.set_output(node, 0, t);
    }

    fn node(&mut self, node: &TypedNode) -> Result<(), LowerError> {
        let op: &dyn TypedOp = node.op.as_ref();
        if let Some(lowered) = crate::native::ops::lower(self, node) {
            return lowered;
        }
        if let Some(op) = node.op_as::<AxisOp>() {
            return self.axis_op(node, op);
        }
        if let Some(op) = node.op_as::<Slice>() {
            return self.slice(node, op);
        }
        if let Some(op) = node.op_as::<MultiBroadcastTo>() {
            let x = self.outlet(node.inputs[0])?;
            let (shape, _) = self.output_fact(node, 0)?;
            let _ = op;
            let v = self.broadcast_to(x, &shape, node)?;
            self.alias(node, v);
            return Ok(());
        }
        if let Some(op) = node.op_as::<Downsample>() {
            return self.downsample(node, op);
        }
        if let Some(op) = node.op_as::<Pad>() {
            return self.pad(node, op);
        }
        if node.op_as::<Scan>().is_some() {
            return self.scan(node);
        }
        if let Some(op) = node.op_as::<LstmEpilogue>() {
            return self.lstm_epilogue(node, op.hidden);
        }
        if op.name() == "Identity" {
            let x = self.outlet(node.inputs[0])?;
            self.alias(node, x);
            return Ok(());
        }
        Err(unsupported(
            node,
            "operator not lowered by the native engine",
        ))
    }

    /// tract's `Scan` (the typed form of ONNX `Scan`, `LSTM`, `GRU` and `RNN`), unrolled: the
    /// iteration count is known at load (fixed input shapes) and at most
    /// [`MAX_SCAN_ITERATIONS`]. Every iteration lowers the body's nodes through this same
    /// front end: scanned inputs are views (one chunk of the outer tensor along the scan
    /// axis, from the end for a negative chunk), full inputs are the outer tensors, state
    /// inputs are the initial values, then the previous iteration's state outputs (tract
    /// pairs the n-th state input with the n-th output marked as state). Scanned outputs are
    /// copies into their slice of the outer output (usually elided: the body writes there);
    /// last-value outputs are the final iteration's tensors. Each run starts from the
    /// initial state given to it, as ONNX defines the operators.
    fn scan(&mut self, node: &TypedNode) -> Result<(), LowerError> {
        let model: &'m TypedModel = self.model;
        let op = model
            .node(node.id)
            .op_as::<Scan>()
            .expect("the caller matched a Scan");
        let body = &op.body;
        if op.skip != 0 {
            return Err(unsupported(
                node,
                format!("scan skipping {} iterations", op.skip),
            ));
        }
        let body_err = |e: TractError| LowerError::Model(format!("node `{}`: {e:#}", node.name));
        let body_inputs = body.input_outlets().map_err(body_err)?.to_vec();
        let body_outputs = body.output_outlets().map_err(body_err)?.to_vec();
        if body_inputs.len() != op.input_mapping.len()
            || body_inputs.len() != node.inputs.len()
            || body_outputs.len() != op.output_mapping.len()
        {
            return Err(LowerError::Model(format!(
                "node `{}`: scan mappings do not match its body",
                node.name
            )));
        }
        let mut outer = Vec::new();
        for &i in &node.inputs {
            outer.push(self.outlet(i)?);
        }
        // Iteration count from the scanned inputs (all must agree, no partial chunk).
        let mut iters: Option<usize> = None;
        for (slot, m) in op.input_mapping.iter().enumerate() {
            if let InputMapping::Scan(info) = m {
                let len = self.g.tensor(outer[slot]).shape[info.axis];
                let chunk = info.chunk.unsigned_abs();
                if chunk == 0 || !len.is_multiple_of(chunk) {
                    return Err(unsupported(
                        node,
                        format!("scan input {slot}: chunk {} over length {len}", info.chunk),
                    ));
                }
                if iters.is_some_and(|n| n != len / chunk) {
                    return Err(unsupported(node, "scan inputs of different lengths"));
                }
                iters = Some(len / chunk);
            }
        }
        let Some(iters) = iters else {
            return Err(unsupported(node, "scan without a scanned input"));
        };
        if iters == 0 || iters > MAX_SCAN_ITERATIONS {
            return Err(unsupported(
                node,
                format!("{iters} iterations (unrolled up to {MAX_SCAN_ITERATIONS})"),
            ));
        }
        // Scanned outputs: allocated whole, each iteration writes its slice.
        let mut scan_out: HashMap<usize, TensorId> = HashMap::new();
        for (ix, m) in op.output_mapping.iter().enumerate() {
            if let Some((slot, info)) = m.scan {
                let (shape, dt) = self.output_fact(node, slot)?;
                let elem =
                    self.concrete(node, body.outlet_fact(body_outputs[ix]).map_err(body_err)?)?;
                let per = elem.get(info.axis).copied().unwrap_or(0);
                if shape.get(info.axis) != Some(&(per * iters)) || (info.chunk < 0 && per != 1) {
                    return Err(unsupported(
                        node,
                        format!(
                            "scan output {slot} of {shape:?} from body chunks of {elem:?} over {iters} iterations (chunk {})",
                            info.chunk
                        ),
                    ));
                }
                let y = self.g.add_packed(
                    format!("{}.{slot}", node.name),
                    dt,
                    &shape,
                    BufferKind::Activation,
                );
                self.map.insert(OutletId::new(node.id, slot), y);
                scan_out.insert(ix, y);
            }
        }
        let state_outputs: Vec<usize> = (0..op.output_mapping.len())
            .filter(|&ix| op.output_mapping[ix].state)
            .collect();
        let mut state: Vec<TensorId> = op
            .input_mapping
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_state())
            .map(|(slot, _)| outer[slot])
            .collect();
        if state.len() != state_outputs.len() {
            return Err(LowerError::Model(format!(
                "node `{}`: {} state inputs, {} state outputs",
                node.name,
                state.len(),
                state_outputs.len()
            )));
        }
        let order = body.eval_order().map_err(body_err)?;
        // Constants of the body are materialised once, shared by every iteration.
        let mut weights: HashMap<OutletId, TensorId> = HashMap::new();
        let mut folded: HashMap<OutletId, Arc<Tensor>> = HashMap::new();
        for i in 0..iters {
            let mut sub = Lowering {
                model: body,
                g: std::mem::take(&mut self.g),
                map: std::mem::take(&mut weights),
                packed: HashMap::new(),
                folded: std::mem::take(&mut folded),
            };
            let mut next_state = 0;
            for (slot, m) in op.input_mapping.iter().enumerate() {
                let t = match m {
                    InputMapping::Full => outer[slot],
                    InputMapping::State => {
                        next_state += 1;
                        state[next_state - 1]
                    }
                    InputMapping::Scan(info) => {
                        let src = sub.g.tensor(outer[slot]).clone();
                        let chunk = info.chunk.unsigned_abs();
                        let start = if info.chunk > 0 {
                            i * chunk
                        } else {
                            src.shape[info.axis] - (i + 1) * chunk
                        };
                        let mut shape = src.shape.clone();
                        shape[info.axis] = chunk;
                        let offset = (src.offset as isize + start as isize * src.strides[info.axis])
                            as usize;
                        sub.view(
                            outer[slot],
                            format!("{}.iter{i}.in{slot}", node.name),
                            shape,
                            offset,
                            src.strides.clone(),
                        )
                    }
                };
                let want =
                    sub.concrete(node, body.outlet_fact(body_inputs[slot]).map_err(body_err)?)?;
                if sub.g.tensor(t).shape != want {
                    let got = sub.g.tensor(t).shape.clone();
                    self.g = sub.g;
                    return Err(unsupported(
                        node,
                        format!("scan input {slot} of {got:?} for a body input of {want:?}"),
                    ));
                }
                sub.map.insert(body_inputs[slot], t);
            }
            let lowered = sub.nodes(&order);
            let outs: Result<Vec<TensorId>, LowerError> =
                lowered.and_then(|()| body_outputs.iter().map(|&o| sub.outlet(o)).collect());
            // Keep the constants for the next iteration, drop the rest of the body's map.
            let konst: Vec<OutletId> = sub
                .map
                .keys()
                .copied()
                .filter(|&o| sub.konst(o).is_some())
                .collect();
            weights = konst.into_iter().map(|o| (o, sub.map[&o])).collect();
            folded = std::mem::take(&mut sub.folded);
            self.g = sub.g;
            let outs = outs?;
            for (k, &ix) in state_outputs.iter().enumerate() {
                state[k] = outs[ix];
            }
            for (ix, m) in op.output_mapping.iter().enumerate() {
                if let Some((_, info)) = m.scan {
                    let y = scan_out[&ix];
                    let src = self.g.tensor(outs[ix]).clone();
                    let out = self.g.tensor(y).clone();
                    let per = src.shape[info.axis];
                    let at = if info.chunk > 0 {
                        i * per
                    } else {
                        iters - 1 - i
                    };
                    let offset = out.offset + at * out.strides[info.axis] as usize;
                    let slice = self.view(
                        y,
                        format!("{}.iter{i}.out{ix}", node.name),
                        src.shape.clone(),
                        offset,
                        out.strides.clone(),
                    );
                    self.push(
                        node,
                        StepKind::Copy(copy::Copy {
                            src: outs[ix],
                            dst: slice,
                        }),
                    );
                }
                if i + 1 == iters
                    && let Some(slot) = m.last_value_slot
                {
                    let (shape, _) = self.output_fact(node, slot)?;
                    if self.g.tensor(outs[ix]).shape != shape {
                        return Err(unsupported(
                            node,
                            format!(
                                "last value {slot} of {shape:?} from a body output of {:?}",
                                self.g.tensor(outs[ix]).shape
                            ),
                        ));
                    }
                    self.map.insert(OutletId::new(node.id, slot), outs[ix]);
                }
            }
        }
        Ok(())
    }

    /// tract's fused LSTM cell (`LstmEpilogue`, inside the body of an ONNX `LSTM`'s scan):
    /// `preact` `[rows, 4 * hidden]` (gate order i, o, f, c, biases included) and the
    /// previous cell state `c` `[.., hidden]` give `Ct = sigmoid(f) * c + sigmoid(i) *
    /// tanh(g)` and `Ht = sigmoid(o) * tanh(Ct)`: two element-wise steps over gate views of
    /// the packed pre-activations.
    fn lstm_epilogue(&mut self, node: &TypedNode, hidden: usize) -> Result<(), LowerError> {
        use crate::native::ir::program::Expr;
        let pre = self.float_input(node, 0)?;
        let pre = self.packed(pre, &node.name);
        let c = self.float_input(node, 1)?;
        let cshape = self.g.tensor(c).shape.clone();
        let rows = self.g.tensor(c).numel() / hidden.max(1);
        if cshape.last() != Some(&hidden) || self.g.tensor(pre).numel() != rows * 4 * hidden {
            return Err(unsupported(
                node,
                format!(
                    "pre-activations {:?} for a cell state {cshape:?} of hidden size {hidden}",
                    self.g.tensor(pre).shape
                ),
            ));
        }
        // Gate g of row r is preact[r * 4h + g * h .. + h]: the cell state's packed strides
        // with every outer stride four times longer.
        let mut strides = packed_strides(&cshape);
        let last = strides.len() - 1;
        for s in &mut strides[..last] {
            *s *= 4;
        }
        let base = self.g.tensor(pre).offset;
        let gates: Vec<TensorId> = (0..4)
            .map(|g| {
                self.view(
                    pre,
                    format!("{}.gate{}", node.name, ["i", "o", "f", "c"][g]),
                    cshape.clone(),
                    base + g * hidden,
                    strides.clone(),
                )
            })
            .collect();
        let op = |op, a, b| Expr::Op {
            op,
            args: [a, b, 0],
            imm: 0.0,
        };
        // Ct = sigmoid(f) * c + sigmoid(i) * tanh(g); inputs: i, f, g, c.
        let ct_program = Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                Expr::Input(2),
                Expr::Input(3),
                op(EwOp::Sigmoid, 1, 0),
                op(EwOp::Mul, 4, 3),
                op(EwOp::Sigmoid, 0, 0),
                op(EwOp::Tanh, 2, 0),
                op(EwOp::Mul, 6, 7),
                op(EwOp::Add, 5, 8),
            ],
        };
        let (_, dt) = self.output_fact(node, 1)?;
        let ct = self.g.add_packed(
            format!("{}.c", node.name),
            dt,
            &cshape,
            BufferKind::Activation,
        );
        self.map.insert(OutletId::new(node.id, 1), ct);
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![gates[0], gates[2], gates[3], c],
                output: ct,
                program: ct_program,
            }),
        );
        // Ht = sigmoid(o) * tanh(Ct); inputs: o, Ct.
        let ht_program = Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                op(EwOp::Sigmoid, 0, 0),
                op(EwOp::Tanh, 1, 0),
                op(EwOp::Mul, 2, 3),
            ],
        };
        let ht = self.g.add_packed(
            format!("{}.h", node.name),
            dt,
            &cshape,
            BufferKind::Activation,
        );
        self.map.insert(OutletId::new(node.id, 0), ht);
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![gates[1], ct],
                output: ht,
                program: ht_program,
            }),
        );
        Ok(())
    }

    fn axis_op(&mut self, node: &TypedNode, op: &AxisOp) -> Result<(), LowerError> {
        let x = self.outlet(node.inputs[0])?;
        let src = self.g.tensor(x).clone();
        let name = node.name.clone();
        let (mut shape, mut strides) = (src.shape.clone(), src.strides.clone());
        let v = match op {
            AxisOp::Add(ax) => {
                shape.insert(*ax, 1);
                strides.insert(*ax, 0);
                self.view(x, name, shape, src.offset, strides)
            }
            AxisOp::Rm(ax) => {
                if shape.get(*ax) != Some(&1) {
                    return Err(unsupported(
                        node,
                        format!("removing axis {ax} of {:?}", shape),
                    ));
                }
                shape.remove(*ax);
                strides.remove(*ax);
                self.view(x, name, shape, src.offset, strides)
            }
            AxisOp::Move(from, to) => {
                let d = shape.remove(*from);
                let s = strides.remove(*from);
                shape.insert(*to, d);
                strides.insert(*to, s);
                self.view(x, name, shape, src.offset, strides)
            }
            AxisOp::Reshape(at, from, to) => {
                let (out, _) = self.output_fact(node, 0)?;
                let span = from.len();
                let to_len = to.len();
                // The reshaped range must be one run of memory in the view; else pack first.
                let mergeable = |t: &View| -> bool {
                    let dims: Vec<(usize, isize)> = (*at..*at + span)
                        .map(|i| (t.shape[i], t.strides[i]))
                        .filter(|(d, _)| *d != 1)
                        .collect();
                    dims.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0 as isize)
                };
                let base = if mergeable(&src) {
                    x
                } else {
                    self.packed(x, &node.name)
                };
                let b = self.g.tensor(base).clone();
                // Innermost stride of the range (1 when every dimension is 1).
                let inner = (*at..*at + span)
                    .rev()
                    .find(|&i| b.shape[i] != 1)
                    .map(|i| b.strides[i])
                    .unwrap_or(1);
                let mut new_shape = b.shape[..*at].to_vec();
                let mut new_strides = b.strides[..*at].to_vec();
                let new_dims = &out[*at..*at + to_len];
                let mut tail = packed_strides(new_dims);
                for s in &mut tail {
                    *s *= inner;
                }
                new_shape.extend_from_slice(new_dims);
                new_strides.extend_from_slice(&tail);
                new_shape.extend_from_slice(&b.shape[*at + span..]);
                new_strides.extend_from_slice(&b.strides[*at + span..]);
                if new_shape != out {
                    return Err(LowerError::Model(format!(
                        "node `{}`: reshape to {:?}, tract says {:?}",
                        node.name, new_shape, out
                    )));
                }
                self.view(base, name, new_shape, b.offset, new_strides)
            }
        };
        self.alias(node, v);
        Ok(())
    }

    fn slice(&mut self, node: &TypedNode, op: &Slice) -> Result<(), LowerError> {
        let x = self.outlet(node.inputs[0])?;
        let src = self.g.tensor(x).clone();
        let start = op
            .start
            .to_i64()
            .ok()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| unsupported(node, format!("slice start {}", op.start)))?;
        let end = op
            .end
            .to_i64()
            .ok()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| unsupported(node, format!("slice end {}", op.end)))?;
        if end < start || end > src.shape[op.axis] {
            return Err(unsupported(
                node,
                format!("slice {start}..{end} of axis {} ({:?})", op.axis, src.shape),
            ));
        }
        let mut shape = src.shape.clone();
        shape[op.axis] = end - start;
        let offset = (src.offset as isize + start as isize * src.strides[op.axis]) as usize;
        let v = self.view(x, node.name.clone(), shape, offset, src.strides.clone());
        self.alias(node, v);
        Ok(())
    }

    fn downsample(&mut self, node: &TypedNode, op: &Downsample) -> Result<(), LowerError> {
        if op.stride <= 0 {
            return Err(unsupported(
                node,
                format!("downsample stride {}", op.stride),
            ));
        }
        let x = self.outlet(node.inputs[0])?;
        let src = self.g.tensor(x).clone();
        let (out, _) = self.output_fact(node, 0)?;
        let ax = op.axis;
        let mut strides = src.strides.clone();
        strides[ax] *= op.stride;
        let offset = (src.offset as isize + op.modulo as isize * src.strides[ax]) as usize;
        let v = self.view(x, node.name.clone(), out, offset, strides);
        self.alias(node, v);
        Ok(())
    }

    fn pad(&mut self, node: &TypedNode, op: &Pad) -> Result<(), LowerError> {
        let value = match &op.mode {
            PadMode::Constant(value) => value,
            PadMode::Reflect => return self.pad_gather(node, op, true),
            PadMode::Edge => return self.pad_gather(node, op, false),
        };
        let value = value
            .cast_to::<f32>()
            .ok()
            .and_then(|v| {
                v.try_as_plain_ram()
                    .ok()?
                    .as_slice::<f32>()
                    .ok()?
                    .first()
                    .copied()
            })
            .ok_or_else(|| unsupported(node, "non-numeric pad value"))?;
        let x = self.outlet(node.inputs[0])?;
        if !self.g.tensor(x).dtype.is_float() {
            return Err(unsupported(node, "pad of a non-float tensor"));
        }
        let y = self.new_output(node, 0)?;
        let out = self.g.tensor(y).clone();
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![],
                output: y,
                program: Program {
                    nodes: vec![crate::native::ir::program::Expr::Imm(value)],
                },
            }),
        );
        let src = self.g.tensor(x).clone();
        let mut offset = out.offset;
        for (ax, &(before, _)) in op.pads.iter().enumerate() {
            offset += before * out.strides[ax] as usize;
        }
        let inner = self.view(
            y,
            format!("{}.inner", node.name),
            src.shape.clone(),
            offset,
            out.strides.clone(),
        );
        self.push(node, StepKind::Copy(copy::Copy { src: x, dst: inner }));
        Ok(())
    }

    /// Reflect (`reflect = true`) or edge padding: one gather per padded axis, with the
    /// source index of every output position along the axis computed at load
    /// (`reflect`: `-i` before the start, `2 (n - 1) - i` past the end; `edge`: clamped).
    /// Axes are padded in order, each over the previous one's output, which fills corners
    /// the way ONNX (and numpy) define them.
    fn pad_gather(&mut self, node: &TypedNode, op: &Pad, reflect: bool) -> Result<(), LowerError> {
        let x = self.outlet(node.inputs[0])?;
        let mut cur = self.packed(x, &node.name);
        let padded: Vec<usize> = (0..op.pads.len())
            .filter(|&ax| op.pads[ax] != (0, 0))
            .collect();
        for (k, &ax) in padded.iter().enumerate() {
            let (before, after) = op.pads[ax];
            let shape = self.g.tensor(cur).shape.clone();
            let n = shape[ax];
            if n == 0 || (reflect && (before >= n || after >= n)) {
                return Err(unsupported(
                    node,
                    format!(
                        "{} pads {before}/{after} on axis {ax} of length {n}",
                        if reflect { "reflect" } else { "edge" }
                    ),
                ));
            }
            let last = n as i64 - 1;
            let idx: Vec<i64> = (0..(before + n + after) as i64)
                .map(|p| {
                    let i = p - before as i64;
                    if reflect {
                        if i < 0 {
                            -i
                        } else if i > last {
                            2 * last - i
                        } else {
                            i
                        }
                    } else {
                        i.clamp(0, last)
                    }
                })
                .collect();
            let indices = self.g.add_packed(
                format!("{}.axis{ax}_indices", node.name),
                ElemType::I64,
                &[idx.len()],
                BufferKind::Weight(idx.iter().flat_map(|v| v.to_ne_bytes()).collect()),
            );
            let mut out_shape = shape.clone();
            out_shape[ax] = idx.len();
            let y = if k + 1 == padded.len() {
                let y = self.new_output(node, 0)?;
                if self.g.tensor(y).shape != out_shape {
                    return Err(LowerError::Model(format!(
                        "node `{}`: padded to {out_shape:?}, tract says {:?}",
                        node.name,
                        self.g.tensor(y).shape
                    )));
                }
                y
            } else {
                let dt = self.g.tensor(cur).dtype;
                self.g.add_packed(
                    format!("{}.axis{ax}", node.name),
                    dt,
                    &out_shape,
                    BufferKind::Activation,
                )
            };
            self.push(
                node,
                StepKind::Gather(gather::Gather {
                    data: cur,
                    indices,
                    y,
                    outer: shape[..ax].iter().product(),
                    n,
                    inner: shape[ax + 1..].iter().product(),
                    count: idx.len(),
                }),
            );
            cur = y;
        }
        if padded.is_empty() {
            self.alias(node, x);
        }
        Ok(())
    }
}

impl Views for Lowering<'_> {
    fn tensor(&self, t: TensorId) -> &View {
        self.g.tensor(t)
    }

    fn buffer(&self, b: BufferId) -> &Buffer {
        self.g.buffer(b)
    }
}

impl Lower for Lowering<'_> {
    type Step = StepKind;

    /// The constant value of an outlet: tract's fact, or a value folded at load.
    fn konst(&self, outlet: OutletId) -> Option<Arc<Tensor>> {
        self.fact(outlet)
            .konst
            .clone()
            .or_else(|| self.folded.get(&outlet).cloned())
    }

    /// The tensor of an outlet; constants become weight buffers the first time they are asked
    /// for.
    fn outlet(&mut self, outlet: OutletId) -> Result<TensorId, LowerError> {
        if let Some(&t) = self.map.get(&outlet) {
            return Ok(t);
        }
        let node = self.model.node(outlet.node);
        let Some(k) = self.konst(outlet) else {
            return Err(LowerError::Model(format!(
                "internal: node `{}` used before it was lowered",
                node.name
            )));
        };
        let t = self.weight(node, &k)?;
        self.map.insert(outlet, t);
        Ok(t)
    }

    /// A scalar float constant (one element), if the outlet is one.
    fn scalar_const(&self, outlet: OutletId) -> Option<f32> {
        let k = self.konst(outlet)?;
        if k.len() != 1 || !matches!(k.datum_type(), DatumType::F32 | DatumType::F16) {
            return None;
        }
        let v = k.cast_to::<f32>().ok()?;
        v.try_as_plain_ram()
            .ok()?
            .as_slice::<f32>()
            .ok()?
            .first()
            .copied()
    }

    fn view(
        &mut self,
        of: TensorId,
        name: String,
        shape: Vec<usize>,
        offset: usize,
        strides: Vec<isize>,
    ) -> TensorId {
        let src = self.g.tensor(of);
        let t = View {
            name,
            buffer: src.buffer,
            dtype: src.dtype,
            shape,
            offset,
            strides,
        };
        self.g.add_view(t)
    }

    /// A packed version of `t`: `t` itself when its view is packed, else a copy (made once).
    fn packed(&mut self, t: TensorId, node: &str) -> TensorId {
        if self.g.tensor(t).is_packed() {
            return t;
        }
        if let Some(&p) = self.packed.get(&t) {
            return p;
        }
        let src = self.g.tensor(t).clone();
        let p = self.g.add_packed(
            format!("{}.packed", src.name),
            src.dtype,
            &src.shape,
            BufferKind::Activation,
        );
        self.g.steps.push(Step {
            node: node.to_string(),
            kind: StepKind::Copy(copy::Copy { src: t, dst: p }),
        });
        self.packed.insert(t, p);
        p
    }

    /// `t` broadcast to `shape` (same rank; dimensions of 1 get stride 0).
    fn broadcast_to(
        &mut self,
        t: TensorId,
        shape: &[usize],
        node: &TypedNode,
    ) -> Result<TensorId, LowerError> {
        let src = self.g.tensor(t).clone();
        if src.shape == shape {
            return Ok(t);
        }
        if src.shape.len() != shape.len() {
            return Err(unsupported(
                node,
                format!("broadcast of rank {} to {:?}", src.shape.len(), shape),
            ));
        }
        let mut strides = src.strides.clone();
        for i in 0..shape.len() {
            if src.shape[i] != shape[i] {
                if src.shape[i] != 1 {
                    return Err(unsupported(
                        node,
                        format!("cannot broadcast {:?} to {:?}", src.shape, shape),
                    ));
                }
                strides[i] = 0;
            }
        }
        Ok(self.view(
            t,
            format!("{}.bcast", src.name),
            shape.to_vec(),
            src.offset,
            strides,
        ))
    }

    fn output_fact(
        &self,
        node: &TypedNode,
        slot: usize,
    ) -> Result<(Vec<usize>, ElemType), LowerError> {
        let fact = &node.outputs[slot].fact;
        let shape = self.concrete(node, fact)?;
        let dt = elem_type(fact.datum_type)
            .ok_or_else(|| unsupported(node, format!("output type {:?}", fact.datum_type)))?;
        Ok((shape, dt))
    }

    fn new_output(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError> {
        let (shape, dt) = self.output_fact(node, slot)?;
        let t = self
            .g
            .add_packed(&node.name, dt, &shape, BufferKind::Activation);
        self.map.insert(OutletId::new(node.id, slot), t);
        Ok(t)
    }

    fn push(&mut self, node: &TypedNode, kind: StepKind) {
        self.g.steps.push(Step {
            node: node.name.clone(),
            kind,
        });
    }

    fn float_input(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError> {
        let t = self.outlet(node.inputs[slot])?;
        let dt = self.g.tensor(t).dtype;
        if !dt.is_float() {
            return Err(unsupported(
                node,
                format!("input {slot} is {dt}; only f32/f16 arithmetic is lowered"),
            ));
        }
        Ok(t)
    }

    fn set_output(&mut self, node: &TypedNode, slot: usize, t: TensorId) {
        self.map.insert(OutletId::new(node.id, slot), t);
    }

    fn add_buffer(
        &mut self,
        name: String,
        dtype: ElemType,
        len: usize,
        kind: BufferKind,
    ) -> BufferId {
        self.g.add_buffer(name, dtype, len, kind)
    }

    fn add_packed(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        shape: &[usize],
        kind: BufferKind,
    ) -> TensorId {
        self.g.add_packed(name, dtype, shape, kind)
    }

    fn add_view(&mut self, t: View) -> TensorId {
        self.g.add_view(t)
    }
}
