//! What every operator provides, and what the stages give it to work with.
//!
//! An operator is one step kind of the IR: its data (the tensors it reads and writes, its
//! parameters) and everything the stages need to know about it, in one file of
//! [`crate::native::ops`]. [`Op`] is the contract; the registry (`ops/mod.rs`) lists every
//! operator once and dispatches to them, so a new operator that leaves out part of the
//! contract does not compile.

use crate::native::ir::{ElemType, TensorId, Views};

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
