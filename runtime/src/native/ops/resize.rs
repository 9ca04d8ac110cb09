//! Resampling of the last two axes (kernel `resize2d`): ONNX `Resize` with tract's own
//! per-axis resampling plans as tables.

use crate::native::ir::{ElemType, TensorId, Views};
use crate::native::ops::op::Op;

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
