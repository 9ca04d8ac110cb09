//! Gathers along one axis (kernel `gather`): ONNX `Gather`, `GatherND` with constant
//! indices, reflect and edge padding.

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Op, is_index};

/// `y = data.take(indices, axis)` over packed `data` `[outer, n, inner]` and packed `i64`
/// indices (`[count]`, negative counted from the end), writing packed `[outer, count, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// Data (packed).
    pub data: TensorId,
    /// Indices (packed, i64 or i32).
    pub indices: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Number of indices.
    pub count: usize,
}

impl Op for Gather {
    const NAME: &'static str = "gather";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.data, self.indices]
    }

    fn writes(&self) -> TensorId {
        self.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.data, false);
        f(&mut self.indices, false);
        f(&mut self.y, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let (d, y, i) = (
            g.tensor(self.data).dtype,
            g.tensor(self.y).dtype,
            g.tensor(self.indices).dtype,
        );
        if d != y || !is_index(i) {
            return Err(format!("gather of {d} into {y} with {i} indices"));
        }
        Ok(())
    }
}
