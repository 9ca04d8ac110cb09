//! Convolutions through cuDNN (`cudnnConvolutionForward` or a cuDNN graph-API engine).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::conv::KernelFormat;
use tract_onnx::tract_core::ops::cnn::{Conv as TractConv, PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;

use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Program};
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::elementwise::Elementwise;
use crate::native::ops::op::{
    Call, HostMemory, Kernel, Library, Lower, Op, ParamError, Uses, cudnn_layout, one_float_type,
    unsupported,
};

/// Padding, strides and dilations per spatial axis.
pub type Spatial = (Vec<usize>, Vec<usize>, Vec<usize>);

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

    const USES: Uses = Uses::CudnnConvolution;

    const KERNELS: &'static [Kernel] = &[];

    /// A direct convolution, fp32 accumulation in input-channel order.
    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let g = mem.views();
        let (xs, ws, ys) = (
            g.tensor(self.x).shape.clone(),
            g.tensor(self.w).shape.clone(),
            g.tensor(self.y).shape.clone(),
        );
        let y = conv_compute(&mem.read(self.x), &mem.read(self.w), &xs, &ws, &ys, self);
        mem.write(self.y, &y);
        Ok(())
    }

    fn call(
        &self,
        _g: &dyn Views,
        _node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        Ok(Call::Library(Library::Convolution {
            x: addr(self.x),
            w: addr(self.w),
            y: addr(self.y),
        }))
    }
}

