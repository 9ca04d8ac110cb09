//! Reductions over adjacent axes (kernels `reduce_rows`, `reduce_cols`): sum, mean of
//! squares, maximum, minimum, product.

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Op, one_float_type};

/// Reduction kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ReduceKind {
    /// Sum.
    Sum = 0,
    /// Mean of the squares (sum of `x * x`, divided by n).
    MeanOfSquares = 1,
    /// Maximum.
    Max = 2,
    /// Minimum.
    Min = 3,
    /// Product.
    Prod = 4,
}

/// A reduction over the middle axis of a packed `[outer, n, inner]` view, writing packed
/// `[outer, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the reduced axes.
    pub outer: usize,
    /// Product of the reduced dimensions.
    pub n: usize,
    /// Product of the dimensions after the reduced axes.
    pub inner: usize,
    /// Kind.
    pub kind: ReduceKind,
}

impl Op for Reduce {
    const NAME: &'static str = "reduce";

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
