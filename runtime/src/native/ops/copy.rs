//! Copies: `dst[i] = src[i]` between two views of one shape and element type (transposes,
//! slices, concatenation pieces, network outputs, packing a view for a library call).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::TypedConcat;
use tract_onnx::tract_core::ops::nn::NearestUpsample;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{self, TensorId, Views, packed_strides};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, KERNEL_RANK, Kernel, KernelCall, Lower, Op, ParamBlock,
    ParamError, Uses, collapse, grid_for, params, to_i32, to_u32, unsupported,
};

/// `dst[i] = src[i]`, same shape and element type.
#[derive(Clone, Debug, PartialEq)]
pub struct Copy {
    /// Source view.
    pub src: TensorId,
    /// Destination view.
    pub dst: TensorId,
}

impl Op for Copy {
    const NAME: &'static str = "copy";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.src]
    }

    fn writes(&self) -> TensorId {
        self.dst
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.src, false);
        f(&mut self.dst, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let (a, b) = (g.tensor(self.src), g.tensor(self.dst));
        if a.shape != b.shape || a.dtype != b.dtype {
            return Err(format!(
                "copy {} {:?} -> {} {:?}",
                a.dtype, a.shape, b.dtype, b.shape
            ));
        }
        Ok(())
    }

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[
        Kernel {
            name: "strided_copy",
            emulate: emulate_copy,
        },
        Kernel {
            name: "tiled_transpose",
            emulate: emulate_transpose,
        },
    ];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let raw = mem.read_raw(self.src);
        mem.write_raw(self.dst, &raw);
        Ok(())
    }

    /// One contiguous block on both sides is a `cuMemcpyDtoDAsync`; a copy between layouts
    /// (source and destination contiguous along different dimensions) `tiled_transpose`;
    /// anything else `strided_copy`.
    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        if is_block_copy(g, self.src, self.dst) {
            let t = g.tensor(self.dst);
            return Ok(Call::Memcpy {
                dst: addr(self.dst),
                src: addr(self.src),
                bytes: t.numel() * t.dtype.size(),
            });
        }
        let params = copy_params(g, node, self.src, self.dst, addr)?;
        Ok(Call::Kernel(match transpose_params(&params) {
            Some((t, grid)) => KernelCall {
                kernel: "tiled_transpose",
                grid,
                block: [32, 8, 1],
                params: ParamBlock::of(&t),
            },
            None => KernelCall::linear("strided_copy", grid_for(params.n), &params),
        }))
    }
}

/// Parameters of `strided_copy` (`struct copy_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct CopyParams {
    /// Elements.
    pub n: u32,
    /// Rank of the collapsed shape.
    pub rank: u32,
    /// Bytes per element (1, 2, 4, 8).
    pub elem_bytes: u32,
    /// Padding.
    pub pad: u32,
    /// Collapsed shape.
    pub shape: [u32; KERNEL_RANK],
    /// Source element 0.
    pub src: u64,
    /// Destination element 0.
    pub dst: u64,
    /// Source strides, elements.
    pub src_strides: [i32; KERNEL_RANK],
    /// Destination strides, elements.
    pub dst_strides: [i32; KERNEL_RANK],
}

/// Parameters of `tiled_transpose` (`struct transpose_params`): a copy whose source is
/// contiguous along dimension `a` (`rows` long) and whose destination is contiguous along
/// dimension `b` (`cols` long), the other dimensions walked one tile plane at a time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct TransposeParams {
    /// Source element 0.
    pub src: u64,
    /// Destination element 0.
    pub dst: u64,
    /// Length of `a`.
    pub rows: u32,
    /// Length of `b`.
    pub cols: u32,
    /// Source stride along `b`, elements (along `a`: 1).
    pub src_b_stride: i32,
    /// Destination stride along `a`, elements (along `b`: 1).
    pub dst_a_stride: i32,
    /// Product of the other dimensions.
    pub outer: u32,
    /// Number of other dimensions.
    pub rank: u32,
    /// Bytes per element (1, 2, 4, 8).
    pub elem_bytes: u32,
    /// Padding.
    pub pad: u32,
    /// The other dimensions.
    pub shape: [u32; KERNEL_RANK],
    /// Their source strides, elements.
    pub src_strides: [i32; KERNEL_RANK],
    /// Their destination strides, elements.
    pub dst_strides: [i32; KERNEL_RANK],
}

const _: () = assert!(std::mem::size_of::<TransposeParams>() == 144);