/// Direct convolution of packed `x` (`xs`) with packed `w` (`ws`) into packed `ys`.
pub fn conv_compute(
    x: &[f32],
    w: &[f32],
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    c: &Conv,
) -> Vec<f32> {
    let (xt_shape, wt_shape, yt_shape) = (xs, ws, ys);
    let spatial = xt_shape.len() - 2;
    // View 1-D as 2-D with H = 1.
    let dims = |s: &[usize]| -> (usize, usize, usize, usize) {
        if spatial == 1 {
            (s[0], s[1], 1, s[2])
        } else {
            (s[0], s[1], s[2], s[3])
        }
    };
    let (n, ci, h, wd) = dims(xt_shape);
    let (_, co, oh, ow) = dims(yt_shape);
    let (kh, kw) = if spatial == 1 {
        (1, wt_shape[2])
    } else {
        (wt_shape[2], wt_shape[3])
    };
    let two = |v: &[usize], one: usize| -> (usize, usize) {
        if spatial == 1 {
            (one, v[0])
        } else {
            (v[0], v[1])
        }
    };
    let (ph, pw) = two(&c.pads, 0);
    let (sh, sw) = two(&c.strides, 1);
    let (dh, dw) = two(&c.dilations, 1);
    let cig = ci / c.group;
    let cog = co / c.group;
    let mut y = vec![0f32; n * co * oh * ow];
    for b in 0..n {
        for o in 0..co {
            let grp = o / cog;
            let acc = &mut y[(b * co + o) * oh * ow..(b * co + o + 1) * oh * ow];
            for i in 0..cig {
                let ic = grp * cig + i;
                let xp = &x[(b * ci + ic) * h * wd..(b * ci + ic + 1) * h * wd];
                for r in 0..kh {
                    for s in 0..kw {
                        let wv = w[((o * cig + i) * kh + r) * kw + s];
                        for yy in 0..oh {
                            let iy = (yy * sh + r * dh) as isize - ph as isize;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            let row = &xp[iy as usize * wd..(iy as usize + 1) * wd];
                            let out = &mut acc[yy * ow..(yy + 1) * ow];
                            for (xx, o) in out.iter_mut().enumerate() {
                                let ix = (xx * sw + s * dw) as isize - pw as isize;
                                if ix >= 0 && ix < wd as isize {
                                    *o += wv * row[ix as usize];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

/// Lower `node` when it is tract's `Conv` (ONNX `Conv`): the convolution, then its bias as
/// an element-wise step; `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Conv> + From<Elementwise>,
{
    let op = node.op_as::<TractConv>()?;
    Some(conv(l, node, op))
}

/// Padding, strides and dilations of a 1-D or 2-D NCHW convolution or pooling of `spec` over
/// an input of shape `input` (shared with [`crate::native::ops::pool`]).
///
/// # Errors
/// [`LowerError::Unsupported`] for another data format or rank, asymmetric padding, or a
/// `ceil_mode` that changes the output size.
pub fn spatial(
    node: &TypedNode,
    spec: &PoolSpec,
    input: &[usize],
) -> Result<Spatial, LowerError> {
    if spec.data_format != DataFormat::NCHW {
        return Err(unsupported(
            node,
            format!("data format {:?}", spec.data_format),
        ));
    }
    let rank = spec.rank();
    if !(1..=2).contains(&rank) || input.len() != rank + 2 {
        return Err(unsupported(
            node,
            format!("{rank}-D spatial input {:?}", input),
        ));
    }
    let hw = &input[2..];
    let padding = spec.computed_padding(hw);
    let mut pads = Vec::new();
    for (ax, p) in padding.iter().enumerate() {
        if p.pad_before != p.pad_after {
            return Err(unsupported(
                node,
                format!(
                    "asymmetric padding {}/{} on spatial axis {ax}",
                    p.pad_before, p.pad_after
                ),
            ));
        }
        pads.push(p.pad_before);
    }
    if let PaddingSpec::ExplicitOnnxPool(_, _, true) = spec.padding {
        // ceil_mode: the output size must still be the floor formula's with these pads.
        for (ax, p) in padding.iter().enumerate() {
            let k = (spec.kernel_shape[ax] - 1) * spec.dilation(ax) + 1;
            let floor = (hw[ax] + 2 * pads[ax] - k) / spec.stride(ax) + 1;
            if floor != p.convoluted {
                return Err(unsupported(
                    node,
                    "ceil_mode pooling that changes the output size",
                ));
            }
        }
    }
    Ok((pads, spec.strides().to_vec(), spec.dilations().to_vec()))
}

fn conv<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TractConv) -> Result<(), LowerError>
where
    L::Step: From<Conv> + From<Elementwise>,
{
    if op.q_params.is_some() {
        return Err(unsupported(node, "quantised convolution"));
    }
    if op.kernel_fmt != KernelFormat::OIHW {
        return Err(unsupported(
            node,
            format!("kernel format {:?}", op.kernel_fmt),
        ));
    }
    if node.inputs.len() != 3 {
        return Err(unsupported(node, format!("{} inputs", node.inputs.len())));
    }
    let x = l.float_input(node, 0)?;
    let xs = l.tensor(x).shape.clone();
    let (pads, strides, dilations) = spatial(node, &op.pool_spec, &xs)?;
    let Some(kernel) = l.konst(node.inputs[1]) else {
        return Err(unsupported(node, "weights that are not constant"));
    };
    if kernel.datum_type() != DatumType::F32 && kernel.datum_type() != DatumType::F16 {
        return Err(unsupported(
            node,
            format!("weights of type {:?}", kernel.datum_type()),
        ));
    }
    let w = l.outlet(node.inputs[1])?;
    if l.tensor(w).shape.len() != xs.len() {
        return Err(unsupported(
            node,
            format!("kernel shape {:?}", kernel.shape()),
        ));
    }
    let x = l.packed(x, &node.name);
    let (shape, dt) = l.output_fact(node, 0)?;
    let y = l.add_packed(
        format!("{}.conv", node.name),
        dt,
        &shape,
        BufferKind::Activation,
    );
    l.push(
        node,
        L::Step::from(Conv {
            x,
            w,
            y,
            pads,
            strides,
            dilations,
            group: op.group,
            channels_last: false,
        }),
    );
    bias(l, node, y, &shape, dt)
}

/// Bias of a convolution output `y` (`[N, C, ...]`): a separate element-wise add (fused
/// later with what follows), or nothing for a constant zero bias (shared with
/// [`crate::native::ops::deconv`]).
pub fn bias<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    y: TensorId,
    shape: &[usize],
    dt: ElemType,
) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    let zero_bias = l.konst(node.inputs[2])
        .map(|k| k.is_zero().unwrap_or(false))
        .unwrap_or(false);
    if zero_bias {
        l.set_output(node, 0, y);
        return Ok(());
    }
    let b = l.outlet(node.inputs[2])?;
    let bt = l.tensor(b).clone();
    let co = shape[1];
    let bview = if bt.numel() == co && bt.is_packed() {
        let mut s = vec![0isize; shape.len()];
        s[1] = if co == 1 { 0 } else { 1 };
        l.view(
            b,
            format!("{}.bias", node.name),
            shape.to_vec(),
            bt.offset,
            s,
        )
    } else if bt.numel() == 1 {
        let s = vec![0isize; shape.len()];
        l.view(
            b,
            format!("{}.bias", node.name),
            shape.to_vec(),
            bt.offset,
            s,
        )
    } else {
        return Err(unsupported(node, format!("bias of shape {:?}", bt.shape)));
    };
    let out = l.add_packed(&node.name, dt, shape, BufferKind::Activation);
    l.set_output(node, 0, out);
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: vec![y, bview],
            output: out,
            program: Program::binary(EwOp::Add),
        }),
    );
    Ok(())
}
