//! What every operator provides, and what the stages give it to work with.
//!
//! An operator is one step kind of the IR: its data (the tensors it reads and writes, its
//! parameters) and everything the stages need to know about it, in one file of
//! [`crate::native::ops`]. [`Op`] is the contract; the registry (`ops/mod.rs`) lists every
//! operator once and dispatches to them, so a new operator that leaves out part of the
//! contract does not compile.

use std::sync::Arc;

use tract_onnx::prelude::{OutletId, TypedNode};

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferId, BufferKind, ElemType, Tensor, TensorId, Views};

/// One operator of the engine (a step kind of the IR).
pub trait Op: Clone + std::fmt::Debug + PartialEq {
    /// Short name of the step kind (plan dumps, step profiles).
    const NAME: &'static str;

    /// Tensors the step reads.
    fn reads(&self) -> Vec<TensorId>;

    /// The tensor the step writes.
    fn writes(&self) -> TensorId;

    /// Every operand of the step, for the passes that rewrite operands: `f(operand,
    /// written)`, `written` true for the tensor the step writes.
    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool));

    /// The step's own invariants over the graph's tensors (operand shapes, element types,
    /// layouts), beyond what every step obeys.
    ///
    /// # Errors
    /// A description of the violation (a bug in the front end or a pass).
    fn check(&self, g: &dyn Views) -> Result<(), String>;
}

/// The check of a step run by cuDNN, cuBLAS or a kernel over one floating-point type
/// (convolutions, poolings, matrix products, softmax, reductions): every operand of one float
/// element type.
///
/// # Errors
/// A description naming the step kind `what`.
pub fn one_float_type(
    g: &dyn Views,
    what: &str,
    reads: &[TensorId],
    write: TensorId,
) -> Result<(), String> {
    let mut types = reads.iter().chain(std::iter::once(&write));
    let first = g.tensor(*types.next().expect("a step reads")).dtype;
    if !first.is_float() || types.any(|&t| g.tensor(t).dtype != first) {
        return Err(format!("{what} over mixed or non-float types"));
    }
    Ok(())
}

/// cuDNN is told exactly one layout per convolution or pooling: packed NCHW (KCRS filter),
/// or with `channels_last` NHWC activations, packed or with a pixel pitch, and a packed KRSC
/// filter. Checks `activations` and `filter` fit it.
///
/// # Errors
/// The first operand that does not.
pub fn cudnn_layout(
    g: &dyn Views,
    activations: &[TensorId],
    filter: Option<TensorId>,
    channels_last: bool,
) -> Result<(), String> {
    let operands = activations
        .iter()
        .map(|&t| (t, true))
        .chain(filter.map(|t| (t, false)));
    let fits = |(t, activation): (TensorId, bool)| {
        let t = g.tensor(t);
        match (channels_last, activation) {
            (true, true) => t.nhwc_pitch().is_some(),
            (true, false) => t.is_packed_nhwc(),
            (false, _) => t.is_packed(),
        }
    };
    if let Some((t, _)) = operands.into_iter().find(|&o| !fits(o)) {
        let t = g.tensor(t);
        return Err(format!(
            "{} operand `{}` {:?} has strides {:?}",
            if channels_last {
                "channels-last"
            } else {
                "NCHW"
            },
            t.name,
            t.shape,
            t.strides
        ));
    }
    Ok(())
}

/// True for the element types of indices (`i32`, `i64`).
pub fn is_index(dt: ElemType) -> bool {
    matches!(dt, ElemType::I32 | ElemType::I64)
}

/// What an operator's lowering works with: the network being lowered (its tract model, the
/// graph built so far) as the front end ([`crate::native::front`]) holds it. An operator's
/// `lower` function is generic over it, with the step type `Step` convertible from every
/// operator it pushes.
pub trait Lower: Views {
    /// The graph's step kind (the registry's [`crate::native::ops::StepKind`]).
    type Step;

    /// The tensor of `outlet`; a constant becomes a weight buffer the first time it is asked
    /// for.
    ///
    /// # Errors
    /// [`LowerError`] when the outlet is not lowered yet or its constant has a type the
    /// engine does not hold.
    fn outlet(&mut self, outlet: OutletId) -> Result<TensorId, LowerError>;

    /// The constant value of `outlet`: tract's fact, or a value folded at load.
    fn konst(&self, outlet: OutletId) -> Option<Arc<tract_onnx::prelude::Tensor>>;

    /// The value of `outlet` when it is a one-element f32 or f16 constant.
    fn scalar_const(&self, outlet: OutletId) -> Option<f32>;

    /// Shape and element type of output `slot` of `node`.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] for a symbolic shape or a type the engine does not hold.
    fn output_fact(
        &self,
        node: &TypedNode,
        slot: usize,
    ) -> Result<(Vec<usize>, ElemType), LowerError>;

    /// A fresh packed activation for output `slot` of `node`, mapped as that outlet.
    ///
    /// # Errors
    /// As [`Lower::output_fact`].
    fn new_output(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError>;

    /// Map output `slot` of `node` onto tensor `t`.
    fn set_output(&mut self, node: &TypedNode, slot: usize, t: TensorId);

    /// Append a step named after `node`.
    fn push(&mut self, node: &TypedNode, step: Self::Step);

    /// A new view of `of`'s buffer.
    fn view(
        &mut self,
        of: TensorId,
        name: String,
        shape: Vec<usize>,
        offset: usize,
        strides: Vec<isize>,
    ) -> TensorId;

    /// A packed version of `t`: `t` itself when its view is packed, else a copy (made once)
    /// named after `node`.
    fn packed(&mut self, t: TensorId, node: &str) -> TensorId;

    /// `t` broadcast to `shape` (same rank; dimensions of 1 get stride 0).
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] when the shapes do not broadcast.
    fn broadcast_to(
        &mut self,
        t: TensorId,
        shape: &[usize],
        node: &TypedNode,
    ) -> Result<TensorId, LowerError>;

    /// Input `slot` of `node`, refused unless it is f32 or f16.
    ///
    /// # Errors
    /// [`LowerError::Unsupported`] naming the input's type.
    fn float_input(&mut self, node: &TypedNode, slot: usize) -> Result<TensorId, LowerError>;

    /// Add a buffer.
    fn add_buffer(
        &mut self,
        name: String,
        dtype: ElemType,
        len: usize,
        kind: BufferKind,
    ) -> BufferId;

    /// Add a packed tensor over a new buffer of its size.
    fn add_packed(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        shape: &[usize],
        kind: BufferKind,
    ) -> TensorId;

    /// Add a view.
    fn add_view(&mut self, t: Tensor) -> TensorId;
}

/// The refusal of `node`: an operator or attribute the engine does not lower.
pub fn unsupported(node: &TypedNode, detail: impl Into<String>) -> LowerError {
    LowerError::Unsupported {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        detail: detail.into(),
    }
}
