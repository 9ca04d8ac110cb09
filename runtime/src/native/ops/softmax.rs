//! Softmax and log-softmax over one axis (kernels `softmax_rows`, `softmax_cols`).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::{Softmax as TractSoftmax, SoftmaxKind};

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{TensorId, Views};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, Kernel, KernelCall, Lower, Op, ParamError, Uses, count,
    one_float_type, params, unsupported,
};

/// Softmax (or log-softmax) over the middle axis of a packed `[outer, n, inner]` view.
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed, same shape).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Log-softmax.
    pub log: bool,
}

impl Op for Softmax {
    const NAME: &'static str = "softmax";

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

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[
        Kernel {
            name: "softmax_rows",
            emulate: emulate_softmax,
        },
        Kernel {
            name: "softmax_cols",
            emulate: emulate_softmax,
        },
    ];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let x = mem.read(self.x);
        let mut y = vec![0f32; x.len()];
        for o in 0..self.outer {
            for i in 0..self.inner {
                let at = |k: usize| (o * self.n + k) * self.inner + i;
                let mut max = f32::NEG_INFINITY;
                for k in 0..self.n {
                    max = max.max(x[at(k)]);
                }
                let mut sum = 0f32;
                for k in 0..self.n {
                    sum += (x[at(k)] - max).exp();
                }
                for k in 0..self.n {
                    y[at(k)] = if self.log {
                        x[at(k)] - max - sum.ln()
                    } else {
                        (x[at(k)] - max).exp() / sum
                    };
                }
            }
        }
        mem.write(self.y, &y);
        Ok(())
    }

    /// A warp per row (`softmax_rows`) when the axis is innermost, else a thread per column
    /// (`softmax_cols`).
    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        let rows = self.inner == 1;
        let threads = if rows {
            self.outer * 32
        } else {
            self.outer * self.inner
        };
        let params = SoftmaxParams {
            x: addr(self.x),
            y: addr(self.y),
            outer: count(self.outer, node)?,
            n: count(self.n, node)?,
            inner: count(self.inner, node)?,
            dtype: g.tensor(self.x).dtype as u32,
            log: self.log as u32,
            pad: 0,
        };
        let grid = count(threads.div_ceil(256), node)?.max(1);
        let kernel = if rows { "softmax_rows" } else { "softmax_cols" };
        Ok(Call::Kernel(KernelCall::linear(kernel, grid, &params)))
    }
}

/// Parameters of `softmax_rows` / `softmax_cols` (`struct softmax_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct SoftmaxParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axis.
    pub outer: u32,
    /// Axis length.
    pub n: u32,
    /// Elements after the axis.
    pub inner: u32,
    /// Element type of x and y.
    pub dtype: u32,
    /// 1 for log-softmax.
    pub log: u32,
    /// Padding.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<SoftmaxParams>() == 40);

/// `softmax_rows` and `softmax_cols`, transcribed (one computation: they differ only in how
/// threads are assigned).
fn emulate_softmax(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<SoftmaxParams>(call)?;
    for o in 0..p.outer as i64 {
        for i in 0..p.inner as i64 {
            let base = o * p.n as i64 * p.inner as i64 + i;
            let at = |k: u32| base + k as i64 * p.inner as i64;
            let mut m = f32::NEG_INFINITY;
            for k in 0..p.n {
                m = m.max(r.load(p.x, at(k), p.dtype)?);
            }
            let mut s = 0f32;
            for k in 0..p.n {
                s += (r.load(p.x, at(k), p.dtype)? - m).exp();
            }
            let ls = s.ln();
            for k in 0..p.n {
                let v = r.load(p.x, at(k), p.dtype)? - m;
                r.store(p.y,
                    at(k),
                    p.dtype,
                    if p.log != 0 { v - ls } else { v.exp() / s },
                )?;
            }
        }
    }
    Ok(())
}

/// Lower `node` when it is tract's `Softmax` (ONNX `Softmax`, `LogSoftmax`); `None` for
/// anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Softmax>,
{
    let op = node.op_as::<TractSoftmax>()?;
    Some(softmax(l, node, op))
}

fn softmax<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TractSoftmax) -> Result<(), LowerError>
where
    L::Step: From<Softmax>,
{
    if op.quant_output_dt.is_some() {
        return Err(unsupported(node, "quantised softmax"));
    }
    if op.axes.len() != 1 {
        return Err(unsupported(
            node,
            format!("softmax over axes {:?}", op.axes),
        ));
    }
    let x = l.float_input(node, 0)?;
    let x = l.packed(x, &node.name);
    let shape = l.tensor(x).shape.clone();
    let ax = op.axes[0];
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Softmax {
            x,
            y,
            outer: shape[..ax].iter().product(),
            n: shape[ax],
            inner: shape[ax + 1..].iter().product(),
            log: op.kind == SoftmaxKind::LogSoftmax,
        }),
    );
    Ok(())
}
