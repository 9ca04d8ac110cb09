//! Element-wise steps: `output[i] = program(inputs[0][i], inputs[1][i], ...)`, one fused
//! program ([`Program`], the operator table of `crate::native::ir::program`) per step.

use crate::native::ir::program::Program;
use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::Op;

/// `output[i] = program(inputs[0][i], inputs[1][i], ...)` over the output's shape; every
/// input is a view with the output's shape (broadcasts are stride-0 views).
#[derive(Clone, Debug, PartialEq)]
pub struct Elementwise {
    /// Input views.
    pub inputs: Vec<TensorId>,
    /// Output view.
    pub output: TensorId,
    /// The per-element program.
    pub program: Program,
}

impl Op for Elementwise {
    const NAME: &'static str = "elementwise";

    fn reads(&self) -> Vec<TensorId> {
        self.inputs.clone()
    }

    fn writes(&self) -> TensorId {
        self.output
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        for t in &mut self.inputs {
            f(t, false);
        }
        f(&mut self.output, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let out = g.tensor(self.output);
        for &t in &self.inputs {
            if g.tensor(t).shape != out.shape {
                return Err(format!(
                    "input `{}` {:?} vs output {:?}",
                    g.tensor(t).name,
                    g.tensor(t).shape,
                    out.shape
                ));
            }
        }
        self.program.validate(self.inputs.len())
    }
}
