//! Softmax and log-softmax over one axis (kernels `softmax_rows`, `softmax_cols`).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::{Softmax as TractSoftmax, SoftmaxKind};

use crate::native::ir::error::LowerError;
use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Lower, Op, one_float_type, unsupported};

/// Softmax (or log-softmax) over the middle axis of a packed `[outer, n, inner]` view.
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed, same shape).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Log-softmax.
    pub log: bool,
}

impl Op for Softmax {
    const NAME: &'static str = "softmax";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.x]
    }

    fn writes(&self) -> TensorId {
        self.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.x, false);
        f(&mut self.y, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        one_float_type(g, Self::NAME, &self.reads(), self.y)
    }
}

/// Lower `node` when it is tract's `Softmax` (ONNX `Softmax`, `LogSoftmax`); `None` for
/// anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Softmax>,
{
    let op = node.op_as::<TractSoftmax>()?;
    Some(softmax(l, node, op))
}

fn softmax<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TractSoftmax) -> Result<(), LowerError>
where
    L::Step: From<Softmax>,
{
    if op.quant_output_dt.is_some() {
        return Err(unsupported(node, "quantised softmax"));
    }
    if op.axes.len() != 1 {
        return Err(unsupported(
            node,
            format!("softmax over axes {:?}", op.axes),
        ));
    }
    let x = l.float_input(node, 0)?;
    let x = l.packed(x, &node.name);
    let shape = l.tensor(x).shape.clone();
    let ax = op.axes[0];
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Softmax {
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
