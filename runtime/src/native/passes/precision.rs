//! Storage precision: fp32 everywhere by default; with [`Precision::Fp16`], fp16 storage for
//! the network's intermediate tensors and for the weights of convolutions and matrix
//! products.
//!
//! What stays fp32 in fp16 mode, and why:
//! * the network's inputs and outputs (the session binds fp32 tensors whatever the precision;
//!   a cast step converts the input once);
//! * every buffer that lives inside an output (the tail of the network that writes the
//!   output in place: for YOLOv8 the box decoding and class sigmoid), so that coordinates in
//!   pixels are not rounded to fp16's 11-bit significand;
//! * weights read only by element-wise steps (biases, anchors, strides): the kernels read
//!   them as fp32 anyway.
//!
//! Element-wise steps compute in fp32 whatever they load and store. Library steps (cuDNN,
//! cuBLAS, softmax, reductions) need one element type for all their operands: an operand of
//! another type is cast into an fp16 twin first (and an fp32 result is written through an
//! fp16 twin and cast after), so every step sees uniform types.

use crate::backend::Precision;
use crate::native::graph::{Graph, Step, StepKind};
use crate::native::ir::error::LowerError;
use crate::native::ir::program::Program;
use crate::native::ir::{BufferKind, ElemType, Tensor, TensorId};
use crate::native::ops::{copy, deconv::Deconv, elementwise::Elementwise};

/// Apply `precision` to a lowered, optimised graph.
///
/// # Errors
/// [`LowerError::Model`] on an internal inconsistency.
pub fn apply(g: &mut Graph, precision: Precision) -> Result<(), LowerError> {
    match precision {
        Precision::Fp32 | Precision::Tf32 => Ok(()),
        Precision::Fp16 => to_fp16(g),
    }
}

/// Whether step kind `k` needs one element type for all its operands (a library call or a
/// kernel over one float type); element-wise steps compute in fp32 whatever they load, copies
/// and gathers move raw elements. Every kind is named: a new operator must decide.
fn is_library(k: &StepKind) -> bool {
    match k {
        StepKind::Conv(_)
        | StepKind::Deconv(_)
        | StepKind::Pool(_)
        | StepKind::Gemm(_)
        | StepKind::Softmax(_)
        | StepKind::Reduce(_) => true,
        StepKind::Elementwise(_)
        | StepKind::Copy(_)
        | StepKind::Gather(_)
        | StepKind::Resize(_)
        | StepKind::UpdateRows(_) => false,
    }
}

/// The buffers step kind `k` reads as weights stored in the library's type (fp16 in fp16
/// mode): convolution filters, matrix product operands, gathered tables (embeddings, fp16
/// like the activations they become). Every kind is named: a new operator must decide.
fn library_weights(k: &StepKind) -> Vec<TensorId> {
    match k {
        StepKind::Conv(c) | StepKind::Deconv(Deconv(c)) => vec![c.w],
        StepKind::Gemm(m) => vec![m.a, m.b],
        StepKind::Gather(m) => vec![m.data],
        StepKind::Elementwise(_)
        | StepKind::Copy(_)
        | StepKind::Pool(_)
        | StepKind::Softmax(_)
        | StepKind::Reduce(_)
        | StepKind::Resize(_)
        | StepKind::UpdateRows(_) => Vec::new(),
    }
}

