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
use tract_onnx::tract_core::ops::array::{MultiBroadcastTo, Pad, PadMode, Slice, TypedConcat};
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::cnn::conv::KernelFormat;
use tract_onnx::tract_core::ops::cnn::{Conv, Deconv, MaxPool, PaddingSpec, PoolSpec, SumPool};
use tract_onnx::tract_core::ops::downsample::Downsample;
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::logic::Iff;
use tract_onnx::tract_core::ops::lstm_cell::LstmEpilogue;
use tract_onnx::tract_core::ops::nn::{
    DataFormat, NearestUpsample, Reduce, Reducer, RmsNorm, ScaledRmsNorm, Softmax, SoftmaxKind,
};
use tract_onnx::tract_core::ops::scan::{InputMapping, Scan};
use tract_onnx::tract_core::ops::source::TypedSource;

use crate::native::graph::{Graph, Io, Step, StepKind};
use crate::native::ir::Tensor as View;
pub use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Program};
use crate::native::ir::{self, BufferKind, ElemType, TensorId, packed_strides};
use crate::native::ops::gemm;
use crate::native::ops::pool::PoolKind;
use crate::native::ops::reduce::ReduceKind;
use crate::native::ops::{conv, copy, deconv, elementwise, gather, pool, reduce, resize, softmax};

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
    declutter(&mut typed).map_err(model_err)?;
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

