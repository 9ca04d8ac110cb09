//! Softmax and log-softmax over one axis (kernels `softmax_rows`, `softmax_cols`).

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Op, one_float_type};

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