/// The `tiled_transpose` form of a copy (its parameters and grid), when the source and the
/// destination are contiguous along different dimensions (a layout conversion, NCHW <->
/// NHWC) and the tiles fit the grid; `None` for anything else (`strided_copy` runs it).
pub fn transpose_params(p: &CopyParams) -> Option<(TransposeParams, [u32; 3])> {
    let rank = p.rank as usize;
    // The destination-ordered collapse puts the destination's unit stride last.
    let b = rank.checked_sub(1)?;
    if p.dst_strides[b] != 1 || p.src_strides[b] == 1 {
        return None;
    }
    let a = (0..b).find(|&d| p.src_strides[d] == 1)?;
    let (rows, cols) = (p.shape[a], p.shape[b]);
    // Both tiled dimensions long enough for a tile to pay (a short destination run went to
    // the source-ordered walk in `copy_params`).
    if rows < 8 || cols < 32 {
        return None;
    }
    let tiles = |n: u32| n.div_ceil(32);
    if tiles(rows) > 65_535 {
        return None;
    }
    let mut t = TransposeParams {
        src: p.src,
        dst: p.dst,
        rows,
        cols,
        src_b_stride: p.src_strides[b],
        dst_a_stride: p.dst_strides[a],
        outer: 1,
        elem_bytes: p.elem_bytes,
        ..TransposeParams::default()
    };
    for d in (0..b).filter(|&d| d != a) {
        let k = t.rank as usize;
        t.shape[k] = p.shape[d];
        t.src_strides[k] = p.src_strides[d];
        t.dst_strides[k] = p.dst_strides[d];
        t.rank += 1;
        t.outer = t.outer.checked_mul(p.shape[d])?;
    }
    Some((t, [tiles(cols), tiles(rows), t.outer.clamp(1, 65_535)]))
}

/// Parameters of a strided copy of `src` into `dst` (same shape and element type).
///
/// # Errors
/// [`ParamError`] as for [`super::elementwise::ew_params`].
pub fn copy_params(
    g: &dyn Views,
    step: &str,
    src: TensorId,
    dst: TensorId,
    addr: &dyn Fn(TensorId) -> u64,
) -> Result<CopyParams, ParamError> {
    let (s, d) = (g.tensor(src), g.tensor(dst));
    // Destination first: the walk follows its memory order (`tiled_transpose` takes it from
    // there when the source is contiguous along another dimension)...
    let (mut shape, mut strides) = collapse(&d.shape, &[&d.strides, &s.strides]);
    // ... unless the destination's contiguous run is shorter than a warp while the source's
    // is not (NCHW into NHWC with 3 channels): then the source's order, so that each warp
    // reads one run and writes a few interleaved ones.
    let short = |shape: &[usize], st: &[isize]| {
        st.last() != Some(&1) || shape.last().is_some_and(|&n| n < 32)
    };
    if short(&shape, &strides[0]) {
        let (s_shape, s_strides) = collapse(&d.shape, &[&s.strides, &d.strides]);
        if !short(&s_shape, &s_strides[0]) {
            shape = s_shape;
            strides = vec![s_strides[1].clone(), s_strides[0].clone()];
        }
    }
    if shape.len() > KERNEL_RANK {
        return Err(ParamError {
            step: step.into(),
            detail: format!("rank {} after collapsing", shape.len()),
        });
    }
    let mut p = CopyParams {
        n: to_u32(d.numel(), "element count", step)?,
        rank: shape.len() as u32,
        elem_bytes: d.dtype.size() as u32,
        src: addr(src),
        dst: addr(dst),
        ..Default::default()
    };
    for (k, &v) in shape.iter().enumerate() {
        p.shape[k] = to_u32(v, "dimension", step)?;
        p.dst_strides[k] = to_i32(strides[0][k], step)?;
        p.src_strides[k] = to_i32(strides[1][k], step)?;
    }
    Ok(p)
}

/// Whether a copy is one contiguous block on both sides (then it is a `cuMemcpyDtoDAsync`).
pub fn is_block_copy(g: &dyn Views, src: TensorId, dst: TensorId) -> bool {
    let (s, d) = (g.tensor(src), g.tensor(dst));
    s.is_packed() && d.is_packed() && s.dtype == d.dtype
}

