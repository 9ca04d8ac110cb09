//! Copies: `dst[i] = src[i]` between two views of one shape and element type (transposes,
//! slices, concatenation pieces, network outputs, packing a view for a library call).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::TypedConcat;
use tract_onnx::tract_core::ops::nn::NearestUpsample;

use crate::native::ir::error::LowerError;
use crate::native::ir::{self, TensorId, Views, packed_strides};
use crate::native::ops::op::{Lower, Op, unsupported};

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
