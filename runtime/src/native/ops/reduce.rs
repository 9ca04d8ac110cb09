//! Reductions over adjacent axes (kernels `reduce_rows`, `reduce_cols`): sum, mean of
//! squares, maximum, minimum, product.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::{Reduce as TractReduce, Reducer, RmsNorm, ScaledRmsNorm};

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Expr, Program};
use crate::native::ir::{BufferKind, TensorId, Views};
use crate::native::ops::elementwise::Elementwise;
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, Kernel, KernelCall, Lower, Op, ParamError, Uses, count,
    one_float_type, params, unsupported,
};

/// Reduction kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ReduceKind {
    /// Sum.
    Sum = 0,
    /// Mean of the squares (sum of `x * x`, divided by n).
    MeanOfSquares = 1,
    /// Maximum.
    Max = 2,
    /// Minimum.
    Min = 3,
    /// Product.
    Prod = 4,
}

/// A reduction over the middle axis of a packed `[outer, n, inner]` view, writing packed
/// `[outer, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the reduced axes.
    pub outer: usize,
    /// Product of the reduced dimensions.
    pub n: usize,
    /// Product of the dimensions after the reduced axes.
    pub inner: usize,
    /// Kind.
    pub kind: ReduceKind,
}

impl Op for Reduce {
    const NAME: &'static str = "reduce";

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
            name: "reduce_rows",
            emulate: emulate_reduce,
        },
        Kernel {
            name: "reduce_cols",
            emulate: emulate_reduce,
        },
    ];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let x = mem.read(self.x);
        let mut y = vec![0f32; self.outer * self.inner];
        for o in 0..self.outer {
            for i in 0..self.inner {
                let vals = (0..self.n).map(|k| x[(o * self.n + k) * self.inner + i]);
                y[o * self.inner + i] = match self.kind {
                    ReduceKind::Sum => vals.sum(),
                    ReduceKind::MeanOfSquares => {
                        vals.map(|v| v * v).sum::<f32>() / self.n as f32
                    }
                    ReduceKind::Max => vals.fold(f32::NEG_INFINITY, f32::max),
                    ReduceKind::Min => vals.fold(f32::INFINITY, f32::min),
                    ReduceKind::Prod => vals.product(),
                };
            }
        }
        mem.write(self.y, &y);
        Ok(())
    }

    /// A warp per row (`reduce_rows`) when the reduced axes are innermost, else a thread per
    /// column (`reduce_cols`).
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
        let params = ReduceParams {
            x: addr(self.x),
            y: addr(self.y),
            outer: count(self.outer, node)?,
            n: count(self.n, node)?,
            inner: count(self.inner, node)?,
            kind: self.kind as u32,
            dtype: g.tensor(self.x).dtype as u32,
            pad: 0,
        };
        let grid = count(threads.div_ceil(256), node)?.max(1);
        let kernel = if rows { "reduce_rows" } else { "reduce_cols" };
        Ok(Call::Kernel(KernelCall::linear(kernel, grid, &params)))
    }
}

/// Parameters of `reduce_rows` / `reduce_cols` (`struct reduce_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct ReduceParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axes.
    pub outer: u32,
    /// Reduced length.
    pub n: u32,
    /// Elements after the axes.
    pub inner: u32,
    /// `ReduceKind` discriminant.
    pub kind: u32,
    /// Element type of x and y.
    pub dtype: u32,
    /// Padding.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<ReduceParams>() == 40);

/// `reduce_rows` and `reduce_cols`, transcribed.
fn emulate_reduce(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<ReduceParams>(call)?;
    for o in 0..p.outer as i64 {
        for i in 0..p.inner as i64 {
            let base = o * p.n as i64 * p.inner as i64 + i;
            let mut acc = match p.kind {
                2 => f32::NEG_INFINITY,
                3 => f32::INFINITY,
                4 => 1.0,
                _ => 0.0,
            };
            for k in 0..p.n as i64 {
                let v = r.load(p.x, base + k * p.inner as i64, p.dtype)?;
                acc = match p.kind {
                    2 => acc.max(v),
                    3 => acc.min(v),
                    4 => acc * v,
                    1 => acc + v * v,
                    _ => acc + v,
                };
            }
            let v = if p.kind == 1 { acc / p.n as f32 } else { acc };
            r.store(p.y, o * p.inner as i64 + i, p.dtype, v)?;
        }
    }
    Ok(())
}

