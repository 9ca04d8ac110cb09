//! Gathers along one axis (kernel `gather`): ONNX `Gather`, `GatherND` with constant
//! indices, reflect and edge padding.

use tract_onnx::prelude::*;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, Kernel, KernelCall, Lower, Op, ParamError, Uses, count,
    grid_for, is_index, params, unsupported,
};

/// `y = data.take(indices, axis)` over packed `data` `[outer, n, inner]` and packed `i64`
/// indices (`[count]`, negative counted from the end), writing packed `[outer, count, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// Data (packed).
    pub data: TensorId,
    /// Indices (packed, i64 or i32).
    pub indices: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Number of indices.
    pub count: usize,
}

impl Op for Gather {
    const NAME: &'static str = "gather";

    fn reads(&self) -> Vec<TensorId> {
        vec![self.data, self.indices]
    }

    fn writes(&self) -> TensorId {
        self.y
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        f(&mut self.data, false);
        f(&mut self.indices, false);
        f(&mut self.y, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let (d, y, i) = (
            g.tensor(self.data).dtype,
            g.tensor(self.y).dtype,
            g.tensor(self.indices).dtype,
        );
        if d != y || !is_index(i) {
            return Err(format!("gather of {d} into {y} with {i} indices"));
        }
        Ok(())
    }

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[Kernel {
        name: "gather",
        emulate: emulate_gather,
    }];

    /// Rows copied as raw elements; an index outside the axis (after adding its length to a
    /// negative one) is an error here, where the kernel clamps it.
    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let views = mem.views();
        let es = views.tensor(self.data).dtype.size();
        let wide = views.tensor(self.indices).dtype == ElemType::I64;
        let raw = mem.read_raw(self.indices);
        let idx: Vec<i64> = (0..self.count)
            .map(|k| {
                if wide {
                    i64::from_ne_bytes(raw[8 * k..8 * k + 8].try_into().expect("8 bytes"))
                } else {
                    i32::from_ne_bytes(raw[4 * k..4 * k + 4].try_into().expect("4 bytes")) as i64
                }
            })
            .collect();
        let data = mem.read_raw(self.data);
        let mut out = vec![0u8; self.outer * self.count * self.inner * es];
        for o in 0..self.outer {
            for (k, &ix) in idx.iter().enumerate() {
                let ix = if ix < 0 { ix + self.n as i64 } else { ix };
                if ix < 0 || ix >= self.n as i64 {
                    return Err(format!(
                        "gather index {ix} out of range 0..{} (the kernel clamps)",
                        self.n
                    ));
                }
                let src = ((o * self.n + ix as usize) * self.inner) * es;
                let dst = ((o * self.count + k) * self.inner) * es;
                out[dst..dst + self.inner * es].copy_from_slice(&data[src..src + self.inner * es]);
            }
        }
        mem.write_raw(self.y, &out);
        Ok(())
    }

    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        let params = GatherParams {
            data: addr(self.data),
            indices: addr(self.indices),
            y: addr(self.y),
            outer: count(self.outer, node)?,
            n: count(self.n, node)?,
            inner: count(self.inner, node)?,
            count: count(self.count, node)?,
            elem_bytes: g.tensor(self.data).dtype.size() as u32,
            index_bytes: g.tensor(self.indices).dtype.size() as u32,
        };
        let grid = grid_for(count(self.outer * self.count * self.inner, node)?);
        Ok(Call::Kernel(KernelCall::linear("gather", grid, &params)))
    }
}

/// Parameters of `gather` (`struct gather_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct GatherParams {
    /// Data.
    pub data: u64,
    /// Indices.
    pub indices: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axis.
    pub outer: u32,
    /// Axis length.
    pub n: u32,
    /// Elements after the axis.
    pub inner: u32,
    /// Number of indices.
    pub count: u32,
    /// Bytes per data element.
    pub elem_bytes: u32,
    /// Bytes per index (4 or 8).
    pub index_bytes: u32,
}

const _: () = assert!(std::mem::size_of::<GatherParams>() == 48);

