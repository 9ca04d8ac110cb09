//! Transposed convolutions (ONNX `ConvTranspose`) through cuDNN's backward data.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{Deconv as TractDeconv, PaddingSpec};
use tract_onnx::tract_core::ops::cnn::conv::KernelFormat;
use tract_onnx::tract_core::ops::nn::DataFormat;

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::conv::{Conv, bias};
use crate::native::ops::elementwise::Elementwise;
use crate::native::ops::op::{
    Call, HostMemory, Kernel, Library, Lower, Op, ParamError, Uses, cudnn_layout, one_float_type,
    unsupported,
};

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

    const USES: Uses = Uses::CudnnConvolution;

    const KERNELS: &'static [Kernel] = &[];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let c = &self.0;
        let g = mem.views();
        let (xs, ws, ys) = (
            g.tensor(c.x).shape.clone(),
            g.tensor(c.w).shape.clone(),
            g.tensor(c.y).shape.clone(),
        );
        let y = deconv_compute(&mem.read(c.x), &mem.read(c.w), &xs, &ws, &ys, c);
        mem.write(c.y, &y);
        Ok(())
    }

    fn call(
        &self,
        _g: &dyn Views,
        _node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        Ok(Call::Library(Library::TransposedConvolution {
            x: addr(self.0.x),
            w: addr(self.0.w),
            y: addr(self.0.y),
        }))
    }
}