/// The IR element type of a tract datum type.
pub fn elem_type(dt: DatumType) -> Option<ElemType> {
    Some(match dt {
        DatumType::F32 => ElemType::F32,
        DatumType::F16 => ElemType::F16,
        DatumType::I32 => ElemType::I32,
        DatumType::I64 => ElemType::I64,
        DatumType::U8 => ElemType::U8,
        DatumType::I8 => ElemType::I8,
        DatumType::Bool => ElemType::Bool,
        _ => return None,
    })
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
        let t = l.tensor(*outlet)?;
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

/// Padding, strides and dilations per spatial axis.
type Spatial = (Vec<usize>, Vec<usize>, Vec<usize>);

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

fn unsupported(node: &TypedNode, detail: impl Into<String>) -> LowerError {
    LowerError::Unsupported {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        detail: detail.into(),
    }
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

    /// The constant value of an outlet: tract's fact, or a value folded at load.
    fn konst(&self, outlet: OutletId) -> Option<Arc<Tensor>> {
        self.fact(outlet)
            .konst
            .clone()
            .or_else(|| self.folded.get(&outlet).cloned())
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

    /// The tensor of an outlet; constants become weight buffers the first time they are asked
    /// for.
    fn tensor(&mut self, outlet: OutletId) -> Result<TensorId, LowerError> {
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

    fn alias(&mut self, node: &TypedNode, t: TensorId) {
        self.map.insert(OutletId::new(node.id, 0), t);
    }

    fn push(&mut self, node: &TypedNode, kind: StepKind) {
        self.g.steps.push(Step {
            node: node.name.clone(),
            kind,
        });
    }

    fn node(&mut self, node: &TypedNode) -> Result<(), LowerError> {
        let op: &dyn TypedOp = node.op.as_ref();
        if let Some(op) = node.op_as::<TypedBinOp>() {
            return self.binary(node, op);
        }
        if let Some(op) = node.op_as::<ElementWiseOp>() {
            return self.unary(node, op);
        }
        if let Some(op) = node.op_as::<Cast>() {
            return self.cast(node, op);
        }
        if let Some(op) = node.op_as::<AxisOp>() {
            return self.axis_op(node, op);
        }
        if let Some(op) = node.op_as::<Slice>() {
            return self.slice(node, op);
        }
        if let Some(op) = node.op_as::<TypedConcat>() {
            return self.concat(node, op);
        }
        if let Some(op) = node.op_as::<MultiBroadcastTo>() {
            let x = self.tensor(node.inputs[0])?;
            let (shape, _) = self.output_fact(node, 0)?;
            let _ = op;
            let v = self.broadcast_to(x, &shape, node)?;
            self.alias(node, v);
            return Ok(());
        }
        if let Some(op) = node.op_as::<Downsample>() {
            return self.downsample(node, op);
        }
        if let Some(op) = node.op_as::<Conv>() {
            return self.conv(node, op);
        }
        if let Some(op) = node.op_as::<Deconv>() {
            return self.deconv(node, op);
        }
        if let Some(op) = node.op_as::<MaxPool>() {
            if op.with_index_outputs.is_some() {
                return Err(unsupported(node, "MaxPool with an indices output"));
            }
            return self.pool(node, &op.pool_spec, PoolKind::Max);
        }
        if let Some(op) = node.op_as::<SumPool>() {
            if !op.normalize {
                return Err(unsupported(node, "SumPool without normalisation"));
            }
            let kind = if op.count_include_pad {
                PoolKind::AvgIncludePad
            } else {
                PoolKind::AvgExcludePad
            };
            return self.pool(node, &op.pool_spec, kind);
        }
        if let Some(op) = node.op_as::<Softmax>() {
            return self.softmax(node, op);
        }
        if let Some(op) = node.op_as::<EinSum>() {
            return self.einsum(node, op);
        }
        if let Some(op) = node.op_as::<Reduce>() {
            return self.reduce(node, op);
        }
        if let Some(op) = node.op_as::<NearestUpsample>() {
            return self.nearest_upsample(node, op);
        }
        if let Some(op) = node.op_as::<tract_onnx::tract_core::ops::nn::resize::Resize>() {
            return self.resize(node, op);
        }
        if node.op_as::<Iff>().is_some() {
            return self.select(node);
        }
        if let Some(op) = node.op_as::<Pad>() {
            return self.pad(node, op);
        }
        if let Some(op) = node.op_as::<tract_onnx::tract_core::ops::array::Gather>() {
            return self.gather(node, op);
        }
        if let Some(op) = node.op_as::<tract_onnx::tract_core::ops::array::GatherNd>() {
            return self.gather_nd(node, op.batch_dims);
        }
        if let Some(op) = node.op_as::<RmsNorm>() {
            return self.rms_norm(node, op.axis, &op.eps, false);
        }
        if let Some(op) = node.op_as::<ScaledRmsNorm>() {
            if op.out_dt.is_some() || op.scale_dt.is_some_and(|d| d != DatumType::F32) {
                return Err(unsupported(
                    node,
                    "scaled RMS norm with a rounding or output type",
                ));
            }
            return self.rms_norm(node, op.axis, &op.eps, true);
        }
        if node.op_as::<Scan>().is_some() {
            return self.scan(node);
        }
        if let Some(op) = node.op_as::<LstmEpilogue>() {
            return self.lstm_epilogue(node, op.hidden);
        }
        if op.name() == "Identity" {
            let x = self.tensor(node.inputs[0])?;
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
            outer.push(self.tensor(i)?);
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
                lowered.and_then(|()| body_outputs.iter().map(|&o| sub.tensor(o)).collect());
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

    fn float_input(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError> {
        let t = self.tensor(node.inputs[slot])?;
        let dt = self.g.tensor(t).dtype;
        if !dt.is_float() {
            return Err(unsupported(
                node,
                format!("input {slot} is {dt}; only f32/f16 arithmetic is lowered"),
            ));
        }
        Ok(t)
    }

    fn binary(&mut self, node: &TypedNode, op: &TypedBinOp) -> Result<(), LowerError> {
        if op.1.is_some() {
            return Err(unsupported(node, "quantised output type"));
        }
        let (ew, swap, logic) = match op.0.name() {
            "Add" => (EwOp::Add, false, false),
            "Sub" => (EwOp::Sub, false, false),
            "SubF" => (EwOp::Sub, true, false),
            "Mul" => (EwOp::Mul, false, false),
            "Div" => (EwOp::Div, false, false),
            "Min" => (EwOp::Min, false, false),
            "Max" => (EwOp::Max, false, false),
            "Pow" => (EwOp::Pow, false, false),
            "Eq" => (EwOp::Eq, false, false),
            "NE" => (EwOp::Ne, false, false),
            "LT" => (EwOp::Lt, false, false),
            "GT" => (EwOp::Gt, false, false),
            "LTE" => (EwOp::Le, false, false),
            "GTE" => (EwOp::Ge, false, false),
            "And" => (EwOp::And, false, true),
            "Or" => (EwOp::Or, false, true),
            "Xor" => (EwOp::Xor, false, true),
            other => return Err(unsupported(node, format!("binary operator {other}"))),
        };
        let (out_shape, out_dt) = self.output_fact(node, 0)?;
        let (ia, ib) = if swap { (1, 0) } else { (0, 1) };
        let mut operands = Vec::new();
        let mut imms = Vec::new();
        for slot in [ia, ib] {
            let outlet = node.inputs[slot];
            if let Some(v) = self.scalar_const(outlet) {
                imms.push(Some(v));
                continue;
            }
            imms.push(None);
            let t = self.tensor(outlet)?;
            let dt = self.g.tensor(t).dtype;
            let ok = if logic {
                dt == ElemType::Bool
            } else {
                dt.is_float()
            };
            if !ok {
                return Err(unsupported(
                    node,
                    format!(
                        "{} on {dt} operands (the engine computes in fp32)",
                        op.0.name()
                    ),
                ));
            }
            operands.push(self.broadcast_to(t, &out_shape, node)?);
        }
        let program = match (imms[0], imms[1]) {
            (None, None) => Program::binary(ew),
            (None, Some(v)) => Program::binary_imm(ew, v, false),
            (Some(v), None) => Program::binary_imm(ew, v, true),
            (Some(_), Some(_)) => {
                return Err(unsupported(node, "binary operator over two constants"));
            }
        };
        let y = self
            .g
            .add_packed(&node.name, out_dt, &out_shape, BufferKind::Activation);
        self.map.insert(OutletId::new(node.id, 0), y);
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: operands,
                output: y,
                program,
            }),
        );
        Ok(())
    }

    fn unary(&mut self, node: &TypedNode, op: &ElementWiseOp) -> Result<(), LowerError> {
        use tract_onnx::tract_core::ops::nn::LeakyRelu;
        if op.1.is_some() {
            return Err(unsupported(node, "quantised output type"));
        }
        let name = op.0.name();
        let mut imm = 0.0f32;
        let ew = match name.as_str() {
            "Neg" => EwOp::Neg,
            "Abs" => EwOp::Abs,
            "Exp" => EwOp::Exp,
            "Ln" => EwOp::Ln,
            "Sqrt" => EwOp::Sqrt,
            "Rsqrt" => EwOp::Rsqrt,
            "Recip" => EwOp::Recip,
            "Sigmoid" => EwOp::Sigmoid,
            "Tanh" => EwOp::Tanh,
            "Erf" => EwOp::Erf,
            "Silu" => EwOp::Silu,
            "Floor" => EwOp::Floor,
            "Ceil" => EwOp::Ceil,
            "Round" => EwOp::Round,
            "RoundHalfToEven" => EwOp::RoundEven,
            "Sin" => EwOp::Sin,
            "Cos" => EwOp::Cos,
            "Square" => EwOp::Square,
            "Sign" => EwOp::Sign,
            "HardSwish" => EwOp::HardSwish,
            "GeluExact" => EwOp::GeluExact,
            "IsNan" => EwOp::IsNan,
            "IsInf" => {
                use tract_onnx::tract_core::ops::math::IsInf;
                let f =
                    op.0.downcast_ref::<IsInf>()
                        .ok_or_else(|| unsupported(node, "IsInf of an unknown type"))?;
                imm = (f.detect_positive as u8 | (f.detect_negative as u8) << 1) as f32;
                EwOp::IsInf
            }
            "GeluApproximate" => {
                use tract_onnx::tract_core::ops::nn::gelu_approximate::GeluApproximate;
                let g =
                    op.0.downcast_ref::<GeluApproximate>()
                        .ok_or_else(|| unsupported(node, "GeluApproximate of an unknown type"))?;
                imm = if g.fast_impl { 2.0 } else { 3.0 };
                EwOp::GeluTanh
            }
            "Not" => EwOp::Not,
            "LeakyRelu" => {
                let l =
                    op.0.downcast_ref::<LeakyRelu>()
                        .ok_or_else(|| unsupported(node, "LeakyRelu of an unknown type"))?;
                imm = l.alpha;
                EwOp::LeakyRelu
            }
            other => return Err(unsupported(node, format!("element-wise operator {other}"))),
        };
        let x = self.tensor(node.inputs[0])?;
        let dt = self.g.tensor(x).dtype;
        let ok = if ew == EwOp::Not {
            dt == ElemType::Bool
        } else {
            dt.is_float()
        };
        if !ok {
            return Err(unsupported(node, format!("{name} on {dt}")));
        }
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![x],
                output: y,
                program: Program::unary(ew, imm),
            }),
        );
        Ok(())
    }

    fn cast(&mut self, node: &TypedNode, op: &Cast) -> Result<(), LowerError> {
        let x = self.tensor(node.inputs[0])?;
        let from = self.g.tensor(x).dtype;
        let to =
            elem_type(op.to).ok_or_else(|| unsupported(node, format!("cast to {:?}", op.to)))?;
        if from == to {
            self.alias(node, x);
            return Ok(());
        }
        // fp32 carries every value of these conversions exactly (or rounds it the way
        // Rust's `as` does); integer-to-integer casts wrap in tract and would saturate here.
        let exact =
            to.is_float() || from.is_float() || from == ElemType::Bool || to == ElemType::Bool;
        if !exact {
            return Err(unsupported(node, format!("cast {from} -> {to}")));
        }
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![x],
                output: y,
                program: Program::identity(),
            }),
        );
        Ok(())
    }

    fn select(&mut self, node: &TypedNode) -> Result<(), LowerError> {
        let (shape, _) = self.output_fact(node, 0)?;
        let mut ins = Vec::new();
        for slot in 0..3 {
            let t = self.tensor(node.inputs[slot])?;
            let dt = self.g.tensor(t).dtype;
            if slot > 0 && !dt.is_float() {
                return Err(unsupported(node, format!("select over {dt} values")));
            }
            ins.push(self.broadcast_to(t, &shape, node)?);
        }
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: ins,
                output: y,
                program: Program::select(),
            }),
        );
        Ok(())
    }

    fn axis_op(&mut self, node: &TypedNode, op: &AxisOp) -> Result<(), LowerError> {
        let x = self.tensor(node.inputs[0])?;
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
        let x = self.tensor(node.inputs[0])?;
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
        let x = self.tensor(node.inputs[0])?;
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

    fn concat(&mut self, node: &TypedNode, op: &TypedConcat) -> Result<(), LowerError> {
        let y = self.new_output(node, 0)?;
        let out = self.g.tensor(y).clone();
        let mut at = 0usize;
        for (i, &outlet) in node.inputs.iter().enumerate() {
            let x = self.tensor(outlet)?;
            let src = self.g.tensor(x).clone();
            let mut shape = out.shape.clone();
            shape[op.axis] = src.shape[op.axis];
            let offset = out.offset + at * out.strides[op.axis] as usize;
            at += src.shape[op.axis];
            if src.numel() == 0 {
                continue;
            }
            let slot = self.view(
                y,
                format!("{}.slot{i}", node.name),
                shape,
                offset,
                out.strides.clone(),
            );
            self.push(node, StepKind::Copy(copy::Copy { src: x, dst: slot }));
        }
        Ok(())
    }

    fn nearest_upsample(
        &mut self,
        node: &TypedNode,
        op: &NearestUpsample,
    ) -> Result<(), LowerError> {
        // out[.., h * s + i, ..] = x[.., h, ..]: view the packed output as [.., H, s, ..] and
        // the input as [.., H, 1 -> s (stride 0), ..], then copy.
        let x = self.tensor(node.inputs[0])?;
        let y = self.new_output(node, 0)?;
        let (src, out) = (self.g.tensor(x).clone(), self.g.tensor(y).clone());
        if op.scales.len() != src.shape.len() {
            return Err(unsupported(
                node,
                format!("scales {:?} for rank {}", op.scales, src.shape.len()),
            ));
        }
        let (mut xs, mut xst, mut ys) = (Vec::new(), Vec::new(), Vec::new());
        for (ax, &s) in op.scales.iter().enumerate() {
            xs.push(src.shape[ax]);
            xst.push(src.strides[ax]);
            ys.push(src.shape[ax]);
            if s > 1 {
                xs.push(s);
                xst.push(0);
                ys.push(s);
            }
        }
        if ys.len() > ir::MAX_RANK {
            return Err(unsupported(
                node,
                "upsampling more axes than the IR's rank limit",
            ));
        }
        let xv = self.view(x, format!("{}.src", node.name), xs, src.offset, xst);
        let ystr = packed_strides(&ys);
        let yv = self.view(y, format!("{}.dst", node.name), ys, out.offset, ystr);
        self.push(node, StepKind::Copy(copy::Copy { src: xv, dst: yv }));
        Ok(())
    }

    /// Resampling (tract's core `Resize`: nearest, linear, cubic, every coordinate transform
    /// it supports) of the last two axes, with tract's own per-axis plans as tables.
    fn resize(
        &mut self,
        node: &TypedNode,
        op: &tract_onnx::tract_core::ops::nn::resize::Resize,
    ) -> Result<(), LowerError> {
        let x = self.float_input(node, 0)?;
        let x = self.packed(x, &node.name);
        let xs = self.g.tensor(x).shape.clone();
        let (ys, _) = self.output_fact(node, 0)?;
        let rank = xs.len();
        if rank < 2 || ys.len() != rank {
            return Err(unsupported(node, format!("resize of {xs:?} to {ys:?}")));
        }
        // The scales tract's own evaluation uses: the `scales` input when it has one value
        // per axis, else output / input.
        let given = op
            .optional_scales_input
            .and_then(|ix| node.inputs.get(ix).copied())
            .and_then(|o| self.konst(o))
            .filter(|t| t.len() == rank)
            .and_then(|t| {
                t.cast_to::<f32>().ok().and_then(|v| {
                    v.try_as_plain_ram()
                        .ok()?
                        .as_slice::<f32>()
                        .ok()
                        .map(|s| s.to_vec())
                })
            });
        let scales: Vec<f32> = given.unwrap_or_else(|| {
            ys.iter()
                .zip(&xs)
                .map(|(o, i)| *o as f32 / *i as f32)
                .collect()
        });
        let mut tables = Vec::new();
        for ax in 0..rank {
            let resized = !(xs[ax] == ys[ax] && scales[ax] == 1.0);
            if resized && ax + 2 < rank {
                return Err(unsupported(node, format!("resizing axis {ax} of {xs:?}")));
            }
            if ax + 2 < rank {
                continue;
            }
            let (idx, w, win) = if resized {
                let plan = op.plan_axis(scales[ax], xs[ax], ys[ax]);
                if plan.extrapolated.iter().any(|&e| e) {
                    return Err(unsupported(node, "extrapolated coordinates"));
                }
                let idx: Vec<i32> = plan
                    .indices
                    .iter()
                    .map(|&i| i32::try_from(i).unwrap_or(i32::MAX))
                    .collect();
                (idx, plan.weights, plan.window)
            } else {
                ((0..xs[ax] as i32).collect(), vec![1.0f32; xs[ax]], 1)
            };
            let n = idx.len();
            let it = self.g.add_packed(
                format!("{}.rows{ax}", node.name),
                ElemType::I32,
                &[n],
                BufferKind::Weight(idx.iter().flat_map(|v| v.to_ne_bytes()).collect()),
            );
            let wt = self.g.add_packed(
                format!("{}.weights{ax}", node.name),
                ElemType::F32,
                &[n],
                BufferKind::Weight(w.iter().flat_map(|v| v.to_ne_bytes()).collect()),
            );
            tables.push((it, wt, win));
        }
        let [(iy, wy, win_h), (ix, wx, win_w)] = tables[..] else {
            return Err(LowerError::Model(format!(
                "node `{}`: resize tables",
                node.name
            )));
        };
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Resize(resize::Resize {
                x,
                y,
                iy,
                wy,
                ix,
                wx,
                outer: xs[..rank - 2].iter().product(),
                h_in: xs[rank - 2],
                w_in: xs[rank - 1],
                h_out: ys[rank - 2],
                w_out: ys[rank - 1],
                win_h,
                win_w,
            }),
        );
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
        let x = self.tensor(node.inputs[0])?;
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
        let x = self.tensor(node.inputs[0])?;
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

    fn spatial(
        &self,
        node: &TypedNode,
        spec: &PoolSpec,
        input: &[usize],
    ) -> Result<Spatial, LowerError> {
        if spec.data_format != DataFormat::NCHW {
            return Err(unsupported(
                node,
                format!("data format {:?}", spec.data_format),
            ));
        }
        let rank = spec.rank();
        if !(1..=2).contains(&rank) || input.len() != rank + 2 {
            return Err(unsupported(
                node,
                format!("{rank}-D spatial input {:?}", input),
            ));
        }
        let hw = &input[2..];
        let padding = spec.computed_padding(hw);
        let mut pads = Vec::new();
        for (ax, p) in padding.iter().enumerate() {
            if p.pad_before != p.pad_after {
                return Err(unsupported(
                    node,
                    format!(
                        "asymmetric padding {}/{} on spatial axis {ax}",
                        p.pad_before, p.pad_after
                    ),
                ));
            }
            pads.push(p.pad_before);
        }
        if let PaddingSpec::ExplicitOnnxPool(_, _, true) = spec.padding {
            // ceil_mode: the output size must still be the floor formula's with these pads.
            for (ax, p) in padding.iter().enumerate() {
                let k = (spec.kernel_shape[ax] - 1) * spec.dilation(ax) + 1;
                let floor = (hw[ax] + 2 * pads[ax] - k) / spec.stride(ax) + 1;
                if floor != p.convoluted {
                    return Err(unsupported(
                        node,
                        "ceil_mode pooling that changes the output size",
                    ));
                }
            }
        }
        Ok((pads, spec.strides().to_vec(), spec.dilations().to_vec()))
    }

    fn conv(&mut self, node: &TypedNode, op: &Conv) -> Result<(), LowerError> {
        if op.q_params.is_some() {
            return Err(unsupported(node, "quantised convolution"));
        }
        if op.kernel_fmt != KernelFormat::OIHW {
            return Err(unsupported(
                node,
                format!("kernel format {:?}", op.kernel_fmt),
            ));
        }
        if node.inputs.len() != 3 {
            return Err(unsupported(node, format!("{} inputs", node.inputs.len())));
        }
        let x = self.float_input(node, 0)?;
        let xs = self.g.tensor(x).shape.clone();
        let (pads, strides, dilations) = self.spatial(node, &op.pool_spec, &xs)?;
        let Some(kernel) = self.konst(node.inputs[1]) else {
            return Err(unsupported(node, "weights that are not constant"));
        };
        if kernel.datum_type() != DatumType::F32 && kernel.datum_type() != DatumType::F16 {
            return Err(unsupported(
                node,
                format!("weights of type {:?}", kernel.datum_type()),
            ));
        }
        let w = self.tensor(node.inputs[1])?;
        if self.g.tensor(w).shape.len() != xs.len() {
            return Err(unsupported(
                node,
                format!("kernel shape {:?}", kernel.shape()),
            ));
        }
        let x = self.packed(x, &node.name);
        let (shape, dt) = self.output_fact(node, 0)?;
        let y = self.g.add_packed(
            format!("{}.conv", node.name),
            dt,
            &shape,
            BufferKind::Activation,
        );
        self.push(
            node,
            StepKind::Conv(conv::Conv {
                x,
                w,
                y,
                pads,
                strides,
                dilations,
                group: op.group,
                channels_last: false,
            }),
        );
        self.bias(node, y, &shape, dt)
    }

    /// Bias of a convolution output `y` (`[N, C, ...]`): a separate element-wise add (fused
    /// later with what follows), or nothing for a constant zero bias.
    fn bias(
        &mut self,
        node: &TypedNode,
        y: TensorId,
        shape: &[usize],
        dt: ElemType,
    ) -> Result<(), LowerError> {
        let zero_bias = self
            .konst(node.inputs[2])
            .map(|k| k.is_zero().unwrap_or(false))
            .unwrap_or(false);
        if zero_bias {
            self.map.insert(OutletId::new(node.id, 0), y);
            return Ok(());
        }
        let b = self.tensor(node.inputs[2])?;
        let bt = self.g.tensor(b).clone();
        let co = shape[1];
        let bview = if bt.numel() == co && bt.is_packed() {
            let mut s = vec![0isize; shape.len()];
            s[1] = if co == 1 { 0 } else { 1 };
            self.view(
                b,
                format!("{}.bias", node.name),
                shape.to_vec(),
                bt.offset,
                s,
            )
        } else if bt.numel() == 1 {
            let s = vec![0isize; shape.len()];
            self.view(
                b,
                format!("{}.bias", node.name),
                shape.to_vec(),
                bt.offset,
                s,
            )
        } else {
            return Err(unsupported(node, format!("bias of shape {:?}", bt.shape)));
        };
        let out = self
            .g
            .add_packed(&node.name, dt, shape, BufferKind::Activation);
        self.map.insert(OutletId::new(node.id, 0), out);
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs: vec![y, bview],
                output: out,
                program: Program::binary(EwOp::Add),
            }),
        );
        Ok(())
    }

    /// ONNX `ConvTranspose` (tract `Deconv`) as cuDNN backward data. tract stores the kernel
    /// as `[C_out, C_in / g, kH, kW]` (it reorders ONNX's `[C_in, C_out / g, kH, kW]` at
    /// load); cuDNN wants the forward filter, ONNX's layout, so the constant is reordered
    /// back here.
    fn deconv(&mut self, node: &TypedNode, op: &Deconv) -> Result<(), LowerError> {
        if op.kernel_format != KernelFormat::OIHW {
            return Err(unsupported(
                node,
                format!("kernel format {:?}", op.kernel_format),
            ));
        }
        if node.inputs.len() != 3 {
            return Err(unsupported(node, format!("{} inputs", node.inputs.len())));
        }
        let x = self.float_input(node, 0)?;
        let xs = self.g.tensor(x).shape.clone();
        let spec = &op.pool_spec;
        if spec.data_format != DataFormat::NCHW {
            return Err(unsupported(
                node,
                format!("data format {:?}", spec.data_format),
            ));
        }
        let rank = spec.rank();
        if !(1..=2).contains(&rank) || xs.len() != rank + 2 {
            return Err(unsupported(node, format!("{rank}-D spatial input {xs:?}")));
        }
        let pads = match &spec.padding {
            PaddingSpec::Valid => vec![0; rank],
            PaddingSpec::Explicit(b, a) if b == a => b.to_vec(),
            other => {
                return Err(unsupported(
                    node,
                    format!("transposed-convolution padding {other:?}"),
                ));
            }
        };
        let Some(kernel) = self.konst(node.inputs[1]) else {
            return Err(unsupported(node, "weights that are not constant"));
        };
        let ks = kernel.shape().to_vec();
        if ks.len() != rank + 2 || kernel.datum_type() != DatumType::F32 {
            return Err(unsupported(
                node,
                format!("kernel {:?} of {:?}", ks, kernel.datum_type()),
            ));
        }
        let g = op.group;
        let (co, cig) = (ks[0], ks[1]);
        let (ci, cog) = (cig * g, co / g);
        if co % g != 0 || ci != xs[1] {
            return Err(unsupported(
                node,
                format!("kernel {ks:?} for input {xs:?}, group {g}"),
            ));
        }
        let spatial: usize = ks[2..].iter().product();
        let src = kernel
            .try_as_plain_ram()
            .ok()
            .and_then(|v| v.as_slice::<f32>().ok().map(|s| s.to_vec()))
            .ok_or_else(|| unsupported(node, "kernel storage"))?;
        // F[gr * cig + i, o, ...] = K[gr * cog + o, i, ...]
        let mut f = vec![0f32; src.len()];
        for gr in 0..g {
            for i in 0..cig {
                for o in 0..cog {
                    let from = ((gr * cog + o) * cig + i) * spatial;
                    let to = ((gr * cig + i) * cog + o) * spatial;
                    f[to..to + spatial].copy_from_slice(&src[from..from + spatial]);
                }
            }
        }
        let mut fshape = vec![ci, cog];
        fshape.extend_from_slice(&ks[2..]);
        let w = self.g.add_packed(
            format!("{}.filter", node.name),
            ElemType::F32,
            &fshape,
            BufferKind::Weight(f.iter().flat_map(|v| v.to_ne_bytes()).collect()),
        );
        let x = self.packed(x, &node.name);
        let (shape, dt) = self.output_fact(node, 0)?;
        // The forward convolution of the output must give the input back (what cuDNN checks).
        for ax in 0..rank {
            let keff = (ks[2 + ax] - 1) * spec.dilation(ax) + 1;
            let fwd = (shape[2 + ax] + 2 * pads[ax])
                .checked_sub(keff)
                .map(|v| v / spec.stride(ax) + 1);
            if fwd != Some(xs[2 + ax]) {
                return Err(unsupported(
                    node,
                    format!("output size {shape:?} for input {xs:?}"),
                ));
            }
        }
        let y = self.g.add_packed(
            format!("{}.deconv", node.name),
            dt,
            &shape,
            BufferKind::Activation,
        );
        self.push(
            node,
            StepKind::Deconv(deconv::Deconv(conv::Conv {
                x,
                w,
                y,
                pads,
                strides: spec.strides().to_vec(),
                dilations: spec.dilations().to_vec(),
                group: g,
                channels_last: false,
            })),
        );
        self.bias(node, y, &shape, dt)
    }

    fn pool(
        &mut self,
        node: &TypedNode,
        spec: &PoolSpec,
        kind: PoolKind,
    ) -> Result<(), LowerError> {
        let x = self.float_input(node, 0)?;
        let xs = self.g.tensor(x).shape.clone();
        let (pads, strides, dilations) = self.spatial(node, spec, &xs)?;
        if dilations.iter().any(|&d| d != 1) {
            return Err(unsupported(
                node,
                format!("pooling dilations {dilations:?}"),
            ));
        }
        let x = self.packed(x, &node.name);
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Pool(pool::Pool {
                x,
                y,
                kind,
                kernel: spec.kernel_shape.to_vec(),
                pads,
                strides,
                channels_last: false,
            }),
        );
        Ok(())
    }

    fn softmax(&mut self, node: &TypedNode, op: &Softmax) -> Result<(), LowerError> {
        if op.quant_output_dt.is_some() {
            return Err(unsupported(node, "quantised softmax"));
        }
        if op.axes.len() != 1 {
            return Err(unsupported(
                node,
                format!("softmax over axes {:?}", op.axes),
            ));
        }
        let x = self.float_input(node, 0)?;
        let x = self.packed(x, &node.name);
        let shape = self.g.tensor(x).shape.clone();
        let ax = op.axes[0];
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Softmax(softmax::Softmax {
                x,
                y,
                outer: shape[..ax].iter().product(),
                n: shape[ax],
                inner: shape[ax + 1..].iter().product(),
                log: op.kind == SoftmaxKind::LogSoftmax,
            }),
        );
        Ok(())
    }

    fn reduce(&mut self, node: &TypedNode, op: &Reduce) -> Result<(), LowerError> {
        let kind = match op.reducer {
            Reducer::Sum => ReduceKind::Sum,
            Reducer::MeanOfSquares => ReduceKind::MeanOfSquares,
            Reducer::Max => ReduceKind::Max,
            Reducer::Min => ReduceKind::Min,
            Reducer::Prod => ReduceKind::Prod,
            ref other => return Err(unsupported(node, format!("reducer {other:?}"))),
        };
        let mut axes: Vec<usize> = op.axes.to_vec();
        axes.sort_unstable();
        if axes.is_empty() || axes.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(unsupported(
                node,
                format!("reduction over non-adjacent axes {axes:?}"),
            ));
        }
        let x = self.float_input(node, 0)?;
        let x = self.packed(x, &node.name);
        let shape = self.g.tensor(x).shape.clone();
        let (first, last) = (axes[0], *axes.last().expect("non-empty"));
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Reduce(reduce::Reduce {
                x,
                y,
                outer: shape[..first].iter().product(),
                n: shape[first..=last].iter().product(),
                inner: shape[last + 1..].iter().product(),
                kind,
            }),
        );
        Ok(())
    }

    /// `y = x * rsqrt(mean(x^2 over axis) + eps)` (times `scale` along the axis when scaled):
    /// a mean-of-squares reduction, then one element-wise step.
    fn rms_norm(
        &mut self,
        node: &TypedNode,
        axis: usize,
        eps: &Tensor,
        scaled: bool,
    ) -> Result<(), LowerError> {
        let eps = eps
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
            .ok_or_else(|| unsupported(node, "non-numeric epsilon"))?;
        let x = self.float_input(node, 0)?;
        let x = self.packed(x, &node.name);
        let xt = self.g.tensor(x).clone();
        let mut ms_shape = xt.shape.clone();
        ms_shape[axis] = 1;
        let ms = self.g.add_packed(
            format!("{}.mean_sq", node.name),
            xt.dtype,
            &ms_shape,
            BufferKind::Activation,
        );
        self.push(
            node,
            StepKind::Reduce(reduce::Reduce {
                x,
                y: ms,
                outer: xt.shape[..axis].iter().product(),
                n: xt.shape[axis],
                inner: xt.shape[axis + 1..].iter().product(),
                kind: ReduceKind::MeanOfSquares,
            }),
        );
        let msb = self.broadcast_to(ms, &xt.shape, node)?;
        use crate::native::ir::program::Expr;
        let op = |op, a, b| Expr::Op {
            op,
            args: [a, b, 0],
            imm: 0.0,
        };
        let mut nodes = vec![
            Expr::Input(0),
            Expr::Input(1),
            Expr::Imm(eps),
            op(EwOp::Add, 1, 2),
            op(EwOp::Rsqrt, 3, 0),
            op(EwOp::Mul, 0, 4),
        ];
        let mut inputs = vec![x, msb];
        if scaled {
            let sc = self.tensor(node.inputs[1])?;
            let st = self.g.tensor(sc).clone();
            if st.numel() != xt.shape[axis] || !st.dtype.is_float() {
                return Err(unsupported(node, format!("scale of shape {:?}", st.shape)));
            }
            let sc = self.packed(sc, &node.name);
            let mut strides = vec![0isize; xt.shape.len()];
            strides[axis] = 1;
            let offset = self.g.tensor(sc).offset;
            let scv = self.view(
                sc,
                format!("{}.scale", node.name),
                xt.shape.clone(),
                offset,
                strides,
            );
            inputs.push(scv);
            nodes.push(Expr::Input(2));
            nodes.push(op(EwOp::Mul, 5, 6));
        }
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Elementwise(elementwise::Elementwise {
                inputs,
                output: y,
                program: Program { nodes },
            }),
        );
        Ok(())
    }

    /// ONNX `GatherND` with constant indices and `batch_dims = 0`: a gather of contiguous
    /// blocks from the packed data viewed as `[rows, block]`, with the flat row indices
    /// computed at load.
    fn gather_nd(&mut self, node: &TypedNode, batch_dims: usize) -> Result<(), LowerError> {
        if batch_dims != 0 {
            return Err(unsupported(node, format!("batch_dims {batch_dims}")));
        }
        let Some(ix) = self.konst(node.inputs[1]) else {
            return Err(unsupported(node, "indices that are not constant"));
        };
        let data = self.tensor(node.inputs[0])?;
        let data = self.packed(data, &node.name);
        let ds = self.g.tensor(data).shape.clone();
        let ish = ix.shape().to_vec();
        let k = *ish
            .last()
            .ok_or_else(|| unsupported(node, "scalar indices"))?;
        if k == 0 || k > ds.len() {
            return Err(unsupported(
                node,
                format!("index depth {k} for data {ds:?}"),
            ));
        }
        let ix = ix
            .cast_to::<i64>()
            .map_err(|e| unsupported(node, format!("indices: {e}")))?;
        let ix = ix
            .try_as_plain_ram()
            .ok()
            .and_then(|v| v.as_slice::<i64>().ok().map(|s| s.to_vec()))
            .ok_or_else(|| unsupported(node, "indices storage"))?;
        let rows: usize = ds[..k].iter().product();
        let count = ix.len() / k;
        let mut flat = Vec::with_capacity(count);
        for tuple in ix.chunks(k) {
            let mut f = 0i64;
            for (t, &v) in tuple.iter().enumerate() {
                let d = ds[t] as i64;
                let v = if v < 0 { v + d } else { v };
                if !(0..d).contains(&v) {
                    return Err(unsupported(node, format!("index {v} out of range 0..{d}")));
                }
                f = f * d + v;
            }
            flat.push(f);
        }
        let idx = self.g.add_packed(
            format!("{}.flat_indices", node.name),
            ElemType::I64,
            &[count],
            BufferKind::Weight(flat.iter().flat_map(|v| v.to_ne_bytes()).collect()),
        );
        let y = self.new_output(node, 0)?;
        self.push(
            node,
            StepKind::Gather(gather::Gather {
                data,
                indices: idx,
                y,
                outer: 1,
                n: rows,
                inner: ds[k..].iter().product(),
                count,
            }),
        );
        Ok(())
    }

    fn gather(
        &mut self,
        node: &TypedNode,
        op: &tract_onnx::tract_core::ops::array::Gather,
    ) -> Result<(), LowerError> {
        if op.output_type.is_some() {
            return Err(unsupported(node, "gather with an output type"));
        }
        let data = self.tensor(node.inputs[0])?;
        let data = self.packed(data, &node.name);
        let idx = self.tensor(node.inputs[1])?;
        let it = self.g.tensor(idx).dtype;
        if !matches!(it, ElemType::I64 | ElemType::I32) {
            return Err(unsupported(node, format!("indices of type {it}")));
        }
        let idx = self.packed(idx, &node.name);
        let shape = self.g.tensor(data).shape.clone();
        let count = self.g.tensor(idx).numel();
        let y = self.new_output(node, 0)?;
        let ax = op.axis;
        self.push(
            node,
            StepKind::Gather(gather::Gather {
                data,
                indices: idx,
                y,
                outer: shape[..ax].iter().product(),
                n: shape[ax],
                inner: shape[ax + 1..].iter().product(),
                count,
            }),
        );
        Ok(())
    }

    fn einsum(&mut self, node: &TypedNode, op: &EinSum) -> Result<(), LowerError> {
        if op.q_params.is_some() {
            return Err(unsupported(node, "quantised matrix product"));
        }
        if node.inputs.len() != 2 {
            return Err(unsupported(
                node,
                format!("einsum over {} inputs", node.inputs.len()),
            ));
        }
        if !matches!(op.operating_dt, DatumType::F32 | DatumType::F16) {
            return Err(unsupported(
                node,
                format!("einsum in {:?}", op.operating_dt),
            ));
        }
        let a = self.float_input(node, 0)?;
        let b = self.float_input(node, 1)?;
        let y = self.new_output(node, 0)?;
        let (at, bt, ct) = (
            self.g.tensor(a).clone(),
            self.g.tensor(b).clone(),
            self.g.tensor(y).clone(),
        );
        // Classify every axis: batch (a, b, c), m (a, c), n (b, c), k (a, b).
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Cat {
            Batch,
            M,
            N,
            K,
        }
        struct Ax {
            cat: Cat,
            pa: Option<usize>,
            pb: Option<usize>,
            pc: Option<usize>,
        }
        let mut axes = Vec::new();
        for axis in op.axes.iter_all_axes() {
            let one = |v: &[usize]| -> Result<Option<usize>, LowerError> {
                match v.len() {
                    0 => Ok(None),
                    1 => Ok(Some(v[0])),
                    _ => Err(unsupported(
                        node,
                        format!("axis {} repeated in an operand", axis.repr),
                    )),
                }
            };
            let pa = one(&axis.inputs[0])?;
            let pb = one(&axis.inputs[1])?;
            let pc = one(&axis.outputs[0])?;
            let dim = |t: &View, p: Option<usize>| p.map(|p| t.shape[p]).unwrap_or(1);
            let (da, db, dc) = (dim(&at, pa), dim(&bt, pb), dim(&ct, pc));
            // Dimensions of 1 take part in nothing.
            let pa = pa.filter(|_| da != 1);
            let pb = pb.filter(|_| db != 1);
            let pc = pc.filter(|_| dc != 1);
            let cat = match (pa.is_some(), pb.is_some(), pc.is_some()) {
                (_, _, false) if pa.is_none() && pb.is_none() => continue,
                (true, true, true) => Cat::Batch,
                (true, false, true) => Cat::M,
                (false, true, true) => Cat::N,
                (true, true, false) => {
                    if da != db {
                        return Err(unsupported(
                            node,
                            format!("contracted axis {} of {da} vs {db}", axis.repr),
                        ));
                    }
                    Cat::K
                }
                (false, false, true) => {
                    return Err(unsupported(
                        node,
                        format!("output axis {} broadcast from nothing", axis.repr),
                    ));
                }
                _ => {
                    return Err(unsupported(
                        node,
                        format!("axis {} summed within one operand", axis.repr),
                    ));
                }
            };
            axes.push(Ax { cat, pa, pb, pc });
        }
        // Merged (size, stride) of one category in one operand, in the output's order (k: in
        // a's order); None when the axes do not form one run of memory.
        let order = |cat: Cat| -> Vec<usize> {
            let mut ix: Vec<usize> = (0..axes.len()).filter(|&i| axes[i].cat == cat).collect();
            ix.sort_by_key(|&i| {
                if cat == Cat::K {
                    axes[i].pa
                } else {
                    axes[i].pc
                }
            });
            ix
        };
        let merged = |t: &View,
                      pos: &dyn Fn(&Ax) -> Option<usize>,
                      ix: &[usize],
                      size: &dyn Fn(&Ax) -> usize|
         -> Option<(usize, isize)> {
            let mut dims: Vec<(usize, isize)> = Vec::new();
            for &i in ix {
                let d = size(&axes[i]);
                let s = pos(&axes[i]).map(|p| t.strides[p]).unwrap_or(0);
                dims.push((d, s));
            }
            let total: usize = dims.iter().map(|d| d.0).product();
            let dims: Vec<(usize, isize)> = dims.into_iter().filter(|d| d.0 != 1).collect();
            if dims.is_empty() {
                return Some((1, 0));
            }
            if !dims.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0 as isize) {
                return None;
            }
            Some((total, dims.last().expect("non-empty").1))
        };
        let size_c = |x: &Ax| x.pc.map(|p| ct.shape[p]).unwrap_or(1);
        let size_k = |x: &Ax| x.pa.map(|p| at.shape[p]).unwrap_or(1);
        let (ob, om, on, ok) = (
            order(Cat::Batch),
            order(Cat::M),
            order(Cat::N),
            order(Cat::K),
        );
        let pa = |x: &Ax| x.pa;
        let pb = |x: &Ax| x.pb;
        let pc = |x: &Ax| x.pc;
        let batch: usize = ob.iter().map(|&i| size_c(&axes[i])).product();
        let m: usize = om.iter().map(|&i| size_c(&axes[i])).product();
        let n: usize = on.iter().map(|&i| size_c(&axes[i])).product();
        let k: usize = ok.iter().map(|&i| size_k(&axes[i])).product();
        // Batch axes of a and b may be broadcast (size 1 in the operand): stride 0.
        let size_in = |t: &View, p: Option<usize>| p.map(|p| t.shape[p]).unwrap_or(1);
        for &i in &ob {
            let x = &axes[i];
            for (t, p) in [(&at, x.pa), (&bt, x.pb)] {
                if size_in(t, p) != size_c(x) {
                    return Err(unsupported(node, "batch axis broadcast inside an operand"));
                }
            }
        }
        let plan_a = (|| {
            let (_, sb) = merged(&at, &pa, &ob, &size_c)?;
            let (_, sm) = merged(&at, &pa, &om, &size_c)?;
            let (_, sk) = merged(&at, &pa, &ok, &size_k)?;
            Some([sb, sm, sk])
        })();
        let plan_b = (|| {
            let (_, sb) = merged(&bt, &pb, &ob, &size_c)?;
            let (_, sk) = merged(&bt, &pb, &ok, &size_k)?;
            let (_, sn) = merged(&bt, &pb, &on, &size_c)?;
            Some([sb, sk, sn])
        })();
        let plan_c = (|| {
            let (_, sb) = merged(&ct, &pc, &ob, &size_c)?;
            let (_, sm) = merged(&ct, &pc, &om, &size_c)?;
            let (_, sn) = merged(&ct, &pc, &on, &size_c)?;
            Some([sb, sm, sn])
        })();
        // Which of a, b, c go through a packed copy: none if the strides fit one BLAS call,
        // else the fewest that make it fit (packed operands always do).
        let fits = |sa: Option<[isize; 3]>, sb: Option<[isize; 3]>, sc: Option<[isize; 3]>| {
            let packed_a = [(m * k) as isize, k as isize, 1];
            let packed_b = [(k * n) as isize, n as isize, 1];
            let packed_c = [(m * n) as isize, n as isize, 1];
            gemm::blas_gemm(&gemm::Gemm {
                a,
                b,
                c: y,
                batch,
                m,
                n,
                k,
                sa: sa.unwrap_or(packed_a),
                sb: sb.unwrap_or(packed_b),
                sc: sc.unwrap_or(packed_c),
            })
            .is_some()
        };
        let choices: [(bool, bool, bool); 8] = [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (false, false, true),
            (true, true, false),
            (true, false, true),
            (false, true, true),
            (true, true, true),
        ];
        let (pack_a, pack_b, pack_c) = choices
            .into_iter()
            .find(|&(xa, xb, xc)| {
                (xa || plan_a.is_some())
                    && (xb || plan_b.is_some())
                    && (xc || plan_c.is_some())
                    && fits(
                        if xa { None } else { plan_a },
                        if xb { None } else { plan_b },
                        if xc { None } else { plan_c },
                    )
            })
            .expect("packed operands always fit one BLAS call");
        let plan_a = if pack_a { None } else { plan_a };
        let plan_b = if pack_b { None } else { plan_b };
        let plan_c = if pack_c { None } else { plan_c };
        // Operands that do not fit are packed in [batch, m, k] / [batch, k, n] order first;
        // a result that does not fit goes through a packed [batch, m, n] tensor.
        let pack = |l: &mut Self,
                    t: TensorId,
                    tt: &View,
                    groups: [&[usize]; 3],
                    pos: &dyn Fn(&Ax) -> Option<usize>,
                    sizes: [&dyn Fn(&Ax) -> usize; 3]|
         -> (TensorId, [isize; 3]) {
            let mut shape = Vec::new();
            let mut strides = Vec::new();
            for (g, size) in groups.iter().zip(sizes) {
                for &i in g.iter() {
                    shape.push(size(&axes[i]));
                    strides.push(pos(&axes[i]).map(|p| tt.strides[p]).unwrap_or(0));
                }
            }
            let v = l.view(
                t,
                format!("{}.gemm_order", tt.name),
                shape.clone(),
                tt.offset,
                strides,
            );
            let p = l.packed(v, &node.name);
            let d: Vec<usize> = groups
                .iter()
                .zip(sizes)
                .map(|(g, size)| g.iter().map(|&i| size(&axes[i])).product())
                .collect();
            (p, [(d[1] * d[2]) as isize, d[2] as isize, 1])
        };
        let (a, sa) = match plan_a {
            Some(s) => (a, s),
            None => pack(
                self,
                a,
                &at,
                [&ob, &om, &ok],
                &pa,
                [&size_c, &size_c, &size_k],
            ),
        };
        let (b, sb) = match plan_b {
            Some(s) => (b, s),
            None => pack(
                self,
                b,
                &bt,
                [&ob, &ok, &on],
                &pb,
                [&size_c, &size_k, &size_c],
            ),
        };
        match plan_c {
            Some(sc) => {
                self.push(
                    node,
                    StepKind::Gemm(gemm::Gemm {
                        a,
                        b,
                        c: y,
                        batch,
                        m,
                        n,
                        k,
                        sa,
                        sb,
                        sc,
                    }),
                );
            }
            None => {
                let tmp = self.g.add_packed(
                    format!("{}.gemm", node.name),
                    ct.dtype,
                    &[batch, m, n],
                    BufferKind::Activation,
                );
                self.push(
                    node,
                    StepKind::Gemm(gemm::Gemm {
                        a,
                        b,
                        c: tmp,
                        batch,
                        m,
                        n,
                        k,
                        sa,
                        sb,
                        sc: [(m * n) as isize, n as isize, 1],
                    }),
                );
                // View tmp with the output's shape: each output axis gets its stride inside
                // its category's block.
                let mut strides = vec![0isize; ct.shape.len()];
                for (g, base) in [(&ob, (m * n) as isize), (&om, n as isize), (&on, 1isize)] {
                    let mut acc = base;
                    for &i in g.iter().rev() {
                        if let Some(p) = axes[i].pc {
                            strides[p] = acc;
                        }
                        acc *= size_c(&axes[i]) as isize;
                    }
                }
                let v = self.view(
                    tmp,
                    format!("{}.gemm_view", node.name),
                    ct.shape.clone(),
                    0,
                    strides,
                );
                self.push(node, StepKind::Copy(copy::Copy { src: v, dst: y }));
            }
        }
        Ok(())
    }
}