/// Lower `node` when it is tract's `Reduce` over adjacent axes, or an RMS norm (ONNX
/// `LayerNormalization`/`RMSNormalization` as tract decomposes them: a mean of squares, then
/// one element-wise step); `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Reduce> + From<Elementwise>,
{
    if let Some(op) = node.op_as::<TractReduce>() {
        return Some(reduce(l, node, op));
    }
    if let Some(op) = node.op_as::<RmsNorm>() {
        return Some(rms_norm(l, node, op.axis, &op.eps, false));
    }
    if let Some(op) = node.op_as::<ScaledRmsNorm>() {
        if op.out_dt.is_some() || op.scale_dt.is_some_and(|d| d != DatumType::F32) {
            return Some(Err(unsupported(
                node,
                "scaled RMS norm with a rounding or output type",
            )));
        }
        return Some(rms_norm(l, node, op.axis, &op.eps, true));
    }
    None
}

fn reduce<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TractReduce) -> Result<(), LowerError>
where
    L::Step: From<Reduce>,
{
    let kind = match op.reducer {
        Reducer::Sum => ReduceKind::Sum,
        Reducer::MeanOfSquares => ReduceKind::MeanOfSquares,
        Reducer::Max => ReduceKind::Max,
        Reducer::Min => ReduceKind::Min,
        Reducer::Prod => ReduceKind::Prod,
        ref other => return Err(unsupported(node, format!("reducer {other:?}"))),
    };
    let mut axes: Vec<usize> = op.axes.to_vec();
    axes.sort_unstable();
    if axes.is_empty() || axes.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(unsupported(
            node,
            format!("reduction over non-adjacent axes {axes:?}"),
        ));
    }
    let x = l.float_input(node, 0)?;
    let x = l.packed(x, &node.name);
    let shape = l.tensor(x).shape.clone();
    let (first, last) = (axes[0], *axes.last().expect("non-empty"));
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Reduce {
            x,
            y,
            outer: shape[..first].iter().product(),
            n: shape[first..=last].iter().product(),
            inner: shape[last + 1..].iter().product(),
            kind,
        }),
    );
    Ok(())
}

/// `y = x * rsqrt(mean(x^2 over axis) + eps)` (times `scale` along the axis when scaled):
/// a mean-of-squares reduction, then one element-wise step.
fn rms_norm<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    axis: usize,
    eps: &Tensor,
    scaled: bool,
) -> Result<(), LowerError>
where
    L::Step: From<Reduce> + From<Elementwise>,
{
    let eps = eps
        .cast_to::<f32>()
        .ok()
        .and_then(|v| {
            v.try_as_plain_ram()
                .ok()?
                .as_slice::<f32>()
                .ok()?
                .first()
                .copied()
        })
        .ok_or_else(|| unsupported(node, "non-numeric epsilon"))?;
    let x = l.float_input(node, 0)?;
    let x = l.packed(x, &node.name);
    let xt = l.tensor(x).clone();
    let mut ms_shape = xt.shape.clone();
    ms_shape[axis] = 1;
    let ms = l.add_packed(
        format!("{}.mean_sq", node.name),
        xt.dtype,
        &ms_shape,
        BufferKind::Activation,
    );
    l.push(
        node,
        L::Step::from(Reduce {
            x,
            y: ms,
            outer: xt.shape[..axis].iter().product(),
            n: xt.shape[axis],
            inner: xt.shape[axis + 1..].iter().product(),
            kind: ReduceKind::MeanOfSquares,
        }),
    );
    let msb = l.broadcast_to(ms, &xt.shape, node)?;
    let op = |op, a, b| Expr::Op {
        op,
        args: [a, b, 0],
        imm: 0.0,
    };
    let mut nodes = vec![
        Expr::Input(0),
        Expr::Input(1),
        Expr::Imm(eps),
        op(EwOp::Add, 1, 2),
        op(EwOp::Rsqrt, 3, 0),
        op(EwOp::Mul, 0, 4),
    ];
    let mut inputs = vec![x, msb];
    if scaled {
        let sc = l.outlet(node.inputs[1])?;
        let st = l.tensor(sc).clone();
        if st.numel() != xt.shape[axis] || !st.dtype.is_float() {
            return Err(unsupported(node, format!("scale of shape {:?}", st.shape)));
        }
        let sc = l.packed(sc, &node.name);
        let mut strides = vec![0isize; xt.shape.len()];
        strides[axis] = 1;
        let offset = l.tensor(sc).offset;
        let scv = l.view(
            sc,
            format!("{}.scale", node.name),
            xt.shape.clone(),
            offset,
            strides,
        );
        inputs.push(scv);
        nodes.push(Expr::Input(2));
        nodes.push(op(EwOp::Mul, 5, 6));
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs,
            output: y,
            program: Program { nodes },
        }),
    );
    Ok(())
}
