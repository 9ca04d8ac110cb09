//! Convolutions through cuDNN (`cudnnConvolutionForward` or a cuDNN graph-API engine).

use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{Op, cudnn_layout, one_float_type};

/// A convolution (cross-correlation, ONNX `Conv` semantics) over packed NCHW `x` with packed
/// OIHW weights `w`, writing packed NCHW `y`, or, with `channels_last`, over NHWC `x` and `y`
/// (packed, or with a pixel pitch: [`crate::native::ir::Tensor::nhwc_pitch`]) with packed OHWI (cuDNN's KRSC)
/// weights; bias and activation are separate
/// element-wise steps (fused with each other, not with the convolution). Shapes are logical
/// (`[N, C, H, W]`, `[O, C / group, kH, kW]`) in both layouts: only the strides differ.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// Input `[N, C, H, W]` (or `[N, C, L]` for 1-D).
    pub x: TensorId,
    /// Weights `[O, C / group, kH, kW]`.
    pub w: TensorId,
    /// Output `[N, O, oH, oW]`.
    pub y: TensorId,
    /// Padding before (and after: symmetric) each spatial axis.
    pub pads: Vec<usize>,
    /// Stride of each spatial axis.
    pub strides: Vec<usize>,
    /// Dilation of each spatial axis.
    pub dilations: Vec<usize>,
    /// Group count (`C` for depthwise).
    pub group: usize,
    /// `x` and `y` NHWC (packed or pitched, [`crate::native::ir::Tensor::nhwc_pitch`]), `w` packed OHWI (2-D
    /// forward convolutions only; set by [`crate::native::passes::layout`]).
    pub channels_last: bool,
}

impl Op for Conv {
    const NAME: &'static str = "conv";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.x, self.w]
    }

    fn writes(&self) -> TensorId {
        self.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.x, false);
        f(&mut self.w, false);
        f(&mut self.y, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        one_float_type(g, Self::NAME, &self.reads(), self.y)?;
        cudnn_layout(g, &[self.x, self.y], Some(self.w), self.channels_last)
    }
}
