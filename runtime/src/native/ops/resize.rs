//! Resampling of the last two axes (kernel `resize2d`): ONNX `Resize` with tract's own
//! per-axis resampling plans as tables.

use tract_onnx::prelude::*;

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::op::{Lower, Op, unsupported};

/// Separable resampling of the last two axes of packed `x` `[outer, h_in, w_in]` into packed
/// `y` `[outer, h_out, w_out]` (ONNX `Resize`, nearest/linear/cubic): output row `r` reads
/// input rows `iy[r * win_h + a]` with weights `wy[r * win_h + a]`, output column `c` input
/// columns `ix[c * win_w + b]` with weights `wx[..]`; the tables are tract's own resampling
/// plans, computed at load. `y[o, r, c] = sum_b wx_b * (sum_a wy_a * x[o, iy_a, ix_b])`,
/// zero-weight taps skipped (tract's order: rows first, then columns).
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Row table: i32 `[h_out * win_h]`.
    pub iy: TensorId,
    /// Row weights: f32 `[h_out * win_h]`.
    pub wy: TensorId,
    /// Column table: i32 `[w_out * win_w]`.
    pub ix: TensorId,
    /// Column weights: f32 `[w_out * win_w]`.
    pub wx: TensorId,
    /// Product of the leading dimensions.
    pub outer: usize,
    /// Input rows and columns.
    pub h_in: usize,
    /// See `h_in`.
    pub w_in: usize,
    /// Output rows and columns.
    pub h_out: usize,
    /// See `h_out`.
    pub w_out: usize,
    /// Taps per output row.
    pub win_h: usize,
    /// Taps per output column.
    pub win_w: usize,
}

impl Op for Resize {
    const NAME: &'static str = "resize";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.x, self.iy, self.wy, self.ix, self.wx]
    }

    fn writes(&self) -> TensorId {
        self.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        for t in [
            &mut self.x,
            &mut self.iy,
            &mut self.wy,
            &mut self.ix,
            &mut self.wx,
        ] {
            f(t, false);
        }
        f(&mut self.y, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let ok = g.tensor(self.x).dtype.is_float()
            && g.tensor(self.y).dtype.is_float()
            && g.tensor(self.iy).dtype == ElemType::I32
            && g.tensor(self.ix).dtype == ElemType::I32
            && g.tensor(self.wy).dtype == ElemType::F32
            && g.tensor(self.wx).dtype == ElemType::F32;
        if !ok {
            return Err("resize tables".into());
        }
        Ok(())
    }
}

/// Lower `node` when it is tract's core `Resize` (ONNX `Resize` over the last two axes);
/// `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Resize>,
{
    let op = node.op_as::<tract_onnx::tract_core::ops::nn::resize::Resize>()?;
    Some(resize(l, node, op))
}

/// Resampling (tract's core `Resize`: nearest, linear, cubic, every coordinate transform
/// it supports) of the last two axes, with tract's own per-axis plans as tables.
fn resize<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    op: &tract_onnx::tract_core::ops::nn::resize::Resize,
) -> Result<(), LowerError>
where
    L::Step: From<Resize>,
{
    let x = l.float_input(node, 0)?;
    let x = l.packed(x, &node.name);
    let xs = l.tensor(x).shape.clone();
    let (ys, _) = l.output_fact(node, 0)?;
    let rank = xs.len();
    if rank < 2 || ys.len() != rank {
        return Err(unsupported(node, format!("resize of {xs:?} to {ys:?}")));
    }
    // The scales tract's own evaluation uses: the `scales` input when it has one value
    // per axis, else output / input.
    let given = op
        .optional_scales_input
        .and_then(|ix| node.inputs.get(ix).copied())
        .and_then(|o| l.konst(o))
        .filter(|t| t.len() == rank)
        .and_then(|t| {
            t.cast_to::<f32>().ok().and_then(|v| {
                v.try_as_plain_ram()
                    .ok()?
                    .as_slice::<f32>()
                    .ok()
                    .map(|s| s.to_vec())
            })
        });
    let scales: Vec<f32> = given.unwrap_or_else(|| {
        ys.iter()
            .zip(&xs)
            .map(|(o, i)| *o as f32 / *i as f32)
            .collect()
    });
    let mut tables = Vec::new();
    for ax in 0..rank {
        let resized = !(xs[ax] == ys[ax] && scales[ax] == 1.0);
        if resized && ax + 2 < rank {
            return Err(unsupported(node, format!("resizing axis {ax} of {xs:?}")));
        }
        if ax + 2 < rank {
            continue;
        }
        let (idx, w, win) = if resized {
            let plan = op.plan_axis(scales[ax], xs[ax], ys[ax]);
            if plan.extrapolated.iter().any(|&e| e) {
                return Err(unsupported(node, "extrapolated coordinates"));
            }
            let idx: Vec<i32> = plan
                .indices
                .iter()
                .map(|&i| i32::try_from(i).unwrap_or(i32::MAX))
                .collect();
            (idx, plan.weights, plan.window)
        } else {
            ((0..xs[ax] as i32).collect(), vec![1.0f32; xs[ax]], 1)
        };
        let n = idx.len();
        let it = l.add_packed(
            format!("{}.rows{ax}", node.name),
            ElemType::I32,
            &[n],
            BufferKind::Weight(idx.iter().flat_map(|v| v.to_ne_bytes()).collect()),
        );
        let wt = l.add_packed(
            format!("{}.weights{ax}", node.name),
            ElemType::F32,
            &[n],
            BufferKind::Weight(w.iter().flat_map(|v| v.to_ne_bytes()).collect()),
        );
        tables.push((it, wt, win));
    }
    let [(iy, wy, win_h), (ix, wx, win_w)] = tables[..] else {
        return Err(LowerError::Model(format!(
            "node `{}`: resize tables",
            node.name
        )));
    };
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Resize {
            x,
            y,
            iy,
            wy,
            ix,
            wx,
            outer: xs[..rank - 2].iter().product(),
            h_in: xs[rank - 2],
            w_in: xs[rank - 1],
            h_out: ys[rank - 2],
            w_out: ys[rank - 1],
            win_h,
            win_w,
        }),
    );
    Ok(())
}
