//! Resampling of the last two axes (kernel `resize2d`): ONNX `Resize` with tract's own
//! per-axis resampling plans as tables.

use tract_onnx::prelude::*;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, Kernel, KernelCall, Lower, Op, ParamError, Uses, count,
    grid_for, params, unsupported,
};

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

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[Kernel {
        name: "resize2d",
        emulate: emulate_resize,
    }];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let (iy, wy, ix, wx) = (
            mem.read(self.iy),
            mem.read(self.wy),
            mem.read(self.ix),
            mem.read(self.wx),
        );
        let y = resize_compute(&mem.read(self.x), self, &iy, &wy, &ix, &wx);
        mem.write(self.y, &y);
        Ok(())
    }

    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        let params = ResizeParams {
            x: addr(self.x),
            y: addr(self.y),
            iy: addr(self.iy),
            wy: addr(self.wy),
            ix: addr(self.ix),
            wx: addr(self.wx),
            outer: count(self.outer, node)?,
            h_in: count(self.h_in, node)?,
            w_in: count(self.w_in, node)?,
            h_out: count(self.h_out, node)?,
            w_out: count(self.w_out, node)?,
            win_h: count(self.win_h, node)?,
            win_w: count(self.win_w, node)?,
            x_dtype: g.tensor(self.x).dtype as u32,
            y_dtype: g.tensor(self.y).dtype as u32,
            pad: 0,
        };
        let grid = grid_for(count(self.outer * self.h_out * self.w_out, node)?);
        Ok(Call::Kernel(KernelCall::linear("resize2d", grid, &params)))
    }
}

/// Parameters of `resize2d` (`struct resize_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct ResizeParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Row table (i32).
    pub iy: u64,
    /// Row weights (f32).
    pub wy: u64,
    /// Column table (i32).
    pub ix: u64,
    /// Column weights (f32).
    pub wx: u64,
    /// Leading planes.
    pub outer: u32,
    /// Input rows.
    pub h_in: u32,
    /// Input columns.
    pub w_in: u32,
    /// Output rows.
    pub h_out: u32,
    /// Output columns.
    pub w_out: u32,
    /// Taps per row.
    pub win_h: u32,
    /// Taps per column.
    pub win_w: u32,
    /// Input element type.
    pub x_dtype: u32,
    /// Output element type.
    pub y_dtype: u32,
    /// Padding.
    pub pad: u32,
}

// The CUDA source states the same size (static_assert there).
const _: () = assert!(std::mem::size_of::<ResizeParams>() == 88);

/// `resize2d`, transcribed.
fn emulate_resize(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<ResizeParams>(call)?;
    let i32_at = |base: u64, i: u32| -> Result<i64, String> {
        let mut b = [0u8; 4];
        r.read(base + i as u64 * 4, &mut b)?;
        Ok(i32::from_ne_bytes(b) as i64)
    };
    let f32_at = |base: u64, i: u32| r.load(base, i as i64, ElemType::F32 as u32);
    let total = p.outer * p.h_out * p.w_out;
    for t in 0..total {
        let col = t % p.w_out;
        let row = (t / p.w_out) % p.h_out;
        let o = t / (p.w_out * p.h_out);
        let plane = o as i64 * p.h_in as i64 * p.w_in as i64;
        let mut acc = 0f32;
        for b in 0..p.win_w {
            let wb = f32_at(p.wx, col * p.win_w + b)?;
            if wb == 0.0 {
                continue;
            }
            let c = i32_at(p.ix, col * p.win_w + b)?;
            let mut s = 0f32;
            for a in 0..p.win_h {
                let wa = f32_at(p.wy, row * p.win_h + a)?;
                if wa == 0.0 {
                    continue;
                }
                let rr = i32_at(p.iy, row * p.win_h + a)?;
                s += wa * r.load(p.x, plane + rr * p.w_in as i64 + c, p.x_dtype)?;
            }
            acc += wb * s;
        }
        r.store(p.y, t as i64, p.y_dtype, acc)?;
    }
    Ok(())
}

/// Resampling with the tables of `r` (indices read as f32, exact for any realistic size):
/// rows first, then columns, zero-weight taps skipped, as tract resamples.
pub fn resize_compute(
    x: &[f32],
    r: &Resize,
    iy: &[f32],
    wy: &[f32],
    ix: &[f32],
    wx: &[f32],
) -> Vec<f32> {
    let mut y = vec![0f32; r.outer * r.h_out * r.w_out];
    for o in 0..r.outer {
        for row in 0..r.h_out {
            for col in 0..r.w_out {
                let mut acc = 0f32;
                for b in 0..r.win_w {
                    let wb = wx[col * r.win_w + b];
                    if wb == 0.0 {
                        continue;
                    }
                    let c = ix[col * r.win_w + b] as usize;
                    let mut t = 0f32;
                    for a in 0..r.win_h {
                        let wa = wy[row * r.win_h + a];
                        if wa == 0.0 {
                            continue;
                        }
                        let rr = iy[row * r.win_h + a] as usize;
                        t += wa * x[(o * r.h_in + rr) * r.w_in + c];
                    }
                    acc += wb * t;
                }
                y[(o * r.h_out + row) * r.w_out + col] = acc;
            }
        }
    }
    y
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