/// `gather`, transcribed: an index past the axis is clamped (negative ones count from the
/// end), so the kernel never reads outside the data.
fn emulate_gather(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<GatherParams>(call)?;
    let es = p.elem_bytes as usize;
    let total = p.outer * p.count * p.inner;
    let mut e = [0u8; 8];
    for t in 0..total {
        let i = t % p.inner;
        let k = (t / p.inner) % p.count;
        let o = t / (p.inner * p.count);
        let ia = p.indices + k as u64 * p.index_bytes as u64;
        let mut b = [0u8; 8];
        r.read(ia, &mut b[..p.index_bytes as usize])?;
        let mut ix = if p.index_bytes == 8 {
            i64::from_ne_bytes(b)
        } else {
            i32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as i64
        };
        if ix < 0 {
            ix += p.n as i64;
        }
        ix = ix.clamp(0, p.n as i64 - 1);
        let src = p.data
            + (((o as i64 * p.n as i64 + ix) * p.inner as i64 + i as i64) as u64) * es as u64;
        let dst = p.y + t as u64 * es as u64;
        r.read(src, &mut e[..es])?;
        r.write(dst, &e[..es])?;
    }
    Ok(())
}

/// Lower `node` when it is tract's `Gather` or a `GatherNd` with constant indices and no
/// batch dimensions; `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Gather>,
{
    if let Some(op) = node.op_as::<tract_onnx::tract_core::ops::array::Gather>() {
        return Some(gather(l, node, op));
    }
    if let Some(op) = node.op_as::<tract_onnx::tract_core::ops::array::GatherNd>() {
        return Some(gather_nd(l, node, op.batch_dims));
    }
    None
}

/// ONNX `GatherND` with constant indices and `batch_dims = 0`: a gather of contiguous
/// blocks from the packed data viewed as `[rows, block]`, with the flat row indices
/// computed at load.
fn gather_nd<L: Lower>(
    l: &mut L, node: &TypedNode, batch_dims: usize) -> Result<(), LowerError>
where
    L::Step: From<Gather>,
{
    if batch_dims != 0 {
        return Err(unsupported(node, format!("batch_dims {batch_dims}")));
    }
    let Some(ix) = l.konst(node.inputs[1]) else {
        return Err(unsupported(node, "indices that are not constant"));
    };
    let data = l.outlet(node.inputs[0])?;
    let data = l.packed(data, &node.name);
    let ds = l.tensor(data).shape.clone();
    let ish = ix.shape().to_vec();
    let k = *ish
        .last()
        .ok_or_else(|| unsupported(node, "scalar indices"))?;
    if k == 0 || k > ds.len() {
        return Err(unsupported(
            node,
            format!("index depth {k} for data {ds:?}"),
        ));
    }
    let ix = ix
        .cast_to::<i64>()
        .map_err(|e| unsupported(node, format!("indices: {e}")))?;
    let ix = ix
        .try_as_plain_ram()
        .ok()
        .and_then(|v| v.as_slice::<i64>().ok().map(|s| s.to_vec()))
        .ok_or_else(|| unsupported(node, "indices storage"))?;
    let rows: usize = ds[..k].iter().product();
    let count = ix.len() / k;
    let mut flat = Vec::with_capacity(count);
    for tuple in ix.chunks(k) {
        let mut f = 0i64;
        for (t, &v) in tuple.iter().enumerate() {
            let d = ds[t] as i64;
            let v = if v < 0 { v + d } else { v };
            if !(0..d).contains(&v) {
                return Err(unsupported(node, format!("index {v} out of range 0..{d}")));
            }
            f = f * d + v;
        }
        flat.push(f);
    }
    let idx = l.add_packed(
        format!("{}.flat_indices", node.name),
        ElemType::I64,
        &[count],
        BufferKind::Weight(flat.iter().flat_map(|v| v.to_ne_bytes()).collect()),
    );
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Gather {
            data,
            indices: idx,
            y,
            outer: 1,
            n: rows,
            inner: ds[k..].iter().product(),
            count,
        }),
    );
    Ok(())
}

fn gather<L: Lower>(
    l: &mut L,
    node: &TypedNode,
    op: &tract_onnx::tract_core::ops::array::Gather,
) -> Result<(), LowerError>
where
    L::Step: From<Gather>,
{
    if op.output_type.is_some() {
        return Err(unsupported(node, "gather with an output type"));
    }
    let data = l.outlet(node.inputs[0])?;
    let data = l.packed(data, &node.name);
    let idx = l.outlet(node.inputs[1])?;
    let it = l.tensor(idx).dtype;
    if !matches!(it, ElemType::I64 | ElemType::I32) {
        return Err(unsupported(node, format!("indices of type {it}")));
    }
    let idx = l.packed(idx, &node.name);
    let shape = l.tensor(data).shape.clone();
    let count = l.tensor(idx).numel();
    let y = l.new_output(node, 0)?;
    let ax = op.axis;
    l.push(
        node,
        L::Step::from(Gather {
            data,
            indices: idx,
            y,
            outer: shape[..ax].iter().product(),
            n: shape[ax],
            inner: shape[ax + 1..].iter().product(),
            count,
        }),
    );
    Ok(())
}
