//! Poolings through cuDNN (`cudnnPoolingForward`): max and average.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{MaxPool, PoolSpec, SumPool};

use crate::native::ir::error::LowerError;
use crate::native::ir::{TensorId, Views};
use crate::native::ops::conv::spatial;
use crate::native::ops::op::{
    Call, HostMemory, Kernel, Library, Lower, Op, ParamError, Uses, cudnn_layout, one_float_type,
    unsupported,
};

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

    const USES: Uses = Uses::CudnnPooling;

    const KERNELS: &'static [Kernel] = &[];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let g = mem.views();
        let (xs, ys) = (g.tensor(self.x).shape.clone(), g.tensor(self.y).shape.clone());
        let y = pool_compute(&mem.read(self.x), &xs, &ys, self);
        mem.write(self.y, &y);
        Ok(())
    }

    fn call(
        &self,
        _g: &dyn Views,
        _node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        Ok(Call::Library(Library::Pooling {
            x: addr(self.x),
            y: addr(self.y),
        }))
    }
}

/// Pooling of packed `x` (`xs`) into packed `ys`.
pub fn pool_compute(x: &[f32], xs: &[usize], ys: &[usize], p: &Pool) -> Vec<f32> {
    let spatial = xs.len() - 2;
    let get = |s: &[usize]| -> (usize, usize, usize) {
        if spatial == 1 {
            (s[0] * s[1], 1, s[2])
        } else {
            (s[0] * s[1], s[2], s[3])
        }
    };
    let (planes, h, w) = get(xs);
    let (_, oh, ow) = get(ys);
    let two = |v: &[usize], one: usize| -> (usize, usize) {
        if spatial == 1 {
            (one, v[0])
        } else {
            (v[0], v[1])
        }
    };
    let (kh, kw) = two(&p.kernel, 1);
    let (ph, pw) = two(&p.pads, 0);
    let (sh, sw) = two(&p.strides, 1);
    let mut y = vec![0f32; planes * oh * ow];
    for pl in 0..planes {
        for yy in 0..oh {
            for xx in 0..ow {
                let mut acc = if p.kind == PoolKind::Max {
                    f32::NEG_INFINITY
                } else {
                    0.0
                };
                let mut count = 0usize;
                for r in 0..kh {
                    let iy = (yy * sh + r) as isize - ph as isize;
                    for s in 0..kw {
                        let ix = (xx * sw + s) as isize - pw as isize;
                        if iy < 0 || iy >= h as isize || ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let v = x[pl * h * w + iy as usize * w + ix as usize];
                        count += 1;
                        if p.kind == PoolKind::Max {
                            acc = acc.max(v);
                        } else {
                            acc += v;
                        }
                    }
                }
                y[(pl * oh + yy) * ow + xx] = match p.kind {
                    PoolKind::Max => acc,
                    PoolKind::AvgIncludePad => acc / (kh * kw) as f32,
                    PoolKind::AvgExcludePad => acc / count.max(1) as f32,
                };
            }
        }
    }
    y
}

/// Lower `node` when it is tract's `MaxPool` or normalised `SumPool` (ONNX `MaxPool`,
/// `AveragePool`); `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Pool>,
{
    if let Some(op) = node.op_as::<MaxPool>() {
        if op.with_index_outputs.is_some() {
            return Some(Err(unsupported(node, "MaxPool with an indices output")));
        }
        return Some(pool(l, node, &op.pool_spec, PoolKind::Max));
    }
    if let Some(op) = node.op_as::<SumPool>() {
        if !op.normalize {
            return Some(Err(unsupported(node, "SumPool without normalisation")));
        }
        let kind = if op.count_include_pad {
            PoolKind::AvgIncludePad
        } else {
            PoolKind::AvgExcludePad
        };
        return Some(pool(l, node, &op.pool_spec, kind));
    }
    None
}

fn pool<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    spec: &PoolSpec,
    kind: PoolKind,
) -> Result<(), LowerError>
where
    L::Step: From<Pool>,
{
    let x = l.float_input(node, 0)?;
    let xs = l.tensor(x).shape.clone();
    let (pads, strides, dilations) = spatial(node, spec, &xs)?;
    if dilations.iter().any(|&d| d != 1) {
        return Err(unsupported(
            node,
            format!("pooling dilations {dilations:?}"),
        ));
    }
    let x = l.packed(x, &node.name);
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Pool {
            x,
            y,
            kind,
            kernel: spec.kernel_shape.to_vec(),
            pads,
            strides,
            channels_last: false,
        }),
    );
    Ok(())
}
