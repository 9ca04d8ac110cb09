//! Transposed convolutions (ONNX `ConvTranspose`) through cuDNN's backward data.

use crate::native::ir::{TensorId, Views};
use crate::native::ops::conv::Conv;
use crate::native::ops::op::{Op, cudnn_layout, one_float_type};

/// cuDNN transposed convolution (`cudnnConvolutionBackwardData`): ONNX `ConvTranspose`.
/// `w` is the *forward* filter `[C_in, C_out / group, kH, kW]` (ONNX's own layout), `x` is
/// `[N, C_in, H, W]`, `y` is `[N, C_out, oH, oW]`; `pads`/`strides`/`dilations` are those
/// of the forward convolution that maps `y`-shaped tensors to `x`-shaped ones. Packed NCHW
/// only (`channels_last` is never set).
#[derive(Clone, Debug, PartialEq)]
pub struct Deconv(pub Conv);

impl Op for Deconv {
    const NAME: &'static str = "deconv";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.0.x, self.0.w]
    }

    fn writes(&self) -> TensorId {
        self.0.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        self.0.operands_mut(f);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        one_float_type(g, Self::NAME, &self.reads(), self.0.y)?;
        if self.0.channels_last {
            return Err("channels-last deconv".into());
        }
        cudnn_layout(g, &[self.0.x, self.0.y], Some(self.0.w), false)
    }
}