/// Transposed convolution (ONNX `ConvTranspose`) of packed `x` `[N, Ci, H, W]` with the
/// forward filter `w` `[Ci, Co / g, kH, kW]` into packed `y` `[N, Co, oH, oW]`:
/// `y[n, g*Cog + o, iy*s + r*d - p, ...] += x[n, g*Cig + i, iy, ...] * w[g*Cig + i, o, r, ...]`.
pub fn deconv_compute(
    x: &[f32],
    w: &[f32],
    xs: &[usize],
    ws: &[usize],
    ys: &[usize],
    c: &Conv,
) -> Vec<f32> {
    let spatial = xs.len() - 2;
    let dims = |s: &[usize]| -> (usize, usize, usize, usize) {
        if spatial == 1 {
            (s[0], s[1], 1, s[2])
        } else {
            (s[0], s[1], s[2], s[3])
        }
    };
    let (n, ci, h, wd) = dims(xs);
    let (_, co, oh, ow) = dims(ys);
    let (kh, kw) = if spatial == 1 {
        (1, ws[2])
    } else {
        (ws[2], ws[3])
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
    let (cig, cog) = (ci / c.group, co / c.group);
    let mut y = vec![0f32; n * co * oh * ow];
    for b in 0..n {
        for ic in 0..ci {
            let grp = ic / cig;
            for o in 0..cog {
                let oc = grp * cog + o;
                for r in 0..kh {
                    for s in 0..kw {
                        let wv = w[((ic * cog + o) * kh + r) * kw + s];
                        for iy in 0..h {
                            let oy = (iy * sh + r * dh) as isize - ph as isize;
                            if oy < 0 || oy >= oh as isize {
                                continue;
                            }
                            for ix in 0..wd {
                                let ox = (ix * sw + s * dw) as isize - pw as isize;
                                if ox < 0 || ox >= ow as isize {
                                    continue;
                                }
                                y[((b * co + oc) * oh + oy as usize) * ow + ox as usize] +=
                                    wv * x[((b * ci + ic) * h + iy) * wd + ix];
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

/// Lower `node` when it is tract's `Deconv` (ONNX `ConvTranspose`): the transposed
/// convolution, then its bias as an element-wise step; `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Deconv> + From<Elementwise>,
{
    let op = node.op_as::<TractDeconv>()?;
    Some(deconv(l, node, op))
}

/// ONNX `ConvTranspose` (tract `Deconv`) as cuDNN backward data. tract stores the kernel
/// as `[C_out, C_in / g, kH, kW]` (it reorders ONNX's `[C_in, C_out / g, kH, kW]` at
/// load); cuDNN wants the forward filter, ONNX's layout, so the constant is reordered
/// back here.
fn deconv<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TractDeconv) -> Result<(), LowerError>
where
    L::Step: From<Deconv> + From<Elementwise>,
{
    if op.kernel_format != KernelFormat::OIHW {
        return Err(unsupported(
            node,
            format!("kernel format {:?}", op.kernel_format),
        ));
    }
    if node.inputs.len() != 3 {
        return Err(unsupported(node, format!("{} inputs", node.inputs.len())));
    }
    let x = l.float_input(node, 0)?;
    let xs = l.tensor(x).shape.clone();
    let spec = &op.pool_spec;
    if spec.data_format != DataFormat::NCHW {
        return Err(unsupported(
            node,
            format!("data format {:?}", spec.data_format),
        ));
    }
    let rank = spec.rank();
    if !(1..=2).contains(&rank) || xs.len() != rank + 2 {
        return Err(unsupported(node, format!("{rank}-D spatial input {xs:?}")));
    }
    let pads = match &spec.padding {
        PaddingSpec::Valid => vec![0; rank],
        PaddingSpec::Explicit(b, a) if b == a => b.to_vec(),
        other => {
            return Err(unsupported(
                node,
                format!("transposed-convolution padding {other:?}"),
            ));
        }
    };
    let Some(kernel) = l.konst(node.inputs[1]) else {
        return Err(unsupported(node, "weights that are not constant"));
    };
    let ks = kernel.shape().to_vec();
    if ks.len() != rank + 2 || kernel.datum_type() != DatumType::F32 {
        return Err(unsupported(
            node,
            format!("kernel {:?} of {:?}", ks, kernel.datum_type()),
        ));
    }
    let g = op.group;
    let (co, cig) = (ks[0], ks[1]);
    let (ci, cog) = (cig * g, co / g);
    if co % g != 0 || ci != xs[1] {
        return Err(unsupported(
            node,
            format!("kernel {ks:?} for input {xs:?}, group {g}"),
        ));
    }
    let spatial: usize = ks[2..].iter().product();
    let src = kernel
        .try_as_plain_ram()
        .ok()
        .and_then(|v| v.as_slice::<f32>().ok().map(|s| s.to_vec()))
        .ok_or_else(|| unsupported(node, "kernel storage"))?;
    // F[gr * cig + i, o, ...] = K[gr * cog + o, i, ...]
    let mut f = vec![0f32; src.len()];
    for gr in 0..g {
        for i in 0..cig {
            for o in 0..cog {
                let from = ((gr * cog + o) * cig + i) * spatial;
                let to = ((gr * cig + i) * cog + o) * spatial;
                f[to..to + spatial].copy_from_slice(&src[from..from + spatial]);
            }
        }
    }
    let mut fshape = vec![ci, cog];
    fshape.extend_from_slice(&ks[2..]);
    let w = l.add_packed(
        format!("{}.filter", node.name),
        ElemType::F32,
        &fshape,
        BufferKind::Weight(f.iter().flat_map(|v| v.to_ne_bytes()).collect()),
    );
    let x = l.packed(x, &node.name);
    let (shape, dt) = l.output_fact(node, 0)?;
    // The forward convolution of the output must give the input back (what cuDNN checks).
    for ax in 0..rank {
        let keff = (ks[2 + ax] - 1) * spec.dilation(ax) + 1;
        let fwd = (shape[2 + ax] + 2 * pads[ax])
            .checked_sub(keff)
            .map(|v| v / spec.stride(ax) + 1);
        if fwd != Some(xs[2 + ax]) {
            return Err(unsupported(
                node,
                format!("output size {shape:?} for input {xs:?}"),
            ));
        }
    }
    let y = l.add_packed(
        format!("{}.deconv", node.name),
        dt,
        &shape,
        BufferKind::Activation,
    );
    l.push(
        node,
        L::Step::from(Deconv(Conv {
            x,
            w,
            y,
            pads,
            strides: spec.strides().to_vec(),
            dilations: spec.dilations().to_vec(),
            group: g,
            channels_last: false,
        })),
    );
    bias(l, node, y, &shape, dt)
}
