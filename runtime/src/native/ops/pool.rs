//! Poolings through cuDNN (`cudnnPoolingForward`): max and average.

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Op, cudnn_layout, one_float_type};

/// Pooling kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Maximum over the window (padding never wins).
    Max,
    /// Mean over the window, counting padded positions (`count_include_pad = 1`).
    AvgIncludePad,
    /// Mean over the window's positions inside the input.
    AvgExcludePad,
}

/// A 2-D (or 1-D) pooling over packed NCHW, or NHWC with `channels_last` (2-D only; packed or
/// pitched, [`crate::native::ir::Tensor::nhwc_pitch`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Input `[N, C, H, W]`.
    pub x: TensorId,
    /// Output `[N, C, oH, oW]`.
    pub y: TensorId,
    /// Kind.
    pub kind: PoolKind,
    /// Window per spatial axis.
    pub kernel: Vec<usize>,
    /// Symmetric padding per spatial axis.
    pub pads: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// `x` and `y` NHWC, packed or pitched (set by [`crate::native::passes::layout`]).
    pub channels_last: bool,
}

impl Op for Pool {
    const NAME: &'static str = "pool";

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
        one_float_type(g, Self::NAME, &self.reads(), self.y)?;
        cudnn_layout(g, &[self.x, self.y], None, self.channels_last)
    }
}