fn to_fp16(g: &mut Graph) -> Result<(), LowerError> {
    // Buffers read by convolutions and matrix products as weights.
    let mut library_weight = vec![false; g.buffers.len()];
    for s in &g.steps {
        for t in library_weights(&s.kind) {
            library_weight[g.tensor(t).buffer.0] = true;
        }
    }
    for (b, &weight_of_library) in library_weight.iter().enumerate() {
        if g.buffers[b].dtype != ElemType::F32 {
            continue;
        }
        let (root, _) = g.root(crate::native::ir::BufferId(b));
        let in_output = matches!(g.buffers[root.0].kind, BufferKind::Output(_));
        let convert = match &g.buffers[b].kind {
            BufferKind::Activation => !in_output,
            BufferKind::Weight(_) => weight_of_library,
            _ => false,
        };
        if !convert {
            continue;
        }
        if let BufferKind::Weight(bytes) = &mut g.buffers[b].kind {
            let halves: Vec<u8> = bytes
                .chunks_exact(4)
                .flat_map(|c| {
                    let v = f32::from_ne_bytes(c.try_into().expect("4 bytes"));
                    half::f16::from_f32(v).to_bits().to_ne_bytes()
                })
                .collect();
            *bytes = halves;
        }
        g.buffers[b].dtype = ElemType::F16;
    }
    // A buffer placed in another must share its type; a root converted to fp16 takes its
    // placed buffers along (they were activations, so they were converted too), and one that
    // stayed fp32 (an output) keeps its placed buffers fp32 (checked by the rule above).
    for t in &mut g.tensors {
        t.dtype = g.buffers[t.buffer.0].dtype;
    }
    // Copies between types become casts.
    for s in &mut g.steps {
        if let StepKind::Copy(copy::Copy { src, dst }) = s.kind
            && g.tensors[src.0].dtype != g.tensors[dst.0].dtype
        {
            s.kind = cast(src, dst);
        }
    }
    // Library steps get uniform fp16 operands.
    let mut out = Vec::with_capacity(g.steps.len());
    let steps = std::mem::take(&mut g.steps);
    for mut s in steps {
        // A gather copies raw elements: its output takes the data's type (through a twin and
        // a cast when they differ).
        if let StepKind::Gather(m) = &mut s.kind {
            let (dd, yd) = (g.tensor(m.data).dtype, g.tensor(m.y).dtype);
            if dd != yd {
                let y = m.y;
                let twin = twin_of(g, y, dd);
                m.y = twin;
                let node = format!("{}.cast", s.node);
                out.push(s);
                out.push(Step {
                    node,
                    kind: cast(twin, y),
                });
                continue;
            }
        }
        // A row update copies raw elements into a cache that keeps its own type (a network
        // output or a state region stays fp32): its new rows are cast into a twin of the
        // cache's type first.
        if let StepKind::UpdateRows(u) = &mut s.kind {
            let (from, to) = (g.tensor(u.src).dtype, g.tensor(u.dst).dtype);
            if from != to {
                let src = u.src;
                let twin = twin_of(g, src, to);
                u.src = twin;
                out.push(Step {
                    node: format!("{}.cast", s.node),
                    kind: cast(src, twin),
                });
                out.push(s);
                continue;
            }
        }
        if !is_library(&s.kind) {
            out.push(s);
            continue;
        }
        let reads = s.reads();
        for t in reads {
            let dt = g.tensor(t).dtype;
            if dt.is_float() && dt != ElemType::F16 {
                let twin = twin_f16(g, t);
                out.push(Step {
                    node: format!("{}.to_fp16", s.node),
                    kind: cast(t, twin),
                });
                replace_read(&mut s.kind, t, twin);
            }
        }
        let w = s.writes();
        let after = if g.tensor(w).dtype != ElemType::F16 && g.tensor(w).dtype.is_float() {
            let twin = twin_f16(g, w);
            replace_write(&mut s.kind, twin);
            Some(Step {
                node: format!("{}.to_fp32", s.node),
                kind: cast(twin, w),
            })
        } else {
            None
        };
        out.push(s);
        out.extend(after);
    }
    g.steps = out;
    g.validate()
        .map_err(|e| LowerError::Model(format!("internal: fp16 graph is invalid: {e}")))
}

/// A step kind converting `from` into `to` element by element (a cast: the identity program
/// loads one type and stores the other).
fn cast(from: TensorId, to: TensorId) -> StepKind {
    StepKind::Elementwise(Elementwise {
        inputs: vec![from],
        output: to,
        program: Program::identity(),
    })
}

/// An fp16 view with `t`'s offset and strides over a new fp16 buffer as long as `t`'s.
fn twin_f16(g: &mut Graph, t: TensorId) -> TensorId {
    twin_of(g, t, ElemType::F16)
}

/// A `dtype` view with `t`'s offset and strides over a new buffer as long as `t`'s.
fn twin_of(g: &mut Graph, t: TensorId, dtype: ElemType) -> TensorId {
    let src = g.tensor(t).clone();
    let len = g.buffer(src.buffer).len;
    let name = format!("{}.{dtype}", src.name);
    let b = g.add_buffer(name.clone(), dtype, len, BufferKind::Activation);
    g.add_view(Tensor {
        name,
        buffer: b,
        dtype,
        ..src
    })
}

/// Replace the read operand `from` of `k` by `to`.
fn replace_read(k: &mut StepKind, from: TensorId, to: TensorId) {
    k.operands_mut(&mut |t, written| {
        if !written && *t == from {
            *t = to;
        }
    });
}

/// Replace the operand `k` writes by `to`.
fn replace_write(k: &mut StepKind, to: TensorId) {
    k.operands_mut(&mut |t, written| {
        if written {
            *t = to;
        }
    });
}