/// The source and destination offsets (elements) of linear index `rem` over `shape`, the
/// innermost dimension last: the decomposition `strided_copy` and `tiled_transpose` make.
fn src_dst_offsets(rem: u32, shape: &[u32], src: &[i32], dst: &[i32]) -> (i64, i64) {
    let (mut s, mut d, mut rem) = (0i64, 0i64, rem);
    for k in (0..shape.len()).rev() {
        let dim = shape[k];
        let q = rem / dim;
        let c = (rem - q * dim) as i64;
        rem = q;
        s += c * src[k] as i64;
        d += c * dst[k] as i64;
    }
    (s, d)
}

/// The threads `(x, y)` of a 32 x 8 `tiled_transpose` block and the tile rows each visits
/// (`y`, `y + 8`, ...): `f(x, row)`.
fn tile_threads(mut f: impl FnMut(u32, u32) -> Result<(), String>) -> Result<(), String> {
    for ty in 0..8u32 {
        for tx in 0..32u32 {
            for j in (ty..32).step_by(8) {
                f(tx, j)?;
            }
        }
    }
    Ok(())
}

/// `strided_copy`, transcribed: element by element through the collapsed strides.
fn emulate_copy(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<CopyParams>(call)?;
    let es = p.elem_bytes as usize;
    let rank = p.rank as usize;
    let mut e = [0u8; 8];
    for i in 0..p.n {
        let (s, d) = src_dst_offsets(
            i,
            &p.shape[..rank],
            &p.src_strides[..rank],
            &p.dst_strides[..rank],
        );
        let (sa, da) = (
            (p.src as i64 + s * es as i64) as u64,
            (p.dst as i64 + d * es as i64) as u64,
        );
        r.read(sa, &mut e[..es])?;
        r.write(da, &e[..es])?;
    }
    Ok(())
}

/// `tiled_transpose`, block by block: each 32 x 32 tile loaded along `a` into the tile, then
/// stored along `b`, for every plane of the other dimensions.
fn emulate_transpose(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<TransposeParams>(call)?;
    let grid = call.grid;
    let es = p.elem_bytes as usize;
    let mut tile = vec![0u8; 32 * 33 * es];
    for bz in 0..grid[2] {
        for by in 0..grid[1] {
            for bx in 0..grid[0] {
                let (a0, b0) = (by * 32, bx * 32);
                let mut o = bz;
                while o < p.outer {
                    let rank = p.rank as usize;
                    let (so, d0) = src_dst_offsets(
                        o,
                        &p.shape[..rank],
                        &p.src_strides[..rank],
                        &p.dst_strides[..rank],
                    );
                    tile_threads(|tx, j| {
                        let (a, b) = (a0 + tx, b0 + j);
                        if a < p.rows && b < p.cols {
                            let at = so + a as i64 + b as i64 * p.src_b_stride as i64;
                            let addr = (p.src as i64 + at * es as i64) as u64;
                            let t = (j as usize * 33 + tx as usize) * es;
                            r.read(addr, &mut tile[t..t + es])?;
                        }
                        Ok(())
                    })?;
                    tile_threads(|tx, j| {
                        let (b, a) = (b0 + tx, a0 + j);
                        if a < p.rows && b < p.cols {
                            let at = d0 + b as i64 + a as i64 * p.dst_a_stride as i64;
                            let addr = (p.dst as i64 + at * es as i64) as u64;
                            let t = (tx as usize * 33 + j as usize) * es;
                            r.write(addr, &tile[t..t + es])?;
                        }
                        Ok(())
                    })?;
                    o += grid[2];
                }
            }
        }
    }
    Ok(())
}

/// Lower `node` when it becomes copies: a concatenation (one copy into each slice of the
/// output, usually elided later) or a nearest upsampling by integer factors (one broadcast
/// copy); `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Copy>,
{
    if let Some(op) = node.op_as::<TypedConcat>() {
        return Some(concat(l, node, op));
    }
    if let Some(op) = node.op_as::<NearestUpsample>() {
        return Some(nearest_upsample(l, node, op));
    }
    None
}

fn concat<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TypedConcat) -> Result<(), LowerError>
where
    L::Step: From<Copy>,
{
    let y = l.new_output(node, 0)?;
    let out = l.tensor(y).clone();
    let mut at = 0usize;
    for (i, &outlet) in node.inputs.iter().enumerate() {
        let x = l.outlet(outlet)?;
        let src = l.tensor(x).clone();
        let mut shape = out.shape.clone();
        shape[op.axis] = src.shape[op.axis];
        let offset = out.offset + at * out.strides[op.axis] as usize;
        at += src.shape[op.axis];
        if src.numel() == 0 {
            continue;
        }
        let slot = l.view(
            y,
            format!("{}.slot{i}", node.name),
            shape,
            offset,
            out.strides.clone(),
        );
        l.push(node, L::Step::from(Copy { src: x, dst: slot }));
    }
    Ok(())
}

