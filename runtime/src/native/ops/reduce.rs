//! Reductions over adjacent axes (kernels `reduce_rows`, `reduce_cols`): sum, mean of
//! squares, maximum, minimum, product.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::{Reduce as TractReduce, Reducer, RmsNorm, ScaledRmsNorm};

use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Expr, Program};
use crate::native::ir::{BufferKind, TensorId, Views};
use crate::native::ops::elementwise::Elementwise;
use crate::native::ops::op::{Lower, Op, one_float_type, unsupported};

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
