//! Copies: `dst[i] = src[i]` between two views of one shape and element type (transposes,
//! slices, concatenation pieces, network outputs, packing a view for a library call).

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::Op;

/// `dst[i] = src[i]`, same shape and element type.
#[derive(Clone, Debug, PartialEq)]
pub struct Copy {
    /// Source view.
    pub src: TensorId,
    /// Destination view.
    pub dst: TensorId,
}

impl Op for Copy {
    const NAME: &'static str = "copy";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.src]
    }

    fn writes(&self) -> TensorId {
        self.dst
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.src, false);
        f(&mut self.dst, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let (a, b) = (g.tensor(self.src), g.tensor(self.dst));
        if a.shape != b.shape || a.dtype != b.dtype {
            return Err(format!(
                "copy {} {:?} -> {} {:?}",
                a.dtype, a.shape, b.dtype, b.shape
            ));
        }
        Ok(())
    }
}