fn nearest_upsample<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    op: &NearestUpsample,
) -> Result<(), LowerError>
where
    L::Step: From<Copy>,
{
    // out[.., h * s + i, ..] = x[.., h, ..]: view the packed output as [.., H, s, ..] and
    // the input as [.., H, 1 -> s (stride 0), ..], then copy.
    let x = l.outlet(node.inputs[0])?;
    let y = l.new_output(node, 0)?;
    let (src, out) = (l.tensor(x).clone(), l.tensor(y).clone());
    if op.scales.len() != src.shape.len() {
        return Err(unsupported(
            node,
            format!("scales {:?} for rank {}", op.scales, src.shape.len()),
        ));
    }
    let (mut xs, mut xst, mut ys) = (Vec::new(), Vec::new(), Vec::new());
    for (ax, &s) in op.scales.iter().enumerate() {
        xs.push(src.shape[ax]);
        xst.push(src.strides[ax]);
        ys.push(src.shape[ax]);
        if s > 1 {
            xs.push(s);
            xst.push(0);
            ys.push(s);
        }
    }
    if ys.len() > ir::MAX_RANK {
        return Err(unsupported(
            node,
            "upsampling more axes than the IR's rank limit",
        ));
    }
    let xv = l.view(x, format!("{}.src", node.name), xs, src.offset, xst);
    let ystr = packed_strides(&ys);
    let yv = l.view(y, format!("{}.dst", node.name), ys, out.offset, ystr);
    l.push(node, L::Step::from(Copy { src: xv, dst: yv }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layout conversions: NHWC into an NCHW slot takes the tiled transpose (channels along
    /// the source's unit stride, pixels along the destination's); NCHW into NHWC with 3
    /// channels walks the source in order instead (a 3-element destination run would leave a
    /// tile nearly empty); a plain slice stays a strided copy.
    #[test]
    fn layout_conversions_take_the_tiled_transpose_or_the_source_order() {
        use crate::native::graph::Graph;
        use crate::native::ir::{BufferKind, ElemType, Tensor};
        let mut g = Graph::default();
        let view = |g: &mut Graph, shape: &[usize], strides: &[isize], offset: usize| {
            let b = g.add_buffer("b", ElemType::F16, 1 << 20, BufferKind::Activation);
            g.add_view(Tensor {
                name: "t".into(),
                buffer: b,
                dtype: ElemType::F16,
                shape: shape.to_vec(),
                offset,
                strides: strides.to_vec(),
            })
        };
        let addr = |t: TensorId| 0x10000 * (t.0 as u64 + 1);
        // [1, 64, 40, 40] NHWC into channels 0..64 of an NCHW [1, 144, 2100] head buffer.
        let nhwc = view(&mut g, &[1, 64, 40, 40], &[0, 1, 2560, 64], 0);
        let slot = view(&mut g, &[1, 64, 40, 40], &[0, 2100, 40, 1], 0);
        let p = copy_params(&g, "s", nhwc, slot, &addr).unwrap();
        let (t, grid) = transpose_params(&p).expect("tiled");
        assert_eq!(
            (t.rows, t.cols, t.src_b_stride, t.dst_a_stride),
            (64, 1600, 64, 2100)
        );
        assert_eq!((t.outer, t.rank, grid), (1, 0, [50, 2, 1]));
        // The network input [1, 3, 320, 320] NCHW into NHWC: source order, no tile.
        let nchw = view(&mut g, &[1, 3, 320, 320], &[0, 102_400, 320, 1], 0);
        let hwc = view(&mut g, &[1, 3, 320, 320], &[0, 1, 960, 3], 0);
        let p = copy_params(&g, "s", nchw, hwc, &addr).unwrap();
        assert!(transpose_params(&p).is_none());
        assert_eq!(&p.shape[..p.rank as usize], &[3, 102_400]);
        assert_eq!((p.src_strides[1], p.dst_strides[1]), (1, 3));
        // Channels 16..48 of an NHWC buffer into a packed NHWC one: no transposition.
        let part = view(&mut g, &[1, 32, 40, 40], &[0, 1, 2560, 64], 16);
        let packed = view(&mut g, &[1, 32, 40, 40], &[0, 1, 1280, 32], 0);
        let p = copy_params(&g, "s", part, packed, &addr).unwrap();
        assert!(transpose_params(&p).is_none());
    }
}
