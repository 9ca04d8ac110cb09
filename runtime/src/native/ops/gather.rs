//! Gathers along one axis (kernel `gather`): ONNX `Gather`, `GatherND` with constant
//! indices, reflect and edge padding.

use tract_onnx::prelude::*;

use crate::native::ir::error::LowerError;
use crate::native::ir::{BufferKind, ElemType, TensorId, Views};
use crate::native::ops::op::{Lower, Op, is_index, unsupported};

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
